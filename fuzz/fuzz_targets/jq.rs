//! A `data.transform` jq program, checked when a workflow is planned.
//! The body is `sluice_fuzz_targets::jq`, replayed over `fuzz/corpus/jq` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::jq(data));
