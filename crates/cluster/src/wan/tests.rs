//! The links and views of `--wan`.

use super::*;

/// The first global aggregator.
const GLOBAL: Member = Member::GlobalAggregator { replica: 0 };

/// Three datacenters in two regions, the global aggregator with USA_0 and USA_1.
const TOPOLOGY: &str = r#"
datacenters = [
    { name = "USA_0", aggregator = "127.0.0.1:7100", shards = ["127.0.0.1:7101"] },
    { name = "USA_1", aggregator = "127.0.0.1:7200", shards = ["127.0.0.1:7201"] },
    { name = "tokyo", region = "ASIA", aggregator = "127.0.0.1:7300", shards = ["127.0.0.1:7301"] },
]
global = { listen = "127.0.0.1:7000" }

[wan]
global_region = "USA"
control = "127.0.0.1:7900"
links = [{ between = ["ASIA", "USA"], delay_ms = 75, jitter_ms = 5 }]
"#;

/// Three regions, no link of their own between ASIA and EUROPE.
const THREE_REGIONS: &str = r#"
datacenters = [
    { name = "USA_0", aggregator = "127.0.0.1:7100", shards = ["127.0.0.1:7101"] },
    { name = "ASIA_0", aggregator = "127.0.0.1:7200", shards = ["127.0.0.1:7201", "127.0.0.1:7202"] },
    { name = "EUROPE_0", aggregator = "127.0.0.1:7300", shards = ["127.0.0.1:7301"] },
]
global = { listen = "127.0.0.1:7000" }

[wan]
global_region = "USA"
control = "127.0.0.1:7900"

[[wan.links]]
between = ["USA", "ASIA"]
delay_ms = 75
jitter_ms = 5
bandwidth_bytes_per_sec = 1000000

[[wan.links]]
between = ["EUROPE", "USA"]
delay_ms = 40
jitter_ms = 2
"#;

fn topology() -> (Topology, WanSettings) {
    let topology = Topology::from_toml("wan.toml", TOPOLOGY).unwrap();
    let wan = topology.wan.clone().unwrap();
    (topology, wan)
}

fn slot(datacenter: &str, index: u32) -> SlotId {
    SlotId::new(datacenter, index)
}

/// A proxy for every link of `TOPOLOGY`, on ports 41000 and up.
fn proxies() -> HashMap<String, SocketAddr> {
    [
        global_to("tokyo", 0),
        to_global("tokyo", 0),
        shard_to("USA_0", &slot("tokyo", 0)),
        shard_to("USA_1", &slot("tokyo", 0)),
        shard_to("tokyo", &slot("USA_0", 0)),
        shard_to("tokyo", &slot("USA_1", 0)),
    ]
    .into_iter()
    .zip(41000u16..)
    .map(|(name, port)| (name, SocketAddr::from(([127, 0, 0, 1], port))))
    .collect()
}

/// Each link as (name, listen, target, delay, jitter, bandwidth).
fn rows(config: &WanConfig) -> Vec<(String, String, String, u64, u64, u64)> {
    config
        .links
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.listen.to_string(),
                l.target.to_string(),
                l.delay_ms,
                l.jitter_ms,
                l.bandwidth_bytes_per_sec,
            )
        })
        .collect()
}

#[test]
fn only_cross_region_connections_get_links() {
    let (topology, wan) = topology();
    let config = emulator_config(&topology, &wan);
    assert_eq!(config.control, wan.control);
    let row = |name: &str, target: &str| {
        let listen = "127.0.0.1:0".to_owned();
        (name.to_owned(), listen, target.to_owned(), 75, 5, 0)
    };
    assert_eq!(
        rows(&config),
        [
            row("global-to-tokyo", "127.0.0.1:7300"),
            row("tokyo-to-global", "127.0.0.1:7000"),
            row("USA_0-to-DC_tokyo_VAL_0", "127.0.0.1:7301"),
            row("USA_1-to-DC_tokyo_VAL_0", "127.0.0.1:7301"),
            row("tokyo-to-DC_USA_0_VAL_0", "127.0.0.1:7101"),
            row("tokyo-to-DC_USA_1_VAL_0", "127.0.0.1:7201"),
        ]
    );
    // The emulator accepts what is written.
    let text = toml::to_string(&config).unwrap();
    assert_eq!(WanConfig::from_toml("wan.toml", &text).unwrap(), config);
}

