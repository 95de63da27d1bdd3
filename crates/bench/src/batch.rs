//! The batched binary path: postcard `POST /batch` requests of many writes over plain hyper
//! HTTP/1.1 connections. The bodies are encoded before the clock starts and sent again and
//! again (as redis-benchmark repeats its commands), so the load generator spends its share of
//! the two cores on sending and checking answers, not on building requests. A load asks for
//! every outcome or, with `Prefer: return=minimal`, for the count applied; either way it checks
//! that every write was applied.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use geocount_model::wire::{
    BatchRequest, BatchResponse, BatchSummary, EntryOutcome, POSTCARD_CONTENT_TYPE,
};
use geocount_net::prefer::{PREFER, PREFERENCE_APPLIED, RETURN_MINIMAL};
use geoctl::load::workload::CounterPicker;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;

/// How many different bodies a load cycles through.
const BODIES: usize = 32;

/// One HTTP/1.1 connection to a node.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    address: SocketAddr,
}

impl Connection {
    /// Connects to `address`.
    pub async fn open(address: SocketAddr) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .with_context(|| format!("cannot connect to {address}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .with_context(|| format!("HTTP handshake with {address} failed"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self { sender, address })
    }

    /// `GET path`: the status and the body.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<(u16, Bytes)> {
        self.call(Method::GET, path).await
    }

    /// `DELETE path`: the status and the body.
    pub async fn delete(&mut self, path: &str) -> anyhow::Result<(u16, Bytes)> {
        self.call(Method::DELETE, path).await
    }

    async fn call(&mut self, method: Method, path: &str) -> anyhow::Result<(u16, Bytes)> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.address.to_string())
            .body(Full::new(Bytes::new()))?;
        self.sender.ready().await?;
        let answer = self.sender.send_request(request).await?;
        let status = answer.status().as_u16();
        Ok((status, answer.into_body().collect().await?.to_bytes()))
    }

    /// Sends one batch body of `writes` writes, asking for `answer`; fails unless every write
    /// was applied.
    pub async fn send_batch(
        &mut self,
        body: Bytes,
        writes: usize,
        answer: Answer,
    ) -> anyhow::Result<()> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/batch")
            .header(hyper::header::HOST, self.address.to_string())
            .header(hyper::header::CONTENT_TYPE, POSTCARD_CONTENT_TYPE);
        if answer == Answer::Minimal {
            request = request.header(PREFER, RETURN_MINIMAL);
        }
        let request = request.body(Full::new(body))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let minimal = response.headers().get(PREFERENCE_APPLIED).is_some();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "{} answered {status}: {}",
                self.address,
                String::from_utf8_lossy(&bytes)
            );
        }
        let (applied, first_refused) = if minimal {
            let summary: BatchSummary =
                postcard::from_bytes(&bytes).context("a batch summary that is not postcard")?;
            let first = summary.refused.into_iter().next();
            (
                summary.applied as usize,
                first.map(|r| format!("{} {}", r.status, r.error)),
            )
        } else {
            let response: BatchResponse =
                postcard::from_bytes(&bytes).context("a batch answer that is not postcard")?;
            let applied = response
                .outcomes
                .iter()
                .filter(|o| matches!(o, EntryOutcome::Applied { .. }))
                .count();
            let first = response.outcomes.into_iter().find_map(|o| match o {
                EntryOutcome::Refused { status, error } => Some(format!("{status} {error}")),
                EntryOutcome::Applied { .. } => None,
            });
            (applied, first)
        };
        if applied != writes {
            bail!(
                "{} applied {applied} of {writes} writes; the first refused: {}",
                self.address,
                first_refused.unwrap_or_else(|| "none".to_owned())
            );
        }
        Ok(())
    }
}

/// What a batch asks to be answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Answer {
    /// Every entry's outcome (a `BatchResponse`).
    Full,
    /// `Prefer: return=minimal`: the count applied and the refused entries (a `BatchSummary`).
    Minimal,
}

/// A body to send again and again, with the number of writes in it.
#[derive(Debug, Clone)]
pub struct Body {
    /// The encoded `BatchRequest`.
    pub bytes: Bytes,
    /// Its writes.
    pub writes: usize,
}

