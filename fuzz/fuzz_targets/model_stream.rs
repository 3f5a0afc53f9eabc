//! What a model server streams to `ai.chat`: server-sent events, read whole and in pieces.
//! The body is `sluice_fuzz_targets::model_stream`, replayed over `fuzz/corpus/model_stream` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::model_stream(data));
