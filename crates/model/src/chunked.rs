//! An append-only vector kept in chunks of a fixed size: what [`crate::IdTable`] keeps its
//! entries in.
//!
//! A `Vec` that grows by doubling copies everything it holds into a block twice as large and
//! frees the old one: at 1,000,000 slot-table entries that is a 32 MiB copy on the commit
//! thread, and a 32 MiB block the allocator may keep long after (docs/architecture.md, "Memory
//! per counter"). Here only the first chunk grows that way; every later chunk is allocated at its full
//! size once, and nothing is ever copied or freed while the vector grows.

use std::ops::{Index, IndexMut};

/// Entries a chunk holds: a power of two, so that an index splits with a shift and a mask.
const CHUNK_BITS: u32 = 14;
const CHUNK: usize = 1 << CHUNK_BITS;
const OFFSET_MASK: usize = CHUNK - 1;

/// An append-only vector stored in chunks of 16,384 entries.
#[derive(Debug, Clone)]
pub struct ChunkedVec<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ChunkedVec<T> {
    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value` at index [`Self::len`].
    pub fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            // The first chunk starts small and doubles (a power of two, so it stops at exactly
            // `CHUNK`); a later one was allocated whole.
            Some(last) if last.len() < CHUNK => last.push(value),
            _ => {
                let mut chunk = if self.chunks.is_empty() {
                    Vec::new()
                } else {
                    Vec::with_capacity(CHUNK)
                };
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// Takes the last element out; a chunk left empty is freed.
    pub fn pop(&mut self) -> Option<T> {
        let last = self.chunks.last_mut()?;
        let value = last.pop()?;
        if last.is_empty() {
            self.chunks.pop();
            if self.chunks.len() * 4 < self.chunks.capacity() {
                self.chunks.shrink_to_fit();
            }
        }
        self.len -= 1;
        Some(value)
    }

    /// Takes element `index` out, putting the last element in its place.
    ///
    /// # Panics
    /// If `index` is out of bounds.
    pub fn swap_remove(&mut self, index: usize) -> T {
        assert!(index < self.len, "swap_remove of {index} in {}", self.len);
        let last = self.pop().expect("not empty");
        if index == self.len {
            return last;
        }
        std::mem::replace(&mut self[index], last)
    }

    /// The entry at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index >> CHUNK_BITS)?
            .get(index & OFFSET_MASK)
    }

    /// Every entry, in index order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> Index<usize> for ChunkedVec<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & OFFSET_MASK]
    }
}

impl<T> IndexMut<usize> for ChunkedVec<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & OFFSET_MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_moves_the_last_element_and_frees_empty_chunks() {
        let mut held = ChunkedVec::default();
        for n in 0..CHUNK + 2 {
            held.push(n);
        }
        assert_eq!(held.swap_remove(3), 3);
        assert_eq!(held[3], CHUNK + 1);
        assert_eq!(held.len(), CHUNK + 1);
        assert_eq!(held.swap_remove(CHUNK), CHUNK);
        assert_eq!((held.len(), held.chunks.len()), (CHUNK, 1));
        while held.pop().is_some() {}
        assert!(held.is_empty() && held.chunks.is_empty());
        held.push(7);
        assert_eq!(held[0], 7);
    }

    #[test]
    fn entries_keep_their_index_across_chunks() {
        let mut held = ChunkedVec::default();
        assert!(held.is_empty());
        let count = 3 * CHUNK + 5;
        for n in 0..count {
            held.push(n);
        }
        assert_eq!(held.len(), count);
        for n in [0, 1, CHUNK - 1, CHUNK, 2 * CHUNK + 7, count - 1] {
            assert_eq!(held[n], n);
            assert_eq!(held.get(n), Some(&n));
        }
        assert_eq!(held.get(count), None);
        assert!(held.iter().copied().eq(0..count));
        held[CHUNK] += 1_000_000;
        assert_eq!(held[CHUNK], CHUNK + 1_000_000);
    }

    #[test]
    fn only_the_first_chunk_grows_and_no_chunk_outgrows_its_size() {
        let mut held = ChunkedVec::default();
        for n in 0..2 * CHUNK + 1 {
            held.push(n);
        }
        assert_eq!(held.chunks.len(), 3);
        assert!(held.chunks.iter().all(|chunk| chunk.capacity() == CHUNK));
        let mut small = ChunkedVec::default();
        small.push(1u8);
        assert!(small.chunks[0].capacity() < CHUNK);
    }

    #[test]
    #[should_panic]
    fn an_index_past_the_end_panics() {
        let mut held = ChunkedVec::default();
        held.push(1);
        let _ = held[CHUNK];
    }
}
