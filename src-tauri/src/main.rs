//! The desktop app's entry point (the app itself is the library, `run`).

// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    sluice_desktop::run();
}
