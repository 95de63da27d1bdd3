//! Idempotency keys on their way to the store: the keys each group recorded, kept as the
//! bytes the log encoded them in, gathered into blocks that a checkpoint writes one row each
//! and that expire whole.
//!
//! A block is a run of postcard `Vec<(Box<str>, IdempotencyRecord)>`s one after another (one
//! per group; a block the store holds from a single list reads the same way).

use geocount_model::IdempotencyRecord;

/// About how many keys one block holds: blocks end between groups, so a large group may
/// take a block past it.
pub const KEYS_PER_BLOCK: usize = 65_536;

/// One block: encoded groups of keys, how many keys, and the newest key's creation time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBlock {
    /// The groups' encoded key lists, one after another.
    pub bytes: Vec<u8>,
    /// How many keys they hold.
    pub keys: usize,
    /// The newest `created_at_ms` among them: the block expires once it has.
    pub newest_ms: u64,
}

/// The keys recorded since the previous checkpoint, in the order recorded.
#[derive(Debug, Default)]
pub struct KeyBlocks {
    blocks: Vec<KeyBlock>,
}

impl KeyBlocks {
    /// Adds one group's keys: `encoded`, the postcard encoding of a list of `keys` keys whose
    /// newest was created at `newest_ms`.
    pub fn push_encoded(&mut self, encoded: &[u8], keys: usize, newest_ms: u64) {
        if keys == 0 {
            return;
        }
        match self.blocks.last_mut() {
            Some(block) if block.keys + keys <= KEYS_PER_BLOCK => {
                block.bytes.extend_from_slice(encoded);
                block.keys += keys;
                block.newest_ms = block.newest_ms.max(newest_ms);
            }
            _ => self.blocks.push(KeyBlock {
                bytes: encoded.to_vec(),
                keys,
                newest_ms,
            }),
        }
    }

    /// Adds `keys` recorded in this order (encoded here, a block's worth at a time).
    pub fn push(&mut self, keys: &[(Box<str>, IdempotencyRecord)]) {
        for part in keys.chunks(KEYS_PER_BLOCK) {
            let newest_ms = part.iter().map(|(_, r)| r.created_at_ms).max();
            let encoded = postcard::to_allocvec(part).expect("keys and records encode");
            self.push_encoded(&encoded, part.len(), newest_ms.unwrap_or_default());
        }
    }

    /// The blocks, oldest first.
    pub fn blocks(&self) -> &[KeyBlock] {
        &self.blocks
    }

    /// How many keys they hold.
    pub fn len(&self) -> usize {
        self.blocks.iter().map(|b| b.keys).sum()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Appends the blocks of a later checkpoint.
    pub fn absorb(&mut self, later: KeyBlocks) {
        self.blocks.extend(later.blocks);
    }
}

/// Decodes a block's keys into `into`, in the order recorded.
pub fn decode_block(
    mut bytes: &[u8],
    into: &mut Vec<(Box<str>, IdempotencyRecord)>,
) -> Result<(), postcard::Error> {
    while !bytes.is_empty() {
        let (keys, rest): (Vec<(Box<str>, IdempotencyRecord)>, _) =
            postcard::take_from_bytes(bytes)?;
        into.extend(keys);
        bytes = rest;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::{CounterId, SlotState};

    fn keys(names: std::ops::Range<u64>) -> Vec<(Box<str>, IdempotencyRecord)> {
        names
            .map(|n| {
                let record = IdempotencyRecord {
                    counter: CounterId::new("c").unwrap(),
                    delta: 1,
                    item: None,
                    outcome: SlotState {
                        value: n as i64,
                        version: n,
                    },
                    created_at_ms: 100 + n,
                };
                (format!("k-{n}").into_boxed_str(), record)
            })
            .collect()
    }

    /// Groups encoded one after another read back in order, as does a block written as one
    /// list; a block ends between groups once it is full.
    #[test]
    fn groups_read_back_in_order_and_fill_blocks() {
        let mut blocks = KeyBlocks::default();
        blocks.push(&keys(0..3));
        let encoded = postcard::to_allocvec(&keys(3..5)).unwrap();
        blocks.push_encoded(&encoded, 2, 104);
        blocks.push(&[]);
        assert_eq!((blocks.blocks().len(), blocks.len()), (1, 5));
        assert_eq!(blocks.blocks()[0].newest_ms, 104);
        let mut back = Vec::new();
        decode_block(&blocks.blocks()[0].bytes, &mut back).unwrap();
        assert_eq!(back, keys(0..5));

        blocks.push(&keys(5..KEYS_PER_BLOCK as u64 + 1));
        assert_eq!(blocks.blocks().len(), 2, "the block would pass its size");
        let mut later = KeyBlocks::default();
        later.push(&keys(0..1));
        blocks.absorb(later);
        assert_eq!(blocks.blocks().len(), 3);

        let one_list = postcard::to_allocvec(&keys(7..9)).unwrap();
        let mut back = Vec::new();
        decode_block(&one_list, &mut back).unwrap();
        assert_eq!(back, keys(7..9));
        assert!(decode_block(&one_list[..one_list.len() - 1], &mut back).is_err());
    }
}
