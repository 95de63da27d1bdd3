//! The command vocabulary: what a frame's arguments ask, checked as Redis checks them (arity
//! from [`COMMANDS`], integers as Redis's `string2ll` reads them) and refused in its words.

use bytes::Bytes;

use crate::args::Args;
use crate::error::CommandError;
use crate::glob::MAX_PATTERN_BYTES;
pub use crate::table::{COMMANDS, CommandSpec, find};

/// One command a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespCommand {
    /// `PING [message]`.
    Ping(Option<Bytes>),
    /// `ECHO message`.
    Echo(Bytes),
    /// `HELLO [protover [AUTH username password] [SETNAME name]]`.
    Hello(Hello),
    /// `AUTH [username] password`.
    Auth {
        /// The user name, when given.
        username: Option<Bytes>,
        /// The password: a geocount client token.
        password: Bytes,
    },
    /// `SELECT index`.
    Select(i64),
    /// `CLIENT ...`.
    Client(ClientCommand),
    /// `COMMAND ...`.
    Command(CommandQuery),
    /// `QUIT`.
    Quit,
    /// `INFO [section ...]`: the sections, lower case.
    Info(Vec<String>),
    /// `CONFIG GET parameter [parameter ...]`: the parameters, lower case, each at most
    /// [`MAX_PATTERN_BYTES`] long.
    ConfigGet(Vec<String>),
    /// `INCR`, `INCRBY`, `DECR`, `DECRBY`: add `delta` (0 for `INCRBY key 0`).
    IncrBy {
        /// The key.
        key: Bytes,
        /// What to add.
        delta: i64,
    },
    /// `PFADD key [element ...]`.
    PfAdd {
        /// The key.
        key: Bytes,
        /// The elements.
        elements: Args,
    },
    /// `DEL key [key ...]` and `UNLINK key [key ...]`.
    Del(Args),
    /// `EXPIRE key seconds` and `PEXPIRE key milliseconds`, in milliseconds from now (zero or
    /// less deletes the key, as in Redis).
    Expire {
        /// The key.
        key: Bytes,
        /// Milliseconds from now.
        millis: i64,
        /// `expire` or `pexpire`, for the error of an expiry past the end of time.
        command: &'static str,
    },
    /// `TTL key` (`millis` false) and `PTTL key`.
    Ttl {
        /// The key.
        key: Bytes,
        /// Whether the answer is in milliseconds.
        millis: bool,
    },
    /// `PERSIST key`.
    Persist(Bytes),
    /// `GET key`.
    Get(Bytes),
    /// `MGET key [key ...]`.
    MGet(Args),
    /// `PFCOUNT key [key ...]`.
    PfCount(Args),
}

/// `HELLO`'s arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version asked for (2 or 3), if any.
    pub version: Option<i64>,
    /// `AUTH username password`.
    pub auth: Option<(Bytes, Bytes)>,
    /// `SETNAME name`.
    pub setname: Option<Bytes>,
}

/// `CLIENT`'s subcommands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCommand {
    /// `CLIENT SETNAME name` (empty: no name).
    SetName(Bytes),
    /// `CLIENT GETNAME`.
    GetName,
    /// `CLIENT ID`.
    Id,
    /// `CLIENT SETINFO attribute value`: accepted and ignored.
    SetInfo,
}

/// `COMMAND`'s forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandQuery {
    /// `COMMAND`: every command's entry.
    All,
    /// `COMMAND COUNT`.
    Count,
    /// `COMMAND INFO [name ...]`: each named command's entry, nil where unknown.
    Info(Args),
    /// `COMMAND DOCS [name ...]`: documentation, of which geocount has none.
    Docs,
    /// `COMMAND LIST`.
    List,
}

/// Parses a command from its arguments, the name first (never empty).
pub fn parse(args: &Args) -> Result<RespCommand, CommandError> {
    let name = &args[0];
    let Some(spec) = find(name) else {
        return Err(unknown_command(args));
    };
    if !spec.fits(args.len()) {
        return Err(CommandError::Arity(spec.name.to_owned()));
    }
    // Within the arity checked.
    let arg = |index| args.get(index).unwrap_or_default();
    let key = || arg(1);
    let rest = || args.rest(1);
    Ok(match spec.name {
        "ping" if args.len() > 2 => return Err(CommandError::Arity("ping".into())),
        "ping" => RespCommand::Ping(args.get(1)),
        "echo" => RespCommand::Echo(key()),
        "hello" => RespCommand::Hello(hello(args)?),
        "auth" => match args.len() {
            2 => RespCommand::Auth {
                username: None,
                password: key(),
            },
            3 => RespCommand::Auth {
                username: Some(key()),
                password: arg(2),
            },
            _ => return Err(CommandError::Syntax),
        },
        "select" => RespCommand::Select(integer(&args[1])?),
        "client" => RespCommand::Client(client(args)?),
        "command" => RespCommand::Command(command(args)?),
        "quit" => RespCommand::Quit,
        "info" => RespCommand::Info(args.iter().skip(1).map(|a| lower(&a)).collect()),
        "config" => config(args)?,
        "incr" => RespCommand::IncrBy {
            key: key(),
            delta: 1,
        },
        "decr" => RespCommand::IncrBy {
            key: key(),
            delta: -1,
        },
        "incrby" => RespCommand::IncrBy {
            key: key(),
            delta: integer(&args[2])?,
        },
        "decrby" => RespCommand::IncrBy {
            key: key(),
            delta: integer(&args[2])?
                .checked_neg()
                .ok_or(CommandError::DecrementOverflow)?,
        },
        "pfadd" => RespCommand::PfAdd {
            key: key(),
            elements: args.rest(2),
        },
        "del" | "unlink" => RespCommand::Del(rest()),
        "expire" | "pexpire" => {
            if let Some(option) = args.get(3) {
                return Err(CommandError::UnsupportedOption(
                    String::from_utf8_lossy(&option).into_owned(),
                ));
            }
            let amount = integer(&args[2])?;
            let millis = if spec.name == "expire" {
                amount
                    .checked_mul(1000)
                    .ok_or(CommandError::InvalidExpire("expire"))?
            } else {
                amount
            };
            RespCommand::Expire {
                key: key(),
                millis,
                command: spec.name,
            }
        }
        "ttl" | "pttl" => RespCommand::Ttl {
            key: key(),
            millis: spec.name == "pttl",
        },
        "persist" => RespCommand::Persist(key()),
        "get" => RespCommand::Get(key()),
        "mget" => RespCommand::MGet(rest()),
        "pfcount" => RespCommand::PfCount(rest()),
        other => unreachable!("command {other} is in the table but not parsed"),
    })
}

