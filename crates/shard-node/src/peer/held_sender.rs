//! The owner's side of `replicated` durability: every group the commit loop made durable in
//! its own log is sent to each peer of the datacenter (`POST /slots/{slot}/replicate`), and
//! its writes are answered once at least one peer holds it fsynced.
//!
//! Pipelined: the commit loop hands a group over and goes on committing the next; each peer
//! has one request in flight, and the groups logged meanwhile go in its next request, so one
//! round trip serves every group that gathered during the previous one. Answers are released
//! in the groups' order, and a group is answered only once it and every earlier group are
//! each held by some peer: a later group can answer a retry from an earlier group's key.
//!
//! A group no peer took within `shard.replication_timeout_ms` (or once every peer failed) has
//! its writes refused (503): they are in the owner's log, so their outcome is unknown to the
//! client, and a retry with the same key is answered from that key once a peer holds the
//! group. The refused group is still sent until a peer takes it, and until then the node
//! refuses new writes up front ([`HeldGroups::refusal`]), so what waits for a peer stays
//! bounded. At start, the log written before is sent first ([`resend_log`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use geocount_model::Durability;
use geocount_model::wire::{HeldBatch, POSTCARD_CONTENT_TYPE};
use geocount_net::HttpClient;
use hyper::Method;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::NodeConfig;
use crate::engine::held::{HeldGroups, Release, Replicated};
use crate::engine::wal;
use crate::error::StorageError;
use crate::storage::Storage;

/// How long a peer that failed waits before it is sent the groups again.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// The most bytes of groups one request carries (at least one group).
const MAX_BATCH_BYTES: usize = 32 << 20;

/// A peer groups are sent to.
#[derive(Debug, Clone)]
pub(crate) struct HeldPeer {
    /// Its slot's name.
    pub(crate) name: String,
    /// Where it listens.
    pub(crate) address: SocketAddr,
}

/// The commit loop's way to the held log of its groups.
#[derive(Clone)]
pub(crate) struct HeldSender {
    logged: mpsc::UnboundedSender<Logged>,
    refusing: Arc<Mutex<Option<String>>>,
}

/// A group the commit loop made durable in its own log.
struct Logged {
    /// Its slot version.
    version: u64,
    /// Its record as the log holds it; `None` when it logged nothing (its answers still wait
    /// for every earlier group).
    payload: Option<Vec<u8>>,
    release: Release,
}

/// A group on its way to the peers.
struct Group {
    seq: u64,
    payload: Vec<u8>,
}

/// What a peer's sender tells the coordinator.
enum Report {
    Held { peer: usize, seqs: Vec<u64> },
    Failed { peer: usize, error: String },
}

/// A group waiting to be answered.
struct Pending {
    seq: u64,
    release: Release,
    /// Told [`Replicated::Refused`]: it still waits for a peer.
    refused: bool,
    deadline: Instant,
    held: bool,
}

impl HeldSender {
    /// In `replicated` durability, the held log of the groups of `config`'s slot (its log
    /// of incarnation `incarnation`; every group it shows from `since_version` on a peer
    /// holds first) to its datacenter's other shard nodes through `client`.
    pub(crate) fn for_node(
        config: &NodeConfig,
        incarnation: u64,
        since_version: u64,
        client: &HttpClient,
    ) -> Option<Box<dyn HeldGroups>> {
        if config.settings.durability != Durability::Replicated {
            return None;
        }
        let peers = (config.datacenter.shards.iter().zip(config.slot_names()))
            .enumerate()
            .filter(|(n, _)| *n as u32 != config.slot.index)
            .map(|(_, (address, name))| HeldPeer {
                name,
                address: *address,
            })
            .collect();
        Some(Box::new(HeldSender::start(
            &config.slot.to_string(),
            (incarnation, since_version),
            peers,
            client.clone(),
            Duration::from_millis(config.settings.replication_timeout_ms),
        )))
    }