/// The postcard body of +1 to each of `ids`.
pub fn encode(ids: &[String]) -> Body {
    let batch = BatchRequest::increments(ids);
    Body {
        bytes: Bytes::from(postcard::to_allocvec(&batch).expect("a batch encodes")),
        writes: ids.len(),
    }
}

/// [`BODIES`] bodies of `per_body` writes each to counters `<prefix>-<n>` picked by `picker`.
pub fn bodies(prefix: &str, picker: &CounterPicker, per_body: usize) -> Vec<Body> {
    bodies_named(picker, per_body, |n| format!("{prefix}-{n}"))
}

/// [`bodies`] over `ids`: `picker` picks an index into them.
pub fn bodies_over(ids: &[String], picker: &CounterPicker, per_body: usize) -> Vec<Body> {
    bodies_named(picker, per_body, |n| ids[n].clone())
}

fn bodies_named(
    picker: &CounterPicker,
    per_body: usize,
    name: impl Fn(usize) -> String,
) -> Vec<Body> {
    let mut rng = StdRng::seed_from_u64(6);
    (0..BODIES)
        .map(|_| {
            let ids: Vec<String> = (0..per_body).map(|_| name(picker.pick(&mut rng))).collect();
            encode(&ids)
        })
        .collect()
}

/// What one batched load measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchRun {
    /// Writes acknowledged per second.
    pub writes_per_sec: f64,
    /// Requests answered.
    pub requests: u64,
    /// Request latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
}

/// Sends `bodies` round robin over `connections` connections per address of `addresses` for
/// `duration`, asking for `answer`; every write must be applied.
pub async fn load(
    addresses: &[SocketAddr],
    connections: usize,
    bodies: Arc<Vec<Body>>,
    answer: Answer,
    duration: Duration,
) -> anyhow::Result<BatchRun> {
    let start = Instant::now();
    let end = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for (n, &address) in addresses
        .iter()
        .cycle()
        .take(connections * addresses.len())
        .enumerate()
    {
        let bodies = bodies.clone();
        tasks.spawn(async move {
            let mut connection = Connection::open(address).await?;
            let mut applied = 0u64;
            let mut latencies = Vec::new();
            let mut next = n;
            while Instant::now() < end {
                let sent = Instant::now();
                let body = &bodies[next % bodies.len()];
                connection
                    .send_batch(body.bytes.clone(), body.writes, answer)
                    .await?;
                applied += body.writes as u64;
                latencies.push(sent.elapsed());
                next += 1;
            }
            anyhow::Ok((applied, latencies))
        });
    }
    let mut applied = 0;
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (a, l) = done.context("a load connection panicked")??;
        applied += a;
        latencies.extend(l);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    Ok(BatchRun {
        writes_per_sec: applied as f64 / elapsed,
        requests: latencies.len() as u64,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// Writes +1 once to each counter `<prefix>-0..counters` through `address`, `chunk` per
/// request, two requests in flight.
pub async fn populate(
    address: SocketAddr,
    prefix: &str,
    counters: usize,
    chunk: usize,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..2 {
        let prefix = prefix.to_owned();
        tasks.spawn(async move {
            let mut connection = Connection::open(address).await?;
            let mut start = lane * chunk;
            while start < counters {
                let ids: Vec<String> = (start..(start + chunk).min(counters))
                    .map(|n| format!("{prefix}-{n}"))
                    .collect();
                let body = encode(&ids);
                connection
                    .send_batch(body.bytes, body.writes, Answer::Minimal)
                    .await?;
                start += 2 * chunk;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a populating connection panicked")??;
    }
    Ok(())
}

/// Writes +1 once to each of `ids` through `address`, `chunk` per request.
pub async fn write_once(address: SocketAddr, ids: &[String], chunk: usize) -> anyhow::Result<()> {
    let mut connection = Connection::open(address).await?;
    for part in ids.chunks(chunk) {
        let body = encode(part);
        connection
            .send_batch(body.bytes, body.writes, Answer::Minimal)
            .await?;
    }
    Ok(())
}
