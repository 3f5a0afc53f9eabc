//! The host side of guest I/O: whatever bytes a guest hands back (the
//! JavaScript runtime's tagged answer, a component's output string) must
//! become an output value or an error that says what is wrong, never a
//! panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice_sandbox::fuzz_guest_output(data);
});