    /// Starts sending the groups of `slot` (whose log is of incarnation `incarnation`, shown
    /// from `since_version` on only once held) to `peers` through `client`; a group no peer
    /// holds after `timeout` is refused.
    pub(crate) fn start(
        slot: &str,
        (incarnation, since_version): (u64, u64),
        peers: Vec<HeldPeer>,
        client: HttpClient,
        timeout: Duration,
    ) -> Self {
        let (logged, logged_rx) = mpsc::unbounded_channel();
        let (reports, reports_rx) = mpsc::unbounded_channel();
        let refusing = Arc::new(Mutex::new(None));
        // Every group up to it is held by some peer: the senders drop those.
        let covered = Arc::new(AtomicU64::new(0));
        // The newest slot version handed over, sent with each batch.
        let made_through = Arc::new(AtomicU64::new(0));
        let mut senders = Vec::new();
        for (index, peer) in peers.iter().enumerate() {
            let (groups, groups_rx) = mpsc::unbounded_channel();
            senders.push(groups);
            let sender = PeerSender {
                index,
                url: client.url(peer.address, &format!("/slots/{slot}/replicate")),
                incarnation,
                since_version,
                client: client.clone(),
                timeout,
                covered: covered.clone(),
                made_through: made_through.clone(),
                reports: reports.clone(),
            };
            tokio::spawn(sender.run(groups_rx));
        }
        let coordinator = Coordinator {
            peers: peers.into_iter().map(|p| p.name).collect(),
            senders,
            covered,
            made_through,
            refusing: refusing.clone(),
            timeout,
            next_seq: 1,
            pending: VecDeque::new(),
            failing: Vec::new(),
        };
        tokio::spawn(coordinator.run(logged_rx, reports_rx));
        Self { logged, refusing }
    }
}

impl HeldGroups for HeldSender {
    /// Why writes are refused up front: a refused group still waits for a peer.
    fn refusal(&self) -> Option<String> {
        self.refusing.lock().expect("held gate lock").clone()
    }

    fn submit(&self, version: u64, payload: Option<Vec<u8>>, release: Release) {
        if let Err(mpsc::error::SendError(mut logged)) = self.logged.send(Logged {
            version,
            payload,
            release,
        }) {
            (logged.release)(Replicated::Refused("the node is stopping".to_owned()));
        }
    }
}

/// Hands `held` every record of the log in `data_dir`, written before this process
/// started: a group logged just before a crash may have reached no peer, and a retry of its
/// writes, answered from its keys, must not be acknowledged on this disk alone. At least one
/// record goes (an empty one when the log is), carrying this process's `since_version`;
/// `shown` is set once a peer holds them all: until then no copy may show the slot, which
/// holds them. `last_version` is the newest version recovered. Called before the commit loop
/// starts, so every later group is answered after them.
pub(crate) async fn resend_log(
    held: &dyn HeldGroups,
    storage: &Storage,
    data_dir: &Path,
    (shown, last_version): (Arc<AtomicBool>, u64),
) -> Result<(), StorageError> {
    let (disk, dir) = (storage.disk.clone(), data_dir.to_owned());
    let mut payloads = storage
        .blocking(move || {
            let all = wal::segments(&*disk, &dir)?;
            let mut payloads = Vec::new();
            for (i, &segment) in all.iter().enumerate() {
                let scan =
                    wal::scan_segment(&*disk, &dir, segment, i + 1 == all.len(), |record| {
                        payloads.push(postcard::to_allocvec(&record));
                    })?;
                // Corruption stops the start, as in replay: the records after it would reach
                // no peer.
                if let Some(corrupt) = scan.corruption() {
                    return Err(corrupt);
                }
            }
            payloads
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(StorageError::from)
        })
        .await?;
    if !payloads.is_empty() {
        tracing::info!(
            groups = payloads.len(),
            "sending the log written before this start to the peers"
        );
    }
    let last = match payloads.pop() {
        Some(last) => last,
        None => postcard::to_allocvec(&wal::LogRecord::default()).map_err(StorageError::from)?,
    };
    for payload in payloads {
        // Their writes were answered, or not, by the process that logged them.
        held.submit(last_version, Some(payload), Box::new(|_: Replicated| {}));
    }
    let release = move |told: Replicated| {
        if told == Replicated::Held {
            tracing::info!(
                "a peer holds the log this process started with: the slot may be pulled"
            );
            shown.store(true, Ordering::Release);
        }
    };
    held.submit(last_version, Some(last), Box::new(release));
    Ok(())
}

