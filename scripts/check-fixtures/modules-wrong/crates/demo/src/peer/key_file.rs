//! The keys' file, which builds the keys.
#[cfg(test)]
const SAMPLE: &[u8] = b"key";

use self::inner::read_all;

mod inner {
    pub fn read_all() -> Vec<super::super::keys::Keys> {
        Vec::new()
    }
}

pub fn read() -> usize {
    read_all().len()
}
