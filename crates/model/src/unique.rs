//! Unique counts: a HyperLogLog sketch of the distinct items one slot of a counter has seen.
//!
//! A [`UniqueSketch`] has 2^14 registers. An item is hashed with the placement hash (xxh3 with
//! geocount's fixed seed, [`hash_item`]); the hash's top 14 bits pick a register, and the
//! register keeps the highest rank (position of the first 1 bit in the remaining 50 bits, 1 to
//! 51) any item has brought it. The estimate is the standard HyperLogLog one with the
//! small-range (linear counting) correction; its relative standard error is
//! 1.04 / sqrt(2^14) ≈ 0.81 % ([`STANDARD_ERROR`]).
//!
//! Two properties make sketches fit the slot model:
//!
//! - Adding an item that raises no register changes nothing, and [`UniqueSketch::add_hash`]
//!   says so: the owner raises the slot's version only when the sketch really changed, so
//!   writing the same items again changes nothing anywhere.
//! - The union of sketches is the register-wise maximum ([`UniqueSketch::union_with`]):
//!   commutative, associative and idempotent, and the union of the sketches of any split of
//!   the items is the sketch of all of them. An item written to two slots counts once.
//!
//! A sketch with few registers set is stored sparsely (`(register, rank)` pairs, 4 bytes each,
//! at most [`SPARSE_MAX`] of them) and turns dense (one byte per register, 16 KiB) past that, so
//! a counter with few distinct items in a slot costs little in memory, in the log and on the
//! wire.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ModelError;

/// Bits of the hash that pick a register.
pub const PRECISION: u32 = 14;
/// How many registers a sketch has: 2^14.
pub const REGISTERS: usize = 1 << PRECISION;
/// The highest rank a register can hold: 64 - 14 + 1.
pub const MAX_RANK: u8 = (64 - PRECISION + 1) as u8;
/// The relative standard error of an estimate: 1.04 / sqrt(2^14).
pub const STANDARD_ERROR: f64 = 1.04 / 128.0;
/// The most registers a sparse sketch holds before it turns dense (its pairs then take half
/// the dense registers' memory).
pub const SPARSE_MAX: usize = REGISTERS / 8;
/// The longest item accepted, in bytes.
pub const MAX_ITEM_BYTES: usize = 1024;

/// `alpha_m` of the HyperLogLog estimator for 2^14 registers.
const ALPHA: f64 = 0.7213 / (1.0 + 1.079 / REGISTERS as f64);

/// The hash of an item: the placement hash of its bytes.
pub fn hash_item(item: &str) -> u64 {
    crate::hash::hash64(item.as_bytes())
}

/// Refuses an empty item or one over [`MAX_ITEM_BYTES`].
pub fn validate_item(item: &str) -> Result<(), ModelError> {
    if item.is_empty() || item.len() > MAX_ITEM_BYTES {
        return Err(ModelError::InvalidItem {
            len: item.len(),
            max: MAX_ITEM_BYTES,
        });
    }
    Ok(())
}

/// The register an item hash goes to, and the rank it brings.
fn position(hash: u64) -> (usize, u8) {
    let index = (hash >> (64 - PRECISION)) as usize;
    // The bit set below the 50 remaining bits caps the rank at MAX_RANK.
    let rest = (hash << PRECISION) | (1 << (PRECISION - 1));
    (index, rest.leading_zeros() as u8 + 1)
}

/// A register's term of the harmonic sum, scaled by 2^MAX_RANK so that it is an exact integer.
fn term(rank: u8) -> u128 {
    1u128 << (MAX_RANK - rank)
}

#[derive(Clone)]
enum Registers {
    /// `(register, rank)` of the registers set, by register; ranks are above 0.
    Sparse(Vec<(u16, u8)>),
    /// Every register's rank; `REGISTERS` long.
    Dense(Box<[u8]>),
}

/// A HyperLogLog sketch of 2^14 registers: the distinct items one slot of a unique counter has
/// seen (module docs).
#[derive(Clone)]
pub struct UniqueSketch {
    registers: Registers,
    /// Registers at 0.
    zeros: u32,
    /// The sum over all registers of 2^(MAX_RANK - rank), kept as each register changes so an
    /// estimate costs O(1).
    harmonic: u128,
}

