//! A workflow file, an import or a `PUT /api/v1/workflows` body: parsed, validated,
//! planned, and sent through a document and back unchanged.
//! The body is `sluice_fuzz_targets::workflow`, replayed over `fuzz/corpus/workflow` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::workflow(data));
