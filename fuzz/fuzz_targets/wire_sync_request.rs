//! The `wire_sync_request` fuzz target: [`geocount_fuzz::targets::wire_sync_request`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::wire_sync_request::run(data);
});
