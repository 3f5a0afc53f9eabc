//! `cargo xtask chaos [--kills N] [--seed S]`: the chaos test
//! (engine/cli/tests/chaos.rs) in its long form, on a release build: a
//! `sluice serve` under webhook load SIGKILLed at N random moments (default
//! 100), then every acknowledged run checked, every effect counted, and the
//! totals printed. `cargo xtask test` runs the same test with 4 kills.

use anyhow::{Result, bail};

use crate::cmd::{cargo, check, step};

pub fn run(args: &[String]) -> Result<()> {
    let mut kills = 100u32;
    let mut seed = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| anyhow::anyhow!("{a} takes a number"))
        };
        match a.as_str() {
            "--kills" => kills = u32::try_from(value()?)?,
            "--seed" => seed = Some(value()?),
            other => bail!("unknown option `{other}` (chaos takes --kills N and --seed S)"),
        }
    }
    step(&format!(
        "chaos: `sluice serve` under webhook load, SIGKILLed {kills} times (release build)"
    ));
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--release",
        "-p",
        "sluice-cli",
        "--test",
        "chaos",
        "--",
        "--nocapture",
    ])
    .env("SLUICE_CHAOS_KILLS", kills.to_string());
    if let Some(seed) = seed {
        cmd.env("SLUICE_CHAOS_SEED", seed.to_string());
    }
    check(&mut cmd)
}
