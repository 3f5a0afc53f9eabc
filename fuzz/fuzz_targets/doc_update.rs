//! Loro updates, version vectors and presence updates from a peer or the editor,
//! merged into a workflow document.
//! The body is `sluice_fuzz_targets::doc_update`, replayed over `fuzz/corpus/doc_update` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::doc_update(data));
