//! The access table of docs/operations.md, "Access", observed: with `[auth]` (a read-only, a
//! write-only and an admin token, a cluster secret), every operation of every tier's
//! `/openapi.json` (each tier's unit test holds its document to its router, so no route is
//! missed), each change a shard node takes once more marked as forwarded, and every command the
//! RESP port lists (`COMMAND LIST`) is tried with no token and with each token, as a valid
//! request. A refused one must change nothing; the admin token's must succeed wherever it is
//! let in. The outcomes are rendered as Markdown and must be what the document holds between
//! its markers; `UPDATE_ACCESS_TABLE=1` writes them there.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use geocount_model::wire::{BatchRequest, ItemBatchRequest, ItemEntry, POSTCARD_CONTENT_TYPE};
use geocount_net::{Connector, Stream, tcp_connector};
use geocount_test_support::access::{ADMIN, FORWARDED_HEADER, READER, SECRET, WRITER, auth_toml};
use geocount_test_support::api::entry;
use geocount_test_support::openapi::{self, Documented};
use geocount_test_support::{Api, Method, TestCluster, TestTopology, eventually, tls};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The callers, as the table's columns name them, and the token each sends.
const CALLERS: [(&str, Option<&str>); 4] = [
    ("no token", None),
    ("`read`", Some(READER)),
    ("`write`", Some(WRITER)),
    ("`admin`", Some(ADMIN)),
];

/// What each caller got: `allowed` (past the access check), or the refusal.
type Outcomes = [String; 4];

const ALLOWED: &str = "allowed";
const DC: &str = "USA_0";
const SLOT: &str = "DC_USA_0_VAL_0";
/// The counter the aggregators' routes name, known at every tier.
const SEEN: &str = "access:seen";
const BEGIN: &str = "<!-- access-table:begin -->";
const END: &str = "<!-- access-table:end -->";
const UPDATE: &str = "UPDATE_ACCESS_TABLE";

/// Every command the RESP port answers, as tried: `{key}` is a sum counter, `{hll}` a unique
/// one, `{token}` the admin token. Subcommands have a line each.
const COMMANDS: &[&[&str]] = &[
    &["PING"],
    &["ECHO", "hi"],
    &["HELLO", "3"],
    &["HELLO", "3", "AUTH", "default", "{token}"],
    &["AUTH", "{token}"],
    &["SELECT", "0"],
    &["CLIENT", "ID"],
    &["CLIENT", "SETNAME", "probe"],
    &["CLIENT", "GETNAME"],
    &["CLIENT", "SETINFO", "lib-name", "probe"],
    &["COMMAND"],
    &["COMMAND", "COUNT"],
    &["COMMAND", "INFO", "get"],
    &["COMMAND", "DOCS"],
    &["COMMAND", "LIST"],
    &["QUIT"],
    &["INFO"],
    &["CONFIG", "GET", "maxclients"],
    &["INCR", "{key}"],
    &["INCRBY", "{key}", "2"],
    &["DECR", "{key}"],
    &["DECRBY", "{key}", "2"],
    &["PFADD", "{hll}", "b"],
    &["DEL", "{key}"],
    &["UNLINK", "{key}"],
    &["EXPIRE", "{key}", "100"],
    &["PEXPIRE", "{key}", "100000"],
    &["TTL", "{key}"],
    &["PTTL", "{key}"],
    &["PERSIST", "{key}"],
    &["GET", "{key}"],
    &["MGET", "{key}"],
    &["PFCOUNT", "{hll}"],
];

/// The counters one caller's request works on: made afresh for it, so what one caller changes
/// (a `DEL`, or a create wrongly let through) leaves the next caller's request alone.
struct Counters {
    /// A bounded sum counter (so it has rights) holding 5, with no expiry.
    sum: String,
    /// A unique counter holding one item.
    hll: String,
    /// An id no counter has: what a `POST /counter` makes.
    new: String,
}

/// The running cluster and how to reach its shard node.
struct Cluster {
    cluster: TestCluster,
    admin: Api,
    connector: Connector,
    resp: SocketAddr,
    /// The admin token's RESP connection that reads the state back.
    reader: Option<Resp>,
    made: usize,
}

