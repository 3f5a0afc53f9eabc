//! Every fuzz target's corpus (`fuzz/corpus/<target>/`) and regressions
//! (`fuzz/regressions/<target>/`: inputs that once crashed, kept with a name
//! saying what they found) run once through the target's body. A panic names
//! the file; a target without a corpus fails.

use std::path::{Path, PathBuf};

use sluice_fuzz_targets::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_runs_its_corpus_and_regressions() {
    let root = fuzz_dir();
    let mut failures = Vec::new();
    let mut total = 0;
    for t in TARGETS {
        // Every target is a libFuzzer binary too.
        let bin = root.join("fuzz_targets").join(format!("{}.rs", t.name));
        assert!(bin.is_file(), "{} has no {}", t.name, bin.display());
        let corpus = files(&root.join("corpus").join(t.name));
        assert!(
            corpus.len() >= 3,
            "fuzz/corpus/{} holds {} inputs: seed it (see fuzz/README.md)",
            t.name,
            corpus.len()
        );
        let inputs = corpus
            .into_iter()
            .chain(files(&root.join("regressions").join(t.name)));
        for path in inputs {
            let data = std::fs::read(&path).unwrap();
            total += 1;
            if std::panic::catch_unwind(|| (t.run)(&data)).is_err() {
                failures.push(path.display().to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{total} inputs over {} targets", TARGETS.len());
}