#[test]
fn the_emulator_accepts_the_links_of_replicas() {
    let replicated = TOPOLOGY
        .replace(
            r#"shards = ["127.0.0.1:7301"] }"#,
            r#"shards = ["127.0.0.1:7301"], aggregator_replicas = ["127.0.0.1:7310"] }"#,
        )
        .replace(
            r#"global = { listen = "127.0.0.1:7000" }"#,
            r#"global = { listen = "127.0.0.1:7000", replicas = ["127.0.0.1:7010"] }"#,
        );
    let topology = Topology::from_toml("wan.toml", &replicated).unwrap();
    let config = emulator_config(&topology, topology.wan.as_ref().unwrap());
    let names: Vec<&str> = config.links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "global-to-tokyo",
            "global-to-tokyo@1",
            "tokyo-to-global",
            "tokyo-to-global@1"
        ]
    );
    // Shard nodes have no replicas: their links are the same.
    assert_eq!(names.len(), 8, "{names:?}");
    let text = toml::to_string(&config).unwrap();
    assert_eq!(WanConfig::from_toml("wan.toml", &text).unwrap(), config);
}

#[test]
fn every_shard_node_reaches_each_other_region_s_shard_nodes_through_a_link() {
    let topology = Topology::from_toml("three.toml", THREE_REGIONS).unwrap();
    let wan = topology.wan.clone().unwrap();
    let config = emulator_config(&topology, &wan);
    let shard_links: Vec<(String, String, String, u64, u64, u64)> = rows(&config)
        .into_iter()
        .filter(|row| !row.0.contains("global"))
        .collect();
    let row = |name: &str, target: &str, shaping: (u64, u64, u64)| {
        let listen = "127.0.0.1:0".to_owned();
        let (delay, jitter, bandwidth) = shaping;
        (
            name.to_owned(),
            listen,
            target.to_owned(),
            delay,
            jitter,
            bandwidth,
        )
    };
    let asia_usa = (75, 5, 1_000_000);
    let europe_usa = (40, 2, 0);
    // No ASIA-EUROPE entry: the path through USA, delays and jitters added, the one cap.
    let asia_europe = (115, 7, 1_000_000);
    assert_eq!(
        shard_links,
        [
            row("USA_0-to-DC_ASIA_0_VAL_0", "127.0.0.1:7201", asia_usa),
            row("USA_0-to-DC_ASIA_0_VAL_1", "127.0.0.1:7202", asia_usa),
            row("USA_0-to-DC_EUROPE_0_VAL_0", "127.0.0.1:7301", europe_usa),
            row("ASIA_0-to-DC_USA_0_VAL_0", "127.0.0.1:7101", asia_usa),
            row("ASIA_0-to-DC_EUROPE_0_VAL_0", "127.0.0.1:7301", asia_europe),
            row("EUROPE_0-to-DC_USA_0_VAL_0", "127.0.0.1:7101", europe_usa),
            row("EUROPE_0-to-DC_ASIA_0_VAL_0", "127.0.0.1:7201", asia_europe),
            row("EUROPE_0-to-DC_ASIA_0_VAL_1", "127.0.0.1:7202", asia_europe),
        ]
    );
    let text = toml::to_string(&config).unwrap();
    assert_eq!(WanConfig::from_toml("wan.toml", &text).unwrap(), config);
}

#[test]
fn a_pair_s_own_link_wins_over_the_path_through_the_global_region() {
    let direct = THREE_REGIONS.to_owned()
        + "\n[[wan.links]]\nbetween = [\"EUROPE\", \"ASIA\"]\ndelay_ms = 90\n\
           bandwidth_bytes_per_sec = 5000\n";
    let topology = Topology::from_toml("three.toml", &direct).unwrap();
    let wan = topology.wan.clone().unwrap();
    let link = region_link(&wan, "ASIA", "EUROPE").unwrap();
    assert_eq!(
        (link.delay_ms, link.jitter_ms, link.bandwidth_bytes_per_sec),
        (90, 0, 5000)
    );
    let config = emulator_config(&topology, &wan);
    let to_europe = config
        .links
        .iter()
        .find(|l| l.name == "ASIA_0-to-DC_EUROPE_0_VAL_0")
        .unwrap();
    assert_eq!((to_europe.delay_ms, to_europe.jitter_ms), (90, 0));
    // Inside a region there is no link; through it, both bandwidth caps, the smaller one.
    assert!(region_link(&wan, "USA", "USA").is_none());
    assert!(region_link(&wan, "ASIA", "ASIA").is_none());
    let mut capped = Topology::from_toml("three.toml", THREE_REGIONS).unwrap();
    let settings = capped.wan.as_mut().unwrap();
    settings.links[1].bandwidth_bytes_per_sec = 300;
    settings.links[0].delay_ms = MAX_WAN_DELAY_MS;
    let through = region_link(settings, "EUROPE", "ASIA").unwrap();
    assert_eq!(
        (through.delay_ms, through.bandwidth_bytes_per_sec),
        (MAX_WAN_DELAY_MS, 300)
    );
}

