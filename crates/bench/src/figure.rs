//! Repeated measurements of one figure (median and range), targets, and the table's rows.

use serde::Serialize;

/// What a figure counts, for formatting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Operations (writes, increments, requests) per second.
    PerSec,
    /// Milliseconds.
    Ms,
    /// Bytes.
    Bytes,
    /// A count of events.
    Count,
    /// CPU time per unit of wall time: cores kept busy.
    Cores,
    /// Microseconds (of CPU time, per write).
    Micros,
}

/// The repeats of one measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// What a sample counts.
    pub unit: Unit,
    /// Every sample, in the order taken.
    pub samples: Vec<f64>,
    /// The median of the samples.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
}

impl Figure {
    /// The figure of `samples` (at least one).
    pub fn new(unit: Unit, samples: Vec<f64>) -> Self {
        assert!(!samples.is_empty(), "a figure needs a sample");
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Self {
            unit,
            median,
            min: sorted[0],
            max: sorted[n - 1],
            samples,
        }
    }

    /// `median (min–max)`, or just the value for one sample.
    pub fn show(&self) -> String {
        let one = |v| show_value(self.unit, v);
        if self.samples.len() == 1 {
            one(self.median)
        } else {
            format!("{} ({}–{})", one(self.median), one(self.min), one(self.max))
        }
    }
}

/// A value with its unit, short: `1.23M/s`, `512k/s`, `3.4 ms`, `87 B`.
pub fn show_value(unit: Unit, value: f64) -> String {
    match unit {
        Unit::PerSec if value >= 1e6 => format!("{:.2}M/s", value / 1e6),
        Unit::PerSec if value >= 1e3 => format!("{:.1}k/s", value / 1e3),
        Unit::PerSec => format!("{value:.0}/s"),
        Unit::Ms if value >= 100.0 => format!("{value:.0} ms"),
        Unit::Ms => format!("{value:.2} ms"),
        Unit::Bytes => format!("{value:.0} B"),
        Unit::Count => format!("{value:.0}"),
        Unit::Cores => format!("{value:.2} cores"),
        Unit::Micros if value >= 10.0 => format!("{value:.1} µs"),
        Unit::Micros => format!("{value:.2} µs"),
    }
}

/// How a row's figure is judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The ratio geocount / peer (medians) must be at least this.
    RatioAtLeast(f64),
    /// The ratio geocount / peer (medians) must be at most this.
    RatioAtMost(f64),
    /// The figure's median must be below this.
    Below(f64),
    /// The figure's median must be at least this.
    AtLeast(f64),
    /// The figure's median must be at most this.
    AtMost(f64),
}

/// One line of the table: a geocount figure, its peer from the same run, and its target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// What was measured, and how.
    pub what: String,
    /// geocount's figure.
    pub geocount: Figure,
    /// What it is compared with, if anything.
    pub peer_name: Option<String>,
    /// The peer's figure.
    pub peer: Option<Figure>,
    /// geocount's median over the peer's median.
    pub ratio: Option<f64>,
    /// The target, if one applies.
    pub goal: Option<Goal>,
    /// Whether the target holds (`None` without one).
    pub holds: Option<bool>,
}

impl Row {
    /// A row without a peer.
    pub fn alone(what: impl Into<String>, geocount: Figure, goal: Option<Goal>) -> Self {
        Self::judged(what.into(), geocount, None, goal)
    }

    /// A row comparing `geocount` with `peer`.
    pub fn against(
        what: impl Into<String>,
        geocount: Figure,
        peer_name: impl Into<String>,
        peer: Figure,
        goal: Option<Goal>,
    ) -> Self {
        Self::judged(what.into(), geocount, Some((peer_name.into(), peer)), goal)
    }

    fn judged(
        what: String,
        geocount: Figure,
        peer: Option<(String, Figure)>,
        goal: Option<Goal>,
    ) -> Self {
        let ratio = peer
            .as_ref()
            .filter(|(_, p)| p.median > 0.0)
            .map(|(_, p)| geocount.median / p.median);
        let holds = goal.as_ref().map(|goal| match *goal {
            Goal::RatioAtLeast(least) => ratio.is_some_and(|r| r >= least),
            Goal::RatioAtMost(most) => ratio.is_some_and(|r| r <= most),
            Goal::Below(limit) => geocount.median < limit,
            Goal::AtLeast(least) => geocount.median >= least,
            Goal::AtMost(most) => geocount.median <= most,
        });
        let (peer_name, peer) = peer.unzip();
        Self {
            what,
            geocount,
            peer_name,
            peer,
            ratio,
            goal,
            holds,
        }
    }

    fn goal_text(&self) -> String {
        match &self.goal {
            None => "—".to_owned(),
            Some(Goal::RatioAtLeast(r)) => format!("≥ {r}×"),
            Some(Goal::RatioAtMost(r)) => format!("≤ {r}×"),
            Some(Goal::Below(v)) => format!("< {}", show_value(self.geocount.unit, *v)),
            Some(Goal::AtLeast(v)) => format!("≥ {}", show_value(self.geocount.unit, *v)),
            Some(Goal::AtMost(v)) => format!("≤ {}", show_value(self.geocount.unit, *v)),
        }
    }
}

/// The rows as a Markdown table.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| figure | geocount, median (range) | peer | peer, median (range) | ratio | target | holds |\n|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let peer = row.peer.as_ref().map_or("—".to_owned(), Figure::show);
        let ratio = row.ratio.map_or("—".to_owned(), |r| format!("{r:.2}×"));
        let holds = match row.holds {
            None => "—",
            Some(true) => "yes",
            Some(false) => "**no**",
        };
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            row.what,
            row.geocount.show(),
            row.peer_name.as_deref().unwrap_or("—"),
            peer,
            ratio,
            row.goal_text(),
            holds,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        let f = Figure::new(Unit::PerSec, vec![3.0, 1.0, 2.0]);
        assert_eq!((f.median, f.min, f.max), (2.0, 1.0, 3.0));
        let f = Figure::new(Unit::Ms, vec![4.0, 1.0]);
        assert_eq!(f.median, 2.5);
        assert_eq!(f.show(), "2.50 ms (1.00 ms–4.00 ms)");
        assert_eq!(
            Figure::new(Unit::PerSec, vec![1_500_000.0]).show(),
            "1.50M/s"
        );
    }

    #[test]
    fn rows_are_judged() {
        let ours = Figure::new(Unit::PerSec, vec![90.0]);
        let peer = Figure::new(Unit::PerSec, vec![100.0]);
        let row = Row::against(
            "x",
            ours.clone(),
            "p",
            peer.clone(),
            Some(Goal::RatioAtLeast(0.8)),
        );
        assert_eq!(row.holds, Some(true));
        let row = Row::against("x", ours.clone(), "p", peer, Some(Goal::RatioAtLeast(3.0)));
        assert_eq!(row.holds, Some(false));
        let lag = Figure::new(Unit::Ms, vec![350.0, 300.0, 420.0]);
        assert_eq!(
            Row::alone("lag", lag, Some(Goal::Below(400.0))).holds,
            Some(true)
        );
        let table = render_table(&[Row::alone("n", ours, None)]);
        assert!(
            table.ends_with("| n | 90/s | — | — | — | — | — |\n"),
            "{table}"
        );
    }
}
