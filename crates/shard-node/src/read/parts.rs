//! The other datacenters' parts of counters, as the global aggregator last reported them.
//!
//! Each counter's parts are cached with the time they were fetched; a read takes them while
//! they are younger than `shard.world_refresh_ms` and counted from at least the generation the
//! node counts from (a reset or delete it learned since makes them due). Missing and due
//! counters go to one fetcher task, which takes every request waiting when it starts a round
//! and asks the global tier once for all their distinct counters (`POST /parts`, postcard), so
//! many readers' misses cost one call. A counter goes to the global replicas holding its
//! partition, the one that answered last first, the next when one cannot be reached or finds
//! another datacenter stale. A stale or unreachable answer is an error for that read and is not
//! cached.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use geocount_model::wire::{
    CounterParts, HeldParts, POSTCARD_CONTENT_TYPE, PartsAnswer, PartsRequest,
};
use geocount_model::{Clock, CounterId, HlcTimestamp, Partitions};
use geocount_net::HttpClient;
use hyper::Method;
use tokio::sync::{mpsc, oneshot};

use crate::error::ShardError;
use crate::metrics::ShardMetrics;

/// The most counters one `POST /parts` asks for; more go in several calls.
const MAX_ASKED: usize = 4_096;

/// Beyond this many cached counters, those due for a refresh are dropped.
const MAX_CACHED: usize = 1 << 20;

/// Requests waiting for the fetcher; beyond this, readers wait.
const ASK_QUEUE: usize = 4_096;

/// Where the global tier is and how this node asks it.
pub struct GlobalTier {
    /// This node's datacenter: its part is computed here, never asked.
    pub datacenter: String,
    /// Every global replica with the partitions it holds, replica 0 first.
    pub replicas: Vec<(SocketAddr, Partitions)>,
    /// The client, with this node's credentials.
    pub client: HttpClient,
    /// The node's metrics: calls made, reads refused.
    pub metrics: Arc<ShardMetrics>,
}

/// One counter's parts and the unix ms they were fetched at.
pub type Fetched = Result<(u64, Arc<HeldParts>), ShardError>;

/// Why a counter's parts cannot be given (cloned to every reader of the counter).
#[derive(Debug, Clone)]
enum Miss {
    /// A datacenter other than this node's is staler than the bound.
    Stale(String),
    /// No global replica holding the counter answered.
    Unreachable(String),
}

impl From<Miss> for ShardError {
    fn from(miss: Miss) -> Self {
        match miss {
            Miss::Stale(why) => ShardError::Unavailable(format!(
                "the global aggregator refuses the other datacenters' parts: {why}"
            )),
            Miss::Unreachable(why) => ShardError::Unreachable(format!(
                "no global aggregator replica answered for the other datacenters' parts: {why}"
            )),
        }
    }
}

/// One counter's parts as the fetcher hands them over: with the unix ms they were fetched at.
type Handed = Result<(u64, Arc<HeldParts>), Miss>;

/// One reader's counters (with the generation it counts from) and where to answer.
struct Ask {
    counters: Vec<(CounterId, HlcTimestamp)>,
    reply: oneshot::Sender<Vec<Handed>>,
}

/// Cached parts: the unix ms they were fetched at, and the parts.
type Cache = Mutex<HashMap<CounterId, (u64, Arc<HeldParts>)>>;

/// The other datacenters' parts, cached, and the way to the fetcher.
pub struct OtherParts {
    cache: Arc<Cache>,
    metrics: Arc<ShardMetrics>,
    asks: mpsc::Sender<Ask>,
    refresh_ms: u64,
    clock: Arc<dyn Clock>,
}

impl OtherParts {
    /// Starts the fetcher of `tier`'s parts; parts older than `refresh_ms` are asked again.
    pub fn start(tier: GlobalTier, refresh_ms: u64, clock: Arc<dyn Clock>) -> Self {
        let cache = Arc::new(Cache::default());
        let metrics = tier.metrics.clone();
        let (asks, waiting) = mpsc::channel(ASK_QUEUE);
        let fetcher = Fetcher {
            tier,
            preferred: AtomicUsize::new(0),
            cache: cache.clone(),
            clock: clock.clone(),
            refresh_ms,
        };
        tokio::spawn(fetcher.run(waiting));
        Self {
            cache,
            metrics,
            asks,
            refresh_ms,
            clock,
        }
    }