impl Default for UniqueSketch {
    fn default() -> Self {
        Self {
            registers: Registers::Sparse(Vec::new()),
            zeros: REGISTERS as u32,
            harmonic: REGISTERS as u128 * term(0),
        }
    }
}

impl UniqueSketch {
    /// An empty sketch (estimate 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// The rank register `index` holds (0: never raised).
    pub fn register(&self, index: usize) -> u8 {
        match &self.registers {
            Registers::Sparse(pairs) => pairs
                .binary_search_by_key(&(index as u16), |(i, _)| *i)
                .map_or(0, |at| pairs[at].1),
            Registers::Dense(ranks) => ranks[index],
        }
    }

    /// Whether adding the item with hash `hash` would raise a register.
    pub fn would_change(&self, hash: u64) -> bool {
        let (index, rank) = position(hash);
        rank > self.register(index)
    }

    /// Whether adding the item with hash `hash` would set a register still at 0 (the sketch
    /// then holds one more: see [`crate::held_bytes`]).
    pub fn sets_register(&self, hash: u64) -> bool {
        let (index, _) = position(hash);
        self.register(index) == 0
    }

    /// Adds the item with hash `hash` ([`hash_item`]); returns whether a register rose. An item
    /// that raises none leaves the sketch exactly as it was.
    pub fn add_hash(&mut self, hash: u64) -> bool {
        let (index, rank) = position(hash);
        self.raise(index, rank)
    }

    /// Adds `item`; returns whether a register rose.
    pub fn add(&mut self, item: &str) -> bool {
        self.add_hash(hash_item(item))
    }

    /// Makes this sketch the union of itself and `other`: the register-wise maximum. Returns
    /// whether a register rose.
    pub fn union_with(&mut self, other: &UniqueSketch) -> bool {
        let mut changed = false;
        match &other.registers {
            Registers::Sparse(pairs) => {
                for &(index, rank) in pairs {
                    changed |= self.raise(usize::from(index), rank);
                }
            }
            Registers::Dense(ranks) => {
                if let Registers::Sparse(_) = self.registers {
                    self.densify();
                }
                for (index, &rank) in ranks.iter().enumerate() {
                    changed |= self.raise(index, rank);
                }
            }
        }
        changed
    }