impl Cluster {
    async fn start() -> Self {
        let topology = TestTopology::with_resp(
            &[(DC, 1)],
            "restore_timeout_ms = 200",
            &format!(
                "{}\n[trending]\nwindow_seconds = 300\nthresholds = {{\"#\" = 5}}\n",
                auth_toml(SECRET)
            ),
        );
        let cluster = TestCluster::start(topology).await;
        let connector = match cluster.topology.topology.tls {
            Some(_) => tls::test_ca().connector(),
            None => tcp_connector(),
        };
        let resp = cluster.topology.resp_addr(DC, 0);
        let admin = cluster.shards[0][0].api().with_token(ADMIN);
        let mut cluster = Self {
            cluster,
            admin,
            connector,
            resp,
            reader: None,
            made: 0,
        };
        eventually(Duration::from_secs(10), "the RESP port answers", || async {
            let mut connection = cluster.connect(Some(ADMIN)).await?;
            (connection.line(&["PING"]).await? == "+PONG").then_some(())
        })
        .await;
        cluster.reader = cluster.connect(Some(ADMIN)).await;
        cluster
    }

    /// A RESP connection, authenticated with `token` when one is given.
    async fn connect(&self, token: Option<&str>) -> Option<Resp> {
        let host = self.resp.ip().to_string();
        let stream = self.connector.connect(&host, self.resp.port()).await.ok()?;
        let mut connection = Resp(BufReader::new(stream));
        if let Some(token) = token {
            let answer = connection.line(&["AUTH", token]).await?;
            assert_eq!(answer, "+OK", "AUTH with a configured token");
        }
        Some(connection)
    }

