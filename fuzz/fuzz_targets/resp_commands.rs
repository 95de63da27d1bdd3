//! The `resp_commands` fuzz target: [`geocount_fuzz::targets::resp_commands`].

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    geocount_fuzz::targets::resp_commands::run(data);
});
