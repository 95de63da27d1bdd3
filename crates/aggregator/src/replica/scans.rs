//! Answering a ranking or a sum without holding up the replica. A ranking the kept leaders
//! answer is a walk under the read lock. One that needs a scan of every counter, and every sum
//! over a prefix ([`super::sums`]), runs on a blocking thread, not a runtime thread, and takes
//! the read lock for [`SCAN_RUN`] counters at a time, so a merge waits at most one run and the
//! reads queued behind it no longer. At most `http.max_concurrent_scans` scans run at once; one
//! more is refused ([`ScansBusy`], 429).

use std::sync::Arc;

use tokio::sync::Semaphore;

use geocount_ranking::{Answer, Ranked, Scan};

use super::top::with_ranked;
use super::{Replica, SharedReplica};

/// How many counters a scan visits per hold of the replica's read lock: a fraction of a
/// millisecond of work, the longest a merge waits for a scan.
pub const SCAN_RUN: usize = 1_024;

/// How long a client refused for too many scans is asked to wait, in seconds.
pub const SCAN_RETRY_AFTER_SECS: u32 = 1;

/// A ranking or a sum that needs a scan of every counter, refused while the most scans this
/// process runs at once are under way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0} rankings or sums that scan every counter are under way, the most this aggregator runs at once (http.max_concurrent_scans); try again shortly"
)]
pub struct ScansBusy(pub usize);

/// A scan of every counter of a replica, visited a run at a time.
pub trait InRuns: Send + 'static {
    /// What the scan finds.
    type Found: Send + 'static;
    /// Visits up to `max` more counters of `replica` as they read at `now_ms` (the lifecycle
    /// rule); returns whether every counter is visited.
    fn visit(&mut self, replica: &Replica, now_ms: u64, max: usize) -> bool;
    /// What the scan found once every counter is visited.
    fn finish(self) -> Self::Found;
}

impl InRuns for Scan {
    type Found = Vec<Vec<Ranked>>;

    fn visit(&mut self, replica: &Replica, now_ms: u64, max: usize) -> bool {
        Scan::visit(self, &replica.ranked_at(now_ms), max)
    }

    fn finish(self) -> Self::Found {
        Scan::finish(self)
    }
}

/// The scans of every counter one process lets run at once.
#[derive(Debug, Clone)]
pub struct Scans {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Scans {
    /// At most `max` scans at once (at least 1).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// The lists `ask` ranks at `now_ms`, given `replica` with its top-K index current
    /// ([`with_ranked`]). A scan `ask` leaves runs as [`Scans::run`] runs it.
    pub async fn rank(
        &self,
        replica: &SharedReplica,
        now_ms: u64,
        ask: impl FnOnce(&Replica) -> Answer,
    ) -> Result<Vec<Vec<Ranked>>, ScansBusy> {
        match with_ranked(replica, now_ms, ask) {
            Answer::Ready(lists) => Ok(lists),
            Answer::Scan(scan) => self.run(replica, scan, now_ms).await,
        }
    }

    /// What `scan` finds over `replica` as it reads at `now_ms`, run off the runtime a run of
    /// counters per hold of the read lock; refused when `max` scans are under way.
    pub async fn run<S: InRuns>(
        &self,
        replica: &SharedReplica,
        scan: S,
        now_ms: u64,
    ) -> Result<S::Found, ScansBusy> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ScansBusy(self.max))?;
        let replica = replica.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            let found = scan_in_runs(&replica, scan, now_ms);
            drop(permit);
            found
        });
        match scanned.await {
            Ok(found) => Ok(found),
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

/// Runs `scan` over `replica`'s copies as they read at `now_ms`, holding the read lock for
/// [`SCAN_RUN`] counters at a time. Each counter is visited as it stood when its run was visited.
pub fn scan_in_runs<S: InRuns>(replica: &SharedReplica, mut scan: S, now_ms: u64) -> S::Found {
    while !scan.visit(&replica.read().expect("replica lock"), now_ms, SCAN_RUN) {}
    scan.finish()
}

#[cfg(test)]
mod tests {
    use geocount_model::{CounterId, SlotState};

    use super::*;
    use geocount_model::WindowQuery;
    use geocount_ranking::{LiveRanking, Scope};

    /// A replica of one slot holding `counters` counters, ranked by total.
    fn replica(counters: usize) -> SharedReplica {
        let replica = Replica::new(vec!["DC_A_VAL_0".to_owned()], &[]).shared();
        let mut held = replica.write().unwrap();
        held.index_top(vec![0], LiveRanking::new(300, 1_000));
        for n in 0..counters {
            let record = SlotState {
                value: n as i64,
                version: 1,
            }
            .into();
            let id = CounterId::new(format!("c{n:05}")).unwrap();
            held.merge(0, &id, &record);
        }
        drop(held);
        replica
    }

    /// The top 3 in a window no counter has hits in (a scan), or all-time (a walk).
    fn ask(window: Option<WindowQuery>) -> impl FnOnce(&Replica) -> Answer {
        move |replica: &Replica| {
            let mut index = replica.top_index().unwrap();
            index.rank(
                &[Scope::All],
                "",
                3,
                None,
                window,
                &replica.ranked_at(1_000_000),
            )
        }
    }

    /// Scans past the bound are refused at once; walks of the leaders never are.
    #[tokio::test]
    async fn scans_past_the_bound_are_refused_and_walks_never() {
        let replica = replica(3 * SCAN_RUN);
        let scans = Scans::new(1);
        let past = Some(WindowQuery { seconds: 60, at: 1 });
        assert_eq!(
            scans.rank(&replica, 1_000_000, ask(past)).await,
            Ok(vec![vec![]])
        );
        let held = scans.permits.clone().try_acquire_owned().unwrap();
        assert_eq!(
            scans.rank(&replica, 1_000_000, ask(past)).await,
            Err(ScansBusy(1))
        );
        let top = scans.rank(&replica, 1_000_000, ask(None)).await.unwrap();
        let ids: Vec<&str> = top[0].iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["c03071", "c03070", "c03069"]);
        drop(held);
        assert!(scans.rank(&replica, 1_000_000, ask(past)).await.is_ok());
    }
}
