//! What a tier's thread does when it runs out of work: it hands the memory its allocator holds
//! back for reuse to the operating system, at most once a second per thread.
//!
//! mimalloc returns a freed page to the system only some time after the free, and only when the
//! thread that owns the page calls into it again. A thread that goes idle right after a burst
//! of large batches keeps tens of megabytes resident that nothing uses (docs/architecture.md,
//! "Memory per counter"). Every runtime a tier builds calls [`thread_parked`] when one of its
//! threads parks; the binary says with [`release_memory_with`] how its allocator gives memory
//! back. Tests that run a tier in-process register nothing, and parking then does nothing.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The least time between two releases on one thread: a release walks the thread's whole
/// heap, so a busy thread that parks thousands of times a second must not do it every time.
pub const RELEASE_INTERVAL: Duration = Duration::from_secs(1);

static RELEASE: OnceLock<fn()> = OnceLock::new();

thread_local! {
    static LAST_RELEASE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Makes `release` what a parking thread calls (the first registration wins).
pub fn release_memory_with(release: fn()) {
    let _ = RELEASE.set(release);
}

/// The hook of every tier runtime's `on_thread_park`: runs the registered release when this
/// thread has not run it for [`RELEASE_INTERVAL`].
pub fn thread_parked() {
    let Some(release) = RELEASE.get() else {
        return;
    };
    let now = Instant::now();
    let due = LAST_RELEASE.with(|last| {
        let due = last
            .get()
            .is_none_or(|at| now.duration_since(at) >= RELEASE_INTERVAL);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        release();
    }
}

/// The release for a binary whose global allocator is mimalloc: collects the calling thread's
/// heap and returns its free pages to the system now rather than after mimalloc's purge delay.
#[allow(unsafe_code)]
pub fn release_mimalloc_memory() {
    // SAFETY: `mi_collect` takes no pointers and only walks the calling thread's own heap and
    // the process's arenas; it is safe to call from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static RELEASES: AtomicUsize = AtomicUsize::new(0);

    fn count_release() {
        RELEASES.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_thread_releases_at_most_once_an_interval() {
        release_memory_with(count_release);
        std::thread::spawn(|| {
            for _ in 0..1_000 {
                thread_parked();
            }
        })
        .join()
        .expect("the parking thread");
        assert_eq!(RELEASES.load(Ordering::SeqCst), 1);
        // Another thread keeps its own interval.
        std::thread::spawn(thread_parked)
            .join()
            .expect("the other thread");
        assert_eq!(RELEASES.load(Ordering::SeqCst), 2);
    }
}
