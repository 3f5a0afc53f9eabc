//! data.transform: jq programs checked with jaq here (syntax, names), when a
//! workflow is planned; they run in the sandbox
//! (`sluice_sandbox::Sandbox::run_jq`).

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, compile, data::JustLut};
use jaq_json::Val;

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

/// Longest jq program accepted, in bytes.
pub const MAX_PROGRAM_LEN: usize = 64 << 10;

/// A jq program that parsed and compiled: what `data.transform` runs (in the
/// sandbox, see `transform` in lib.rs).
#[derive(Debug, Clone)]
pub struct Program {
    pub source: String,
}

impl Program {
    /// Checks a program: its length, then parsing and compiling it with jaq
    /// on a thread with a large stack, so that no program text (nested
    /// brackets, long pipes) can overflow the caller's stack. Errors carry
    /// line and column.
    pub fn compile(code: &str) -> Result<Program, String> {
        if code.len() > MAX_PROGRAM_LEN {
            return Err(format!(
                "jq program is {} bytes long, more than the limit of {MAX_PROGRAM_LEN}",
                code.len()
            ));
        }
        // (A browser has no threads: the editor checks in line, and a
        // program too deep for its stack stops that check, not the engine.)
        #[cfg(target_arch = "wasm32")]
        let checked: std::io::Result<std::thread::Result<Result<(), String>>> =
            Ok(Ok(compile_jq(code).map(drop)));
        #[cfg(not(target_arch = "wasm32"))]
        let checked = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("sluice-jq-check".into())
                .stack_size(COMPILE_STACK)
                .spawn_scoped(s, || compile_jq(code).map(drop))
                .map(|t| t.join())
        });
        match checked {
            Ok(Ok(result)) => result.map(|()| Program {
                source: code.to_string(),
            }),
            Ok(Err(_)) => Err("jq program could not be checked (the checker panicked)".into()),
            Err(e) => Err(format!("jq program could not be checked: {e}")),
        }
    }
}

/// The checking thread's stack: enough for the deepest program of
/// `MAX_PROGRAM_LEN` bytes (reserved, not committed, until used).
#[cfg(not(target_arch = "wasm32"))]
const COMPILE_STACK: usize = 512 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_compile_with_line_and_column_in_errors() {
        assert!(Program::compile(".a | map(. + 1)").is_ok());
        let e = Program::compile(".a |").unwrap_err();
        assert!(e.starts_with("jq syntax error: line 1"), "{e}");
        let e = Program::compile("nope(1)").unwrap_err();
        assert!(e.contains("undefined filter nope/1"), "{e}");
        assert!(Program::compile("now | floor").is_ok());
        assert!(Program::compile("env").is_err());
    }

    /// The deepest programs of the longest allowed length are checked
    /// without overflowing any stack (each would crash the process if it
    /// did), and one byte more is refused by length.
    #[test]
    fn the_deepest_programs_are_checked_without_overflow() {
        let n = MAX_PROGRAM_LEN / 2 - 2;
        let half = n / 2;
        let programs = [
            format!("{}.{}", "(".repeat(half), ")".repeat(half)),
            format!("{}1{}", "[".repeat(half), "]".repeat(half)),
            format!(".{}", "|.".repeat(half)),
            format!("1{}", "+1".repeat(half)),
            format!("{}.", "-".repeat(n)),
            format!("{}1{}", "{a:".repeat(n / 4), "}".repeat(n / 4)),
            format!("{}.{}", "if . then ".repeat(n / 11), " end".repeat(n / 11)),
            format!("{}.", "def f: ".repeat(n / 8)),
            ".a".repeat(half),
        ];
        for p in programs {
            assert!(p.len() <= MAX_PROGRAM_LEN);
            let _ = Program::compile(&p);
        }
        let long = " ".repeat(MAX_PROGRAM_LEN + 1);
        assert!(
            Program::compile(&long)
                .unwrap_err()
                .contains("more than the limit")
        );
    }
}
