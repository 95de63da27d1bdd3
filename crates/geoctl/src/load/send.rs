//! Sending the load's writes: one write per request (`PATCH /counter/{id}/write`) or many
//! (postcard `POST /batch`), each write with its own `Idempotency-Key`, and a failed request (or
//! batch entry) sent once more, to the same node, with the same keys.
//!
//! Every attempt is classified ([`Attempt`]); a write's [`Fate`] folds its attempts into one
//! [`WriteOutcome`]: acknowledged if any attempt was applied, else unknown if any attempt may
//! have been applied (a 503 "not acknowledged" among them: logged, but no peer held it in
//! time), else refused. Keys make the retry safe: the node answers a retried key as
//! it answered the first attempt, and applies it only once. The retry goes to the same node
//! because keys are deduplicated per datacenter.

use std::time::{Duration, Instant};

use bytes::Bytes;
use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use geocount_model::wire::{BatchEntry, BatchRequest, BatchResponse, BatchSummary, EntryOutcome};
use geocount_net::prefer::{PREFERENCE_APPLIED, RETURN_MINIMAL};
use geocount_net::{Answer, ClientError, HttpClient};
use hyper::Method;

use crate::cluster::write_op;
use crate::cluster::{ShardNode, status_error};
use crate::load::tally::{Tally, WriteOutcome};

/// How many times a request is sent at most (the first time and one retry).
pub const MAX_ATTEMPTS: usize = 2;

/// One write the load is about to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWrite {
    /// The counter's index (`<prefix>-<counter>`).
    pub counter: usize,
    /// The signed change, never 0.
    pub delta: i64,
    /// Its idempotency key, unique in the run (`None`: sent without one, at least once).
    pub key: Option<String>,
}

/// What one attempt at a write tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Applied (or, for a retried key, applied earlier).
    Applied,
    /// Refused for good (4xx): nothing applied, and a retry would be refused too.
    Refused,
    /// Not applied, but a retry may succeed (the connection could not be made, a 5xx that
    /// changes nothing).
    Retryable,
    /// It may or may not have been applied (the connection broke after sending, a timeout, a
    /// 504 from a forward).
    Unknown,
}

/// An answer's status, for a single write or one entry of a batch.
pub fn status_attempt(status: u16) -> Attempt {
    match status {
        200..=299 => Attempt::Applied,
        504 => Attempt::Unknown,
        500..=599 => Attempt::Retryable,
        _ => Attempt::Refused,
    }
}

/// How a shard node's refusal of a write it logged begins when no peer held it in time
/// (`replicated` durability): the write may still apply.
pub const NOT_ACKNOWLEDGED: &str = "not acknowledged";

/// A refusal's status and error message, for a single write or one entry of a batch: a 503
/// saying "not acknowledged" leaves the write in the node's log, so its outcome is unknown.
pub fn refusal_attempt(status: u16, error: &str) -> Attempt {
    if status == 503 && error.contains(NOT_ACKNOWLEDGED) {
        Attempt::Unknown
    } else {
        status_attempt(status)
    }
}

/// A single write's answer: its status, and for a refusal the `error` of its JSON body.
pub fn answer_attempt(answer: &Answer) -> Attempt {
    let status = answer.status.as_u16();
    if answer.status.is_success() {
        return status_attempt(status);
    }
    let error = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|body| body.get("error")?.as_str().map(str::to_owned))
        .unwrap_or_default();
    refusal_attempt(status, &error)
}

/// A whole batch answered with an error status. A 5xx may come after some entries were
/// forwarded and applied elsewhere, so their outcome is unknown; a 4xx refused the batch before
/// anything was applied.
pub fn batch_status_attempt(status: u16) -> Attempt {
    match status {
        500..=599 => Attempt::Unknown,
        status => status_attempt(status),
    }
}

/// A request that got no answer.
pub fn error_attempt(error: &ClientError) -> Attempt {
    match error {
        // Nothing reached the node.
        ClientError::Connect { .. } => Attempt::Retryable,
        // The request could not even be built: it would fail again.
        ClientError::Request(_) => Attempt::Refused,
        // Sent, and maybe applied: its answer did not arrive whole.
        ClientError::Transport { .. } | ClientError::Timeout(_) | ClientError::TooLarge { .. } => {
            Attempt::Unknown
        }
    }
}

