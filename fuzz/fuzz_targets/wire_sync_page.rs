//! The `wire_sync_page` fuzz target: [`geocount_fuzz::targets::wire_sync_page`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::wire_sync_page::run(data);
});
