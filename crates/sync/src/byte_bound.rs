//! The bound on the bytes of copies an aggregator holds (`[aggregator]` in the topology):
//! what [`crate::SlotCopies`] counts as it merges, and what an aggregator's replica reports once
//! it refused entries past it. Sizes are the estimates of [`geocount_model::held_bytes`].

/// Bytes held against a bound, kept as merges change them (never by a scan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBound {
    held: u64,
    max: u64,
}

impl Default for ByteBound {
    /// Nothing held, no bound.
    fn default() -> Self {
        Self {
            held: 0,
            max: u64::MAX,
        }
    }
}

impl ByteBound {
    /// The bytes held.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The bound (`u64::MAX`: none).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Sets the bound; what is held already stays.
    pub fn set_max(&mut self, max: u64) {
        self.max = max;
    }

    /// Whether an entry may go from `before` to `after` bytes: shrinking always may, growing
    /// only within the bound.
    pub fn admits(&self, before: u64, after: u64) -> bool {
        after <= before || self.held.saturating_add(after - before) <= self.max
    }

    /// Notes an entry gone from `before` to `after` bytes.
    pub fn changed(&mut self, before: u64, after: u64) {
        self.held = self.held.saturating_sub(before).saturating_add(after);
    }
}

/// What a replica refused past its bound, to report it naming the setting.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    /// The setting that bounds the copies (empty: unbounded).
    pub key: &'static str,
    /// Pulled entries refused since the process started.
    pub entries: u64,
}

impl Refusals {
    /// Once entries were refused: the report, with the `bound` they were refused by.
    pub fn report(&self, bound: ByteBound) -> Option<String> {
        (self.entries > 0).then(|| {
            format!(
                "{} ({}) reached: {} pulled entries refused (this aggregator holds {} bytes); the sums of the slots they belong to are incomplete until it restarts with a higher bound",
                self.key,
                bound.max(),
                self.entries,
                bound.held(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_admitted_within_the_bound_and_shrinking_always() {
        let mut bound = ByteBound::default();
        bound.set_max(100);
        assert!(bound.admits(0, 100));
        bound.changed(0, 90);
        assert!(bound.admits(10, 20) && !bound.admits(10, 21));
        assert!(bound.admits(90, 5), "shrinking");
        bound.changed(90, 5);
        assert_eq!(bound.held(), 5);
        let refusals = Refusals {
            key: "aggregator.global_max_state_bytes",
            entries: 3,
        };
        let report = refusals.report(bound).unwrap();
        assert!(
            report.starts_with("aggregator.global_max_state_bytes (100) reached: 3 pulled"),
            "{report}"
        );
        assert!(Refusals::default().report(bound).is_none());
    }
}
