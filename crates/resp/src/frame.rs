//! Taking whole commands off a connection's bytes.
//!
//! A client sends each command as a RESP array of bulk strings (`*2\r\n$4\r\nINCR\r\n$1\r\na\r\n`),
//! whatever protocol version it speaks after `HELLO`. Before the `redis-protocol` decoder sees
//! the bytes, [`shape`] walks the frame's headers (never its contents): a nested array or any
//! other element type is refused at once, as Redis refuses it, so the decoder, which recurses
//! into nested arrays, never meets a frame nested thousands deep; and a frame whose announced
//! lengths pass the limit is refused before its bytes arrive. The decoder then reads the frame
//! and each argument is kept as its range in the frame's bytes ([`Args`]), not a copy nor a
//! handle of its own.

use bytes::BytesMut;
use redis_protocol::resp2::decode::decode_range;
use redis_protocol::resp2::types::RangeFrame;

use crate::args::{Args, offset};
use crate::error::FrameError;

/// The most arguments one command may have (Redis's own bound on a multibulk length).
pub const MAX_ARGUMENTS: usize = 1024 * 1024;

/// The longest header line (`*<n>` or `$<n>`) read before its end: 20 digits and a sign.
const MAX_HEADER: usize = 32;

/// Takes the first whole command off `buf`: its arguments, the command's name first. `None`
/// when `buf` holds no whole command yet (nothing is taken then); an empty list for an empty
/// array (`*0`), which Redis ignores too. A frame that is no flat array of bulk strings, or
/// that is larger than `max_frame_bytes` (or 4 GiB), is an error: nothing more of the
/// connection can be read.
pub fn take_command(
    buf: &mut BytesMut,
    max_frame_bytes: usize,
) -> Result<Option<Args>, FrameError> {
    if buf.is_empty() {
        return Ok(None);
    }
    // Offsets in a frame are 32-bit.
    let limit = max_frame_bytes.min(u32::MAX as usize);
    let Some(length) = shape(buf, limit)? else {
        return Ok(None);
    };
    let (frame, amount) = match decode_range(&buf[..length]) {
        Ok(Some(decoded)) => decoded,
        Ok(None) => {
            return Err(FrameError::Protocol(
                "the decoder found the frame incomplete".into(),
            ));
        }
        Err(error) => return Err(FrameError::Protocol(error.details().to_owned())),
    };
    let bytes = buf.split_to(amount).freeze();
    match frame {
        RangeFrame::Array(elements) => {
            // Exactly one range an argument: a queued command keeps these.
            let mut ranges = Vec::with_capacity(elements.len());
            for element in elements {
                match element {
                    RangeFrame::BulkString((start, end)) => {
                        ranges.push((offset(start), offset(end)));
                    }
                    other => {
                        return Err(FrameError::Protocol(format!(
                            "expected a bulk string, got {other:?}"
                        )));
                    }
                }
            }
            Ok(Some(Args::new(bytes, ranges)))
        }
        RangeFrame::Null => Ok(Some(Args::default())),
        other => Err(FrameError::Protocol(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

/// The length of the whole frame at the start of `buf` once it is all there (`None` before),
/// checking its headers: an array of at most [`MAX_ARGUMENTS`] bulk strings, no longer in all
/// than `limit` bytes.
fn shape(buf: &[u8], limit: usize) -> Result<Option<usize>, FrameError> {
    let too_large = || FrameError::TooLarge { limit };
    if buf[0] != b'*' {
        return Err(FrameError::Protocol(format!(
            "expected '*', got '{}' (only RESP arrays of bulk strings are commands)",
            char::from(buf[0]).escape_default()
        )));
    }
    let Some((count, mut at)) = header(buf, 0, "multibulk")? else {
        return Ok(None);
    };
    if count < 0 {
        return Ok(Some(at));
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count > MAX_ARGUMENTS {
        return Err(FrameError::Protocol("invalid multibulk length".into()));
    }
    for _ in 0..count {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        if kind != b'$' {
            return Err(FrameError::Protocol(format!(
                "expected '$', got '{}'",
                char::from(kind).escape_default()
            )));
        }
        let Some((length, body)) = header(buf, at, "bulk")? else {
            return if at > limit {
                Err(too_large())
            } else {
                Ok(None)
            };
        };
        let length = usize::try_from(length)
            .map_err(|_| FrameError::Protocol("invalid bulk length".into()))?;
        at = body
            .checked_add(length)
            .and_then(|end| end.checked_add(2))
            .filter(|end| *end <= limit)
            .ok_or_else(too_large)?;
        if at > buf.len() {
            return Ok(None);
        }
        if &buf[at - 2..at] != b"\r\n" {
            return Err(FrameError::Protocol(
                "expected CRLF after a bulk string".into(),
            ));
        }
    }
    Ok(Some(at))
}

/// The number of the header line starting at `buf[at]` (`*<n>\r\n` or `$<n>\r\n`) and where
/// the next starts; `None` while the line is incomplete.
fn header(buf: &[u8], at: usize, what: &str) -> Result<Option<(i64, usize)>, FrameError> {
    let line = &buf[at + 1..buf.len().min(at + 1 + MAX_HEADER)];
    let bad = || FrameError::Protocol(format!("invalid {what} length"));
    let Some(end) = line.iter().position(|b| *b == b'\r') else {
        return if line.len() == MAX_HEADER {
            Err(bad())
        } else {
            Ok(None)
        };
    };
    match line.get(end + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(bad()),
    }
    let number = std::str::from_utf8(&line[..end])
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .filter(|n| *n >= -1)
        .ok_or_else(bad)?;
    Ok(Some((number, at + 1 + end + 2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn take(bytes: &[u8]) -> Result<Option<Vec<Bytes>>, FrameError> {
        take_command(&mut BytesMut::from(bytes), 1 << 20)
            .map(|args| args.map(|a| a.iter().collect()))
    }

    fn words(args: Option<Args>) -> Vec<Bytes> {
        args.expect("a whole command").iter().collect()
    }

    #[test]
    fn commands_come_off_whole_and_in_order() {
        let mut buf =
            BytesMut::from(&b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n*1\r\n$4\r\nPING\r\n*1\r\n$3"[..]);
        let first = words(take_command(&mut buf, 1024).unwrap());
        assert_eq!(first, [Bytes::from("INCR"), Bytes::from("a")]);
        let second = words(take_command(&mut buf, 1024).unwrap());
        assert_eq!(second, [Bytes::from("PING")]);
        assert_eq!(take_command(&mut buf, 1024).unwrap(), None);
        assert_eq!(&buf[..], b"*1\r\n$3", "an incomplete command stays");
        buf.extend_from_slice(b"\r\nGET\r\n");
        assert_eq!(
            words(take_command(&mut buf, 1024).unwrap()),
            [Bytes::from("GET")]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn every_prefix_of_a_command_is_incomplete() {
        let whole = b"*3\r\n$6\r\nINCRBY\r\n$0\r\n\r\n$2\r\n-5\r\n";
        for end in 0..whole.len() {
            assert_eq!(take(&whole[..end]), Ok(None), "{end}");
        }
        let args = take(whole).unwrap().unwrap();
        assert_eq!(
            args,
            [Bytes::from("INCRBY"), Bytes::new(), Bytes::from("-5")]
        );
        assert_eq!(take(b"*0\r\n").unwrap().unwrap(), Vec::<Bytes>::new());
        // Binary arguments, CRLF inside included.
        let binary = take(b"*1\r\n$4\r\n\r\n\x00\xff\r\n").unwrap().unwrap();
        assert_eq!(binary, [Bytes::from_static(b"\r\n\x00\xff")]);
    }

    #[test]
    fn anything_but_a_flat_array_of_bulk_strings_is_refused() {
        for bad in [
            &b"PING\r\n"[..],
            b"$4\r\nPING\r\n",
            b"*1\r\n*1\r\n$4\r\nPING\r\n",
            b"*1\r\n:1\r\n",
            b"*1\r\n$-1\r\n",
            b"*x\r\n",
            b"*1\rx",
            b"*1\r\n$4x\r\n",
            b"*-2\r\n",
            b"*1\r\n$4\r\nPINGxx",
            b"*99999999999999999999999999999999999",
            b"*1048577\r\n",
        ] {
            assert!(
                matches!(take(bad), Err(FrameError::Protocol(_))),
                "{:?}: {:?}",
                String::from_utf8_lossy(bad),
                take(bad)
            );
        }
    }

    #[test]
    fn deep_nesting_is_refused_without_decoding() {
        let nested = b"*1\r\n".repeat(200_000);
        assert!(matches!(take(&nested), Err(FrameError::Protocol(_))));
    }

    #[test]
    fn frames_past_the_limit_are_refused_before_they_arrive() {
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$100\r\n"[..]);
        assert_eq!(
            take_command(&mut buf, 64),
            Err(FrameError::TooLarge { limit: 64 })
        );
        let whole = b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
        assert!(take_command(&mut BytesMut::from(&whole[..]), whole.len()).is_ok());
        assert_eq!(
            take_command(&mut BytesMut::from(&whole[..]), whole.len() - 1),
            Err(FrameError::TooLarge {
                limit: whole.len() - 1
            })
        );
        let huge = b"*1\r\n$9223372036854775807\r\n";
        assert_eq!(take(huge), Err(FrameError::TooLarge { limit: 1 << 20 }));
    }
}