    /// Fresh counters for the next request, made by the admin token.
    async fn counters(&mut self) -> Counters {
        self.made += 1;
        let n = self.made;
        let counters = Counters {
            sum: format!("access:{n}"),
            hll: format!("access:{n}:hll"),
            new: format!("access:{n}:new"),
        };
        self.admin.created(bounded(&counters.sum)).await;
        assert_eq!(self.admin.add(&counters.sum, 5).await.unwrap().0, 200);
        self.admin
            .created(json!({"id": counters.hll, "type": "unique"}))
            .await;
        let item = Some(json!({"item": "a"}));
        let (code, body) = self
            .admin
            .write(&counters.hll, "INCREMENT", item, None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{body}");
        counters
    }

    /// What the shard node holds of `counters`: each one's slot (status and value) and its
    /// expiry (`TTL`: -2 none such, -1 no expiry, or that it expires).
    async fn state(&mut self, counters: &Counters) -> Vec<(u16, Value, String)> {
        let mut state = Vec::new();
        let connection = self.reader.as_mut().expect("RESP connection");
        for id in [&counters.sum, &counters.hll, &counters.new] {
            let (code, body) = self.admin.read(id).await;
            let ttl = connection.line(&["TTL", id]).await.expect("TTL answered");
            let ttl = if ttl.starts_with(":-") {
                ttl
            } else {
                "expires".to_owned()
            };
            state.push((code, body["value"].clone(), ttl));
        }
        state
    }
}

/// The description of a bounded sum counter `id` with a history: the routes of its rights and
/// of its history answer for it.
fn bounded(id: &str) -> Value {
    json!({"id": id, "min": -1_000_000, "max": 1_000_000,
           "history": [{"stepSeconds": 60, "keepSeconds": 3600}]})
}

/// A RESP connection, read line by line.
struct Resp(BufReader<Box<dyn Stream>>);

impl Resp {
    /// Sends `args` as one command; the first line of its reply, without its line end.
    async fn line(&mut self, args: &[&str]) -> Option<String> {
        let mut frame = format!("*{}\r\n", args.len());
        for arg in args {
            frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.0.write_all(frame.as_bytes()).await.ok()?;
        self.next_line().await
    }

    async fn next_line(&mut self) -> Option<String> {
        let mut line = Vec::new();
        let read = self.0.read_until(b'\n', &mut line);
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("a reply within 10 s")
            .ok()?;
        let line = String::from_utf8_lossy(&line);
        Some(line.trim_end_matches("\r\n").to_owned())
    }

    /// The names `COMMAND LIST` answers.
    async fn command_list(&mut self) -> BTreeSet<String> {
        let head = self.line(&["COMMAND", "LIST"]).await.expect("a reply");
        let count: usize = head
            .strip_prefix('*')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("COMMAND LIST answered {head}"));
        let mut names = BTreeSet::new();
        for _ in 0..count {
            let length = self.next_line().await.expect("a name's length");
            assert!(length.starts_with('$'), "{length}");
            names.insert(self.next_line().await.expect("a name"));
        }
        names
    }
}

/// The outcome of an HTTP answer: 401 and 403 are refusals, anything else got past the check.
fn http_outcome(status: u16) -> String {
    match status {
        401 | 403 => status.to_string(),
        _ => ALLOWED.to_owned(),
    }
}

/// The outcome of a RESP reply's first line: `NOAUTH` and `NOPERM` are refusals.
fn resp_outcome(line: &str) -> String {
    ["NOAUTH", "NOPERM"]
        .into_iter()
        .find(|word| line.starts_with(&format!("-{word}")))
        .map_or_else(|| ALLOWED.to_owned(), |word| format!("`{word}`"))
}

/// Whether `operation` is a client route: neither open (`security: []`) nor one between tiers.
fn for_clients(operation: &Documented<'_>) -> bool {
    operation.operation["security"].is_null()
}

/// The headers and body that make `operation` a valid request on `counters`: the document's
/// JSON example (a new counter's id in place of its example's), or the postcard batch it
/// takes. A route between tiers gets none: clients are refused before its body is read.
fn request(
    operation: &Documented<'_>,
    counters: &Counters,
) -> (Vec<(&'static str, &'static str)>, Vec<u8>) {
    let postcard = |body: Vec<u8>| (vec![("content-type", POSTCARD_CONTENT_TYPE)], body);
    match operation.postcard_message() {
        Some("BatchRequest") => postcard(
            postcard::to_allocvec(&BatchRequest {
                entries: vec![entry(&counters.sum, 1)],
            })
            .unwrap(),
        ),
        Some("ItemBatchRequest") => postcard(
            postcard::to_allocvec(&ItemBatchRequest {
                entries: vec![ItemEntry {
                    id: &counters.hll,
                    item: "b",
                    idempotency_key: None,
                    timestamp: None,
                }],
            })
            .unwrap(),
        ),
        _ => {
            let mut operation = operation.clone();
            if let Some(id) = operation.json.as_mut().and_then(|body| body.get_mut("id")) {
                *id = json!(counters.new);
            }
            operation.json_body()
        }
    }
}

/// Tries every operation of the tier behind `api` with every caller; one row each, and one
/// more for each change a shard node takes marked as forwarded by another.
async fn http_rows(cluster: &mut Cluster, tier: &'static str, api: &Api) -> Vec<HttpRow> {
    let (status, doc) = api.get_json("/openapi.json").await;
    assert_eq!(status, 200, "{tier}: {doc}");
    let mut rows = Vec::new();
    let shard = tier == TIERS[0];
    for operation in openapi::operations(&doc, "{id}", SLOT) {
        let changes = operation.method != Method::GET && for_clients(&operation);
        for forwarded in [false, true] {
            if forwarded && !(shard && changes) {
                continue;
            }
            let outcomes = try_callers(cluster, tier, api, &operation, forwarded).await;
            rows.push(HttpRow {
                path: operation.path.to_owned(),
                method: operation.method.to_string(),
                forwarded,
                tier,
                outcomes,
            });
        }
    }
    rows
}

/// Sends `operation` to `api` as every caller, marked as forwarded when `forwarded`: what
/// each got. A refused request must change nothing; one let through as admin must succeed.
async fn try_callers(
    cluster: &mut Cluster,
    tier: &str,
    api: &Api,
    operation: &Documented<'_>,
    forwarded: bool,
) -> Outcomes {
    let mut outcomes = Outcomes::default();
    for (column, (caller, token)) in CALLERS.iter().enumerate() {
        let counters = cluster.counters().await;
        // The aggregators know only a counter that has reached them.
        let id = if tier == TIERS[0] {
            &counters.sum
        } else {
            SEEN
        };
        let url = operation.url.replace("{id}", id);
        let before = cluster.state(&counters).await;
        let api = token.map_or_else(|| api.clone(), |token| api.clone().with_token(token));
        let (mut headers, body) = request(operation, &counters);
        if forwarded {
            headers.push((FORWARDED_HEADER, "1"));
        }
        let method = &operation.method;
        let answer = api
            .send(method.clone(), &url, &headers, body)
            .await
            .unwrap_or_else(|e| panic!("{tier} {method} {url}: {e}"));
        let status = answer.status.as_u16();
        let outcome = http_outcome(status);
        let said = || {
            format!(
                "{tier} {method} {url} {headers:?} as {caller}: {status} {}",
                String::from_utf8_lossy(&answer.body)
            )
        };
        if outcome != ALLOWED {
            assert!(answer.json()["error"].is_string(), "{}", said());
            let after = cluster.state(&counters).await;
            assert_eq!(after, before, "changed by {}", said());
        } else if *token == Some(ADMIN) {
            assert!(
                answer.status.is_success(),
                "not a valid request: {}",
                said()
            );
        }
        outcomes[column] = outcome;
    }
    outcomes
}

/// Tries every command of [`COMMANDS`] with every caller, after checking that they are the
/// commands the RESP port lists; one row each.
async fn resp_rows(cluster: &mut Cluster) -> Vec<(String, Outcomes)> {
    let mut connection = cluster.connect(Some(ADMIN)).await.expect("RESP connection");
    let listed = connection.command_list().await;
    let tried: BTreeSet<String> = COMMANDS.iter().map(|args| args[0].to_lowercase()).collect();
    assert_eq!(tried, listed, "COMMANDS is not what COMMAND LIST answers");
    let mut rows = Vec::new();
    for template in COMMANDS {
        let mut outcomes = Outcomes::default();
        for (column, (caller, token)) in CALLERS.iter().enumerate() {
            let counters = cluster.counters().await;
            let args: Vec<&str> = template
                .iter()
                .map(|arg| match *arg {
                    "{key}" => counters.sum.as_str(),
                    "{hll}" => counters.hll.as_str(),
                    "{token}" => ADMIN,
                    arg => arg,
                })
                .collect();
            let before = cluster.state(&counters).await;
            let mut connection = cluster.connect(*token).await.expect("RESP connection");
            let reply = connection.line(&args).await.expect("a reply");
            let outcome = resp_outcome(&reply);
            let said = || format!("{template:?} as {caller}: {reply}");
            if outcome != ALLOWED {
                assert_eq!(
                    cluster.state(&counters).await,
                    before,
                    "changed by {}",
                    said()
                );
            }
            if *token == Some(ADMIN) {
                assert!(
                    !reply.starts_with(['-', '!']),
                    "not a valid command: {}",
                    said()
                );
            }
            outcomes[column] = outcome;
        }
        let shown: Vec<&str> = template
            .iter()
            .map(|arg| match *arg {
                "{key}" | "{hll}" => "key",
                "{token}" => "token",
                arg => arg,
            })
            .collect();
        rows.push((format!("`{}`", shown.join(" ")), outcomes));
    }
    rows
}

/// One route at one tier, as tried, and each caller's outcome.
struct HttpRow {
    path: String,
    method: String,
    /// Marked `x-geocount-forwarded`, as a shard node forwards a change to another.
    forwarded: bool,
    tier: &'static str,
    outcomes: Outcomes,
}

/// A line of the table: a route's path and method, and whether it was marked as forwarded.
type RouteKey<'a> = (&'a str, &'a str, bool);

/// The tiers named in the table, in this order.
const TIERS: [&str; 3] = ["shard node", "datacenter aggregator", "global aggregator"];

/// The tiers that answer a route alike, as the table's "at" column says them.
fn at(tiers: &[&str]) -> String {
    match tiers {
        [_, _, _] => "every tier".to_owned(),
        [a, b] if [*a, *b] == TIERS[1..] => "both aggregators".to_owned(),
        tiers => tiers.join(", "),
    }
}

/// The table's Markdown: one line per route and outcomes (by path, then method), naming the
/// tiers that answer so, then one per command.
fn render(http: &[HttpRow], resp: &[(String, Outcomes)]) -> String {
    let heads = CALLERS.map(|(head, _)| head).join(" | ");
    // Rows alike but for their tier, merged.
    let mut merged: Vec<(RouteKey<'_>, Vec<&str>, &Outcomes)> = Vec::new();
    for row in http {
        let key = (row.path.as_str(), row.method.as_str(), row.forwarded);
        match merged
            .iter_mut()
            .find(|(k, _, o)| (*k, *o) == (key, &row.outcomes))
        {
            Some((_, tiers, _)) => tiers.push(row.tier),
            None => merged.push((key, vec![row.tier], &row.outcomes)),
        }
    }
    merged.sort_by_key(|(key, _, _)| *key);
    let mut text = format!(
        "<!-- Written by tests/access_table.rs ({UPDATE}=1); do not edit by hand. -->\n\n\
         | route | at | {heads} |\n|---|---|---|---|---|---|\n"
    );
    for ((path, method, forwarded), tiers, outcomes) in merged {
        let mark = if forwarded {
            format!(" marked `{FORWARDED_HEADER}`")
        } else {
            String::new()
        };
        let (at, outcomes) = (at(&tiers), outcomes.join(" | "));
        text.push_str(&format!(
            "| `{method} {path}`{mark} | {at} | {outcomes} |\n"
        ));
    }
    text.push_str(&format!(
        "\n| Redis command (shard node) | {heads} |\n|---|---|---|---|---|\n"
    ));
    for (command, outcomes) in resp {
        text.push_str(&format!("| {command} | {} |\n", outcomes.join(" | ")));
    }
    text
}

#[tokio::test]
async fn every_route_and_command_answers_each_token_as_the_access_table_says() {
    let mut cluster = Cluster::start().await;
    cluster.admin.created(bounded(SEEN)).await;
    assert_eq!(cluster.admin.add(SEEN, 3).await.unwrap().0, 200);
    let tiers = [
        cluster.cluster.shards[0][0].api(),
        cluster.cluster.aggregator(0).api(),
        cluster.cluster.global.api(),
    ];
    for api in &tiers[1..] {
        let api = api.clone().with_token(ADMIN);
        api.read_until(
            Duration::from_secs(10),
            &format!("/counter/{SEEN}"),
            |code, _| code == 200,
        )
        .await;
    }
    let mut http = Vec::new();
    for (tier, api) in TIERS.into_iter().zip(&tiers) {
        http.extend(http_rows(&mut cluster, tier, api).await);
    }
    let resp = resp_rows(&mut cluster).await;
    let table = render(&http, &resp);

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let doc = std::fs::read_to_string(&path).expect("docs/operations.md");
    let (start, end) = match (doc.find(BEGIN), doc.find(END)) {
        (Some(start), Some(end)) if start < end => (start + BEGIN.len(), end),
        _ => panic!("docs/operations.md has no {BEGIN} ... {END}"),
    };
    let held = doc[start..end].trim_matches('\n');
    if std::env::var_os(UPDATE).is_some() {
        let updated = format!("{}\n{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).expect("write docs/operations.md");
    } else {
        let table = table.trim_end_matches('\n');
        let only = |a: &str, b: &str| {
            let b: BTreeSet<&str> = b.lines().collect();
            let lines: Vec<&str> = a.lines().filter(|line| !b.contains(line)).collect();
            lines.join("\n")
        };
        assert!(
            held == table,
            "docs/operations.md's access table is not what the tiers answer \
             ({UPDATE}=1 writes it); they answer:\n{table}\n\nthe document says, and they do \
             not:\n{}\n\nthey answer, and the document does not say:\n{}",
            only(held, table),
            only(table, held),
        );
    }
}
