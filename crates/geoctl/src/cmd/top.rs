//! `geoctl top`: the world's top K counters (`GET /topk`) or its trending ones
//! (`GET /trending`) at the global aggregator, or one datacenter's at its aggregator
//! (`--dc`), as a table for people: rank, id, value, and at the global tier each datacenter's
//! own value where the id ranks there too.
//!
//! In a terminal the table is redrawn in place every `--every` seconds until Ctrl-C; with
//! `--once`, or when standard output is not a terminal, each table is printed as plain lines
//! (`--once`: one, then exit). The global tier is asked with `allow_partial=true`: a stale
//! datacenter leaves the table marked partial rather than empty. In the refreshing view a
//! failed request is shown and retried at the next refresh; with `--once` it is the error.

use std::fmt::Write as _;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

use super::get::Ordered;
use crate::cluster::{ClusterClient, parse_body, status_error};
use crate::error::GeoctlError;

/// `--every` unless given, in seconds.
pub const DEFAULT_EVERY_SECS: u64 = 2;
/// `--k` unless given (the aggregators' own default).
pub const DEFAULT_K: u32 = 10;

/// What `geoctl top` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopOptions {
    /// Only ids starting with this; `None`: any (`/topk`), or the topology's one trending
    /// prefix (`--trending`).
    pub prefix: Option<String>,
    /// Rank by the hits of the last S seconds rather than all-time totals (`/topk` only).
    pub window: Option<u32>,
    /// How many to rank (`/topk` only).
    pub k: u32,
    /// The trending counters of the prefix rather than the top K.
    pub trending: bool,
    /// Ask this datacenter's aggregator rather than the global one.
    pub datacenter: Option<String>,
    /// Seconds between refreshes.
    pub every_secs: u64,
    /// Print one table and exit.
    pub once: bool,
    /// Redraw in place (standard output is a terminal and `--once` was not given).
    pub live: bool,
}

/// One ranked counter.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ranked {
    /// Its id.
    pub id: String,
    /// Its value (all-time or in the window).
    pub value: i128,
}

/// The window a ranking counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct RankWindow {
    /// Its length, seconds.
    pub seconds: u32,
    /// Its end, unix seconds.
    pub at: u64,
}

/// One datacenter's own ranking in a global answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DatacenterRanking {
    /// Its own list (`top` of `/topk`, `trending` of `/trending`).
    #[serde(alias = "trending")]
    pub top: Vec<Ranked>,
    /// How stale it is; `None`: never complete.
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered the global one.
    pub heard: bool,
}

/// A 200 answer of `/topk` or `/trending`, at either tier.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ranking {
    /// The replica that answered.
    #[serde(default)]
    pub replica: Option<usize>,
    /// The list, highest first (`top` of `/topk`, `trending` of `/trending`).
    #[serde(alias = "trending")]
    pub top: Vec<Ranked>,
    /// How many were asked for (`/topk`).
    #[serde(default)]
    pub k: Option<u32>,
    /// The prefix.
    pub prefix: String,
    /// The prefix's threshold (`/trending`).
    #[serde(default)]
    pub threshold: Option<i64>,
    /// The window counted, if any.
    #[serde(default)]
    pub window: Option<RankWindow>,
    /// The worst staleness; `None`: a part was never complete.
    pub staleness_ms: Option<u64>,
    /// Whether no part is stale.
    pub complete: bool,
    /// Each datacenter's own ranking (global tier only), in topology order.
    #[serde(default)]
    pub datacenters: Option<Ordered<DatacenterRanking>>,
}

/// Where a table came from, for its title.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `the global aggregator` or `USA_0's aggregator`.
    pub tier: String,
    /// The address that answered.
    pub address: String,
}

/// The prefix asked for: the given one, else `""` for `/topk`, else the topology's trending
/// prefix when it configures exactly one.
pub fn prefix_of(cluster: &ClusterClient, options: &TopOptions) -> Result<String, GeoctlError> {
    if let Some(prefix) = &options.prefix {
        return Ok(prefix.clone());
    }
    if !options.trending {
        return Ok(String::new());
    }
    let configured: Vec<&String> = cluster.topology().trending.thresholds.keys().collect();
    match configured.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(GeoctlError::InvalidArgument(
            "--trending: the topology configures no [trending] thresholds".to_owned(),
        )),
        many => Err(GeoctlError::InvalidArgument(format!(
            "--trending needs --prefix, one of {many:?}"
        ))),
    }
}