/// A 64-bit integer as Redis reads one (`string2ll`): an optional `-`, then digits without a
/// leading zero (`0` alone excepted), nothing else, within range.
pub fn integer(bytes: &[u8]) -> Result<i64, CommandError> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let canonical = match digits {
        [b'0'] => bytes.len() == 1,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical {
        return Err(CommandError::NotInteger);
    }
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(CommandError::NotInteger)
}

fn lower(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_ascii_lowercase()
}

/// At most 128 bytes of `bytes`, as Redis quotes a name in an error.
fn quoted(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned()
}

/// Redis's refusal of an unknown command: its name and its first arguments, each quoted and
/// followed by a space, until they pass 128 bytes.
fn unknown_command(args: &Args) -> CommandError {
    let mut listed = String::new();
    for arg in args.iter().skip(1) {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push('\'');
        listed.push_str(&quoted(&arg[..arg.len().min(room)]));
        listed.push_str("' ");
    }
    CommandError::UnknownCommand {
        name: quoted(&args[0]),
        args: listed,
    }
}

/// `HELLO`'s arguments after its name.
fn hello(args: &Args) -> Result<Hello, CommandError> {
    let mut args = args.iter().skip(1);
    let Some(version) = args.next() else {
        return Ok(Hello::default());
    };
    let version = integer(&version).map_err(|_| CommandError::ProtocolVersion)?;
    let mut hello = Hello {
        version: Some(version),
        ..Hello::default()
    };
    while let Some(option) = args.next() {
        let taken = match lower(&option).as_str() {
            "auth" if args.len() >= 2 => {
                hello.auth = args.next().zip(args.next());
                true
            }
            "setname" => args.next().map(|name| hello.setname = Some(name)).is_some(),
            _ => false,
        };
        if !taken {
            return Err(CommandError::HelloOption(quoted(&option)));
        }
    }
    if !(2..=3).contains(&version) {
        return Err(CommandError::NoProto);
    }
    Ok(hello)
}

fn unknown_subcommand(command: &'static str, subcommand: &[u8]) -> CommandError {
    CommandError::UnknownSubcommand {
        command,
        subcommand: quoted(subcommand),
    }
}

fn client(args: &Args) -> Result<ClientCommand, CommandError> {
    let sub = lower(&args[1]);
    let arity = |count: usize| {
        if args.len() == count {
            Ok(())
        } else {
            Err(CommandError::Arity(format!("client|{sub}")))
        }
    };
    match sub.as_str() {
        "setname" => {
            arity(3)?;
            if !args[2].iter().all(|b| (b'!'..=b'~').contains(b)) {
                return Err(CommandError::ClientName);
            }
            Ok(ClientCommand::SetName(args.get(2).unwrap_or_default()))
        }
        "getname" => arity(2).map(|()| ClientCommand::GetName),
        "id" => arity(2).map(|()| ClientCommand::Id),
        "setinfo" => arity(4).map(|()| ClientCommand::SetInfo),
        _ => Err(unknown_subcommand("CLIENT", &args[1])),
    }
}

fn command(args: &Args) -> Result<CommandQuery, CommandError> {
    let Some(sub) = args.get(1) else {
        return Ok(CommandQuery::All);
    };
    let sub_name = lower(&sub);
    match sub_name.as_str() {
        "count" if args.len() == 2 => Ok(CommandQuery::Count),
        "list" if args.len() == 2 => Ok(CommandQuery::List),
        "info" => Ok(CommandQuery::Info(args.rest(2))),
        "docs" => Ok(CommandQuery::Docs),
        "count" | "list" => Err(CommandError::Arity(format!("command|{sub_name}"))),
        _ => Err(unknown_subcommand("COMMAND", &sub)),
    }
}

fn config(args: &Args) -> Result<RespCommand, CommandError> {
    match lower(&args[1]).as_str() {
        "get" if args.len() >= 3 => {
            let patterns = args.rest(2);
            if let Some(long) = patterns.iter().find(|p| p.len() > MAX_PATTERN_BYTES) {
                return Err(CommandError::PatternTooLong(long.len()));
            }
            Ok(RespCommand::ConfigGet(
                patterns.iter().map(|p| lower(&p)).collect(),
            ))
        }
        "get" => Err(CommandError::Arity("config|get".into())),
        _ => Err(unknown_subcommand("CONFIG", &args[1])),
    }
}

#[cfg(test)]
mod tests;
