//! The topology's loading, validation and lookups, against files written to a temporary
//! directory.

use std::path::{Path, PathBuf};

use figment::providers::Env;

use super::*;
use crate::SlotId;

/// Two datacenters, every key else at its default.
const GOOD: &str = crate::fixtures::TWO_DATACENTERS;

fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topology.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn load(text: &str) -> Result<Topology, TopologyError> {
    let (_dir, path) = write(text);
    Topology::load_with_env(&path, Env::prefixed("GEOCOUNT_TEST_NEVER_SET_"))
}

/// [`GOOD`] with `setting` in `[section]`.
fn load_with(section: &str, setting: &str) -> Result<Topology, TopologyError> {
    load(&format!("{GOOD}\n[{section}]\n{setting}\n"))
}

/// Why [`GOOD`] with `setting` in `[section]` is refused.
fn refused(section: &str, setting: &str) -> TopologyError {
    load_with(section, setting).unwrap_err()
}

/// Asserts that [`GOOD`] with `setting` in `[section]` is refused, naming `key`.
fn assert_refused_at(section: &str, setting: &str, key: &str) {
    assert_eq!(refused(section, setting).key, key);
}

/// Hostile input (the `topology` fuzz target): the placement ring is built in memory from
/// `shard.virtual_nodes` points per slot, so an unbounded count could exhaust memory (and
/// overflowed `slots * virtual_nodes` in `Placement::new`).
#[test]
fn virtual_nodes_are_bounded() {
    let with = |n: u64| format!("{GOOD}\n[shard]\nvirtual_nodes = {n}\n");
    assert!(Topology::from_toml("t.toml", &with(u64::from(MAX_VIRTUAL_NODES))).is_ok());
    let error = Topology::from_toml("t.toml", &with(4_294_967_295)).unwrap_err();
    assert_eq!(error.key, "shard.virtual_nodes");
    assert!(error.message.contains("more than 4096"), "{error}");
}

/// Each scan holds a thread of its own, so their number is bounded, and at least one runs.
#[test]
fn concurrent_scans_are_bounded() {
    let with = |n: usize| format!("{GOOD}\n[http]\nmax_concurrent_scans = {n}\n");
    let t = Topology::from_toml("t.toml", &with(MAX_CONCURRENT_SCANS)).unwrap();
    assert_eq!(t.http.max_concurrent_scans, MAX_CONCURRENT_SCANS);
    for bad in [0, MAX_CONCURRENT_SCANS + 1] {
        let error = Topology::from_toml("t.toml", &with(bad)).unwrap_err();
        assert_eq!(error.key, "http.max_concurrent_scans", "{bad}");
    }
}

#[test]
fn good_topology_loads_with_defaults() {
    let t = load(GOOD).unwrap();
    assert_eq!(t.datacenters.len(), 2);
    assert_eq!(t.shard, ShardDefaults::default());
    assert_eq!(
        t.shard_address(&SlotId::new("USA_0", 1)).unwrap(),
        "127.0.0.1:7102".parse().unwrap()
    );
}

#[test]
fn duplicate_address_names_the_key() {
    let text = GOOD.replace("127.0.0.1:7201", "127.0.0.1:7101");
    let err = load(&text).unwrap_err();
    assert_eq!(err.key, "datacenters[1].shards[0]");
    assert!(err.message.contains("datacenters[0].shards[0]"), "{err}");
    assert!(
        err.to_string()
            .contains("topology.toml: datacenters[1].shards[0]: duplicate")
    );
}

#[test]
fn bad_values_name_the_key() {
    let err = load(&GOOD.replace("127.0.0.1:7000", "nowhere")).unwrap_err();
    assert_eq!(err.key, "global.listen");
    assert_refused_at("shard", "durability = \"maybe\"", "shard.durability");
    assert_refused_at("shard", "max_batch_entries = 0", "shard.max_batch_entries");
    let err = load(&GOOD.replace("ASIA_0", "ASIA-0")).unwrap_err();
    assert_eq!(err.key, "datacenters[1].name");
    let err = load(&GOOD.replace("listen", "lisen")).unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
}

#[test]
fn huge_pages_are_off_unless_memory_says_so() {
    assert!(!load(GOOD).unwrap().memory.huge_pages);
    let on = load_with("memory", "huge_pages = true").unwrap();
    assert!(on.memory.huge_pages);
    assert_refused_at("memory", "huge_pages = \"yes\"", "memory.huge_pages");
    let err = refused("memory", "huge_page = true");
    assert!(err.to_string().contains("huge_page"), "{err}");
}

