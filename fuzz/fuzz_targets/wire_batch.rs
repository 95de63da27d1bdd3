//! The `wire_batch` fuzz target: [`geocount_fuzz::targets::wire_batch`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::wire_batch::run(data);
});
