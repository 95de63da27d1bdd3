//! The disk.
pub fn create_dir_durably(dir: &str) -> bool {
    !dir.is_empty()
}
