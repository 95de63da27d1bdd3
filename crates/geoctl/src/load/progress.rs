//! The live progress bar: elapsed time against the run's duration, acknowledged writes, the
//! write rate over the last second, and failed writes. Drawn on standard output only when it is
//! a terminal.

use std::collections::VecDeque;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::load::report::grouped;

/// How far back the live rate looks.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// The write rate over the last [`RATE_WINDOW`], from `(elapsed, total so far)` samples.
#[derive(Debug, Default)]
pub struct RateWindow {
    samples: VecDeque<(Duration, u64)>,
}

impl RateWindow {
    /// Adds a sample and returns the rate since the oldest sample still inside the window
    /// (per second; 0 until two samples are apart in time).
    pub fn push(&mut self, at: Duration, total: u64) -> f64 {
        self.samples.push_back((at, total));
        // Keep the newest sample at least RATE_WINDOW old as the base.
        while self.samples.len() > 2 && at - self.samples[1].0 >= RATE_WINDOW {
            self.samples.pop_front();
        }
        let (from, base) = self.samples[0];
        let span = (at - from).as_secs_f64();
        if span > 0.0 {
            total.saturating_sub(base) as f64 / span
        } else {
            0.0
        }
    }
}

/// The bar's message.
pub fn live_message(acknowledged: u64, rate: f64, failed: u64) -> String {
    format!(
        "{} writes  {} writes/s  {} failed",
        grouped(acknowledged),
        grouped(rate.round() as u64),
        grouped(failed)
    )
}

/// The progress bar of one run.
#[derive(Debug)]
pub struct LoadProgress {
    bar: ProgressBar,
    length_ms: u64,
}

impl LoadProgress {
    /// A bar over `duration`, drawn on standard output if `visible`, else hidden.
    pub fn new(visible: bool, duration: Duration) -> Self {
        let target = if visible {
            ProgressDrawTarget::stdout()
        } else {
            ProgressDrawTarget::hidden()
        };
        let length_ms = duration.as_millis() as u64;
        let bar = ProgressBar::with_draw_target(Some(length_ms), target);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        Self { bar, length_ms }
    }

    /// Shows `elapsed` of the run and `message`.
    pub fn update(&self, elapsed: Duration, message: String) {
        self.bar
            .set_position((elapsed.as_millis() as u64).min(self.length_ms));
        self.bar.set_message(message);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_looks_back_about_one_second() {
        let mut window = RateWindow::default();
        let ms = Duration::from_millis;
        assert_eq!(window.push(ms(0), 0), 0.0);
        assert_eq!(window.push(ms(250), 250), 1000.0);
        assert_eq!(window.push(ms(500), 500), 1000.0);
        assert_eq!(window.push(ms(1000), 1000), 1000.0);
        // The load speeds up: the window forgets the slow start.
        assert_eq!(window.push(ms(1250), 1500), 1250.0);
        assert_eq!(window.push(ms(2250), 4500), 3000.0);
        assert_eq!(window.push(ms(3250), 4500), 0.0);
    }

    #[test]
    fn the_message_groups_digits() {
        assert_eq!(
            live_message(1_234_567, 98_765.4, 0),
            "1,234,567 writes  98,765 writes/s  0 failed"
        );
    }

    #[test]
    fn a_hidden_bar_takes_updates() {
        let bar = LoadProgress::new(false, Duration::from_secs(1));
        bar.update(Duration::from_secs(2), live_message(1, 1.0, 0));
        bar.finish();
    }
}
