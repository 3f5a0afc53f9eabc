//! A webhook request's body by its content type (first line: the header).
//! The body is `sluice_fuzz_targets::webhook_body`, replayed over `fuzz/corpus/webhook_body` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::webhook_body(data));
