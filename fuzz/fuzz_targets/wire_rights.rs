//! The `wire_rights` fuzz target: [`geocount_fuzz::targets::wire_rights`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::wire_rights::run(data);
});