/// The path `options` asks for at the tier it asks (`global`: with `allow_partial=true`).
pub fn top_path(options: &TopOptions, prefix: &str, global: bool) -> String {
    let prefix = utf8_percent_encode(prefix, NON_ALPHANUMERIC);
    let mut path = if options.trending {
        format!("/trending?prefix={prefix}")
    } else {
        format!("/topk?k={}&prefix={prefix}", options.k)
    };
    if let (false, Some(seconds)) = (options.trending, options.window) {
        path.push_str(&format!("&window={seconds}"));
    }
    if global {
        path.push_str("&allow_partial=true");
    }
    path
}

/// Asks once: the ranking and where it came from.
async fn fetch(
    cluster: &ClusterClient,
    options: &TopOptions,
    prefix: &str,
) -> Result<(Ranking, Source), GeoctlError> {
    let (tier, (url, answer)) = match &options.datacenter {
        None => (
            "the global aggregator".to_owned(),
            cluster
                .get_any_global(&top_path(options, prefix, true))
                .await?,
        ),
        Some(name) => {
            let dc = (cluster.topology())
                .datacenter(name)
                .map_err(GeoctlError::InvalidArgument)?;
            let path = top_path(options, prefix, false);
            (
                format!("{name}'s aggregator"),
                cluster.get_any_aggregator(&dc.aggregators(), &path).await?,
            )
        }
    };
    if answer.status != hyper::StatusCode::OK {
        return Err(status_error(&url, &answer));
    }
    let ranking = parse_body(&url, &answer)?;
    // `<scheme>://<address><path>`: the address alone, for the title.
    let address = (url.split_once("://").map_or(url.as_str(), |(_, rest)| rest))
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    Ok((ranking, Source { tier, address }))
}

/// Unix seconds now.
fn unix_now() -> u64 {
    (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_secs())
}

/// Prints the table once, or refreshes it until Ctrl-C.
pub async fn run(
    cluster: &ClusterClient,
    options: &TopOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let prefix = prefix_of(cluster, options)?;
    if let Some(name) = &options.datacenter {
        // Checked once: a name the topology lacks is no reason to keep refreshing.
        (cluster.topology().datacenter(name)).map_err(GeoctlError::InvalidArgument)?;
    }
    if options.once {
        let (ranking, source) = fetch(cluster, options, &prefix).await?;
        out.write_all(render_top(&ranking, &source, options, unix_now()).as_bytes())?;
        return Ok(());
    }
    let every = Duration::from_secs(options.every_secs);
    let screen = options.live.then(console::Term::stdout);
    if let Some(term) = &screen {
        term.clear_screen()?;
        term.hide_cursor()?;
    }
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One listener for the whole run: a Ctrl-C during a request is not lost.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let outcome = loop {
        tokio::select! {
            _ = &mut interrupted => break Ok(()),
            _ = ticks.tick() => {}
        }
        let fetched = tokio::select! {
            _ = &mut interrupted => break Ok(()),
            fetched = fetch(cluster, options, &prefix) => fetched,
        };
        let text = match fetched {
            Ok((ranking, source)) => render_top(&ranking, &source, options, unix_now()),
            Err(error) => format!("{}  geoctl top: {error}\n", clock(unix_now())),
        };
        let drawn = match &screen {
            Some(term) => draw(term, &text),
            None => writeln!(out, "{text}").and_then(|()| out.flush()),
        };
        if let Err(error) = drawn {
            break Err(error.into());
        }
    };
    if let Some(term) = &screen {
        term.show_cursor()?;
    }
    outcome
}

