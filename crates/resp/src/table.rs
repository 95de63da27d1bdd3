//! Every command geocount answers, as Redis describes its commands to `COMMAND`: the one
//! table both the arity check and `COMMAND`'s replies read.

use crate::reply::Reply;

/// One command as `COMMAND INFO` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    /// Its name, lower case.
    pub name: &'static str,
    /// Its arguments, the name included: exactly this many when positive, at least its
    /// negation when negative (Redis's convention).
    pub arity: i64,
    /// Redis's flags for it (`write`, `readonly`, `fast`, ...).
    pub flags: &'static [&'static str],
    /// The position of its first key (0: none).
    pub first_key: i64,
    /// The position of its last key (-1: the last argument).
    pub last_key: i64,
    /// The step between keys.
    pub step: i64,
    /// Its ACL categories, as Redis lists them.
    pub categories: &'static [&'static str],
}

impl CommandSpec {
    /// Whether `count` arguments (the name included) fit its arity.
    pub fn fits(&self, count: usize) -> bool {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        if self.arity >= 0 {
            count == self.arity
        } else {
            count >= -self.arity
        }
    }

    /// Its `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL
    /// categories, tips, key specifications, subcommands.
    pub fn info(&self) -> Reply {
        let words = |list: &[&'static str]| {
            Reply::Array(list.iter().map(|word| Reply::Simple(word)).collect())
        };
        Reply::Array(vec![
            Reply::word(self.name),
            Reply::Integer(self.arity),
            words(self.flags),
            Reply::Integer(self.first_key),
            Reply::Integer(self.last_key),
            Reply::Integer(self.step),
            words(self.categories),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    }
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    categories: &'static [&'static str],
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        categories,
    }
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);
const CONNECTION: &[&str] = &["@fast", "@connection"];
const WRITE_FAST: &[&str] = &["write", "denyoom", "fast"];

/// Every command geocount answers, in the order `COMMAND` lists them.
pub const COMMANDS: &[CommandSpec] = &[
    spec("ping", -1, &["fast", "stale"], NO_KEYS, CONNECTION),
    spec("echo", 2, &["fast"], NO_KEYS, CONNECTION),
    spec(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        CONNECTION,
    ),
    spec(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        CONNECTION,
    ),
    spec(
        "select",
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
        CONNECTION,
    ),
    spec(
        "client",
        -2,
        &["sentinel"],
        NO_KEYS,
        &["@slow", "@connection"],
    ),
    spec(
        "command",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow", "@connection"],
    ),
    spec(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        CONNECTION,
    ),
    spec(
        "info",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow", "@dangerous"],
    ),
    spec("config", -2, &[], NO_KEYS, &["@slow"]),
    spec(
        "incr",
        2,
        WRITE_FAST,
        ONE_KEY,
        &["@write", "@string", "@fast"],
    ),
    spec(
        "incrby",
        3,
        WRITE_FAST,
        ONE_KEY,
        &["@write", "@string", "@fast"],
    ),
    spec(
        "decr",
        2,
        WRITE_FAST,
        ONE_KEY,
        &["@write", "@string", "@fast"],
    ),
    spec(
        "decrby",
        3,
        WRITE_FAST,
        ONE_KEY,
        &["@write", "@string", "@fast"],
    ),
    spec(
        "pfadd",
        -2,
        WRITE_FAST,
        ONE_KEY,
        &["@write", "@hyperloglog", "@fast"],
    ),
    spec(
        "del",
        -2,
        &["write"],
        ALL_KEYS,
        &["@keyspace", "@write", "@slow"],
    ),
    spec(
        "unlink",
        -2,
        &["write", "fast"],
        ALL_KEYS,
        &["@keyspace", "@write", "@fast"],
    ),
    spec(
        "expire",
        -3,
        &["write", "fast"],
        ONE_KEY,
        &["@keyspace", "@write", "@fast"],
    ),
    spec(
        "pexpire",
        -3,
        &["write", "fast"],
        ONE_KEY,
        &["@keyspace", "@write", "@fast"],
    ),
    spec(
        "ttl",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        &["@keyspace", "@read", "@fast"],
    ),
    spec(
        "pttl",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        &["@keyspace", "@read", "@fast"],
    ),
    spec(
        "persist",
        2,
        &["write", "fast"],
        ONE_KEY,
        &["@keyspace", "@write", "@fast"],
    ),
    spec(
        "get",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        &["@read", "@string", "@fast"],
    ),
    spec(
        "mget",
        -2,
        &["readonly", "fast"],
        ALL_KEYS,
        &["@read", "@string", "@fast"],
    ),
    spec(
        "pfcount",
        -2,
        &["readonly"],
        ALL_KEYS,
        &["@read", "@hyperloglog", "@slow"],
    ),
];

/// The command named `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}
