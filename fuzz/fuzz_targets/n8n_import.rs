//! An n8n export, converted by `sluice import`: never a panic, always a workflow that parses.
//! The body is `sluice_fuzz_targets::n8n_import`, replayed over `fuzz/corpus/n8n_import` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::n8n_import(data));
