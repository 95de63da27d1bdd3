//! The `topology` fuzz target: [`geocount_fuzz::targets::topology`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::topology::run(data);
});
