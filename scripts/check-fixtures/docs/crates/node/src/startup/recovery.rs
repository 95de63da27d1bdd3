//! Recovery of a data directory.
use crate::storage::create_dir_durably;

pub fn recover(dir: &str) -> bool {
    create_dir_durably(dir)
}
