//! Which partitions of the slot the complete copies a restore received cover, from sources
//! that hold only some: the restore has the whole slot once they cover every partition of one
//! way of splitting the counter space. Indices from sources split differently (another
//! partition count, during a change of it) name different sets of counters, so they never add
//! up.

use std::collections::{BTreeSet, HashMap};

use geocount_model::Partitions;

/// The partitions covered so far, per partition count.
#[derive(Debug, Default)]
pub struct Coverage(HashMap<u32, BTreeSet<u32>>);

impl Coverage {
    /// Adds a complete copy of `partitions`; whether the copies now cover every partition of
    /// its count.
    pub fn add(&mut self, partitions: &Partitions) -> bool {
        let covered = self.0.entry(partitions.count).or_default();
        covered.extend(partitions.held.iter().filter(|&&p| p < partitions.count));
        covered.len() as u64 >= u64::from(partitions.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(count: u32, held: &[u32]) -> Partitions {
        Partitions {
            count,
            held: held.to_vec(),
        }
    }

    #[test]
    fn copies_cover_the_slot_only_within_one_partition_count() {
        let mut coverage = Coverage::default();
        assert!(!coverage.add(&held(2, &[0])));
        // Partitions 1 and 2 of 3 are not the rest of 2, though three indices are in hand.
        assert!(!coverage.add(&held(3, &[1, 2])));
        // Indices past the count, or repeated, cover nothing more.
        assert!(!coverage.add(&held(2, &[0, 0, 7])));
        assert!(coverage.add(&held(2, &[1])));
        let mut coverage = Coverage::default();
        assert!(!coverage.add(&held(3, &[1])));
        assert!(coverage.add(&held(3, &[0, 2])));
    }
}
