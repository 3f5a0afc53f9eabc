//! Project automation, so that a clean clone needs exactly two commands:
//! `cargo xtask run` and `cargo xtask test`. Each step says what it does and
//! installs what it needs (rustup targets, tools) when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

  run               build the engine and run the example workflows (durable, in the data dir)
  test              fmt check, clippy -D warnings, the whole test suite, wasm32 build of the model
  bench [engine]    print the engine figures (docs/benchmarks.md)
  docs              regenerate docs/nodes.md from the node schemas
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("test") => test(),
        Some("bench") => bench(args.get(1).map(String::as_str).unwrap_or("engine")),
        Some("docs") => docs(),
        _ => {
            eprint!("{USAGE}");
            std::process::exit(2);
        }
    }
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn step(what: &str) {
    eprintln!("\x1b[1m==> {what}\x1b[0m");
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn check(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("failed ({status}): {cmd:?}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs a rustup target when it is missing.
fn ensure_target(target: &str) -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed.lines().any(|l| l.trim() == target) {
        step(&format!("installing rustup target {target}"));
        check(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

fn ensure_components() -> Result<()> {
    let installed = output(Command::new("rustup").args(["component", "list", "--installed"]))?;
    for c in ["rustfmt", "clippy"] {
        if !installed.lines().any(|l| l.starts_with(c)) {
            step(&format!("installing rustup component {c}"));
            check(Command::new("rustup").args(["component", "add", c]))?;
        }
    }
    Ok(())
}

fn test() -> Result<()> {
    ensure_components()?;
    ensure_target("wasm32-unknown-unknown")?;
    step("cargo fmt --check");
    check(cargo().args(["fmt", "--all", "--check"]))?;
    step("cargo clippy --workspace --all-targets -- -D warnings");
    check(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]))?;
    step(
        "cargo build -p sluice-model --target wasm32-unknown-unknown (the shared crate stays pure)",
    );
    check(cargo().args([
        "build",
        "-p",
        "sluice-model",
        "--target",
        "wasm32-unknown-unknown",
        "--locked",
    ]))?;
    step("cargo test --workspace");
    check(cargo().args(["test", "--workspace", "--locked"]))?;
    step("all checks passed");
    Ok(())
}

fn run(extra: &[String]) -> Result<()> {
    step("building the sluice binary");
    check(cargo().args(["build", "--release", "-p", "sluice-cli", "--locked"]))?;
    let bin = target_dir()?.join("release").join("sluice");
    if !extra.is_empty() {
        return check(Command::new(&bin).args(extra));
    }
    for example in [
        "assets/examples/hello.flow.json",
        "assets/examples/orders.flow.json",
    ] {
        step(&format!("sluice validate {example}"));
        check(Command::new(&bin).args(["validate", example]))?;
        step(&format!("sluice run {example}"));
        check(Command::new(&bin).args([
            "run",
            example,
            "--input",
            "@assets/examples/orders.input.json",
        ]))?;
    }
    step("sluice runs list (the journal in the data dir)");
    check(Command::new(&bin).args(["runs", "list"]))?;
    eprintln!(
        "\nThe engine stores runs in its data dir (override with --data-dir or SLUICE_DATA_DIR)."
    );
    eprintln!(
        "Try: {} runs show <RUN>   |   {} run FILE --input '{{...}}'",
        bin.display(),
        bin.display()
    );
    Ok(())
}

fn target_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(project_root().join("target"))
}

fn bench(which: &str) -> Result<()> {
    match which {
        "engine" => {
            step(
                "engine benchmark (release build): durable steps/s, step overhead, SQLite commit floor",
            );
            check(cargo().args([
                "run",
                "--release",
                "--locked",
                "-p",
                "sluice-cli",
                "--bin",
                "sluice-bench-engine",
            ]))
        }
        other => bail!("unknown benchmark `{other}` (available: engine)"),
    }
}

fn docs() -> Result<()> {
    step("writing docs/nodes.md from the node schemas");
    std::fs::write("docs/nodes.md", sluice_model::kinds::reference_markdown())?;
    Ok(())
}
