//! Writes the seed corpora: `fuzz/corpus/<target>/seed-<n>`, valid inputs made from the real
//! types ([`geocount_fuzz::seeds`]) and the repository's topology files. Run from anywhere:
//! `cargo run --manifest-path fuzz/Cargo.toml --example write_seeds`.

use std::path::Path;

use geocount_fuzz::seeds;

fn main() -> std::io::Result<()> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The repository's own topologies, and the local one with another trending window.
    let config = fuzz.join("../config");
    let local = std::fs::read_to_string(config.join("local.toml"))?;
    let trending = local.replacen("[trending]\n", "[trending]\nwindow_seconds = 60\n", 1);
    assert_ne!(
        trending, local,
        "config/local.toml has a [trending] section"
    );
    let topology = vec![
        local.into_bytes(),
        std::fs::read(config.join("geo-10dc.toml"))?,
        trending.into_bytes(),
    ];
    let targets = [
        ("wire_batch", seeds::wire_batch()),
        ("wire_rights", seeds::wire_rights()),
        ("wire_sync_request", seeds::wire_sync_request()),
        ("wire_sync_page", seeds::wire_sync_page()),
        ("wire_slot_copy", seeds::wire_slot_copy()),
        ("json_bodies", seeds::json_bodies()),
        ("queries", seeds::queries()),
        ("resp_commands", seeds::resp_commands()),
        ("topology", topology),
    ];
    for (target, inputs) in targets {
        let dir = fuzz.join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        for (n, input) in inputs.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{n}")), input)?;
        }
        println!("{target}: {} seeds in {}", inputs.len(), dir.display());
    }
    Ok(())
}
