//! Refusals in Redis's own words: a client library maps an error reply by its first word
//! (`ERR`, `WRONGTYPE`, `NOAUTH`, ...), and people search for the rest, so both are Redis's.

/// Error lines Redis answers with, as geocount answers them too (without the leading `-`).
pub mod words {
    /// A key of a sum counter used as a unique counter, or the other way round.
    pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    /// `PFADD` or `PFCOUNT` of a sum counter.
    pub const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
    /// A delta that would take a counter past the 64-bit range.
    pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
    /// A command other than `AUTH`, `HELLO` or `QUIT` before `AUTH` when tokens are configured.
    pub const NOAUTH: &str = "NOAUTH Authentication required.";
    /// `AUTH` with a token that is not configured.
    pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
    /// `AUTH` when no token is configured.
    pub const NO_PASSWORD: &str = "ERR AUTH <password> called without any password configured \
                                   for the default user. Are you sure your configuration is correct?";
    /// A connection past `resp.max_connections`.
    pub const MAX_CLIENTS: &str = "ERR max number of clients reached";
}

/// Why the bytes of a connection are no command: the connection is answered this error and
/// closed, as Redis does (the client and server no longer agree where a frame starts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not a flat array of bulk strings, a bad length, or what the decoder refused.
    #[error("ERR Protocol error: {0}")]
    Protocol(String),
    /// A command frame larger than the limit (`resp.max_frame_bytes`).
    #[error("ERR Protocol error: a command of more than {limit} bytes (resp.max_frame_bytes)")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Why a command was refused before it ran: the reply is the error line, and the connection
/// goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A command name geocount does not know.
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand {
        /// The name as sent (at most 128 bytes).
        name: String,
        /// The first arguments, each quoted and followed by a space, as Redis lists them.
        args: String,
    },
    /// A subcommand the command does not know (`CLIENT`, `COMMAND`, `CONFIG`).
    #[error("ERR unknown subcommand '{subcommand}'. Try {command} HELP.")]
    UnknownSubcommand {
        /// The command, upper case.
        command: &'static str,
        /// The subcommand as sent (at most 128 bytes).
        subcommand: String,
    },
    /// Too few or too many arguments for the command (lower case, `client|setname` for a
    /// subcommand).
    #[error("ERR wrong number of arguments for '{0}' command")]
    Arity(String),
    /// An argument that must be a 64-bit integer is not one.
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    /// `DECRBY key -9223372036854775808`: its negation does not fit.
    #[error("ERR decrement would overflow")]
    DecrementOverflow,
    /// An expiry that does not fit once turned into milliseconds from now.
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    /// An option the command does not take.
    #[error("ERR syntax error")]
    Syntax,
    /// `HELLO` with a version other than 2 or 3.
    #[error("NOPROTO unsupported protocol version")]
    NoProto,
    /// `HELLO` with a version that is not a number.
    #[error("ERR Protocol version is not an integer or out of range")]
    ProtocolVersion,
    /// `HELLO` with an option it does not take, or `AUTH` without its two arguments.
    #[error("ERR Syntax error in HELLO option '{0}'")]
    HelloOption(String),
    /// `SELECT` of a database other than 0: geocount has one.
    #[error("ERR DB index is out of range")]
    DbIndex,
    /// A client name with a space, a newline or another character outside `!`..`~`.
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    ClientName,
    /// A `CONFIG GET` pattern longer than [`crate::glob::MAX_PATTERN_BYTES`] (its length).
    #[error(
        "ERR pattern too long: a CONFIG GET pattern of {0} bytes (at most {max})",
        max = crate::glob::MAX_PATTERN_BYTES
    )]
    PatternTooLong(usize),
    /// `EXPIRE` with `NX`, `XX`, `GT` or `LT`, which geocount does not take.
    #[error("ERR Unsupported option {0}")]
    UnsupportedOption(String),
}
