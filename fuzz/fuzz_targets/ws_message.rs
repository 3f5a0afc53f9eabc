//! A text frame on the editor's WebSocket, decoded and applied.
//! The body is `sluice_fuzz_targets::ws_message`, replayed over `fuzz/corpus/ws_message` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::ws_message(data));