#[test]
fn each_process_dials_the_other_region_through_its_proxy() {
    let (topology, wan) = topology();
    let global = view(&topology, &wan, &GLOBAL, &proxies()).unwrap();
    let aggregators: Vec<String> = global
        .datacenters
        .iter()
        .map(|dc| dc.aggregator.to_string())
        .collect();
    assert_eq!(
        aggregators,
        ["127.0.0.1:7100", "127.0.0.1:7200", "127.0.0.1:41000"]
    );
    assert_eq!(global.global, topology.global);
    assert_eq!(global.wan, None);

    let remote = Member::DatacenterAggregator {
        datacenter: "tokyo".into(),
        replica: 0,
    };
    let remote = view(&topology, &wan, &remote, &proxies()).unwrap();
    assert_eq!(remote.global.listen.to_string(), "127.0.0.1:41001");
    assert_eq!(remote.datacenters, topology.datacenters);

    let local = Member::DatacenterAggregator {
        datacenter: "USA_1".into(),
        replica: 0,
    };
    let local = view(&topology, &wan, &local, &proxies()).unwrap();
    let plain = Topology {
        wan: None,
        ..topology.clone()
    };
    assert_eq!(local, plain);
}

/// Every datacenter's shard addresses as `view` gives them to `member`.
fn shards_seen_by(member: &Member) -> Vec<Vec<String>> {
    let (topology, wan) = topology();
    let view = view(&topology, &wan, member, &proxies()).unwrap();
    // Only shard addresses change.
    let mut plain = view.clone();
    for (dc, real) in plain.datacenters.iter_mut().zip(&topology.datacenters) {
        dc.shards.clone_from(&real.shards);
    }
    assert_eq!(
        plain,
        Topology {
            wan: None,
            ..topology
        }
    );
    view.datacenters
        .iter()
        .map(|dc| dc.shards.iter().map(ToString::to_string).collect())
        .collect()
}

#[test]
fn shard_nodes_dial_other_regions_shard_nodes_through_their_datacenter_s_links() {
    let usa_0 = Member::Shard {
        datacenter: "USA_0".into(),
        slot: 0,
    };
    // USA_1 is in the same region: direct; tokyo through USA_0-to-DC_tokyo_VAL_0.
    assert_eq!(
        shards_seen_by(&usa_0),
        [["127.0.0.1:7101"], ["127.0.0.1:7201"], ["127.0.0.1:41002"]]
    );
    let usa_1 = Member::Shard {
        datacenter: "USA_1".into(),
        slot: 0,
    };
    assert_eq!(
        shards_seen_by(&usa_1),
        [["127.0.0.1:7101"], ["127.0.0.1:7201"], ["127.0.0.1:41003"]]
    );
    let tokyo = Member::Shard {
        datacenter: "tokyo".into(),
        slot: 0,
    };
    assert_eq!(
        shards_seen_by(&tokyo),
        [["127.0.0.1:41004"], ["127.0.0.1:41005"], ["127.0.0.1:7301"]]
    );
}

#[test]
fn views_survive_the_round_trip_through_toml() {
    let (topology, wan) = topology();
    let shard = Member::Shard {
        datacenter: "tokyo".into(),
        slot: 0,
    };
    for member in [GLOBAL, shard] {
        let view = view(&topology, &wan, &member, &proxies()).unwrap();
        let text = toml::to_string(&view).unwrap();
        assert_eq!(Topology::from_toml("view.toml", &text).unwrap(), view);
    }
}

#[test]
fn a_missing_proxy_names_the_link() {
    let (topology, wan) = topology();
    let error = view(&topology, &wan, &GLOBAL, &HashMap::new()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "WAN mode: the emulator has no link named global-to-tokyo"
    );
    let shard = Member::Shard {
        datacenter: "USA_1".into(),
        slot: 0,
    };
    let error = view(&topology, &wan, &shard, &HashMap::new()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "WAN mode: the emulator has no link named USA_1-to-DC_tokyo_VAL_0"
    );
}
