//! Encoding postcard messages into a `Vec<u8>` without a `memmove` call per field.
//!
//! postcard's own `Vec` flavors (`to_allocvec`, `to_io`, `to_extend`) copy each field into the
//! vector with `extend_from_slice`: a call into libc's `memmove` for every varint of one to ten
//! bytes. A batch answer of 1,000 outcomes is 3,000 such calls; `perf` put them at 4 % of a
//! shard node's CPU under batches, and as much again in the commit thread's log encoding
//! (ARCHITECTURE.md, "Fourteenth round"). [`append`] and [`to_vec`] push short fields a byte at
//! a time, inline, and copy only long ones (ids, items, sketches) with one call.

use postcard::ser_flavors::Flavor;
use serde::Serialize;

/// Fields shorter than this are pushed byte by byte; longer ones are copied in one call.
const SHORT_FIELD: usize = 16;

/// A postcard flavor writing at the end of a borrowed vector.
struct AppendFlavor<'a> {
    out: &'a mut Vec<u8>,
}

impl Flavor for AppendFlavor<'_> {
    type Output = ();

    #[inline]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.out.push(byte);
        Ok(())
    }

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if data.len() < SHORT_FIELD {
            self.out.reserve(data.len());
            for &byte in data {
                self.out.push(byte);
            }
        } else {
            self.out.extend_from_slice(data);
        }
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Appends `value`'s postcard encoding to `out`, byte for byte what `postcard::to_allocvec`
/// gives. On an error, `out` may hold part of the encoding after what it held.
pub fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, AppendFlavor { out })
}

/// `value`'s postcard encoding, byte for byte what `postcard::to_allocvec` gives.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> postcard::Result<Vec<u8>> {
    let mut out = Vec::new();
    append(value, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BatchResponse, EntryOutcome};

    #[test]
    fn encodes_as_postcard_does_fields_short_and_long() {
        let response = BatchResponse {
            slot: "DC_USA_0_VAL_1".into(),
            outcomes: vec![
                EntryOutcome::Applied {
                    value: -5,
                    version: u64::MAX,
                },
                EntryOutcome::Refused {
                    status: 422,
                    error: "a field longer than sixteen bytes, copied in one call".into(),
                },
                EntryOutcome::Applied {
                    value: i64::MIN,
                    version: 0,
                },
            ],
        };
        let expected = postcard::to_allocvec(&response).unwrap();
        assert_eq!(to_vec(&response).unwrap(), expected);
        let mut out = vec![7, 7];
        append(&response, &mut out).unwrap();
        assert_eq!(out[..2], [7, 7]);
        assert_eq!(out[2..], expected[..]);
        let back: BatchResponse = postcard::from_bytes(&out[2..]).unwrap();
        assert_eq!(back, response);
    }
}
