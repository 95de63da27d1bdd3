//! Faults of a shard node's disk, as TigerBeetle's simulator injects them: a failed fsync, a
//! power cut in the middle of one (a torn write), and a bit flipped in what recovery reads.
//!
//! The driver arms a fault on a host's [`DiskFaults`] ([`DiskFaults::arm`]); the host's
//! [`crate::seams::SimDisk`] carries it out at the next call it applies to, and records that
//! it fired; the driver then plays the operator ([`reaction`]): it restarts a fenced node,
//! brings a node back after the power cut, and starts a node that refused to start on a
//! corrupt read again on an empty data directory, where it restores its slot from its
//! datacenter (operations.md, "Corrupt log").

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long an armed fault waits for a call it applies to (an fsync, or a start) before it is
/// withdrawn, unfired.
pub const ARM_WINDOW: Duration = Duration::from_millis(1_500);

/// A fault of a shard node's disk, with the operator's delays, all drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    /// From the next fsync of the node's data directory (a log segment, the store or a
    /// directory) until the node restarts, every fsync fails; `reached` says whether what each
    /// was to make durable reached the disk all the same (after a failed fsync either may be
    /// so). The node fences itself (503 to writes, `/healthz` naming the fsync), and the
    /// operator restarts it `restart_after` the first failure.
    FailFsync {
        /// Whether the data of each failed fsync is durable all the same.
        reached: bool,
        /// How long after the first failure the operator restarts the node.
        restart_after: Duration,
    },
    /// The power fails in the middle of the next fsync of a log segment: of what was written
    /// to it since its last good fsync, the first `kept_permille` thousandths reach the disk
    /// (at least a byte, never all of a write of more than one), nothing after that call
    /// reaches it, and the host stops at once; it is back `down_for` later, and recovery must
    /// cut the torn record off.
    PowerCut {
        /// How much of the unsynced bytes survive, in thousandths.
        kept_permille: u32,
        /// How long the host is down.
        down_for: Duration,
    },
    /// At the node's next start (the plan crashes and restarts it), one bit of what recovery
    /// reads is flipped: in non-empty read number `nth` (from 0) of a log segment, or of the
    /// store, bit `bit` of the byte `at_millionths` millionths into it. The node must refuse to
    /// start; the operator moves its data directory aside (the disk is lost) and starts it
    /// again `restart_after` later.
    CorruptRead {
        /// Whether the flip is in a read of the store rather than of a log segment.
        store: bool,
        /// Which read of that file.
        nth: u32,
        /// Where in the read buffer, in millionths of its length.
        at_millionths: u32,
        /// Which bit of that byte.
        bit: u8,
        /// How long after the refusal the operator starts the node again.
        restart_after: Duration,
    },
}

/// What a host's disk did with an armed fault, for the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fired {
    /// The first fsync failed (every later one fails too, until a restart).
    FsyncFailed,
    /// The power failed in the middle of an fsync: the host must stop now.
    PowerCut,
    /// A bit was flipped in what recovery read.
    CorruptRead,
    /// After a corrupt read, the node refused to start: it ended with this error.
    RefusedToStart,
}

/// How many of each disk fault a run armed, and what came of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskFaultTally {
    /// Faults armed.
    pub armed: u32,
    /// Armed faults withdrawn unfired (no call they apply to came within [`ARM_WINDOW`]).
    pub withdrawn: u32,
    /// fsyncs that failed (each host's first: later ones fail too).
    pub fsync_failures: u32,
    /// Power cuts in the middle of an fsync.
    pub power_cuts: u32,
    /// Bits flipped in what recovery read.
    pub corrupt_reads: u32,
    /// Starts refused on a corrupt read (each followed by a start on an empty disk).
    pub refused_starts: u32,
    /// Bits flipped in a read of a log segment that the node started on all the same: every
    /// record is checksummed, so each must be refused.
    pub unnoticed_log_reads: u32,
}

