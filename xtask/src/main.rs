//! Project automation, so that a clean clone needs exactly two commands:
//! `cargo xtask run` and `cargo xtask test`. Each step says what it does and
//! installs what it needs (rustup targets, tools) when it is missing.

mod bench;
mod chaos;
mod cmd;
mod dist;
mod frontend;
mod fuzz;
mod run;
mod test;
mod toolchain;

use anyhow::Result;

use crate::cmd::{project_root, step};

const USAGE: &str = "\
usage: cargo xtask <command>

  run               build the engine and the editor, run the example workflows, then the desktop
                    app when there is a display, else `sluice serve` (the editor in a browser)
  test              fmt check, clippy -D warnings, the whole test suite, wasm32 build of the model and the core
  dist              build the desktop app's .deb into target/dist
  bench [engine|webhook|soak|http|docs|peers|sandbox|js-engines|editor|desktop|worker]
                    print the engine figures, or load the trigger port with wrk (docs/benchmarks.md);
                    webhook takes --secs N (per measurement) and --flame FILE.svg
                    soak takes --minutes N (default 60), --svg FILE and --no-ab
  chaos [--kills N] [--seed S]
                    SIGKILL a loaded `sluice serve` N times (default 100), check every run and side effect
  fuzz [TARGET...] [--secs N]
                    run the fuzz targets (fuzz/) under libFuzzer, N seconds each (default 60)
  docs              regenerate docs/nodes.md from the node schemas
  frontend          build the editor into target/frontend/dist
";

fn main() -> Result<()> {
    cmd::start_clock();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("run") => run::run(&args[1..]),
        Some("test") => test::run(),
        Some("bench") => bench::run(
            args.get(1).map(String::as_str).unwrap_or("engine"),
            args.get(2..).unwrap_or_default(),
        ),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("chaos") => chaos::run(&args[1..]),
        Some("docs") => docs(),
        Some("frontend") => frontend::build().map(|_| ()),
        Some("dist") => dist::build().map(|_| ()),
        _ => {
            eprint!("{USAGE}");
            std::process::exit(2);
        }
    }
}

fn docs() -> Result<()> {
    step("writing docs/nodes.md from the node schemas");
    std::fs::write("docs/nodes.md", sluice_model::kinds::reference_markdown())?;
    Ok(())
}