    /// The parts of each counter of `wanted` (with the generation this node counts it from),
    /// in order: cached when fresh enough, else asked of the global tier.
    pub async fn get(&self, wanted: &[(CounterId, HlcTimestamp)]) -> Vec<Fetched> {
        let now_ms = self.clock.now_unix_ms();
        let mut found: Vec<Option<Fetched>> = Vec::with_capacity(wanted.len());
        let mut missing = Vec::new();
        {
            let cache = self.cache.lock().expect("parts cache lock");
            for (n, (id, from)) in wanted.iter().enumerate() {
                match cache.get(id) {
                    Some((at_ms, parts))
                        if now_ms.saturating_sub(*at_ms) < self.refresh_ms
                            && parts.from >= *from =>
                    {
                        found.push(Some(Ok((*at_ms, parts.clone()))));
                    }
                    _ => {
                        found.push(None);
                        missing.push((n, (id.clone(), *from)));
                    }
                }
            }
        }
        if !missing.is_empty() {
            let (at, counters): (Vec<usize>, Vec<_>) = missing.into_iter().unzip();
            let (reply, answer) = oneshot::channel();
            let stopped = || Miss::Unreachable("the node is shutting down".into());
            let answers = match self.asks.send(Ask { counters, reply }).await {
                Ok(()) => answer
                    .await
                    .unwrap_or_else(|_| vec![Err(stopped()); at.len()]),
                Err(_) => vec![Err(stopped()); at.len()],
            };
            let refused = answers.iter().filter(|answer| answer.is_err()).count();
            self.metrics.world_refused.inc_by(refused as u64);
            for (n, answer) in at.into_iter().zip(answers) {
                found[n] = Some(answer.map_err(ShardError::from));
            }
        }
        found
            .into_iter()
            .map(|f| f.expect("every counter answered"))
            .collect()
    }
}

/// The task that asks the global tier.
struct Fetcher {
    tier: GlobalTier,
    /// The replica that answered last, tried first.
    preferred: AtomicUsize,
    cache: Arc<Cache>,
    clock: Arc<dyn Clock>,
    refresh_ms: u64,
}

impl Fetcher {
    /// Answers every waiting request in rounds: each round asks once for the distinct
    /// counters of every request waiting when it starts.
    async fn run(self, mut waiting: mpsc::Receiver<Ask>) {
        while let Some(first) = waiting.recv().await {
            let mut round = vec![first];
            let mut asked = round[0].counters.len();
            while asked < MAX_ASKED {
                let Ok(ask) = waiting.try_recv() else { break };
                asked += ask.counters.len();
                round.push(ask);
            }
            let mut distinct: HashMap<CounterId, HlcTimestamp> = HashMap::new();
            for (id, from) in round.iter().flat_map(|ask| &ask.counters) {
                let newest = distinct.entry(id.clone()).or_default();
                *newest = (*newest).max(*from);
            }
            let counters: Vec<(CounterId, HlcTimestamp)> = distinct.into_iter().collect();
            let answers = self.fetch(&counters).await;
            let at_ms = self.clock.now_unix_ms();
            let mut fetched = HashMap::with_capacity(counters.len());
            for ((id, _), answer) in counters.into_iter().zip(answers) {
                fetched.insert(id, answer.map(|parts| (at_ms, Arc::new(parts))));
            }
            self.keep(&fetched, at_ms);
            for ask in round {
                let answers = (ask.counters.iter())
                    .map(|(id, _)| fetched[id].clone())
                    .collect();
                let _ = ask.reply.send(answers);
            }
        }
    }

    /// Caches the parts fetched at `at_ms`, dropping those due for a refresh when too many.
    fn keep(&self, fetched: &HashMap<CounterId, Handed>, at_ms: u64) {
        let mut cache = self.cache.lock().expect("parts cache lock");
        if cache.len() + fetched.len() > MAX_CACHED {
            let refresh_ms = self.refresh_ms;
            cache.retain(|_, (at, _)| at_ms.saturating_sub(*at) < refresh_ms);
        }
        for (id, answer) in fetched {
            if let Ok(parts) = answer {
                cache.insert(id.clone(), parts.clone());
            }
        }
    }

