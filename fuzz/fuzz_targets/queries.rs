//! The `queries` fuzz target: [`geocount_fuzz::targets::queries`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::queries::run(data);
});
