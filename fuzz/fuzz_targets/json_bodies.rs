//! The `json_bodies` fuzz target: [`geocount_fuzz::targets::json_bodies`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::json_bodies::run(data);
});