    /// The parts of `counters`, in order, from the replicas holding each one's partition.
    async fn fetch(&self, counters: &[(CounterId, HlcTimestamp)]) -> Vec<Result<HeldParts, Miss>> {
        let mut answers: Vec<Option<Result<HeldParts, Miss>>> = vec![None; counters.len()];
        // Replicas hold the same partitions or none in common: one group of replicas each.
        let mut groups: Vec<(&Partitions, Vec<SocketAddr>)> = Vec::new();
        for (address, held) in &self.tier.replicas {
            match groups
                .iter_mut()
                .find(|(partitions, _)| *partitions == held)
            {
                Some((_, addresses)) => addresses.push(*address),
                None => groups.push((held, vec![*address])),
            }
        }
        for (partitions, addresses) in &groups {
            let held: Vec<usize> = (0..counters.len())
                .filter(|&n| answers[n].is_none() && partitions.holds(counters[n].0.as_str()))
                .collect();
            for chunk in held.chunks(MAX_ASKED) {
                let asked: Vec<_> = chunk.iter().map(|&n| counters[n].clone()).collect();
                let parts = self.ask(addresses, asked).await;
                for (&n, part) in chunk.iter().zip(parts) {
                    answers[n] = Some(part);
                }
            }
        }
        let unheld = || {
            Err(Miss::Unreachable(
                "no global replica holds its partition".into(),
            ))
        };
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(unheld))
            .collect()
    }

    /// Asks `addresses` in turn (the one that answered last first) for `counters`' parts.
    async fn ask(
        &self,
        addresses: &[SocketAddr],
        counters: Vec<(CounterId, HlcTimestamp)>,
    ) -> Vec<Result<HeldParts, Miss>> {
        let count = counters.len();
        let request = PartsRequest {
            datacenter: self.tier.datacenter.clone(),
            max_staleness_ms: None,
            counters,
        };
        let body = match postcard::to_allocvec(&request) {
            Ok(body) => Bytes::from(body),
            Err(e) => return vec![Err(Miss::Unreachable(format!("cannot encode: {e}"))); count],
        };
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        // A replica that finds another datacenter stale: another replica may be fresher.
        let mut stale = None;
        for turn in 0..addresses.len() {
            let at = (first + turn) % addresses.len();
            let address = addresses[at];
            match self.ask_one(address, body.clone(), count).await {
                Ok(parts) if parts.iter().any(|p| matches!(p, Err(Miss::Stale(_)))) => {
                    stale.get_or_insert(parts);
                }
                Ok(parts) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return parts;
                }
                Err(why) => failures.push(format!("{address}: {why}")),
            }
        }
        stale.unwrap_or_else(|| vec![Err(Miss::Unreachable(failures.join("; "))); count])
    }

    /// One `POST /parts` to `address`: each of the `count` counters' parts, or why the
    /// replica gave none.
    async fn ask_one(
        &self,
        address: SocketAddr,
        body: Bytes,
        count: usize,
    ) -> Result<Vec<Result<HeldParts, Miss>>, String> {
        self.tier.metrics.world_fetches.inc();
        let url = self.tier.client.url(address, "/parts");
        let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
        let answer = (self.tier.client)
            .send(Method::POST, &url, &headers, body)
            .await
            .map_err(|e| e.to_string())?;
        if !answer.status.is_success() {
            let text = String::from_utf8_lossy(&answer.body);
            return Err(format!("answered {}: {text}", answer.status));
        }
        let parts: PartsAnswer =
            postcard::from_bytes(&answer.body).map_err(|e| format!("unreadable answer: {e}"))?;
        if parts.counters.len() != count {
            return Err(format!(
                "answered {} counters of {count}",
                parts.counters.len()
            ));
        }
        if parts
            .counters
            .iter()
            .any(|c| matches!(c, CounterParts::NotHeld))
        {
            return Err("does not hold the partition of a counter asked".into());
        }
        Ok(parts
            .counters
            .into_iter()
            .map(|part| match part {
                CounterParts::Held(parts) => Ok(parts),
                CounterParts::Stale(why) => Err(Miss::Stale(why)),
                CounterParts::NotHeld => Err(Miss::Unreachable("partition not held".into())),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SystemClock;
    use std::time::Duration;

    #[tokio::test]
    async fn readers_waiting_at_once_share_one_call_and_failures_are_not_cached() {
        // Nothing listens there: every call fails at once.
        let closed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let metrics = Arc::new(ShardMetrics::default());
        let tier = GlobalTier {
            datacenter: "USA_0".into(),
            replicas: vec![(closed, Partitions::all(1)), (closed, Partitions::all(1))],
            client: HttpClient::new(Duration::from_secs(1)),
            metrics: metrics.clone(),
        };
        let parts = Arc::new(OtherParts::start(tier, 60_000, Arc::new(SystemClock)));
        let readers: Vec<_> = (0..50)
            .map(|n| {
                let parts = parts.clone();
                let id = CounterId::new(format!("c{}", n % 10)).unwrap();
                tokio::spawn(async move { parts.get(&[(id, HlcTimestamp::default())]).await })
            })
            .collect();
        for reader in readers {
            let answers = reader.await.unwrap();
            assert!(
                matches!(&answers[..], [Err(ShardError::Unreachable(_))]),
                "{answers:?}"
            );
        }
        // Two replicas tried per round; the 50 readers waited in few rounds.
        let calls = metrics.world_fetches.get();
        assert!((2..=10).contains(&calls), "{calls} calls");
        assert_eq!(metrics.world_refused.get(), 50);
        // A failure is not kept: the next read asks again.
        let id = CounterId::new("c0").unwrap();
        let again = parts.get(&[(id, HlcTimestamp::default())]).await;
        assert!(matches!(&again[..], [Err(ShardError::Unreachable(_))]));
        assert_eq!(metrics.world_fetches.get(), calls + 2);
    }
}
