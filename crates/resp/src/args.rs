//! A command's arguments as the connection keeps them: the frame's bytes and where each
//! argument lies in them.

use std::fmt;
use std::ops::Index;

use bytes::Bytes;

/// A command's arguments, its name first: the bytes of its frame and, for each argument, the
/// two 32-bit offsets of its contents. A queued command holds its frame and 8 bytes an
/// argument (a bulk string takes at least 6 on the wire), not a handle of its own for each.
#[derive(Clone, Default)]
pub struct Args {
    frame: Bytes,
    ranges: Vec<(u32, u32)>,
}

impl Args {
    /// The arguments at `ranges` (start and end offsets) of `frame`; each must lie in it.
    pub(crate) fn new(frame: Bytes, ranges: Vec<(u32, u32)>) -> Self {
        Self { frame, ranges }
    }

    /// How many arguments.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none (the empty array, `*0`).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Argument `index`, sharing the frame's bytes.
    pub fn get(&self, index: usize) -> Option<Bytes> {
        let &(start, end) = self.ranges.get(index)?;
        Some(self.frame.slice(start as usize..end as usize))
    }

    /// Each argument in order, sharing the frame's bytes.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Bytes> + Clone + '_ {
        (self.ranges.iter()).map(|&(start, end)| self.frame.slice(start as usize..end as usize))
    }

    /// The arguments from `first` on (none past the end).
    pub fn rest(&self, first: usize) -> Self {
        Self {
            frame: self.frame.clone(),
            ranges: self.ranges.get(first..).unwrap_or_default().to_vec(),
        }
    }

    /// The bytes these arguments keep: their frame's.
    pub fn frame_bytes(&self) -> usize {
        self.frame.len()
    }
}

impl Index<usize> for Args {
    type Output = [u8];

    fn index(&self, index: usize) -> &[u8] {
        let (start, end) = self.ranges[index];
        &self.frame[start as usize..end as usize]
    }
}

impl PartialEq for Args {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Args {}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The arguments of a frame made of `args` (for tests and tools building commands).
impl<A: AsRef<[u8]>> FromIterator<A> for Args {
    fn from_iter<I: IntoIterator<Item = A>>(args: I) -> Self {
        let mut frame = Vec::new();
        let mut ranges = Vec::new();
        for arg in args {
            let arg = arg.as_ref();
            frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            let start = frame.len();
            frame.extend_from_slice(arg);
            ranges.push((offset(start), offset(frame.len())));
            frame.extend_from_slice(b"\r\n");
        }
        Self::new(Bytes::from(frame), ranges)
    }
}

/// `at` as an offset in a frame: frames are at most `u32::MAX` bytes (`MAX_FRAME_LIMIT`).
pub(crate) fn offset(at: usize) -> u32 {
    u32::try_from(at).expect("a frame of at most 4 GiB")
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use crate::take_command;

    #[test]
    fn arguments_are_ranges_of_their_frame() {
        let mut wire = b"*100001\r\n$4\r\nMGET\r\n".to_vec();
        for _ in 0..100_000 {
            wire.extend_from_slice(b"$1\r\nk\r\n");
        }
        let args = take_command(&mut BytesMut::from(&wire[..]), 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(args.frame_bytes(), wire.len());
        assert_eq!((args.len(), args.ranges.capacity()), (100_001, 100_001));
        assert_eq!(&args[0], b"MGET");
        let keys = args.rest(1);
        assert_eq!((keys.len(), keys.ranges.capacity()), (100_000, 100_000));
        // Each key a slice of the one frame, not a copy.
        let frame = args.frame.as_ptr_range();
        assert!(
            keys.iter()
                .all(|key| &key[..] == b"k" && frame.contains(&key.as_ptr()))
        );
        assert_eq!(keys.get(100_000), None);
        assert!(args.rest(200_000).is_empty());
        let built: super::Args = ["MGET", "k"].into_iter().collect();
        assert_eq!(
            built,
            take_command(
                &mut BytesMut::from(&b"*2\r\n$4\r\nMGET\r\n$1\r\nk\r\n"[..]),
                64
            )
            .unwrap()
            .unwrap()
        );
    }
}