/// Orders the groups, marks what the peers hold, and answers in order.
struct Coordinator {
    peers: Vec<String>,
    senders: Vec<mpsc::UnboundedSender<Arc<Group>>>,
    covered: Arc<AtomicU64>,
    made_through: Arc<AtomicU64>,
    refusing: Arc<Mutex<Option<String>>>,
    timeout: Duration,
    next_seq: u64,
    pending: VecDeque<Pending>,
    /// The latest failure of each peer failing now.
    failing: Vec<Option<String>>,
}

impl Coordinator {
    async fn run(
        mut self,
        mut logged: mpsc::UnboundedReceiver<Logged>,
        mut reports: mpsc::UnboundedReceiver<Report>,
    ) {
        self.failing = vec![None; self.peers.len()];
        loop {
            let deadline = (self.pending.iter())
                .filter(|p| !p.refused && !p.held)
                .map(|p| p.deadline)
                .min();
            // In order: the same run every time under simulation.
            tokio::select! {
                biased;
                group = logged.recv() => match group {
                    Some(group) => self.logged(group),
                    None => return,
                },
                Some(report) = reports.recv() => self.report(report),
                () = sleep_until(deadline), if deadline.is_some() => self.expire(),
            }
            self.release_held();
        }
    }

    fn logged(
        &mut self,
        Logged {
            version,
            payload,
            release,
        }: Logged,
    ) {
        // Before the group goes: a batch never says less than the groups it carries.
        self.made_through.fetch_max(version, Ordering::Release);
        let seq = self.next_seq;
        self.next_seq += 1;
        let held = payload.is_none();
        if let Some(payload) = payload {
            let group = Arc::new(Group { seq, payload });
            for sender in &self.senders {
                let _ = sender.send(group.clone());
            }
        }
        self.pending.push_back(Pending {
            seq,
            release,
            refused: false,
            deadline: Instant::now() + self.timeout,
            held,
        });
        if !held && self.peers.is_empty() {
            self.refuse_waiting("this datacenter has no other shard node");
        }
    }

    fn report(&mut self, report: Report) {
        match report {
            Report::Held { peer, seqs } => {
                self.failing[peer] = None;
                let Some(first) = self.pending.front().map(|p| p.seq) else {
                    return;
                };
                for seq in seqs {
                    if let Some(pending) =
                        (seq.checked_sub(first)).and_then(|at| self.pending.get_mut(at as usize))
                    {
                        pending.held = true;
                    }
                }
            }
            Report::Failed { peer, error } => {
                self.failing[peer] = Some(error);
                if self.failing.iter().all(Option::is_some) {
                    let why: Vec<String> = (self.peers.iter().zip(&self.failing))
                        .map(|(name, error)| format!("{name}: {}", error.as_deref().unwrap_or("")))
                        .collect();
                    let reason = format!(
                        "no peer shard node could hold the write durably ({})",
                        why.join("; ")
                    );
                    self.refuse_waiting(&reason);
                }
            }
        }
    }

    /// Refuses the groups past their deadline that no peer holds yet.
    fn expire(&mut self) {
        let now = Instant::now();
        let timeout_ms = self.timeout.as_millis();
        let reason = format!(
            "no peer shard node held the write durably within shard.replication_timeout_ms ({timeout_ms} ms)"
        );
        for pending in &mut self.pending {
            if !pending.held && pending.deadline <= now {
                refuse(pending, &reason);
            }
        }
        self.update_gate(Some(&reason));
    }

    /// Refuses every group no peer holds yet.
    fn refuse_waiting(&mut self, reason: &str) {
        for pending in &mut self.pending {
            if !pending.held {
                refuse(pending, reason);
            }
        }
        self.update_gate(Some(reason));
    }

    /// Answers, in order, the groups that every earlier group's peers hold.
    fn release_held(&mut self) {
        while self.pending.front().is_some_and(|p| p.held) {
            let mut pending = self.pending.pop_front().expect("a front group");
            self.covered.store(pending.seq, Ordering::Release);
            (pending.release)(Replicated::Held);
        }
        self.update_gate(None);
    }

