//! The bytes a Redis client sends a shard node's RESP port: commands taken off the buffer as
//! the connection takes them (`geocount_resp::take_command`, with a small frame limit so that
//! oversized frames are met too), each parsed into a command (`geocount_resp::parse`) and its
//! replies encoded in both protocol versions, as the connection answers them.

use bytes::BytesMut;
use geocount_resp::{Protocol, Reply, RespCommand, parse, take_command};

/// The frame limit the target reads with: small, so frames past it are common.
const MAX_FRAME_BYTES: usize = 4_096;

/// Runs one input through the target; whether it held at least one whole command.
pub fn run(data: &[u8]) -> bool {
    let mut buf = BytesMut::from(data);
    let mut decoded = false;
    loop {
        let before = buf.len();
        let args = match take_command(&mut buf, MAX_FRAME_BYTES) {
            Ok(Some(args)) => args,
            // Incomplete, or a bad frame: the connection waits, or answers and closes.
            Ok(None) | Err(_) => return decoded,
        };
        assert!(buf.len() < before, "a command taken consumes bytes");
        decoded = true;
        if args.is_empty() {
            continue;
        }
        let reply = match parse(&args) {
            Ok(command) => echo(command),
            Err(error) => Reply::error(error.to_string()),
        };
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let mut out = Vec::new();
            reply.encode(protocol, &mut out);
            assert!(out.ends_with(b"\r\n"), "a reply ends its line");
        }
    }
}

/// A reply built from what the command carries, so that every argument passes through the
/// encoder (keys, elements, names).
fn echo(command: RespCommand) -> Reply {
    match command {
        RespCommand::Ping(message) => message.map_or(Reply::Simple("PONG"), Reply::Bulk),
        RespCommand::Echo(message) | RespCommand::Get(message) | RespCommand::Persist(message) => {
            Reply::Bulk(message)
        }
        RespCommand::IncrBy { key, delta } => {
            Reply::Array(vec![Reply::Bulk(key), Reply::number(i128::from(delta) * 3)])
        }
        RespCommand::PfAdd { key, elements } => {
            let mut replies = vec![Reply::Bulk(key)];
            replies.extend(elements.iter().map(Reply::Bulk));
            Reply::Array(replies)
        }
        RespCommand::Del(keys) | RespCommand::MGet(keys) | RespCommand::PfCount(keys) => {
            Reply::Array(keys.iter().map(Reply::Bulk).collect())
        }
        RespCommand::Info(words) | RespCommand::ConfigGet(words) => Reply::Map(
            words
                .into_iter()
                .map(|word| (Reply::text(word.clone()), Reply::Verbatim(word)))
                .collect(),
        ),
        RespCommand::Expire { key, millis, .. } => {
            Reply::Map(vec![(Reply::Bulk(key), Reply::Integer(millis))])
        }
        other => Reply::error(format!("ERR {other:?}")),
    }
}