impl DiskFaultTally {
    /// Counts `fired`.
    pub fn count(&mut self, fired: Fired, fault: DiskFault) {
        let log = matches!(fault, DiskFault::CorruptRead { store: false, .. });
        match fired {
            Fired::FsyncFailed => self.fsync_failures += 1,
            Fired::PowerCut => self.power_cuts += 1,
            Fired::CorruptRead => {
                self.corrupt_reads += 1;
                self.unnoticed_log_reads += u32::from(log);
            }
            Fired::RefusedToStart => {
                self.refused_starts += 1;
                self.unnoticed_log_reads -= u32::from(log);
            }
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &DiskFaultTally) {
        self.armed += other.armed;
        self.withdrawn += other.withdrawn;
        self.fsync_failures += other.fsync_failures;
        self.power_cuts += other.power_cuts;
        self.corrupt_reads += other.corrupt_reads;
        self.refused_starts += other.refused_starts;
        self.unnoticed_log_reads += other.unnoticed_log_reads;
    }
}

#[derive(Debug, Default)]
struct State {
    /// The fault waiting for its call, and when it was armed.
    armed: Option<(DiskFault, Duration)>,
    /// What fired since the driver last looked, each with the fault it came from.
    fired: Vec<(Fired, DiskFault)>,
    /// Every fsync fails until the next start.
    fsyncs_fail: Option<bool>,
    /// The power is off: every call fails until the next start.
    dead: bool,
    /// The corrupt read that flipped a bit in this start's recovery.
    flipped: Option<DiskFault>,
    /// Reads an armed corrupt read applies to, since it was armed.
    reads: u32,
}

/// One shard host's disk faults, shared by the driver (which arms them) and the host's disk
/// (which carries them out).
#[derive(Debug, Clone, Default)]
pub struct DiskFaults(Arc<Mutex<State>>);

/// What an fsync is to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Sync, and succeed.
    Normal,
    /// Fail; with `reached`, after syncing all the same.
    Fail {
        /// Whether the data reaches the disk all the same.
        reached: bool,
    },
    /// Keep this many thousandths of the unsynced bytes, then the power is off.
    PowerCut {
        /// Thousandths of the unsynced bytes kept.
        kept_permille: u32,
    },
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected disk fault: {what}"))
}

/// Whether `path` is a log segment (`wal-<n>.log`).
fn is_segment(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("wal-") && name.ends_with(".log"))
}

impl DiskFaults {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().expect("disk faults lock")
    }

    /// Arms `fault` at `now` (the driver): it replaces any fault armed and not fired.
    pub fn arm(&self, fault: DiskFault, now: Duration) {
        let mut state = self.state();
        state.armed = Some((fault, now));
        state.reads = 0;
    }

    /// What fired since the last call (the driver).
    pub fn take_fired(&self) -> Vec<(Fired, DiskFault)> {
        std::mem::take(&mut self.state().fired)
    }

    /// Whether a fault is armed and still within [`ARM_WINDOW`] at `now`; one past it is
    /// withdrawn, and counted in `tally` (the driver).
    pub fn outstanding(&self, now: Duration, tally: &mut DiskFaultTally) -> bool {
        let mut state = self.state();
        match state.armed {
            Some((_, at)) if now >= at + ARM_WINDOW => {
                state.armed = None;
                tally.withdrawn += 1;
                false
            }
            armed => armed.is_some(),
        }
    }

    /// The host's software starts: the power is on and fsyncs work again.
    pub fn started(&self) {
        let mut state = self.state();
        state.dead = false;
        state.fsyncs_fail = None;
        state.flipped = None;
    }

    /// The node ended with `error` (the host): a start refused on a corrupt read, a failing
    /// fsync or a power cut, which the operator answers, or an error the run must report.
    pub fn ended(&self, error: shard_node::StorageError) -> Result<(), shard_node::StorageError> {
        let mut state = self.state();
        if let Some(fault) = state.flipped.take() {
            state.fired.push((Fired::RefusedToStart, fault));
            return Ok(());
        }
        // The fault's reaction restarts the node.
        match state.dead || state.fsyncs_fail.is_some() {
            true => Ok(()),
            false => Err(error),
        }
    }

    /// Fails every call once the power is off.
    pub fn alive(&self) -> io::Result<()> {
        match self.state().dead {
            true => Err(injected("the power is off")),
            false => Ok(()),
        }
    }

    /// What the next fsync does; `segment` when it is a log segment's (only those are cut by
    /// the power).
    pub fn fsync(&self, segment: bool) -> io::Result<Fsync> {
        let mut state = self.state();
        if state.dead {
            return Err(injected("the power is off"));
        }
        if let Some(reached) = state.fsyncs_fail {
            return Ok(Fsync::Fail { reached });
        }
        match state.armed {
            Some((fault @ DiskFault::FailFsync { reached, .. }, _)) => {
                state.armed = None;
                state.fsyncs_fail = Some(reached);
                state.fired.push((Fired::FsyncFailed, fault));
                Ok(Fsync::Fail { reached })
            }
            Some((fault @ DiskFault::PowerCut { kept_permille, .. }, _)) if segment => {
                state.armed = None;
                state.dead = true;
                state.fired.push((Fired::PowerCut, fault));
                Ok(Fsync::PowerCut { kept_permille })
            }
            _ => Ok(Fsync::Normal),
        }
    }

    /// Flips the armed bit in `bytes`, just read from `path` (a log segment's whole content,
    /// or a page of the store when `store`), if a corrupt read is armed for it.
    pub fn read(&self, path: Option<&Path>, bytes: &mut [u8]) {
        let mut state = self.state();
        let Some((
            fault @ DiskFault::CorruptRead {
                store,
                nth,
                at_millionths,
                bit,
                ..
            },
            _,
        )) = state.armed
        else {
            return;
        };
        let applies = match path {
            Some(path) => !store && is_segment(path),
            None => store,
        };
        if !applies || bytes.is_empty() {
            return;
        }
        state.reads += 1;
        if state.reads <= nth {
            return;
        }
        let at = (bytes.len() as u64 * u64::from(at_millionths) / 1_000_000) as usize;
        bytes[at.min(bytes.len() - 1)] ^= 1 << (bit % 8);
        state.flipped = Some(fault);
        state.fired.push((Fired::CorruptRead, fault));
        state.armed = None;
    }
}

