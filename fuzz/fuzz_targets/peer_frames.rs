//! What a connected peer can send: frames off the stream, tickets, updates.
//! The body is `sluice_fuzz_targets::peer_frames`, replayed over `fuzz/corpus/peer_frames` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::peer_frames(data));
