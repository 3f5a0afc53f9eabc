//! What a guest hands back (the JavaScript runtime's tagged answer, its output,
//! pointers into its memory).
//! The body is `sluice_fuzz_targets::guest_output`, replayed over `fuzz/corpus/guest_output` by `cargo xtask test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz_targets::guest_output(data));
