//! jq for `data.transform`: jaq, run inside the sandbox like `code.js`, so
//! that a program that recurses without end traps on the guest's stack, one
//! that loops is stopped at its deadline, and one that allocates is stopped
//! at its memory limit, instead of taking the engine's own threads down.
//!
//! `sluice_jq(program, input)` answers `o` + a JSON array of the outputs,
//! or `e` + `{"name": "jq", "message"}`.

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data::JustLut};
use jaq_json::{Num, Val};
use serde_json::{Number, Value as J};

type Filter = jaq_core::Filter<JustLut<Val>>;

/// Deepest value a program may return: the host parses the answer with
/// serde_json (at most 128 levels), and a value is wrapped a few levels
/// deeper still on its way through a run (outputs, the run's result).
const MAX_DEPTH: usize = 100;

/// Runs `program` on `input` (JSON text), keeping at most `max_outputs`.
pub fn run(program: &str, input: &str, max_outputs: usize) -> Result<String, String> {
    let filter = compile_jq(program)?;
    let input: J =
        serde_json::from_str(input).map_err(|e| format!("the input is not JSON: {e}"))?;
    let ctx = Ctx::<JustLut<Val>>::new(&filter.lut, Vars::new([]));
    let mut out = Vec::new();
    for r in filter.id.run((ctx, json_to_val(&input))) {
        match r {
            Ok(v) => out.push(to_json_at(&v, 0).map_err(|bad| bad.message(out.len()))?),
            Err(exn) => {
                return Err(match exn.get_err() {
                    Ok(e) => format!("jq runtime error: {e}"),
                    Err(exn) => match exn.get_halt() {
                        Ok(code) => format!("jq program called halt({code})"),
                        Err(_) => "internal jaq exception".to_string(),
                    },
                });
            }
        }
        if out.len() > max_outputs {
            return Err(format!(
                "jq program produced more than {max_outputs} outputs"
            ));
        }
    }
    serde_json::to_string(&out).map_err(|e| format!("the output cannot be written: {e}"))
}

fn compile_jq(code: &str) -> Result<Filter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    // The same functions the host validates programs against (no `env`),
    // with `now` from the host's clock (this target has none of its own).
    let funs = jaq_core::funs()
        .chain(jaq_std::funs().filter(|(name, _, _)| !matches!(*name, "env" | "now")))
        .chain(jaq_json::funs())
        .chain([now()]);
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(|errs| load_error(code, errs))?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errs| {
            let n = errs.iter().map(|(_, e)| e.len()).sum::<usize>();
            format!("jq compile error ({n} undefined names)")
        })
}

fn now() -> jaq_core::native::Fun<JustLut<Val>> {
    jaq_core::native::run(("now", jaq_core::native::v(0), |_| {
        jaq_core::native::bome(Ok(Val::from(crate::now_us() / 1e6)))
    }))
}

fn load_error(code: &str, errs: load::Errors<&str, ()>) -> String {
    let _ = code;
    format!("jq syntax error ({} problems)", errs.len())
}

fn json_to_val(v: &J) -> Val {
    match v {
        J::Null => Val::Null,
        J::Bool(b) => Val::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Val::Num(Num::from_integral(i))
            } else if let Some(u) = n.as_u64() {
                Val::Num(Num::from_integral(u))
            } else {
                Val::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Val::from(s.clone()),
        J::Array(a) => a.iter().map(json_to_val).collect(),
        J::Object(o) => Val::obj(
            o.iter()
                .map(|(k, v)| (Val::from(k.clone()), json_to_val(v)))
                .collect(),
        ),
    }
}

/// Why an output cannot become JSON.
enum Bad {
    TooDeep,
    /// Infinity or NaN (JSON has neither), and where: the path's steps
    /// from the innermost out.
    NotFinite(f64, Vec<String>),
}

impl Bad {
    /// Adds the step of the value holding this one to the path.
    fn at(self, step: impl FnOnce() -> String) -> Bad {
        match self {
            Bad::NotFinite(f, mut steps) => {
                steps.push(step());
                Bad::NotFinite(f, steps)
            }
            other => other,
        }
    }

    /// The message for output `index` (0-based) of the program.
    fn message(self, index: usize) -> String {
        match self {
            Bad::TooDeep => format!("jq output is nested more than {MAX_DEPTH} levels deep"),
            Bad::NotFinite(f, steps) => {
                let path: String = steps.into_iter().rev().collect();
                let at = match (index, path.is_empty()) {
                    (0, true) => "the output".to_string(),
                    (0, false) => format!("the output at {path}"),
                    (n, true) => format!("output {}", n + 1),
                    (n, false) => format!("output {} at {path}", n + 1),
                };
                let what = if f.is_nan() {
                    "NaN"
                } else if f > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                };
                format!(
                    "{at} is {what}, which JSON cannot hold (a division by zero gives it; \
                     test the divisor first, or the result with `isinfinite` / `isnan`)"
                )
            }
        }
    }
}

fn to_json_at(v: &Val, depth: usize) -> Result<J, Bad> {
    if depth > MAX_DEPTH {
        return Err(Bad::TooDeep);
    }
    Ok(match v {
        Val::Null => J::Null,
        Val::Bool(b) => J::Bool(*b),
        Val::Num(n) => num_to_json(n)?,
        Val::TStr(b) | Val::BStr(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(a) => J::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| to_json_at(x, depth + 1).map_err(|bad| bad.at(|| format!("[{i}]"))))
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(o) => J::Object(
            o.iter()
                .map(|(k, v)| {
                    let key = key_to_string(k);
                    let v = to_json_at(v, depth + 1).map_err(|bad| bad.at(|| key_step(&key)))?;
                    Ok((key, v))
                })
                .collect::<Result<_, Bad>>()?,
        ),
    })
}

/// `.name` for a key jq writes so, `."any key"` for the rest.
fn key_step(key: &str) -> String {
    let plain = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        format!(".{key}")
    } else {
        format!(".{}", J::String(key.to_string()))
    }
}

fn key_to_string(k: &Val) -> String {
    match k {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.to_string(),
    }
}

fn num_to_json(n: &Num) -> Result<J, Bad> {
    Ok(match n {
        Num::Int(i) => J::Number(Number::from(*i as i64)),
        Num::Float(f) => {
            J::Number(Number::from_f64(*f).ok_or_else(|| Bad::NotFinite(*f, Vec::new()))?)
        }
        Num::BigInt(_) | Num::Dec(_) => {
            let s = n.to_string();
            s.parse::<Number>().map(J::Number).unwrap_or_else(|_| {
                s.parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map_or(J::Null, J::Number)
            })
        }
    })
}
