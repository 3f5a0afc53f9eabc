//! A template in a node's config: checked, compiled and evaluated (bounded by fuel).
//! The body is `sluice_fuzz_targets::template`, replayed over `fuzz/corpus/template` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::template(data));