/// A short label for a request error, to count errors by kind.
pub fn error_kind(error: &ClientError) -> &'static str {
    match error {
        ClientError::Connect { .. } => "connect error",
        ClientError::Request(_) => "bad request",
        ClientError::Transport { .. } => "transport error",
        ClientError::Timeout(_) => "timeout",
        ClientError::TooLarge { .. } => "answer too large",
    }
}

/// What is known of one write after its attempts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fate {
    applied: bool,
    maybe_applied: bool,
    retry: bool,
}

impl Fate {
    /// Takes one attempt into account.
    pub fn record(&mut self, attempt: Attempt) {
        match attempt {
            Attempt::Applied => {
                self.applied = true;
                self.retry = false;
            }
            Attempt::Refused => self.retry = false,
            Attempt::Retryable => self.retry = true,
            Attempt::Unknown => {
                self.maybe_applied = true;
                self.retry = true;
            }
        }
    }

    /// Whether another attempt may settle it. Without a key (`keyed` false) a write that may
    /// have been applied is not sent again: it could apply twice.
    pub fn wants_retry(&self, keyed: bool) -> bool {
        self.retry && !self.applied && (keyed || !self.maybe_applied)
    }

    /// The write's outcome after the attempts recorded.
    pub fn outcome(&self) -> WriteOutcome {
        if self.applied {
            WriteOutcome::Acknowledged
        } else if self.maybe_applied {
            WriteOutcome::Unknown
        } else {
            WriteOutcome::Refused
        }
    }
}

/// The run's clock: when it started, to place answers in per-second buckets.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    /// The start of the run.
    pub start: Instant,
}