#[cfg(test)]
mod tests {
    use shard_node::StorageError;

    use super::*;

    fn corruption() -> StorageError {
        StorageError::Corrupt {
            file: "wal-00000000000000000002.log".into(),
            offset: 0,
            reason: "checksum mismatch".into(),
        }
    }

    #[test]
    fn a_corrupt_read_flips_one_bit_of_the_armed_read_and_a_refusal_follows() {
        let faults = DiskFaults::default();
        let fault = DiskFault::CorruptRead {
            store: false,
            nth: 1,
            at_millionths: 500_000,
            bit: 3,
            restart_after: Duration::from_millis(100),
        };
        faults.arm(fault, Duration::ZERO);
        let (first, second) = (Path::new("/d/wal-1.log"), Path::new("/d/wal-2.log"));
        let mut bytes = vec![0xA5u8; 64];
        faults.read(Some(first), &mut bytes);
        faults.read(Some(Path::new("/d/incarnation")), &mut bytes);
        faults.read(None, &mut bytes);
        assert_eq!(
            bytes,
            vec![0xA5u8; 64],
            "only the second segment read is flipped"
        );
        faults.read(Some(second), &mut bytes);
        let flipped: Vec<usize> = (0..64).filter(|&i| bytes[i] != 0xA5).collect();
        assert_eq!(flipped, vec![32]);
        assert_eq!(bytes[32] ^ 0xA5, 1 << 3);
        assert!(
            faults.ended(corruption()).is_ok(),
            "a refusal the operator answers"
        );
        let fired: Vec<Fired> = faults.take_fired().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fired, vec![Fired::CorruptRead, Fired::RefusedToStart]);
        assert!(faults.ended(corruption()).is_err(), "no fault, no excuse");
    }

    #[test]
    fn an_armed_fault_is_withdrawn_after_its_window() {
        let faults = DiskFaults::default();
        let mut tally = DiskFaultTally::default();
        let fault = DiskFault::PowerCut {
            kept_permille: 500,
            down_for: Duration::from_millis(100),
        };
        faults.arm(fault, Duration::from_secs(1));
        assert!(faults.outstanding(Duration::from_secs(1) + ARM_WINDOW / 2, &mut tally));
        assert!(!faults.outstanding(Duration::from_secs(1) + ARM_WINDOW, &mut tally));
        assert_eq!(tally.withdrawn, 1);
        assert_eq!(faults.fsync(true).expect("alive"), Fsync::Normal);
    }
}
