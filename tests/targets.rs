//! Every test file of this directory is a test target: Cargo finds none by itself here (it looks
//! in `tests/tests/`), so a file missing from `Cargo.toml`'s `[[test]]` list would never run.

use std::path::Path;

#[test]
fn every_test_file_is_a_test_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".rs") {
            files += 1;
            let target = format!("[[test]]\nname = \"{stem}\"\npath = \"{name}\"\n");
            assert!(
                manifest.contains(&target),
                "{name} is not a [[test]] in Cargo.toml"
            );
        }
    }
    assert!(files > 1, "no test files in {}", dir.display());
}