impl RunClock {
    /// How long since the start.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Sends one request and counts it: its latency if answered, its error if not.
async fn exchange(
    client: &HttpClient,
    clock: RunClock,
    tally: &mut Tally,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<geocount_net::Answer, ClientError> {
    tally.sent();
    let sent = Instant::now();
    let result = client.send(method, url, headers, body).await;
    match &result {
        Ok(answer) => {
            tally.answered(sent.elapsed(), clock.now());
            if !answer.status.is_success() {
                let kind = format!("HTTP {}", answer.status.as_u16());
                tally.error(&kind, || status_error(url, answer).to_string());
            }
        }
        Err(error) => tally.error(error_kind(error), || error.to_string()),
    }
    result
}

/// Sends one write through `shard` with `PATCH {counter_path}/write`, retrying once if that may
/// help. `counter_path` is the counter's `/counter/{id}`.
pub async fn send_single(
    client: &HttpClient,
    shard: &ShardNode,
    counter_path: &str,
    write: &PlannedWrite,
    clock: RunClock,
    tally: &mut Tally,
) -> WriteOutcome {
    let mut fate = Fate::default();
    match write_op(write.delta) {
        Ok((op, magnitude)) => {
            let url = shard.url(&format!("{counter_path}/write?op={op}"));
            let body = Bytes::from(format!("{{\"delta\":{magnitude}}}"));
            let mut headers = vec![("content-type", "application/json")];
            if let Some(key) = &write.key {
                headers.push(("idempotency-key", key.as_str()));
            }
            for attempt in 0..MAX_ATTEMPTS {
                if attempt > 0 {
                    tally.retried += 1;
                }
                let result = exchange(
                    client,
                    clock,
                    tally,
                    Method::PATCH,
                    &url,
                    &headers,
                    body.clone(),
                )
                .await;
                fate.record(match &result {
                    Ok(answer) => answer_attempt(answer),
                    Err(error) => error_attempt(error),
                });
                if !fate.wants_retry(write.key.is_some()) {
                    break;
                }
            }
        }
        Err(error) => {
            tally.error("bad delta", || error.to_string());
            fate.record(Attempt::Refused);
        }
    }
    let outcome = fate.outcome();
    tally.outcome(write.counter, write.delta, outcome, clock.now());
    outcome
}

/// Encodes the entries `which` of `writes` as a postcard batch; `ids[i]` is counter `i`'s id.
pub fn encode_batch(ids: &[String], writes: &[PlannedWrite], which: &[usize]) -> Bytes {
    let entries = which
        .iter()
        .map(|&i| BatchEntry {
            id: &ids[writes[i].counter],
            delta: writes[i].delta,
            idempotency_key: writes[i].key.as_deref(),
            timestamp: None,
        })
        .collect();
    let bytes = postcard::to_allocvec(&BatchRequest { entries })
        .expect("a batch of strings and integers encodes");
    Bytes::from(bytes)
}

/// Sends `writes` as one postcard batch through `shard`; the entries that failed in a way a
/// retry may fix are sent once more as a second batch. Returns how many were acknowledged.
pub async fn send_batch(
    client: &HttpClient,
    shard: &ShardNode,
    ids: &[String],
    writes: &[PlannedWrite],
    clock: RunClock,
    tally: &mut Tally,
) -> u64 {
    let url = shard.url("/batch");
    // Only refusals matter here, so the answer need not carry every slot state.
    let headers = [
        ("content-type", POSTCARD_CONTENT_TYPE),
        ("prefer", RETURN_MINIMAL),
    ];
    let mut fates = vec![Fate::default(); writes.len()];
    let mut pending: Vec<usize> = (0..writes.len()).collect();
    for attempt in 0..MAX_ATTEMPTS {
        if pending.is_empty() {
            break;
        }
        if attempt > 0 {
            tally.retried += pending.len() as u64;
        }
        let body = encode_batch(ids, writes, &pending);
        let result = exchange(client, clock, tally, Method::POST, &url, &headers, body).await;
        let attempts = batch_attempts(&url, result, pending.len(), tally);
        for (&i, attempt) in pending.iter().zip(attempts) {
            fates[i].record(attempt);
        }
        pending.retain(|&i| fates[i].wants_retry(writes[i].key.is_some()));
    }
    let at = clock.now();
    let mut acknowledged = 0;
    for (write, fate) in writes.iter().zip(&fates) {
        let outcome = fate.outcome();
        if outcome == WriteOutcome::Acknowledged {
            acknowledged += 1;
        }
        tally.outcome(write.counter, write.delta, outcome, at);
    }
    acknowledged
}

/// One attempt per entry of a batch of `entries` entries, from the request's result.
fn batch_attempts(
    url: &str,
    result: Result<geocount_net::Answer, ClientError>,
    entries: usize,
    tally: &mut Tally,
) -> Vec<Attempt> {
    let answer = match result {
        Ok(answer) => answer,
        Err(error) => return vec![error_attempt(&error); entries],
    };
    if !answer.status.is_success() {
        return vec![batch_status_attempt(answer.status.as_u16()); entries];
    }
    if answer.headers.contains_key(PREFERENCE_APPLIED) {
        return summary_attempts(url, &answer.body, entries, tally);
    }
    match postcard::from_bytes::<BatchResponse>(&answer.body) {
        Ok(response) if response.outcomes.len() == entries => response
            .outcomes
            .iter()
            .map(|outcome| entry_attempt(outcome, tally))
            .collect(),
        Ok(response) => {
            tally.error("bad answer", || {
                format!(
                    "{url}: {} outcomes for {entries} entries",
                    response.outcomes.len()
                )
            });
            vec![Attempt::Unknown; entries]
        }
        Err(error) => {
            tally.error("bad answer", || {
                format!("{url}: undecodable batch answer: {error}")
            });
            vec![Attempt::Unknown; entries]
        }
    }
}

/// One attempt per entry of a batch of `entries` entries, from its `return=minimal` answer: every
/// entry applied but the refused ones.
fn summary_attempts(url: &str, body: &[u8], entries: usize, tally: &mut Tally) -> Vec<Attempt> {
    let summary = match postcard::from_bytes::<BatchSummary>(body) {
        Ok(summary) => summary,
        Err(error) => {
            tally.error("bad answer", || {
                format!("{url}: undecodable batch summary: {error}")
            });
            return vec![Attempt::Unknown; entries];
        }
    };
    let consistent = summary.applied as usize + summary.refused.len() == entries
        && summary.refused.iter().all(|r| (r.index as usize) < entries);
    if !consistent {
        tally.error("bad answer", || {
            format!(
                "{url}: a summary of {} applied and {} refused for {entries} entries",
                summary.applied,
                summary.refused.len()
            )
        });
        return vec![Attempt::Unknown; entries];
    }
    let mut attempts = vec![Attempt::Applied; entries];
    for refused in summary.refused {
        attempts[refused.index as usize] = entry_attempt(
            &EntryOutcome::Refused {
                status: refused.status,
                error: refused.error,
            },
            tally,
        );
    }
    attempts
}

/// One batch entry's outcome as an attempt; a refusal is counted as an error.
fn entry_attempt(outcome: &EntryOutcome, tally: &mut Tally) -> Attempt {
    match outcome {
        EntryOutcome::Applied { .. } => Attempt::Applied,
        EntryOutcome::Refused { status, error } => {
            tally.error(&format!("entry refused {status}"), || {
                format!("batch entry refused: {status}: {error}")
            });
            refusal_attempt(*status, error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_attempts() {
        assert_eq!(status_attempt(200), Attempt::Applied);
        assert_eq!(status_attempt(400), Attempt::Refused);
        assert_eq!(status_attempt(422), Attempt::Refused);
        assert_eq!(status_attempt(500), Attempt::Retryable);
        assert_eq!(status_attempt(503), Attempt::Retryable);
        assert_eq!(status_attempt(507), Attempt::Retryable);
        assert_eq!(status_attempt(504), Attempt::Unknown);
        assert_eq!(batch_status_attempt(413), Attempt::Refused);
        assert_eq!(batch_status_attempt(500), Attempt::Unknown);
        assert_eq!(batch_status_attempt(503), Attempt::Unknown);
    }

    #[test]
    fn a_logged_write_no_peer_held_has_an_unknown_outcome() {
        let not_acknowledged = "not acknowledged: no peer shard node held the write durably \
            within shard.replication_timeout_ms (1000 ms); the write is in this node's log";
        assert_eq!(refusal_attempt(503, not_acknowledged), Attempt::Unknown);
        let forwarded = format!("DC_ASIA_0_VAL_0 refused the write: {not_acknowledged}");
        assert_eq!(refusal_attempt(503, &forwarded), Attempt::Unknown);
        let not_applied = "not applied: no peer; writes are taken again once a peer holds them";
        assert_eq!(refusal_attempt(503, not_applied), Attempt::Retryable);
        assert_eq!(refusal_attempt(422, not_acknowledged), Attempt::Refused);
        let answer = |status: u16, body: &str| Answer {
            status: hyper::StatusCode::from_u16(status).expect("a status"),
            headers: hyper::HeaderMap::new(),
            body: Bytes::from(body.to_owned()),
        };
        let body = serde_json::json!({ "error": not_acknowledged }).to_string();
        assert_eq!(answer_attempt(&answer(503, &body)), Attempt::Unknown);
        assert_eq!(answer_attempt(&answer(503, "{}")), Attempt::Retryable);
        assert_eq!(answer_attempt(&answer(503, "not json")), Attempt::Retryable);
        assert_eq!(answer_attempt(&answer(200, "{}")), Attempt::Applied);
    }

    #[test]
    fn errors_become_attempts() {
        let url = "http://x".to_owned();
        let connect = ClientError::Connect {
            url: url.clone(),
            message: "refused".into(),
        };
        let transport = ClientError::Transport {
            url: url.clone(),
            message: "reset".into(),
        };
        assert_eq!(error_attempt(&connect), Attempt::Retryable);
        assert_eq!(error_attempt(&transport), Attempt::Unknown);
        assert_eq!(error_attempt(&ClientError::Timeout(url)), Attempt::Unknown);
        assert_eq!(
            error_attempt(&ClientError::Request("bad".into())),
            Attempt::Refused
        );
        assert_eq!(error_kind(&connect), "connect error");
        assert_eq!(error_kind(&transport), "transport error");
    }

    fn fate(attempts: &[Attempt]) -> Fate {
        let mut fate = Fate::default();
        attempts.iter().for_each(|&a| fate.record(a));
        fate
    }

    #[test]
    fn fates_fold_attempts_into_one_outcome() {
        use Attempt::*;
        assert_eq!(fate(&[Applied]).outcome(), WriteOutcome::Acknowledged);
        assert!(!fate(&[Applied]).wants_retry(true));
        assert_eq!(fate(&[Refused]).outcome(), WriteOutcome::Refused);
        assert!(!fate(&[Refused]).wants_retry(true));
        assert!(fate(&[Retryable]).wants_retry(true));
        assert!(fate(&[Unknown]).wants_retry(true));
        // Without a key only a write surely not applied is sent again.
        assert!(fate(&[Retryable]).wants_retry(false));
        assert!(!fate(&[Unknown]).wants_retry(false));
        assert!(!fate(&[Retryable, Unknown]).wants_retry(false));
        // A retry that is applied settles an unknown first attempt (same key: applied once).
        assert_eq!(
            fate(&[Unknown, Applied]).outcome(),
            WriteOutcome::Acknowledged
        );
        assert_eq!(
            fate(&[Retryable, Applied]).outcome(),
            WriteOutcome::Acknowledged
        );
        // Refused twice, or refused after a failed connection: nothing was applied.
        assert_eq!(
            fate(&[Retryable, Retryable]).outcome(),
            WriteOutcome::Refused
        );
        assert_eq!(fate(&[Retryable, Refused]).outcome(), WriteOutcome::Refused);
        // A first attempt that may have been applied stays unknown unless a retry is applied.
        assert_eq!(fate(&[Unknown, Retryable]).outcome(), WriteOutcome::Unknown);
        assert_eq!(fate(&[Unknown, Refused]).outcome(), WriteOutcome::Unknown);
        assert_eq!(fate(&[Unknown, Unknown]).outcome(), WriteOutcome::Unknown);
    }

    #[test]
    fn a_summary_answers_every_entry_but_the_refused_as_applied() {
        use geocount_model::wire::RefusedEntry;
        let encode = |applied, refused: Vec<RefusedEntry>| {
            postcard::to_allocvec(&BatchSummary {
                slot: "s".into(),
                applied,
                refused,
            })
            .unwrap()
        };
        let refusal = |index, status| RefusedEntry {
            index,
            status,
            error: "storage failed".into(),
        };
        let mut tally = Tally::default();
        assert_eq!(
            summary_attempts("u", &encode(2, vec![refusal(1, 503)]), 3, &mut tally),
            vec![Attempt::Applied, Attempt::Retryable, Attempt::Applied]
        );
        assert_eq!(tally.errors.get("entry refused 503"), Some(&1));
        // A summary that does not add up, or does not decode, leaves every outcome unknown.
        assert_eq!(
            summary_attempts("u", &encode(2, vec![refusal(3, 400)]), 3, &mut tally),
            vec![Attempt::Unknown; 3]
        );
        assert_eq!(
            summary_attempts("u", &encode(3, Vec::new()), 2, &mut tally),
            vec![Attempt::Unknown; 2]
        );
        assert_eq!(
            summary_attempts("u", &[0xff], 2, &mut tally),
            vec![Attempt::Unknown; 2]
        );
        assert_eq!(tally.errors.get("bad answer"), Some(&3));
    }

    #[test]
    fn batches_carry_every_key() {
        let ids = vec!["c-0".to_owned(), "c-1".to_owned()];
        let writes = vec![
            PlannedWrite {
                counter: 1,
                delta: -3,
                key: Some("k-0".into()),
            },
            PlannedWrite {
                counter: 0,
                delta: 4,
                key: Some("k-1".into()),
            },
        ];
        let bytes = encode_batch(&ids, &writes, &[1]);
        let batch: BatchRequest = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            batch.entries,
            [BatchEntry {
                id: "c-0",
                delta: 4,
                idempotency_key: Some("k-1"),
                timestamp: None
            }]
        );
        let bytes = encode_batch(&ids, &writes, &[0, 1]);
        let batch: BatchRequest = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(batch.entries.len(), 2);
        assert_eq!(batch.entries[0].id, "c-1");
        assert_eq!(batch.entries[0].idempotency_key, Some("k-0"));
        let keyless = [PlannedWrite {
            key: None,
            ..writes[0].clone()
        }];
        let bytes = encode_batch(&ids, &keyless, &[0]);
        let batch: BatchRequest = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(batch.entries[0].idempotency_key, None);
    }
}