    /// The union of `sketches` (empty when there are none).
    pub fn union_of<'a>(sketches: impl IntoIterator<Item = &'a UniqueSketch>) -> UniqueSketch {
        let mut union = UniqueSketch::new();
        for sketch in sketches {
            union.union_with(sketch);
        }
        union
    }

    /// The estimated number of distinct items: HyperLogLog's, with linear counting while the
    /// raw estimate is at most 2.5 × 2^14 and some register is still 0.
    pub fn estimate(&self) -> f64 {
        let m = REGISTERS as f64;
        let raw = ALPHA * m * m / (self.harmonic as f64 / term(0) as f64);
        if raw <= 2.5 * m && self.zeros > 0 {
            m * (m / f64::from(self.zeros)).ln()
        } else {
            raw
        }
    }

    /// The estimate, rounded to a whole count.
    pub fn count(&self) -> i64 {
        self.estimate().round() as i64
    }

    /// How many registers are above 0.
    pub fn registers_set(&self) -> usize {
        REGISTERS - self.zeros as usize
    }

    /// Whether the registers are stored one byte each (else as `(register, rank)` pairs).
    pub fn is_dense(&self) -> bool {
        matches!(self.registers, Registers::Dense(_))
    }

    /// At most how many bytes the sketch takes encoded with postcard (its registers as stored,
    /// behind a variant tag and a length).
    pub fn encoded_bytes(&self) -> usize {
        match &self.registers {
            Registers::Sparse(pairs) => 4 + 3 * pairs.len(),
            Registers::Dense(_) => 4 + REGISTERS,
        }
    }

    /// Every register's rank, dense.
    pub fn to_dense(&self) -> Box<[u8]> {
        match &self.registers {
            Registers::Dense(ranks) => ranks.clone(),
            Registers::Sparse(pairs) => {
                let mut ranks = vec![0u8; REGISTERS].into_boxed_slice();
                for &(index, rank) in pairs {
                    ranks[usize::from(index)] = rank;
                }
                ranks
            }
        }
    }

    fn raise(&mut self, index: usize, rank: u8) -> bool {
        let old = match &mut self.registers {
            Registers::Dense(ranks) => {
                let old = ranks[index];
                if rank <= old {
                    return false;
                }
                ranks[index] = rank;
                old
            }
            Registers::Sparse(pairs) => {
                match pairs.binary_search_by_key(&(index as u16), |(i, _)| *i) {
                    Ok(at) => {
                        let old = pairs[at].1;
                        if rank <= old {
                            return false;
                        }
                        pairs[at].1 = rank;
                        old
                    }
                    Err(at) => {
                        if rank == 0 {
                            return false;
                        }
                        pairs.insert(at, (index as u16, rank));
                        0
                    }
                }
            }
        };
        if old == 0 {
            self.zeros -= 1;
        }
        self.harmonic = self.harmonic - term(old) + term(rank);
        if matches!(&self.registers, Registers::Sparse(pairs) if pairs.len() > SPARSE_MAX) {
            self.densify();
        }
        true
    }

    fn densify(&mut self) {
        self.registers = Registers::Dense(self.to_dense());
    }

    /// A sketch holding `registers`, with its sums computed.
    fn from_registers(registers: Registers) -> Self {
        let mut sketch = Self {
            registers,
            zeros: REGISTERS as u32,
            harmonic: REGISTERS as u128 * term(0),
        };
        let mut account = |rank: u8| {
            if rank > 0 {
                sketch.zeros -= 1;
                sketch.harmonic = sketch.harmonic - term(0) + term(rank);
            }
        };
        match &sketch.registers {
            Registers::Sparse(pairs) => pairs.iter().for_each(|&(_, rank)| account(rank)),
            Registers::Dense(ranks) => ranks.iter().for_each(|&rank| account(rank)),
        }
        sketch
    }
}

impl PartialEq for UniqueSketch {
    /// Equal when every register is, however each is stored.
    fn eq(&self, other: &Self) -> bool {
        match (&self.registers, &other.registers) {
            (Registers::Sparse(a), Registers::Sparse(b)) => a == b,
            (Registers::Dense(a), Registers::Dense(b)) => a == b,
            _ => self.zeros == other.zeros && self.to_dense() == other.to_dense(),
        }
    }
}

impl Eq for UniqueSketch {}

impl fmt::Debug for UniqueSketch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueSketch")
            .field("registers_set", &self.registers_set())
            .field("dense", &self.is_dense())
            .field("estimate", &self.estimate())
            .finish()
    }
}