/// Redraws the screen from its top-left corner with `text`, cut to the terminal's size.
fn draw(term: &console::Term, text: &str) -> std::io::Result<()> {
    let (rows, columns) = term.size();
    term.move_cursor_to(0, 0)?;
    for line in text.lines().take(usize::from(rows).saturating_sub(1)) {
        term.clear_line()?;
        let cut: String = line.chars().take(usize::from(columns)).collect();
        term.write_line(&cut)?;
    }
    term.clear_to_end_of_screen()?;
    term.flush()
}

/// `HH:MM:SS UTC` of unix second `now`.
fn clock(now: u64) -> String {
    let day = now % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        day / 3_600,
        day % 3_600 / 60,
        day % 60
    )
}

/// A staleness for people: `42 ms`, `never heard`, `never complete`.
fn staleness(ms: Option<u64>, heard: bool) -> String {
    match (ms, heard) {
        (Some(ms), _) => format!("{ms} ms"),
        (None, false) => "never heard".to_owned(),
        (None, true) => "never complete".to_owned(),
    }
}

/// The table of one answer: a title, the ranking, and at the global tier each datacenter's own
/// value (`-` where the id is not in its own list) and staleness.
pub fn render_top(ranking: &Ranking, source: &Source, options: &TopOptions, now: u64) -> String {
    let what = match (ranking.threshold, ranking.k) {
        (Some(threshold), _) => format!("trending {:?}: at least {threshold}", ranking.prefix),
        (None, k) => format!("top {} of {:?}", k.unwrap_or(options.k), ranking.prefix),
    };
    let when = match ranking.window {
        Some(w) => format!("the last {} s", w.seconds),
        None => "all time".to_owned(),
    };
    let replica = ranking
        .replica
        .map_or(String::new(), |r| format!(", replica {r}"));
    let complete = if ranking.complete {
        "complete"
    } else {
        "PARTIAL (stale parts count with their last known values)"
    };
    let refresh = if options.once {
        String::new()
    } else {
        format!(", every {} s", options.every_secs)
    };
    let mut text = format!(
        "{what}, {when}: {} {}{replica}\n{complete}, staleness {}, {}{refresh}\n\n",
        source.tier,
        source.address,
        staleness(ranking.staleness_ms, true),
        clock(now),
    );
    let parts = ranking.datacenters.as_ref().map_or(&[][..], |d| &d.0[..]);
    let mut header = vec!["RANK".to_owned(), "ID".to_owned(), "VALUE".to_owned()];
    header.extend(parts.iter().map(|(name, _)| name.clone()));
    let mut rows = vec![header];
    for (rank, entry) in ranking.top.iter().enumerate() {
        let mut row = vec![
            (rank + 1).to_string(),
            entry.id.clone(),
            entry.value.to_string(),
        ];
        row.extend(parts.iter().map(|(_, part)| {
            (part.top.iter().find(|own| own.id == entry.id))
                .map_or("-".to_owned(), |own| own.value.to_string())
        }));
        rows.push(row);
    }
    text.push_str(&table(&rows));
    if ranking.top.is_empty() {
        text.push_str(match ranking.threshold {
            Some(_) => "(no counter reaches the threshold)\n",
            None => "(no counter ranks)\n",
        });
    }
    if !parts.is_empty() {
        let each: Vec<String> = (parts.iter())
            .map(|(name, part)| format!("{name} {}", staleness(part.staleness_ms, part.heard)))
            .collect();
        let own = if ranking.threshold.is_some() {
            "not trending there on its own"
        } else {
            "not in that datacenter's own list"
        };
        let _ = write!(text, "\nstaleness: {}\n-: {own}\n", each.join(", "));
    }
    text
}

