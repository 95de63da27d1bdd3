//! How long a restore waits for more pages: until `restore_timeout_ms` passed with no page from
//! any source. One deadline, pushed back only by the pages that come, so that nothing else the
//! restore waits on meanwhile (its progress report, a source's task ending) restarts it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// When a restore last received a page, from any source.
#[derive(Debug)]
pub struct LastPage(Mutex<Instant>);

impl Default for LastPage {
    /// Counting from now.
    fn default() -> Self {
        Self(Mutex::new(Instant::now()))
    }
}

impl LastPage {
    /// A page came now.
    pub fn received(&self) {
        *self.0.lock().expect("last page lock") = Instant::now();
    }

    /// Resolves once `settle` has passed since the last page.
    pub async fn settled(&self, settle: Duration) {
        loop {
            let deadline = *self.0.lock().expect("last page lock") + settle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages push the deadline back; a timer that fires more often than the settle (the
    /// restore's report) does not.
    #[tokio::test]
    async fn the_settle_ends_its_length_after_the_last_page() {
        let settle = Duration::from_millis(150);
        let last = LastPage::default();
        let mut last_at = Instant::now();
        let settled = last.settled(settle);
        tokio::pin!(settled);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let mut pages = 0;
        let ended = loop {
            tokio::select! {
                () = &mut settled => break Instant::now(),
                _ = tick.tick() => {
                    if pages < 4 {
                        last.received();
                        last_at = Instant::now();
                        pages += 1;
                    }
                }
            }
        };
        assert_eq!(pages, 4);
        let after = ended - last_at;
        assert!(after >= settle, "{after:?}");
        assert!(after < settle + Duration::from_secs(1), "{after:?}");
    }
}