/// How a sketch is written: its registers as stored.
#[derive(Serialize)]
enum EncodedRef<'a> {
    Sparse(&'a [(u16, u8)]),
    Dense(&'a [u8]),
}

/// How a sketch is read back (the same shape as [`EncodedRef`]).
#[derive(Deserialize)]
enum Encoded {
    Sparse(Vec<(u16, u8)>),
    Dense(Vec<u8>),
}

impl Serialize for UniqueSketch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.registers {
            Registers::Sparse(pairs) => EncodedRef::Sparse(pairs),
            Registers::Dense(ranks) => EncodedRef::Dense(ranks),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for UniqueSketch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let encoded = Encoded::deserialize(deserializer)?;
        UniqueSketch::try_from(encoded).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<Encoded> for UniqueSketch {
    type Error = ModelError;

    fn try_from(encoded: Encoded) -> Result<Self, ModelError> {
        let invalid = |why: String| ModelError::InvalidSketch(why);
        let registers = match encoded {
            Encoded::Dense(ranks) => {
                if ranks.len() != REGISTERS {
                    return Err(invalid(format!(
                        "{} dense registers, expected {REGISTERS}",
                        ranks.len()
                    )));
                }
                if let Some(rank) = ranks.iter().find(|r| **r > MAX_RANK) {
                    return Err(invalid(format!("rank {rank} is above {MAX_RANK}")));
                }
                Registers::Dense(ranks.into_boxed_slice())
            }
            Encoded::Sparse(pairs) => {
                let ordered = pairs.windows(2).all(|w| w[0].0 < w[1].0);
                let in_range = pairs
                    .iter()
                    .all(|&(i, r)| usize::from(i) < REGISTERS && (1..=MAX_RANK).contains(&r));
                if !ordered || !in_range {
                    return Err(invalid(
                        "sparse registers must be distinct, in order, below 2^14, with ranks 1 to 51"
                            .into(),
                    ));
                }
                Registers::Sparse(pairs)
            }
        };
        let mut sketch = Self::from_registers(registers);
        if matches!(&sketch.registers, Registers::Sparse(pairs) if pairs.len() > SPARSE_MAX) {
            sketch.densify();
        }
        Ok(sketch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch_of(items: impl IntoIterator<Item = String>) -> UniqueSketch {
        let mut sketch = UniqueSketch::new();
        for item in items {
            sketch.add(&item);
        }
        sketch
    }

    fn items(range: std::ops::Range<u64>) -> impl Iterator<Item = String> {
        range.map(|n| format!("user-{n}"))
    }

    fn relative_error(estimate: f64, truth: u64) -> f64 {
        (estimate - truth as f64).abs() / truth as f64
    }

    #[test]
    fn the_estimate_is_within_two_percent_at_a_million_distinct_items() {
        let sketch = sketch_of(items(0..1_000_000));
        let error = relative_error(sketch.estimate(), 1_000_000);
        assert!(error < 0.02, "estimate {} ({error})", sketch.estimate());
        assert!(sketch.is_dense());
    }

    #[test]
    fn estimates_hold_across_the_range() {
        assert_eq!(UniqueSketch::new().estimate(), 0.0);
        assert_eq!(sketch_of(items(0..1)).count(), 1);
        // Linear counting below 2.5 × 2^14, the raw estimate above: three standard errors.
        for truth in [100, 1_000, 10_000, 40_000, 60_000, 200_000] {
            let estimate = sketch_of(items(0..truth)).estimate();
            assert!(
                relative_error(estimate, truth) < 3.0 * STANDARD_ERROR,
                "{truth}: {estimate}"
            );
        }
        // The errors of independent item sets spread like the standard error says.
        let errors: Vec<f64> = (0..20u64)
            .map(|set| {
                let start = 1_000_000 * (set + 1);
                relative_error(sketch_of(items(start..start + 50_000)).estimate(), 50_000)
            })
            .collect();
        let rms = (errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64).sqrt();
        assert!(rms < 2.0 * STANDARD_ERROR, "rms error {rms}");
    }

    #[test]
    fn duplicates_change_nothing() {
        let mut sketch = sketch_of(items(0..50_000));
        let before = sketch.clone();
        for item in items(0..50_000) {
            assert!(!sketch.would_change(hash_item(&item)));
            assert!(!sketch.add(&item), "{item} raised a register twice");
        }
        assert_eq!(sketch, before);
        assert_eq!(sketch.estimate(), before.estimate());
        // A new item usually does change it, and says so.
        let mut fresh = UniqueSketch::new();
        assert!(fresh.would_change(hash_item("x")));
        assert!(fresh.add("x"));
        assert!(!fresh.add("x"));
    }

    #[test]
    fn the_union_is_the_register_wise_maximum() {
        let a = sketch_of(items(0..30_000));
        let b = sketch_of(items(20_000..60_000));
        let c = sketch_of(items(100..200));
        let mut ab = a.clone();
        assert!(ab.union_with(&b));
        let (a_dense, b_dense, ab_dense) = (a.to_dense(), b.to_dense(), ab.to_dense());
        for index in 0..REGISTERS {
            assert_eq!(ab_dense[index], a_dense[index].max(b_dense[index]));
        }
        assert_eq!(
            ab,
            sketch_of(items(0..60_000)),
            "the sketch of all the items"
        );
        let mut ba = b.clone();
        ba.union_with(&a);
        assert_eq!(ab, ba, "commutative");
        assert!(!ab.clone().union_with(&a), "idempotent");
        let mut ab_c = ab.clone();
        ab_c.union_with(&c);
        let mut bc = b.clone();
        bc.union_with(&c);
        let mut a_bc = a.clone();
        a_bc.union_with(&bc);
        assert_eq!(ab_c, a_bc, "associative");
        assert_eq!(UniqueSketch::union_of([&a, &b, &c]), ab_c);
        assert!(relative_error(ab.estimate(), 60_000) < 0.03);
    }

    #[test]
    fn sparse_and_dense_sketches_agree() {
        let few = sketch_of(items(0..500));
        assert!(!few.is_dense());
        let many = sketch_of(items(0..5_000));
        assert!(many.is_dense(), "past {SPARSE_MAX} registers");
        // A dense sketch holding the same registers as a sparse one is equal to it.
        let mut dense = UniqueSketch::new();
        dense.union_with(&many);
        let mut both = few.clone();
        both.union_with(&many);
        assert_eq!(both, many, "the first 500 items are in the 5,000");
        let mut densified = few.clone();
        densified.densify();
        assert_eq!(densified, few);
        assert_eq!(densified.estimate(), few.estimate());
    }

    #[test]
    fn sketches_survive_serialization() {
        for sketch in [
            UniqueSketch::new(),
            sketch_of(items(0..300)),
            sketch_of(items(0..300_000)),
        ] {
            let bytes = postcard::to_allocvec(&sketch).unwrap();
            let back: UniqueSketch = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(back, sketch);
            assert_eq!(back.estimate(), sketch.estimate());
            assert_eq!(back.is_dense(), sketch.is_dense());
            assert!(bytes.len() <= REGISTERS + 8, "{} bytes", bytes.len());
            assert!(
                bytes.len() <= sketch.encoded_bytes(),
                "{} bytes",
                bytes.len()
            );
            let json = serde_json::to_string(&sketch).unwrap();
            assert_eq!(serde_json::from_str::<UniqueSketch>(&json).unwrap(), sketch);
        }
        let small = postcard::to_allocvec(&sketch_of(items(0..10))).unwrap();
        assert!(small.len() < 60, "sparse: {} bytes", small.len());
    }

    #[test]
    fn malformed_encodings_are_refused() {
        let refused = |encoded: &str| serde_json::from_str::<UniqueSketch>(encoded).is_err();
        assert!(refused(r#"{"Dense":[1,2,3]}"#), "wrong length");
        let mut too_high = vec![0u8; REGISTERS];
        too_high[7] = MAX_RANK + 1;
        let too_high = serde_json::to_string(&serde_json::json!({ "Dense": too_high })).unwrap();
        assert!(refused(&too_high));
        assert!(refused(r#"{"Sparse":[[5,1],[3,1]]}"#), "out of order");
        assert!(refused(r#"{"Sparse":[[5,1],[5,2]]}"#), "repeated");
        assert!(
            refused(r#"{"Sparse":[[16384,1]]}"#),
            "past the last register"
        );
        assert!(refused(r#"{"Sparse":[[5,0]]}"#), "a rank of 0 is no entry");
        let ok: UniqueSketch = serde_json::from_str(r#"{"Sparse":[[3,1],[5,2]]}"#).unwrap();
        assert_eq!((ok.register(3), ok.register(5), ok.register(4)), (1, 2, 0));
    }

    #[test]
    fn ranks_are_capped_and_registers_cover_the_hash() {
        assert_eq!(position(0), (0, MAX_RANK));
        assert_eq!(position(u64::MAX), (REGISTERS - 1, 1));
        assert_eq!(position(1 << 49), (0, 1));
        assert_eq!(position(1 << 48), (0, 2));
        assert_eq!(position(1 << 50), (1, MAX_RANK));
    }

    #[test]
    fn items_are_one_to_1024_bytes() {
        assert!(validate_item("user-42").is_ok());
        assert!(validate_item("").is_err());
        assert!(validate_item(&"x".repeat(MAX_ITEM_BYTES)).is_ok());
        assert!(validate_item(&"x".repeat(MAX_ITEM_BYTES + 1)).is_err());
    }
}