/// `rows` as aligned columns two spaces apart: the first row (the header) and the ID column
/// (the second) left-aligned, the others right-aligned.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            (rows.iter().filter_map(|r| r.get(c)))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for (r, row) in rows.iter().enumerate() {
        let cells: Vec<String> = (row.iter().zip(&widths).enumerate())
            .map(|(c, (cell, &width))| {
                if r == 0 || c == 1 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> TopOptions {
        TopOptions {
            prefix: None,
            window: None,
            k: DEFAULT_K,
            trending: false,
            datacenter: None,
            every_secs: DEFAULT_EVERY_SECS,
            once: true,
            live: false,
        }
    }

    fn source() -> Source {
        Source {
            tier: "the global aggregator".into(),
            address: "127.0.0.1:7000".into(),
        }
    }

    #[test]
    fn paths_carry_only_what_each_route_takes() {
        let windowed = TopOptions {
            window: Some(300),
            k: 3,
            ..options()
        };
        assert_eq!(
            top_path(&windowed, "#", true),
            "/topk?k=3&prefix=%23&window=300&allow_partial=true"
        );
        assert_eq!(top_path(&options(), "", false), "/topk?k=10&prefix=");
        let trending = TopOptions {
            trending: true,
            ..windowed
        };
        assert_eq!(top_path(&trending, "#", false), "/trending?prefix=%23");
    }

    #[test]
    fn the_trending_prefix_defaults_to_the_topologys_only_one() {
        let cluster = crate::cluster::tests::cluster();
        let trending = TopOptions {
            trending: true,
            ..options()
        };
        // The fixture configures no threshold.
        let error = prefix_of(&cluster, &trending).unwrap_err();
        assert!(error.to_string().contains("no [trending]"), "{error}");
        assert_eq!(prefix_of(&cluster, &options()).unwrap(), "");
        let given = TopOptions {
            prefix: Some("#".into()),
            ..trending
        };
        assert_eq!(prefix_of(&cluster, &given).unwrap(), "#");
    }

    #[test]
    fn the_world_table_shows_each_datacenters_own_value() {
        let answer = r##"{"replica":0,"top":[{"id":"#rust","value":70},{"id":"#go","value":55},
            {"id":"#zig","value":5}],"k":3,"prefix":"#","window":{"seconds":300,"at":1700000000},
            "staleness_ms":41,"complete":true,"datacenters":{
            "USA_0":{"top":[{"id":"#go","value":30},{"id":"#rust","value":20},{"id":"#zig","value":5}],
                     "staleness_ms":41,"heard":true},
            "ASIA_0":{"top":[{"id":"#rust","value":50},{"id":"#go","value":25}],
                      "staleness_ms":38,"heard":true},
            "EUROPE_0":{"top":[],"staleness_ms":null,"heard":false}}}"##;
        let ranking: Ranking = serde_json::from_str(answer).unwrap();
        let expected = "\
top 3 of \"#\", the last 300 s: the global aggregator 127.0.0.1:7000, replica 0
complete, staleness 41 ms, 22:13:20 UTC

RANK  ID     VALUE  USA_0  ASIA_0  EUROPE_0
   1  #rust     70     20      50         -
   2  #go       55     30      25         -
   3  #zig       5      5       -         -

staleness: USA_0 41 ms, ASIA_0 38 ms, EUROPE_0 never heard
-: not in that datacenter's own list
";
        assert_eq!(
            render_top(&ranking, &source(), &options(), 1_700_000_000),
            expected
        );
    }

    #[test]
    fn a_datacenters_trending_table_has_no_datacenter_columns() {
        let answer = r##"{"replica":1,"prefix":"#","threshold":50,
            "window":{"seconds":300,"at":1700000000},"trending":[],"staleness_ms":null,
            "complete":false}"##;
        let ranking: Ranking = serde_json::from_str(answer).unwrap();
        let source = Source {
            tier: "ASIA_0's aggregator".into(),
            address: "127.0.0.1:7200".into(),
        };
        let refreshing = TopOptions {
            trending: true,
            once: false,
            ..options()
        };
        let expected = "\
trending \"#\": at least 50, the last 300 s: ASIA_0's aggregator 127.0.0.1:7200, replica 1
PARTIAL (stale parts count with their last known values), staleness never complete, 00:00:59 UTC, every 2 s

RANK  ID  VALUE
(no counter reaches the threshold)
";
        assert_eq!(render_top(&ranking, &source, &refreshing, 59), expected);
    }

    #[test]
    fn clocks_are_utc_times_of_day() {
        assert_eq!(clock(0), "00:00:00 UTC");
        assert_eq!(clock(86_399), "23:59:59 UTC");
        assert_eq!(clock(86_400 + 3_661), "01:01:01 UTC");
    }
}
