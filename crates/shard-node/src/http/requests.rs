//! Decoding and checking what clients send the shard node: the JSON bodies of `POST /counter`
//! and of single writes, the `op` of `PATCH /counter/{id}/write`, `Idempotency-Key`s, and the
//! postcard bodies of `POST /batch` and `POST /batch/items`, and whether a request was
//! forwarded by another node.
//!
//! The handlers of [`super::api`] call these, and so do the fuzz targets of `fuzz/`: every byte
//! a client sends is refused here with an error (400, 413 or 422), never a panic.

use geocount_model::held_bytes::full_history_bytes;
use geocount_model::unique::validate_item;
use geocount_model::wire::{BatchEntry, BatchRequest, ItemBatchRequest, ItemEntry};
use geocount_model::{
    CounterDescription, CounterId, CounterType, HistoryLevel, ModelError, ShardDefaults,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use geocount_http::routing::TokenName;
use hyper::Request;
use hyper::body::Incoming;

use crate::engine::key_scope::KeyScope;
use crate::engine::write::{Change, WriteRequest};
use crate::error::ShardError;
use crate::route::slots::FORWARDED_HEADER;

pub use geocount_model::MAX_SHARDS_PER_COUNTER;

/// Parses an optional JSON body: empty means every field takes its default (whitespace alone
/// is no JSON, and refused as any malformed body is).
fn json_body<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ShardError> {
    if bytes.is_empty() {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ShardError::bad_request(format!("malformed JSON body: {e}")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBody {
    id: Option<String>,
    number_of_shards: Option<u32>,
    window_seconds: Option<u32>,
    #[serde(rename = "type")]
    counter_type: Option<CounterType>,
    ttl_seconds: Option<u32>,
    history: Option<Vec<HistoryLevel>>,
    min: Option<i64>,
    max: Option<i64>,
}

/// The description a `POST /counter` body asks for (`{"id"?, "numberOfShards"?,
/// "windowSeconds"?, "type"?, "ttlSeconds"?, "history"?, "min"?, "max"?}`, empty for every
/// default), created
/// at `now_ms`: a random id when none is given, the defaults of `settings`, and 400 for a
/// malformed body, a bad id or a count, window, time to live or history out of range.
pub fn parse_create(
    body: &[u8],
    settings: &ShardDefaults,
    now_ms: u64,
) -> Result<CounterDescription, ShardError> {
    let body: CreateBody = json_body(body)?;
    let id = match body.id {
        Some(id) => CounterId::new(id)?,
        None => CounterId::new(format!(
            "c-{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        ))?,
    };
    let number_of_shards = body
        .number_of_shards
        .unwrap_or(settings.default_number_of_shards);
    if !(1..=MAX_SHARDS_PER_COUNTER).contains(&number_of_shards) {
        return Err(ShardError::bad_request(format!(
            "numberOfShards must be 1 to {MAX_SHARDS_PER_COUNTER}, got {number_of_shards}"
        )));
    }
    let window_seconds = body
        .window_seconds
        .unwrap_or(settings.default_window_seconds);
    let max_window = settings.max_window_seconds;
    if !(1..=max_window).contains(&window_seconds) {
        return Err(ShardError::bad_request(format!(
            "windowSeconds must be 1 to {max_window}, got {window_seconds}"
        )));
    }
    let expires_at_ms = body
        .ttl_seconds
        .map(|ttl| expiry_of(ttl, now_ms))
        .transpose()?;
    let counter_type = body.counter_type.unwrap_or_default();
    let history = history_of(body.history, counter_type, settings)?;
    let description = CounterDescription {
        id,
        counter_type,
        number_of_shards,
        base_number_of_shards: number_of_shards,
        window_seconds,
        created_at_ms: now_ms,
        generation: Default::default(),
        deleted: false,
        expires_at_ms,
        history,
        min: body.min,
        max: body.max,
    };
    // Bounds: a sum counter's only, holding its start at zero.
    description.check().map_err(ShardError::Model)?;
    Ok(description)
}

/// The history levels a create asks for (`None`: the defaults of a sum, none for a unique
/// counter): 400 past `shard.max_history_levels` or `shard.max_history_buckets`, for a unique
/// counter's, and for levels whose buckets alone, all filled, would not fit
/// `shard.max_counter_bytes`.
fn history_of(
    asked: Option<Vec<HistoryLevel>>,
    counter_type: CounterType,
    settings: &ShardDefaults,
) -> Result<Vec<HistoryLevel>, ShardError> {
    let levels = match (asked, counter_type) {
        (None, CounterType::Sum) => return Ok(settings.default_history_levels()),
        (None, CounterType::Unique) => return Ok(Vec::new()),
        (Some(levels), CounterType::Unique) if !levels.is_empty() => {
            return Err(ShardError::bad_request(
                "a unique counter keeps no history: leave history out".into(),
            ));
        }
        (Some(levels), _) => levels,
    };
    geocount_model::history::check_levels_within(
        &levels,
        settings.max_history_levels,
        settings.max_history_buckets,
    )
    .map_err(ShardError::bad_request)?;
    let full = full_history_bytes(&levels) as u64;
    if full > settings.max_counter_bytes {
        return Err(ShardError::bad_request(format!(
            "history would hold up to {full} bytes per slot, above shard.max_counter_bytes ({})",
            settings.max_counter_bytes
        )));
    }
    Ok(levels)
}

/// When a counter given `ttl_secs` at `now_ms` expires: 400 for 0 (a counter that would be
/// gone before it is made).
pub fn expiry_of(ttl_secs: u32, now_ms: u64) -> Result<u64, ShardError> {
    if ttl_secs == 0 {
        return Err(ShardError::bad_request(
            "ttlSeconds must be at least 1 (DELETE /counter/{id} deletes at once)".into(),
        ));
    }
    Ok(now_ms + u64::from(ttl_secs) * 1000)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExpiryBody {
    /// Required, and may be `null`: an absent field is not a request to persist.
    #[serde(deserialize_with = "present")]
    ttl_seconds: Option<u32>,
}

/// A field that must be present, `null` or a value.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Option::<u32>::deserialize(d)
}

/// The time to live a `PATCH /counter/{id}` body asks for (`{"ttlSeconds": n}`, n >= 1, or
/// `{"ttlSeconds": null}` for none): 400 for anything else.
pub fn parse_ttl(body: &[u8]) -> Result<Option<u32>, ShardError> {
    let body: ExpiryBody = serde_json::from_slice(body).map_err(|e| {
        ShardError::bad_request(format!(
            "the body must be {{\"ttlSeconds\": seconds or null}}: {e}"
        ))
    })?;
    if let Some(ttl) = body.ttl_seconds {
        expiry_of(ttl, 0)?;
    }
    Ok(body.ttl_seconds)
}

/// The expiry a `PATCH /counter/{id}` body asks for ([`parse_ttl`]) at `now_ms`.
pub fn parse_expiry(body: &[u8], now_ms: u64) -> Result<Option<u64>, ShardError> {
    Ok(parse_ttl(body)?.map(|ttl| now_ms + u64::from(ttl) * 1000))
}

/// The sign of a `PATCH /counter/{id}/write` from its query's `op`: 1 for `INCREMENT`, -1 for
/// `DECREMENT`, 400 when missing or anything else.
pub fn parse_write_op(query: Option<&str>) -> Result<i64, ShardError> {
    let query = query.unwrap_or("");
    let op = form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "op")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| {
            ShardError::bad_request("missing query parameter op=INCREMENT|DECREMENT".into())
        })?;
    match op.as_str() {
        "INCREMENT" => Ok(1),
        "DECREMENT" => Ok(-1),
        other => Err(ShardError::bad_request(format!(
            "op must be INCREMENT or DECREMENT, got {other:?}"
        ))),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WriteBody {
    delta: Option<i64>,
    item: Option<String>,
    timestamp: Option<u64>,
    ttl_seconds: Option<u32>,
}

impl WriteBody {
    /// The change the body asks for: its item, else its delta (default 1) times `sign`;
    /// `signed` says whether the delta may be negative (else it must be above 0).
    fn change(&self, sign: i64, signed: bool) -> Result<Change, ShardError> {
        match (self.delta, &self.item) {
            (Some(_), Some(_)) => Err(ShardError::bad_request(
                "a write carries a \"delta\" (sum counters) or an \"item\" (unique counters), not both"
                    .into(),
            )),
            (None, Some(_)) if sign < 0 => Err(ShardError::bad_request(
                "items are only ever added: write them with op=INCREMENT".into(),
            )),
            (None, Some(item)) => {
                validate_item(item)?;
                Ok(Change::item(item))
            }
            (delta, None) => {
                let delta = delta.unwrap_or(1);
                if signed && delta == 0 {
                    return Err(ShardError::bad_request("delta must not be 0".into()));
                }
                if !signed && delta <= 0 {
                    return Err(ModelError::NonPositiveDelta(delta).into());
                }
                Ok(Change::Delta(sign * delta))
            }
        }
    }
}

/// What a single write's JSON body asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedWrite {
    /// The delta or item.
    pub change: Change,
    /// When the hit happened, in unix seconds.
    pub timestamp_secs: u64,
    /// The expiry the write sets when its counter has none.
    pub ttl_secs: Option<u32>,
}

/// The change, timestamp and time to live of a single write's JSON body (`{"delta"?,
/// "timestamp"?, "ttlSeconds"?}` or `{"item", "timestamp"?, "ttlSeconds"?}`, empty for a delta of
/// 1 now): the delta (default 1) times `sign`, which must be above 0 unless `signed` (then it
/// must not be 0); the timestamp checked against `now_secs` with
/// `settings.max_future_skew_secs`, `now_secs` when absent; a time to live of at least 1.
pub fn parse_write(
    body: &[u8],
    sign: i64,
    signed: bool,
    settings: &ShardDefaults,
    now_secs: u64,
) -> Result<ParsedWrite, ShardError> {
    let body: WriteBody = json_body(body)?;
    let change = body.change(sign, signed)?;
    let timestamp_secs = write_timestamp(settings, body.timestamp, now_secs)?;
    if let Some(ttl) = body.ttl_seconds {
        expiry_of(ttl, 0)?;
    }
    Ok(ParsedWrite {
        change,
        timestamp_secs,
        ttl_secs: body.ttl_seconds,
    })
}

/// A write's timestamp: its own, refused when more than `settings.max_future_skew_secs` ahead
/// of `now` (this node's clock), else `now`.
pub fn write_timestamp(
    settings: &ShardDefaults,
    timestamp: Option<u64>,
    now: u64,
) -> Result<u64, ShardError> {
    let Some(timestamp) = timestamp else {
        return Ok(now);
    };
    let allowed = settings.max_future_skew_secs;
    let ahead = timestamp.saturating_sub(now);
    if ahead > allowed {
        return Err(ShardError::TimestampAhead {
            timestamp,
            ahead,
            allowed,
        });
    }
    Ok(timestamp)
}

/// Decodes a postcard batch body of type `T`, refusing trailing bytes.
pub fn decode_batch<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ShardError> {
    let (batch, rest): (T, _) = postcard::take_from_bytes(body)
        .map_err(|e| ShardError::bad_request(format!("malformed postcard batch: {e}")))?;
    if !rest.is_empty() {
        return Err(ShardError::bad_request(format!(
            "malformed postcard batch: {} trailing bytes",
            rest.len()
        )));
    }
    Ok(batch)
}

/// One entry of a postcard batch: a delta ([`BatchEntry`]) or an item ([`ItemEntry`]).
trait Entry {
    /// The counter's id, as sent.
    fn id(&self) -> &str;
    /// The change, checked as the same write on its own would be.
    fn change(&self) -> Result<Change, ShardError>;
    /// The idempotency key, as sent.
    fn idempotency_key(&self) -> Option<&str>;
    /// The timestamp, as sent.
    fn timestamp(&self) -> Option<u64>;
}

impl Entry for BatchEntry<'_> {
    fn id(&self) -> &str {
        self.id
    }
    fn change(&self) -> Result<Change, ShardError> {
        if self.delta == 0 {
            return Err(ShardError::bad_request("delta must not be 0".into()));
        }
        Ok(Change::Delta(self.delta))
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key
    }
    fn timestamp(&self) -> Option<u64> {
        self.timestamp
    }
}

impl Entry for ItemEntry<'_> {
    fn id(&self) -> &str {
        self.id
    }
    fn change(&self) -> Result<Change, ShardError> {
        validate_item(self.item)?;
        Ok(Change::item(self.item))
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key
    }
    fn timestamp(&self) -> Option<u64> {
        self.timestamp
    }
}

/// The writes of a batch's entries, each checked as the same write on its own would be
/// (`now_secs`: the node's clock, read once per batch); the whole batch is refused when it has
/// more than `settings.max_batch_entries` entries.
fn checked_writes(
    entries: &[impl Entry],
    settings: &ShardDefaults,
    now_secs: u64,
    scope: &KeyScope,
) -> Result<Vec<Result<WriteRequest, ShardError>>, ShardError> {
    let limit = settings.max_batch_entries;
    if entries.len() > limit {
        return Err(ShardError::TooManyEntries {
            entries: entries.len(),
            limit,
        });
    }
    let check = |entry: &dyn Entry| {
        // Validated before the change, so a bad id and a bad change report the id, as before.
        let id = CounterId::new(entry.id())?;
        let change = entry.change()?;
        let key = entry
            .idempotency_key()
            .map(|key| scope.key(key))
            .transpose()?;
        Ok(WriteRequest {
            id,
            change,
            idempotency_key: key,
            timestamp_secs: write_timestamp(settings, entry.timestamp(), now_secs)?,
            ttl_secs: None,
        })
    };
    Ok(entries.iter().map(|entry| check(entry)).collect())
}

/// The writes of a `POST /batch` body (a postcard [`BatchRequest`]), each checked as on its
/// own: the whole body is refused when malformed (400) or over `settings.max_batch_entries`
/// (413); otherwise one result per entry, in order, a bad entry refusing only itself.
pub fn parse_batch(
    body: &[u8],
    settings: &ShardDefaults,
    now_secs: u64,
    scope: &KeyScope,
) -> Result<Vec<Result<WriteRequest, ShardError>>, ShardError> {
    let batch: BatchRequest = decode_batch(body)?;
    checked_writes(&batch.entries, settings, now_secs, scope)
}

/// The writes of a `POST /batch/items` body (a postcard [`ItemBatchRequest`]), checked like
/// [`parse_batch`]'s, each item 1 to 1,024 bytes.
pub fn parse_item_batch(
    body: &[u8],
    settings: &ShardDefaults,
    now_secs: u64,
    scope: &KeyScope,
) -> Result<Vec<Result<WriteRequest, ShardError>>, ShardError> {
    let batch: ItemBatchRequest = decode_batch(body)?;
    checked_writes(&batch.entries, settings, now_secs, scope)
}

/// Whether another node forwarded this write here: it is applied here, never sent on.
pub(crate) fn is_forwarded(request: &Request<Incoming>) -> bool {
    request.headers().contains_key(FORWARDED_HEADER)
}

/// Whose the request's idempotency keys are: the token that sent it, or the node that
/// forwarded it (its keys come scoped already).
pub(crate) fn key_scope(request: &Request<Incoming>) -> KeyScope {
    if is_forwarded(request) {
        return KeyScope::Forwarded;
    }
    KeyScope::Token(
        request
            .extensions()
            .get::<TokenName>()
            .map_or_else(String::new, |TokenName(name)| name.clone()),
    )
}

/// The request's `Idempotency-Key`, scoped ([`key_scope`]); 400 for one no client may send.
pub(crate) fn idempotency_key(request: &Request<Incoming>) -> Result<Option<Box<str>>, ShardError> {
    let Some(value) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ShardError::bad_request("Idempotency-Key must be visible ASCII".into()))?;
    key_scope(request).key(key).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn settings() -> ShardDefaults {
        ShardDefaults::default()
    }

    #[test]
    fn create_bodies_take_defaults_and_refuse_what_is_out_of_range() {
        let created = parse_create(b"", &settings(), 5).unwrap();
        assert_eq!(
            (
                created.number_of_shards,
                created.window_seconds,
                created.created_at_ms
            ),
            (1, 300, 5)
        );
        assert!(created.id.as_str().starts_with("c-"));
        let body = br#"{"id": "a", "numberOfShards": 2, "type": "unique"}"#;
        let created = parse_create(body, &settings(), 5).unwrap();
        assert_eq!(created.counter_type, CounterType::Unique);
        for bad in [
            &br#"{"numberOfShards": 0}"#[..],
            br#"{"numberOfShards": 1025}"#,
            br#"{"windowSeconds": 0}"#,
            br#"{"windowSeconds": 3601}"#,
            br#"{"id": ""}"#,
            br#"{"id": "a\u0000"}"#,
            br#"{"colour": "red"}"#,
            br#"{"min": 1}"#,
            br#"{"max": -1}"#,
            br#"{"min": 0, "max": 5, "type": "unique"}"#,
            b"{",
            b"\xff",
        ] {
            assert!(parse_create(bad, &settings(), 5).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn write_bodies_are_checked_like_the_handlers_did() {
        let parsed = |body: &[u8], sign, signed| {
            let write = parse_write(body, sign, signed, &settings(), NOW).unwrap();
            (write.change, write.timestamp_secs)
        };
        assert_eq!(parsed(b"", -1, false), (Change::Delta(-1), NOW));
        // Whitespace alone is no JSON body.
        assert!(parse_write(b" \n", -1, false, &settings(), NOW).is_err());
        let body = br#"{"delta": 5, "timestamp": 1800000060}"#;
        assert_eq!(parsed(body, 1, false), (Change::Delta(5), NOW + 60));
        assert_eq!(parsed(br#"{"delta": -5}"#, 1, true).0, Change::Delta(-5));
        let with_ttl = parse_write(br#"{"ttlSeconds": 60}"#, 1, false, &settings(), NOW);
        assert_eq!(with_ttl.unwrap().ttl_secs, Some(60));
        // i64::MIN is refused as a non-positive delta before any sign is applied.
        let min = br#"{"delta": -9223372036854775808}"#;
        assert!(parse_write(min, -1, false, &settings(), NOW).is_err());
        for (bad, sign, signed) in [
            (&br#"{"delta": 0}"#[..], 1, true),
            (br#"{"delta": 0}"#, 1, false),
            (br#"{"delta": 1, "item": "x"}"#, 1, false),
            (br#"{"item": "x"}"#, -1, false),
            (br#"{"item": ""}"#, 1, false),
            (br#"{"delta": 1, "timestamp": 1800000061}"#, 1, false),
            (br#"{"delta": 9223372036854775808}"#, 1, false),
            (br#"{"ttlSeconds": 0}"#, 1, false),
            (br#"{"ttlSeconds": -1}"#, 1, false),
            (br#"{"ttl_seconds": 5}"#, 1, false),
        ] {
            assert!(
                parse_write(bad, sign, signed, &settings(), NOW).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(parse_write_op(Some("op=DECREMENT&x=1")).unwrap(), -1);
        for bad in [None, Some(""), Some("op=increment"), Some("op=%FF")] {
            assert!(parse_write_op(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn batches_refuse_malformed_bodies_and_bad_entries_alone() {
        let batch = BatchRequest {
            entries: vec![
                BatchEntry {
                    id: "a",
                    delta: 2,
                    idempotency_key: None,
                    timestamp: None,
                },
                BatchEntry {
                    id: "b",
                    delta: 0,
                    idempotency_key: None,
                    timestamp: None,
                },
                BatchEntry {
                    id: "c",
                    delta: 1,
                    idempotency_key: Some(""),
                    timestamp: None,
                },
            ],
        };
        let mut bytes = postcard::to_allocvec(&batch).unwrap();
        let writes =
            parse_batch(&bytes, &settings(), NOW, &KeyScope::Token(String::new())).unwrap();
        assert!(writes[0].is_ok() && writes[1].is_err() && writes[2].is_err());
        bytes.push(0);
        assert!(
            parse_batch(&bytes, &settings(), NOW, &KeyScope::Token(String::new())).is_err(),
            "trailing bytes"
        );
        let items = ItemBatchRequest {
            entries: vec![ItemEntry {
                id: "v",
                item: "user-1",
                idempotency_key: None,
                timestamp: Some(NOW + 61),
            }],
        };
        let bytes = postcard::to_allocvec(&items).unwrap();
        let writes =
            parse_item_batch(&bytes, &settings(), NOW, &KeyScope::Token(String::new())).unwrap();
        assert!(matches!(writes[0], Err(ShardError::TimestampAhead { .. })));
        let few = ShardDefaults {
            max_batch_entries: 2,
            ..settings()
        };
        let bytes = postcard::to_allocvec(&batch).unwrap();
        assert!(matches!(
            parse_batch(&bytes, &few, NOW, &KeyScope::Token(String::new())),
            Err(ShardError::TooManyEntries { entries: 3, .. })
        ));
    }

    /// A length prefix is never trusted for an allocation: a batch claiming 2^32 - 1 entries
    /// (or an id of that many bytes) in a few bytes is refused at once.
    #[test]
    fn huge_length_prefixes_are_refused_without_allocating() {
        let entries = [0xff, 0xff, 0xff, 0xff, 0x0f, 1, b'a', 2, 0, 0];
        assert!(parse_batch(&entries, &settings(), NOW, &KeyScope::Token(String::new())).is_err());
        assert!(
            parse_item_batch(&entries, &settings(), NOW, &KeyScope::Token(String::new())).is_err()
        );
        let id = [1, 0xff, 0xff, 0xff, 0xff, 0x0f, b'a'];
        assert!(parse_batch(&id, &settings(), NOW, &KeyScope::Token(String::new())).is_err());
        // Not UTF-8 where a str is expected.
        assert!(
            parse_batch(
                &[1, 1, 0xff, 2, 0, 0],
                &settings(),
                NOW,
                &KeyScope::Token(String::new())
            )
            .is_err()
        );
    }

    #[test]
    fn expiry_bodies_need_a_time_to_live_or_null() {
        assert_eq!(
            parse_expiry(br#"{"ttlSeconds": 10}"#, 5).unwrap(),
            Some(10_005)
        );
        assert_eq!(parse_expiry(br#"{"ttlSeconds": null}"#, 5).unwrap(), None);
        for bad in [
            &b""[..],
            b"{}",
            br#"{"ttlSeconds": 0}"#,
            br#"{"ttlSeconds": "1"}"#,
            br#"{"ttlSeconds": 1, "x": 2}"#,
            br#"{"ttlSeconds": 4294967296}"#,
        ] {
            assert!(parse_expiry(bad, 5).is_err(), "{bad:?}");
        }
        let created = parse_create(br#"{"ttlSeconds": 2}"#, &settings(), 5).unwrap();
        assert_eq!(created.expires_at_ms, Some(2_005));
        assert!(parse_create(br#"{"ttlSeconds": 0}"#, &settings(), 5).is_err());
    }

    #[test]
    fn a_create_takes_history_within_the_limits_or_the_defaults() {
        let minutes = geocount_model::HistoryLevel {
            step_seconds: 60,
            keep_seconds: 7_200,
        };
        let body = br#"{"history": [{"stepSeconds": 60, "keepSeconds": 7200}]}"#;
        assert_eq!(
            parse_create(body, &settings(), 5).unwrap().history,
            [minutes]
        );
        assert!(
            parse_create(b"", &settings(), 5)
                .unwrap()
                .history
                .is_empty()
        );
        let mut defaults = settings();
        defaults.default_history = vec![geocount_model::topology::HistoryLevelConfig {
            step_seconds: 60,
            keep_seconds: 7_200,
        }];
        assert_eq!(parse_create(b"", &defaults, 5).unwrap().history, [minutes]);
        let unique = parse_create(br#"{"type": "unique"}"#, &defaults, 5).unwrap();
        assert!(unique.history.is_empty(), "a unique counter keeps none");
        assert!(
            parse_create(br#"{"history": []}"#, &defaults, 5)
                .unwrap()
                .history
                .is_empty()
        );
        for (bad, says) in [
            (&br#"{"history": [{"stepSeconds": 60, "keepSeconds": 90}]}"#[..], "multiple"),
            (br#"{"history": [{"stepSeconds": 1, "keepSeconds": 5000}]}"#, "at most 4096"),
            (br#"{"history": [{"stepSeconds": 60}]}"#, "keepSeconds"),
            (
                br#"{"type": "unique", "history": [{"stepSeconds": 60, "keepSeconds": 60}]}"#,
                "unique",
            ),
            (
                br#"{"history": [{"stepSeconds": 1, "keepSeconds": 4096}, {"stepSeconds": 2, "keepSeconds": 8192}]}"#,
                "shard.max_counter_bytes",
            ),
        ] {
            let refused = parse_create(bad, &settings(), 5).unwrap_err().to_string();
            assert!(refused.contains(says), "{refused}");
        }
    }
}