    /// Refuses writes up front while a refused group waits for a peer (`reason`: why, when
    /// one was just refused); takes them again once none does.
    fn update_gate(&self, reason: Option<&str>) {
        let mut refusing = self.refusing.lock().expect("held gate lock");
        let waiting = self.pending.iter().any(|p| p.refused && !p.held);
        if !waiting {
            if refusing.take().is_some() {
                tracing::info!("a peer holds every refused group again: taking writes");
            }
        } else if let Some(reason) = reason {
            if refusing.is_none() {
                tracing::warn!(%reason, "refusing writes until a peer holds the refused ones");
            }
            *refusing = Some(reason.to_owned());
        }
    }
}

fn refuse(pending: &mut Pending, reason: &str) {
    if !pending.refused {
        pending.refused = true;
        (pending.release)(Replicated::Refused(reason.to_owned()));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Sends one peer every group it does not hold and no other peer does, one request at a time.
struct PeerSender {
    index: usize,
    url: String,
    incarnation: u64,
    since_version: u64,
    client: HttpClient,
    timeout: Duration,
    covered: Arc<AtomicU64>,
    made_through: Arc<AtomicU64>,
    reports: mpsc::UnboundedSender<Report>,
}

impl PeerSender {
    async fn run(self, mut groups: mpsc::UnboundedReceiver<Arc<Group>>) {
        let mut queue: VecDeque<Arc<Group>> = VecDeque::new();
        loop {
            if queue.is_empty() {
                match groups.recv().await {
                    Some(group) => queue.push_back(group),
                    None => return,
                }
            }
            while let Ok(group) = groups.try_recv() {
                queue.push_back(group);
            }
            let covered = self.covered.load(Ordering::Acquire);
            queue.retain(|group| group.seq > covered);
            let mut bytes = 0;
            let batch: Vec<Arc<Group>> = (queue.iter())
                .take_while(|group| {
                    let first = bytes == 0;
                    bytes += group.payload.len();
                    first || bytes <= MAX_BATCH_BYTES
                })
                .cloned()
                .collect();
            if batch.is_empty() {
                continue;
            }
            let report = match self.send(&batch).await {
                Ok(()) => {
                    queue.drain(..batch.len());
                    Report::Held {
                        peer: self.index,
                        seqs: batch.iter().map(|group| group.seq).collect(),
                    }
                }
                Err(error) => Report::Failed {
                    peer: self.index,
                    error,
                },
            };
            let failed = matches!(report, Report::Failed { .. });
            if self.reports.send(report).is_err() {
                return;
            }
            if failed {
                tokio::time::sleep(RETRY_EVERY).await;
            }
        }
    }

    async fn send(&self, batch: &[Arc<Group>]) -> Result<(), String> {
        let body = HeldBatch {
            incarnation: self.incarnation,
            since_version: self.since_version,
            made_through: self.made_through.load(Ordering::Acquire),
            groups: batch.iter().map(|group| group.payload.as_slice()).collect(),
        };
        let body = encode_batch(&body).map_err(|e| format!("cannot encode: {e}"))?;
        let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
        let sent = self
            .client
            .send(Method::POST, &self.url, &headers, Bytes::from(body));
        match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(answer)) if answer.status.is_success() => Ok(()),
            Ok(Ok(answer)) => Err(format!(
                "answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }
}

/// `batch` as postcard encodes it, each group copied at once: a byte string encodes as a
/// sequence of bytes does (its length, then the bytes), which goes a byte at a time.
fn encode_batch(batch: &HeldBatch<'_>) -> postcard::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct BatchOf<'a> {
        incarnation: u64,
        since_version: u64,
        made_through: u64,
        groups: Groups<'a>,
    }
    struct Groups<'a>(&'a [&'a [u8]]);
    impl Serialize for Groups<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(self.0.iter().map(|group| ByteString(group)))
        }
    }
    struct ByteString<'a>(&'a [u8]);
    impl Serialize for ByteString<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }
    let HeldBatch {
        incarnation,
        since_version,
        made_through,
        groups,
    } = batch;
    postcard::to_allocvec(&BatchOf {
        incarnation: *incarnation,
        since_version: *since_version,
        made_through: *made_through,
        groups: Groups(groups),
    })
}

#[cfg(test)]
mod tests;