#[test]
fn trending_thresholds_default_to_none_and_are_validated() {
    let t = load(GOOD).unwrap();
    assert_eq!(t.trending, TrendingConfig::default());
    assert_eq!(t.trending.window_seconds, 300);
    let t = load_with(
        "trending",
        "window_seconds = 60\nthresholds = {\"#\" = 10000}",
    )
    .unwrap();
    assert_eq!(t.trending.window_seconds, 60);
    assert_eq!(t.trending.threshold("#"), Ok(10_000));
    assert_eq!(
        t.trending.threshold("@"),
        Err("no trending threshold for prefix \"@\" (configured: \"#\")".to_owned())
    );
    assert_refused_at("trending", "window_seconds = 0", "trending.window_seconds");
    assert_refused_at(
        "trending",
        "window_seconds = 7200",
        "trending.window_seconds",
    );
    assert_refused_at(
        "trending",
        "thresholds = {\"#\" = 0}",
        "trending.thresholds.\"#\"",
    );
    let err = refused("trending", "window = 5");
    assert!(err.to_string().contains("window"), "{err}");
}

#[test]
fn the_clock_skew_bound_defaults_to_a_minute_and_must_be_positive() {
    assert_eq!(load(GOOD).unwrap().sync.max_clock_skew_ms, 60_000);
    let set = load_with("sync", "max_clock_skew_ms = 5000").unwrap();
    assert_eq!(set.sync.max_clock_skew_ms, 5_000);
    assert_refused_at("sync", "max_clock_skew_ms = 0", "sync.max_clock_skew_ms");
    assert_eq!(load(GOOD).unwrap().sync.tombstone_retention_secs, 604_800);
    let set = load_with("sync", "tombstone_retention_secs = 60").unwrap();
    assert_eq!(set.sync.tombstone_retention_secs, 60);
    let key = "sync.tombstone_retention_secs";
    assert_refused_at("sync", "tombstone_retention_secs = 0", key);
}

#[test]
fn byte_limits_have_defaults_and_are_validated() {
    let t = load(GOOD).unwrap();
    assert_eq!(
        (t.shard.max_counter_bytes, t.shard.max_state_bytes),
        (65_536, 4 << 30)
    );
    assert_eq!(t.aggregator.global_max_state_bytes, 16 << 30);
    for (section, setting, key) in [
        (
            "shard",
            "max_counter_bytes = 1000",
            "shard.max_counter_bytes",
        ),
        ("shard", "max_state_bytes = 5000", "shard.max_counter_bytes"),
        ("shard", "max_state_bytes = 0", "shard.max_state_bytes"),
        (
            "aggregator",
            "datacenter_max_state_bytes = 0",
            "aggregator.datacenter_max_state_bytes",
        ),
        ("aggregator", "global_max_state_byte = 1", "aggregator"),
    ] {
        let err = refused(section, setting);
        assert!(err.key.starts_with(key), "{setting}: {err}");
        assert!(err.to_string().contains("topology.toml"), "{err}");
    }
}

#[test]
fn syntax_errors_are_one_line() {
    let err = load("[global\nlisten = 1").unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(err.to_string().contains("topology.toml"));
}

#[test]
fn missing_file_is_an_error() {
    let err = Topology::load(Path::new("/nonexistent/geo.toml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/geo.toml: (file): cannot read")
    );
}

#[test]
fn overrides_replace_keys_and_are_validated() {
    use figment::providers::Serialized;
    let (_dir, path) = write(GOOD);
    let overrides = Serialized::default("shard.durability", "async").key("shard.durability");
    let t = Topology::load_with_env(&path, overrides).unwrap();
    assert_eq!(t.shard.durability, Durability::Async);
    let overrides = Serialized::default("global.listen", "127.0.0.1:7101");
    let err = Topology::load_with_env(&path, overrides).unwrap_err();
    assert_eq!(err.key, "datacenters[0].shards[0]", "{err}");
}

/// `GOOD` with a `[wan]` section: the global aggregator in USA, ASIA 75 ms away.
fn with_wan(links: &str) -> String {
    format!("{GOOD}\n[wan]\nglobal_region = \"USA\"\ncontrol = \"127.0.0.1:7900\"\n{links}")
}

