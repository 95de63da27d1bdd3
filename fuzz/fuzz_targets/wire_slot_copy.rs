//! The `wire_slot_copy` fuzz target: [`geocount_fuzz::targets::wire_slot_copy`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::wire_slot_copy::run(data);
});
