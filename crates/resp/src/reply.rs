//! Replies, and their bytes in the protocol version the connection speaks: RESP2 until the
//! client says `HELLO 3`, RESP3 after. The `redis-protocol` crate writes the bytes.

use bytes::Bytes;
use redis_protocol::resp2::encode::encode as encode2;
use redis_protocol::resp2::types::{OwnedFrame as Frame2, Resp2Frame};
use redis_protocol::resp3::encode::complete::encode as encode3;
use redis_protocol::resp3::types::{
    FrameMap, OwnedFrame as Frame3, Resp3Frame, VerbatimStringFormat,
};

/// The protocol version of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, every connection's first.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

impl Protocol {
    /// Its number, as `HELLO` answers it.
    pub fn number(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// One reply. Where RESP2 has no type of its own for it, it is sent as Redis sends it there: a
/// map as a flat array of keys and values, a big number and a verbatim string as bulk strings,
/// nil as the null bulk string.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`, `+PONG`.
    Simple(&'static str),
    /// An error line, its first word the kind (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// A 64-bit integer.
    Integer(i64),
    /// An integer past 64 bits (RESP3 big number; a bulk string in RESP2).
    Big(i128),
    /// A binary-safe string.
    Bulk(Bytes),
    /// No value.
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// Keys and values, in order.
    Map(Vec<(Reply, Reply)>),
    /// Text for people (`INFO`): a verbatim string in RESP3, a bulk string in RESP2.
    Verbatim(String),
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple("OK");

    /// An error reply of `line` (`ERR ...`), newlines made spaces so that it stays one line.
    pub fn error(line: impl Into<String>) -> Self {
        let mut line = line.into();
        if line.contains(['\r', '\n']) {
            line = line.replace(['\r', '\n'], " ");
        }
        Reply::Error(line)
    }

    /// A bulk string of `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Bulk(Bytes::from(text.into()))
    }

    /// A bulk string of the static `text`.
    pub fn word(text: &'static str) -> Self {
        Reply::Bulk(Bytes::from_static(text.as_bytes()))
    }

    /// An integer reply of a value that may pass 64 bits.
    pub fn number(value: i128) -> Self {
        i64::try_from(value).map_or(Reply::Big(value), Reply::Integer)
    }

    /// Whether it is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends its bytes in `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut Vec<u8>) {
        match protocol {
            Protocol::Resp2 => {
                let frame = self.resp2();
                let start = out.len();
                out.resize(start + frame.encode_len(false), 0);
                let written =
                    encode2(&mut out[start..], &frame, false).expect("the buffer was sized for it");
                out.truncate(start + written);
            }
            Protocol::Resp3 => {
                let frame = self.resp3();
                let start = out.len();
                out.resize(start + frame.encode_len(false), 0);
                let written =
                    encode3(&mut out[start..], &frame, false).expect("the buffer was sized for it");
                out.truncate(start + written);
            }
        }
    }

    fn resp2(&self) -> Frame2 {
        match self {
            Reply::Simple(text) => Frame2::SimpleString(text.as_bytes().to_vec()),
            Reply::Error(line) => Frame2::Error(line.clone()),
            Reply::Integer(n) => Frame2::Integer(*n),
            Reply::Big(n) => Frame2::BulkString(n.to_string().into_bytes()),
            Reply::Bulk(bytes) => Frame2::BulkString(bytes.to_vec()),
            Reply::Nil => Frame2::Null,
            Reply::Array(items) => Frame2::Array(items.iter().map(Reply::resp2).collect()),
            Reply::Map(pairs) => Frame2::Array(
                pairs
                    .iter()
                    .flat_map(|(key, value)| [key.resp2(), value.resp2()])
                    .collect(),
            ),
            Reply::Verbatim(text) => Frame2::BulkString(text.as_bytes().to_vec()),
        }
    }

    fn resp3(&self) -> Frame3 {
        match self {
            Reply::Simple(text) => Frame3::SimpleString {
                data: text.as_bytes().to_vec(),
                attributes: None,
            },
            Reply::Error(line) => Frame3::SimpleError {
                data: line.clone(),
                attributes: None,
            },
            Reply::Integer(n) => Frame3::Number {
                data: *n,
                attributes: None,
            },
            Reply::Big(n) => Frame3::BigNumber {
                data: n.to_string().into_bytes(),
                attributes: None,
            },
            Reply::Bulk(bytes) => Frame3::BlobString {
                data: bytes.to_vec(),
                attributes: None,
            },
            Reply::Nil => Frame3::Null,
            Reply::Array(items) => Frame3::Array {
                data: items.iter().map(Reply::resp3).collect(),
                attributes: None,
            },
            Reply::Map(pairs) => {
                let mut map = FrameMap::with_capacity(pairs.len());
                for (key, value) in pairs {
                    map.insert(key.resp3(), value.resp3());
                }
                Frame3::Map {
                    data: map,
                    attributes: None,
                }
            }
            Reply::Verbatim(text) => Frame3::VerbatimString {
                data: text.as_bytes().to_vec(),
                format: VerbatimStringFormat::Text,
                attributes: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(reply: &Reply, protocol: Protocol) -> String {
        let mut out = Vec::new();
        reply.encode(protocol, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn both(reply: Reply) -> (String, String) {
        (
            bytes(&reply, Protocol::Resp2),
            bytes(&reply, Protocol::Resp3),
        )
    }

    #[test]
    fn scalars_are_sent_as_redis_sends_them() {
        assert_eq!(both(Reply::OK), ("+OK\r\n".into(), "+OK\r\n".into()));
        assert_eq!(
            both(Reply::error("ERR bad\r\nthing")),
            ("-ERR bad  thing\r\n".into(), "-ERR bad  thing\r\n".into())
        );
        assert_eq!(
            both(Reply::Integer(i64::MIN)),
            (
                ":-9223372036854775808\r\n".into(),
                ":-9223372036854775808\r\n".into()
            )
        );
        assert_eq!(both(Reply::Nil), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(
            both(Reply::text("42")),
            ("$2\r\n42\r\n".into(), "$2\r\n42\r\n".into())
        );
        assert_eq!(
            both(Reply::Bulk(Bytes::new())),
            ("$0\r\n\r\n".into(), "$0\r\n\r\n".into())
        );
    }

    #[test]
    fn numbers_past_64_bits_are_big_numbers_in_resp3_and_strings_in_resp2() {
        let big = i128::from(i64::MAX) + 1;
        assert_eq!(Reply::number(5), Reply::Integer(5));
        assert_eq!(
            both(Reply::number(big)),
            (
                "$19\r\n9223372036854775808\r\n".into(),
                "(9223372036854775808\r\n".into()
            )
        );
    }

    #[test]
    fn maps_are_flat_arrays_in_resp2_and_ordered_maps_in_resp3() {
        let map = Reply::Map(vec![
            (Reply::word("server"), Reply::word("geocount")),
            (Reply::word("proto"), Reply::Integer(3)),
            (Reply::word("modules"), Reply::Array(Vec::new())),
        ]);
        assert_eq!(
            both(map),
            (
                "*6\r\n$6\r\nserver\r\n$8\r\ngeocount\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"
                    .into(),
                "%3\r\n$6\r\nserver\r\n$8\r\ngeocount\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"
                    .into()
            )
        );
        assert_eq!(
            both(Reply::Verbatim("a:1\r\n".into())),
            ("$5\r\na:1\r\n\r\n".into(), "=9\r\ntxt:a:1\r\n\r\n".into())
        );
    }
}
