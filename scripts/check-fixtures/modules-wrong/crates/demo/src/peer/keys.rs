//! The keys, read from their file.
pub struct Keys;

pub fn load() -> Keys {
    super::key_file::read();
    Keys
}
