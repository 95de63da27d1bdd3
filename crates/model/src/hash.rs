//! The one hash every binary and every version agrees on: xxh3 with a fixed seed. Placement,
//! partitions, unique-count items and node ids in timestamps are all taken from it.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The fixed seed of every hash.
const SEED: u64 = 0x6765_6f63_6f75_6e74; // "geocount"

/// A 64-bit hash of `bytes`.
pub fn hash64(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, SEED)
}

/// A 32-bit hash of a name (node ids in timestamps).
pub fn hash32(name: &str) -> u32 {
    (hash64(name.as_bytes()) >> 32) as u32
}
