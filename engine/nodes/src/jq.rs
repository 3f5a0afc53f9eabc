//! data.transform: jq programs via jaq, compiled once, run on a thread of their own with a deadline.

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, compile, data::JustLut};
use jaq_json::{Num, Val};
use serde_json::{Number, Value as J};

pub type JqFilter = jaq_core::Filter<JustLut<Val>>;

/// Parse + compile a jq program (core + std + json libraries). Errors carry line/column.
pub fn compile_jq(code: &str) -> Result<JqFilter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(
            jaq_std::funs()
                .filter(|(name, _, _)| !matches!(*name, "env" /* , "now" on wasm */)),
        )
        .chain(jaq_json::funs());

    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(fmt_load_errors)?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(fmt_compile_errors)
}

/// Run on one JSON input; collect at most `max_outputs` outputs.
pub fn run_jq(f: &JqFilter, input: &J, max_outputs: usize) -> Result<Vec<J>, String> {
    let ctx = Ctx::<JustLut<Val>>::new(&f.lut, Vars::new([]));
    let mut out = Vec::new();
    for r in f.id.run((ctx, json_to_val(input))) {
        match r {
            Ok(v) => out.push(val_to_json(&v)?),
            Err(exn) => {
                return Err(match exn.get_err() {
                    Ok(e) => format!("jq runtime error: {e}"), // e: jaq_core::Error<Val>: Display
                    Err(exn) => match exn.get_halt() {
                        Ok(code) => format!("jq program called halt({code})"),
                        Err(_) => "internal jaq exception".to_string(),
                    },
                });
            }
        }
        if out.len() >= max_outputs {
            return Err(format!(
                "jq program produced more than {max_outputs} outputs"
            ));
        }
    }
    Ok(out)
}

// ---------- error formatting ----------
fn line_col(code: &str, part: &str) -> String {
    let start = load::span(code, part).start;
    let before = &code[..start];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {col}")
}

fn found(s: &str) -> String {
    if s.is_empty() {
        "end of input".into()
    } else {
        format!("{:?}", s.chars().take(12).collect::<String>())
    }
}

fn fmt_load_errors(errs: load::Errors<&str, ()>) -> String {
    let mut msgs = Vec::new();
    for (file, err) in errs {
        let code = file.code;
        match err {
            load::Error::Io(es) => {
                for (path, e) in es {
                    msgs.push(format!(
                        "{}: cannot load module {path:?}: {e}",
                        line_col(code, path)
                    ))
                }
            }
            load::Error::Lex(es) => {
                for (expected, rest) in es {
                    msgs.push(format!(
                        "{}: expected {}, found {}",
                        line_col(code, rest),
                        expected.as_str(),
                        found(rest)
                    ))
                }
            }
            load::Error::Parse(es) => {
                for (expected, tok) in es {
                    msgs.push(format!(
                        "{}: expected {}, found {}",
                        line_col(code, tok),
                        expected.as_str(),
                        found(tok)
                    ))
                }
            }
        }
    }
    format!("jq syntax error: {}", msgs.join("; "))
}

fn fmt_compile_errors(errs: compile::Errors<&str, ()>) -> String {
    let mut msgs = Vec::new();
    for (file, es) in errs {
        for (name, undef) in es {
            let what = match undef {
                compile::Undefined::Filter(arity) => format!("undefined filter {name}/{arity}"),
                other => format!("undefined {} {name}", other.as_str()),
            };
            msgs.push(format!("{}: {what}", line_col(file.code, name)));
        }
    }
    format!("jq compile error: {}", msgs.join("; "))
}

// ---------- serde_json <-> jaq_json::Val ----------
pub fn json_to_val(v: &J) -> Val {
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
        J::Array(a) => a.iter().map(json_to_val).collect(), // FromIterator<Val> => Val::Arr
        J::Object(o) => Val::obj(
            o.iter()
                .map(|(k, v)| (Val::from(k.clone()), json_to_val(v)))
                .collect(),
        ),
    }
}

/// Deepest value a jq program may return: the engine serializes, journals and
/// drops values recursively, so depth is bounded like parsed JSON (serde_json: 128).
pub const MAX_DEPTH: usize = 128;

pub fn val_to_json(v: &Val) -> Result<J, String> {
    to_json_at(v, 0)
}

fn to_json_at(v: &Val, depth: usize) -> Result<J, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "jq output is nested more than {MAX_DEPTH} levels deep"
        ));
    }
    Ok(match v {
        Val::Null => J::Null,
        Val::Bool(b) => J::Bool(*b),
        Val::Num(n) => num_to_json(n),
        Val::TStr(b) | Val::BStr(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(a) => J::Array(
            a.iter()
                .map(|x| to_json_at(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(o) => J::Object(
            o.iter()
                .map(|(k, v)| Ok((key_to_string(k), to_json_at(v, depth + 1)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

fn key_to_string(k: &Val) -> String {
    match k {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.to_string(), // non-string keys (jaq allows them): use their JSON text
    }
}

fn num_to_json(n: &Num) -> J {
    match n {
        Num::Int(i) => J::Number(Number::from(*i as i64)),
        Num::Float(f) => Number::from_f64(*f).map_or(J::Null, J::Number), // NaN/inf -> null
        Num::BigInt(_) | Num::Dec(_) => {
            let s = n.to_string(); // digits, or decimal literal text such as "1.50"
            s.parse::<Number>() // serde_json: big ints become f64; "1e1000" is an Err
                .map(J::Number)
                .unwrap_or_else(|_| {
                    s.parse::<f64>()
                        .ok()
                        .and_then(Number::from_f64)
                        .map_or(J::Null, J::Number)
                })
        }
    }
}

/// A compiled jq program, shareable between steps.
pub struct Program(pub JqFilter);

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("jq::Program")
    }
}

impl Program {
    pub fn compile(code: &str) -> Result<Program, String> {
        compile_jq(code).map(Program)
    }
}
