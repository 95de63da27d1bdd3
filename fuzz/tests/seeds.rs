//! Every target's seed corpus (`corpus/<target>/seed-*`) replays through the target on the
//! stable toolchain: each seed must still decode and run without a panic. A wire change that
//! leaves the seeds behind fails here; `examples/write_seeds.rs` writes them afresh.

use std::path::Path;

use geocount_fuzz::targets;

type Target = fn(&[u8]) -> bool;

const TARGETS: [(&str, Target); 9] = [
    ("json_bodies", targets::json_bodies::run),
    ("queries", targets::queries::run),
    ("resp_commands", targets::resp_commands::run),
    ("topology", targets::topology::run),
    ("wire_batch", targets::wire_batch::run),
    ("wire_rights", targets::wire_rights::run),
    ("wire_slot_copy", targets::wire_slot_copy::run),
    ("wire_sync_page", targets::wire_sync_page::run),
    ("wire_sync_request", targets::wire_sync_request::run),
];

#[test]
fn every_seed_decodes_and_runs() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, run) in TARGETS {
        let mut seeds: Vec<_> = std::fs::read_dir(corpus.join(name))
            .unwrap_or_else(|e| panic!("corpus/{name}: {e}"))
            .map(|entry| entry.expect("a corpus entry").path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("seed-"))
            })
            .collect();
        seeds.sort();
        assert!(!seeds.is_empty(), "corpus/{name} has no seed");
        for seed in seeds {
            let bytes = std::fs::read(&seed).expect("a readable seed");
            assert!(run(&bytes), "{} no longer decodes", seed.display());
        }
    }
}

#[test]
fn a_target_tells_garbage_from_a_seed() {
    // The replay's assertion can fail: bytes no decoder accepts are reported as such.
    assert!(!targets::wire_slot_copy::run(&[0xff; 3]));
    assert!(!targets::topology::run(b"\xff\xfe"));
}
