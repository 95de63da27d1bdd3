//! What the node says of itself over RESP: `INFO`, `CONFIG GET` (what `redis-benchmark` and
//! client libraries ask at start) and `COMMAND`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use geocount_model::Durability;
use geocount_resp::command::{COMMANDS, find};
use geocount_resp::{CommandQuery, Glob, Reply};

use super::Shared;

/// The Redis version whose protocol and replies geocount follows, as `INFO` and `HELLO`
/// report it: clients that enable features by version read it.
pub(crate) const REDIS_VERSION: &str = "7.2.0";

/// `INFO [section ...]`: `server`, `clients`, `stats` and `geocount`; all of them without a
/// section, or with `default`, `all` or `everything`. An unknown section adds nothing, as in
/// Redis.
pub(crate) fn info(shared: &Shared, sections: &[String]) -> Reply {
    let all = sections.is_empty()
        || sections
            .iter()
            .any(|s| matches!(s.as_str(), "default" | "all" | "everything"));
    let wanted = |name: &str| all || sections.iter().any(|s| s == name);
    let stats = &shared.stats;
    let state = &shared.state;
    let mut text = String::new();
    let uptime = stats.started.elapsed().as_secs();
    if wanted("server") {
        let _ = write!(
            text,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\ngeocount_version:{}\r\nredis_mode:standalone\r\n\
             process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            shared.port,
            uptime / 86_400,
        );
    }
    if wanted("clients") {
        let _ = write!(
            text,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            stats.connected.load(Ordering::Relaxed),
            shared.settings.max_connections,
        );
    }
    if wanted("stats") {
        let _ = write!(
            text,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             rejected_connections:{}\r\n\r\n",
            stats.connections.load(Ordering::Relaxed),
            stats.commands.load(Ordering::Relaxed),
            stats.rejected.load(Ordering::Relaxed),
        );
    }
    if wanted("geocount") {
        let counters = state.table.read().expect("slot table lock").len();
        let _ = write!(
            text,
            "# Geocount\r\nslot:{}\r\ndatacenter:{}\r\ndurability:{}\r\ncounters:{counters}\r\n\
             max_pipeline:{}\r\nmax_frame_bytes:{}\r\n\r\n",
            state.slot_name,
            state.datacenter,
            state.settings.durability,
            shared.settings.max_pipeline,
            shared.settings.max_frame_bytes,
        );
    }
    if text.ends_with("\r\n\r\n") {
        text.truncate(text.len() - 2);
    }
    Reply::Verbatim(text)
}

/// `CONFIG GET parameter...`: the parameters that say what geocount is (Redis's glob patterns
/// allowed, each compiled once), each once, as a map; an unknown one adds nothing, as in
/// Redis.
pub(crate) fn config_get(shared: &Shared, patterns: &[String]) -> Reply {
    let durability = shared.state.settings.durability;
    let appendfsync = match durability {
        Durability::Async => "everysec",
        Durability::Sync | Durability::Replicated => "always",
    };
    let settings = &shared.settings;
    let parameters = [
        ("save", String::new()),
        ("appendonly", "yes".to_owned()),
        ("appendfsync", appendfsync.to_owned()),
        ("databases", "1".to_owned()),
        ("maxclients", settings.max_connections.to_string()),
        ("proto-max-bulk-len", settings.max_frame_bytes.to_string()),
    ];
    let globs: Vec<Glob> = (patterns.iter())
        .map(|pattern| Glob::new(pattern.as_bytes()))
        .collect();
    let pairs = parameters
        .into_iter()
        .filter(|(name, _)| globs.iter().any(|glob| glob.matches(name.as_bytes())))
        .map(|(name, value)| (Reply::word(name), Reply::text(value)))
        .collect();
    Reply::Map(pairs)
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO`, `COMMAND DOCS`, `COMMAND LIST`: from the table
/// of every command geocount answers. geocount has no documentation to give `DOCS`: an empty
/// map, which `redis-cli` takes as no hints.
pub(crate) fn command(query: &CommandQuery) -> Reply {
    match query {
        CommandQuery::All => Reply::Array(COMMANDS.iter().map(|spec| spec.info()).collect()),
        CommandQuery::Count => Reply::Integer(COMMANDS.len() as i64),
        CommandQuery::List => Reply::Array(COMMANDS.iter().map(|s| Reply::word(s.name)).collect()),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|name| find(&name).map_or(Reply::Nil, |spec| spec.info()))
                .collect(),
        ),
        CommandQuery::Docs => Reply::Map(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_answers_from_the_table() {
        assert_eq!(
            command(&CommandQuery::Count),
            Reply::Integer(COMMANDS.len() as i64)
        );
        let Reply::Array(info) =
            command(&CommandQuery::Info(["INCR", "set"].into_iter().collect()))
        else {
            panic!("an array");
        };
        assert_eq!(info[1], Reply::Nil);
        let Reply::Array(entry) = &info[0] else {
            panic!("an entry");
        };
        assert_eq!(entry[0], Reply::word("incr"));
        assert_eq!(entry[1], Reply::Integer(2));
    }
}
