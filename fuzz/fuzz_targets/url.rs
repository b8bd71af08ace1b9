#![no_main]

#[path = "../../crates/echomq/tests/suite/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::url(data));
