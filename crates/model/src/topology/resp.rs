//! The Redis protocol on the shard nodes: `resp` in each `[[datacenters]]` (where each node
//! listens for it) and the `[resp]` limits every node's listener keeps.

use serde::{Deserialize, Serialize};

use super::Topology;

/// Limits of every shard node's RESP listener (`[resp]`), against too many, too large or too
/// deeply pipelined clients, as `[http]` bounds the HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RespSettings {
    /// The largest command frame a client may send, in bytes (its array header, every
    /// argument and their lengths); a larger one is answered a protocol error and its
    /// connection closed, as soon as its announced lengths pass the limit. 1024 to 1 GiB.
    pub max_frame_bytes: usize,
    /// The most commands of one connection in flight at once: past it the node reads no more
    /// of the connection until the oldest is answered (commands are answered in order).
    pub max_pipeline: usize,
    /// The most bytes of one connection's commands in flight at once (their frames, and the
    /// replies of those answered but waiting behind an earlier one): past it the node reads no
    /// more of the connection until the oldest are answered, so a client pipelining behind a
    /// slow command waits instead of growing the node's memory. A command larger than it is
    /// still taken, alone.
    pub max_pipeline_bytes: usize,
    /// The most RESP connections a node keeps open at once; one more is answered
    /// `-ERR max number of clients reached` and closed, as Redis does past `maxclients`.
    pub max_connections: usize,
    /// The most RESP connections a node keeps open at once from one IP address, so one host
    /// (a client pooling too many connections, or opening idle sockets) cannot take every
    /// connection from the others; one more from it is refused as past `max_connections`.
    pub max_connections_per_peer: usize,
    /// A connection with no command in flight that sends nothing for this many milliseconds
    /// is closed (Redis's `timeout`), so sockets of clients gone away do not keep their
    /// places; 0 keeps idle connections open.
    pub idle_timeout_ms: u64,
}

/// The least `resp.max_frame_bytes`: room for a command with the longest counter id.
pub const MIN_RESP_FRAME_BYTES: usize = 1_024;

/// The most `resp.max_frame_bytes` may be: a frame's arguments are kept as 32-bit offsets.
pub const MAX_RESP_FRAME_BYTES: usize = 1 << 30;

impl Default for RespSettings {
    /// A megabyte per command (a `PFADD` or `MGET` of thousands of keys); 1,024 commands and
    /// 4 MiB in flight per connection, well past the `-P 128` pipelines of `redis-benchmark`;
    /// Redis's own 10,000 clients, 1,000 of them from one address (as `[http]`); idle
    /// connections closed after 5 minutes, which frees the places of vanished clients while a
    /// connection in regular use is never idle that long.
    fn default() -> Self {
        Self {
            max_frame_bytes: 1 << 20,
            max_pipeline: 1_024,
            max_pipeline_bytes: 4 << 20,
            max_connections: 10_000,
            max_connections_per_peer: 1_000,
            idle_timeout_ms: 300_000,
        }
    }
}

impl Topology {
    /// `[resp]` in bounds, and each datacenter's `resp` as long as its `shards` (its
    /// addresses are checked for duplicates with every other address of the topology).
    pub(super) fn validate_resp(&self) -> Result<(), (String, String)> {
        for (i, dc) in self.datacenters.iter().enumerate() {
            if !dc.resp.is_empty() && dc.resp.len() != dc.shards.len() {
                return Err((
                    format!("datacenters[{i}].resp"),
                    format!(
                        "{} address(es) for {} shard node(s): resp lists one per shard node, \
                         in the order of shards, or is left out",
                        dc.resp.len(),
                        dc.shards.len()
                    ),
                ));
            }
        }
        let resp = &self.resp;
        for (key, value) in [
            ("resp.max_pipeline", resp.max_pipeline),
            ("resp.max_pipeline_bytes", resp.max_pipeline_bytes),
            ("resp.max_connections", resp.max_connections),
            (
                "resp.max_connections_per_peer",
                resp.max_connections_per_peer,
            ),
        ] {
            if value == 0 {
                return Err((key.into(), "must be greater than 0".into()));
            }
        }
        if !(MIN_RESP_FRAME_BYTES..=MAX_RESP_FRAME_BYTES).contains(&resp.max_frame_bytes) {
            return Err((
                "resp.max_frame_bytes".into(),
                format!("must be {MIN_RESP_FRAME_BYTES} to {MAX_RESP_FRAME_BYTES}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Topology;

    const GOOD: &str = crate::fixtures::TWO_DATACENTERS;

    fn with_resp(usa: &str, extra: &str) -> String {
        GOOD.replace(
            "shards = [\"127.0.0.1:7101\", \"127.0.0.1:7102\"]",
            &format!("shards = [\"127.0.0.1:7101\", \"127.0.0.1:7102\"]\n{usa}"),
        ) + extra
    }

    #[test]
    fn resp_addresses_are_one_per_shard_node() {
        let text = with_resp(r#"resp = ["127.0.0.1:7111", "127.0.0.1:7112"]"#, "");
        let topology = Topology::from_toml("t.toml", &text).unwrap();
        let usa = topology.datacenter("USA_0").unwrap();
        assert_eq!(usa.resp_address(1), Some("127.0.0.1:7112".parse().unwrap()));
        assert_eq!(topology.datacenter("ASIA_0").unwrap().resp_address(0), None);
        assert_eq!(topology.resp, super::RespSettings::default());

        let short = with_resp(r#"resp = ["127.0.0.1:7111"]"#, "");
        let error = Topology::from_toml("t.toml", &short).unwrap_err();
        assert_eq!(error.key, "datacenters[0].resp");
        assert!(
            error
                .to_string()
                .starts_with("t.toml: datacenters[0].resp: 1 address")
        );

        let taken = with_resp(r#"resp = ["127.0.0.1:7111", "127.0.0.1:7201"]"#, "");
        let error = Topology::from_toml("t.toml", &taken).unwrap_err();
        assert_eq!(error.key, "datacenters[1].shards[0]");
        assert!(error.message.contains("datacenters[0].resp[1]"), "{error}");
    }

    #[test]
    fn resp_limits_are_bounded() {
        let limits = |line: &str| with_resp("", &format!("\n[resp]\n{line}\n"));
        let topology = Topology::from_toml("t.toml", &limits("max_pipeline = 16")).unwrap();
        assert_eq!(topology.resp.max_pipeline, 16);
        let topology = Topology::from_toml("t.toml", &limits("idle_timeout_ms = 0")).unwrap();
        assert_eq!(topology.resp.idle_timeout_ms, 0);
        for (line, key) in [
            ("max_pipeline = 0", "resp.max_pipeline"),
            ("max_connections = 0", "resp.max_connections"),
            ("max_frame_bytes = 1023", "resp.max_frame_bytes"),
            ("max_frame_bytes = 1073741825", "resp.max_frame_bytes"),
            ("max_pipeline_bytes = 0", "resp.max_pipeline_bytes"),
            (
                "max_connections_per_peer = 0",
                "resp.max_connections_per_peer",
            ),
            ("max_frames = 1", "resp.max_frames"),
        ] {
            let error = Topology::from_toml("t.toml", &limits(line)).unwrap_err();
            assert_eq!(error.key, key, "{line}: {error}");
        }
    }
}
