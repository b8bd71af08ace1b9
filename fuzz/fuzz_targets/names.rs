#![no_main]

#[path = "../../crates/echomq-protocol/tests/suite/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::names(data));