const USA_ASIA: &str = "[[wan.links]]\nbetween = [\"USA\", \"ASIA\"]\ndelay_ms = 75\n";

#[test]
fn regions_default_to_the_name_up_to_the_last_underscore() {
    let t = load(GOOD).unwrap();
    assert_eq!(t.wan, None);
    let regions: Vec<&str> = t.datacenters.iter().map(|dc| dc.region()).collect();
    assert_eq!(regions, ["USA", "ASIA"]);
    let text = GOOD
        .replace("\"USA_0\"", "\"US_EAST_1\"")
        .replace("\"ASIA_0\"", "\"tokyo\"\nregion = \"ASIA\"");
    let t = load(&text).unwrap();
    let regions: Vec<&str> = t.datacenters.iter().map(|dc| dc.region()).collect();
    assert_eq!(regions, ["US_EAST", "ASIA"]);
    let err = load(&GOOD.replace("\"ASIA_0\"", "\"ASIA_0\"\nregion = \"AS IA\"")).unwrap_err();
    assert_eq!(err.key, "datacenters[1].region", "{err}");
}

#[test]
fn wan_links_are_found_in_either_order() {
    let text = with_wan(&format!("{USA_ASIA}jitter_ms = 5\n"));
    let wan = load(&text).unwrap().wan.unwrap();
    assert_eq!(wan.global_region, "USA");
    assert_eq!(wan.control, "127.0.0.1:7900".parse().unwrap());
    let link = wan.link("ASIA", "USA").unwrap();
    assert_eq!((link.delay_ms, link.jitter_ms), (75, 5));
    assert_eq!(link.bandwidth_bytes_per_sec, 0);
    assert_eq!(wan.link("USA", "ASIA"), Some(link));
    assert_eq!(wan.link("USA", "USA"), None);
}

#[test]
fn bad_wan_sections_are_one_line_errors_naming_the_key() {
    let cases = [
        (
            with_wan(""),
            "wan.links: no delay between ASIA (datacenter ASIA_0) and USA (the global \
             aggregator): add [[wan.links]] between = [\"USA\", \"ASIA\"]",
        ),
        (
            with_wan(USA_ASIA).replace("\"USA\"\ncontrol", "\"MARS\"\ncontrol"),
            "wan.global_region: unknown region \"MARS\" (the datacenters' regions: USA, ASIA)",
        ),
        (
            with_wan(&USA_ASIA.replace("\"ASIA\"]", "\"EUROPE\"]")),
            "wan.links[0].between: unknown region \"EUROPE\" (the datacenters' regions: USA, \
             ASIA)",
        ),
        (
            with_wan(&USA_ASIA.replace("\"ASIA\"]", "\"USA\"]")),
            "wan.links[0].between: \"USA\" twice: traffic inside a region is not emulated",
        ),
        (
            with_wan(&format!(
                "{USA_ASIA}{}",
                USA_ASIA.replace("[\"USA\", \"ASIA\"]", "[\"ASIA\", \"USA\"]")
            )),
            "wan.links[1].between: duplicate pair ASIA-USA (also wan.links[0])",
        ),
        (
            with_wan(&format!("{USA_ASIA}jitter_ms = 60001\n")),
            "wan.links[0].jitter_ms: 60001 is more than 60000 ms",
        ),
        (
            with_wan(USA_ASIA).replace("127.0.0.1:7900", "127.0.0.1:7100"),
            "datacenters[0].aggregator: duplicate address 127.0.0.1:7100 (also at wan.control)",
        ),
    ];
    for (text, expected) in cases {
        let err = load(&text).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: {expected}", err.file.display())
        );
    }
    let err = load(&with_wan(&USA_ASIA.replace("delay_ms = 75\n", ""))).unwrap_err();
    assert!(err.to_string().contains("delay_ms"), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
}

#[test]
fn slot_out_of_range_and_unknown_dc() {
    let t = load(GOOD).unwrap();
    let (key, msg) = t.shard_address(&SlotId::new("ASIA_0", 1)).unwrap_err();
    assert_eq!(key, "datacenters[1].shards");
    assert!(msg.contains("out of range"));
    let (key, msg) = t.shard_address(&SlotId::new("MARS_0", 0)).unwrap_err();
    assert_eq!(key, "datacenters");
    assert!(msg.contains("USA_0, ASIA_0"));
}
