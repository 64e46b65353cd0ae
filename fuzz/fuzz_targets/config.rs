//! Config text → `Config::parse`: never a panic, whatever the file holds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = warden_gateway::config::Config::parse(text, "fuzz.toml");
    }
});
