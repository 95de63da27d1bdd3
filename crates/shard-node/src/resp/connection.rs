//! One client connection: commands taken off its bytes as they arrive and run in the order
//! they came, each answered in the protocol version the connection spoke when it was sent.
//!
//! Commands run one after another, as Redis runs them, so a read sees every write sent before
//! it on the connection. What keeps a pipeline fast is batching: consecutive increments
//! (`INCR`, `INCRBY`, `DECR`, `DECRBY`) go to the commit loop as one batch, where they share a
//! group commit with every other connection's, and consecutive `GET`s are read at once. Up to
//! `resp.max_pipeline` commands, and `resp.max_pipeline_bytes` of them, are taken ahead of
//! their answers; past either the connection is not read until the oldest are answered. A
//! queued command holds its frame's bytes (its arguments are ranges in them); a reply ready
//! behind an earlier command is held encoded, and counts as bytes too.
//!
//! A malformed or oversized frame is answered with its protocol error, the commands before it
//! are answered, and the connection is closed; so is one that sent `QUIT`, and one with no
//! command in flight that sends nothing for `resp.idle_timeout_ms`. Nothing else ends a
//! connection but the client.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::{BoxFuture, Either, FutureExt, Ready, ready};
use geocount_model::{RespSettings, Right};
use geocount_resp::{Args, Protocol, Reply, RespCommand, take_command};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::session::Session;
use super::{Shared, about, counters};

/// The replies of one queued entry: one command's, or a batch's.
pub(crate) enum Replies {
    /// One command's reply.
    One(Reply),
    /// The replies of a batch of consecutive commands, in order.
    Many(Vec<Reply>),
    /// Replies encoded already.
    Encoded(Vec<u8>),
}

/// A queued entry's replies: ready at once, or once its work is done.
type Answer = Either<Ready<Replies>, BoxFuture<'static, Replies>>;

/// What dispatching a command gives: its answer, or a command to batch with the same
/// commands that follow it.
enum Dispatched {
    Answer(Answer),
    Batched(Batched),
}

/// A command run in a batch with the same consecutive commands.
enum Batched {
    /// An increment: key and delta.
    Increment(Bytes, i64),
    /// A `GET`.
    Get(Bytes),
}

/// How much is read from the socket at a time, at least.
const READ_CHUNK: usize = 16 * 1024;

/// Serves one connection until the client closes it, sends `QUIT` or a malformed frame, or an
/// I/O error ends it.
pub(crate) async fn run<S>(io: S, peer: SocketAddr, shared: &Shared)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let id = shared.stats.last_id.fetch_add(1, Ordering::Relaxed) + 1;
    let mut session = Session::new(id, &shared.state.access);
    if let Err(error) = serve(io, shared, &mut session).await {
        tracing::debug!(%peer, %error, "RESP connection ended");
    }
}

/// A queued entry: the protocol its replies go in, how many commands it answers, the bytes it
/// holds (its frames, or its encoded replies), its work.
struct Entry {
    protocol: Protocol,
    count: usize,
    bytes: usize,
    answer: Answer,
}

/// The commands of one connection taken and not answered yet, run in order.
#[derive(Default)]
struct Pipeline {
    /// The entries, oldest first.
    queue: VecDeque<Entry>,
    /// Commands in the queue (a batch counts each of its commands).
    in_flight: usize,
    /// Commands taken and not yet queued, all of one kind: they go as one batch.
    batch: Vec<Batched>,
    /// The bytes the queue and the batch hold.
    bytes: usize,
    /// The bytes of the batch's frames.
    batch_bytes: usize,
}

impl Pipeline {
    /// Whether no more commands may be taken until the oldest are answered.
    fn full(&self, settings: &RespSettings) -> bool {
        self.in_flight + self.batch.len() >= settings.max_pipeline
            || self.bytes >= settings.max_pipeline_bytes
    }

    /// Queues `answer`, of `count` commands whose frames were `bytes` long; an answer ready
    /// now is kept encoded, as what it holds.
    fn push(&mut self, protocol: Protocol, count: usize, bytes: usize, answer: Answer) {
        let (bytes, answer) = match answer {
            Either::Left(now) => {
                let mut encoded = Vec::new();
                encode(protocol, now.into_inner(), &mut encoded);
                (
                    encoded.len(),
                    Either::Left(ready(Replies::Encoded(encoded))),
                )
            }
            work => (bytes, work),
        };
        self.in_flight += count;
        self.bytes += bytes;
        self.queue.push_back(Entry {
            protocol,
            count,
            bytes,
            answer,
        });
    }

    /// Adds `command`, whose frame was `bytes` long, to the batch, queueing the batch first if
    /// it holds another kind.
    fn add(&mut self, shared: &Shared, protocol: Protocol, command: Batched, bytes: usize) {
        let same = matches!(
            (self.batch.first(), &command),
            (None, _)
                | (Some(Batched::Increment(..)), Batched::Increment(..))
                | (Some(Batched::Get(_)), Batched::Get(_))
        );
        if !same {
            self.flush(shared, protocol);
        }
        self.batch.push(command);
        self.batch_bytes += bytes;
        self.bytes += bytes;
    }

    /// Queues the batch taken so far.
    fn flush(&mut self, shared: &Shared, protocol: Protocol) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let bytes = std::mem::take(&mut self.batch_bytes);
        // Counted already, as the batch's.
        self.bytes -= bytes;
        let count = batch.len();
        let state = shared.state.clone();
        let work = if matches!(batch[0], Batched::Increment(..)) {
            let increments = batch
                .into_iter()
                .filter_map(|command| match command {
                    Batched::Increment(key, delta) => Some((key, delta)),
                    Batched::Get(_) => None,
                })
                .collect();
            async move { Replies::Many(counters::incr(state, increments).await) }.boxed()
        } else {
            let keys = batch
                .into_iter()
                .filter_map(|command| match command {
                    Batched::Get(key) => Some(key),
                    Batched::Increment(..) => None,
                })
                .collect();
            async move { Replies::Many(counters::get_each(state, keys).await) }.boxed()
        };
        self.push(protocol, count, bytes, Either::Right(work));
    }

    /// The replies of the oldest entry, once its work is done; the next entry's work starts
    /// only then. Dropped before it is done, the entry keeps what it did so far.
    async fn next(&mut self) -> Option<(Protocol, usize, Replies)> {
        let replies = (&mut self.queue.front_mut()?.answer).await;
        let entry = self.queue.pop_front()?;
        self.in_flight -= entry.count;
        self.bytes -= entry.bytes;
        Some((entry.protocol, entry.count, replies))
    }
}

async fn serve<S>(io: S, shared: &Shared, session: &mut Session) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let settings = &shared.settings;
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = Vec::with_capacity(READ_CHUNK);
    let mut pipeline = Pipeline::default();
    let idle_timeout = Duration::from_millis(settings.idle_timeout_ms);
    // No more commands are taken: QUIT, a bad frame, or the client closed its side.
    let mut closing = false;
    loop {
        while !closing && !pipeline.full(settings) {
            // The protocol of the replies to the commands before this one.
            let protocol = session.protocol;
            let args = match take_command(&mut input, settings.max_frame_bytes) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => args,
                Ok(None) => break,
                Err(error) => {
                    pipeline.flush(shared, protocol);
                    let reply = Replies::One(Reply::error(error.to_string()));
                    pipeline.push(protocol, 1, 0, Either::Left(ready(reply)));
                    closing = true;
                    break;
                }
            };
            closing = args[0].eq_ignore_ascii_case(b"quit");
            let bytes = args.frame_bytes();
            match dispatch(shared, session, args) {
                Dispatched::Batched(command) => pipeline.add(shared, protocol, command, bytes),
                Dispatched::Answer(answer) => {
                    pipeline.flush(shared, protocol);
                    // In the protocol it leaves the connection in: HELLO 3's own is RESP3.
                    pipeline.push(session.protocol, 1, bytes, answer);
                }
            }
        }
        pipeline.flush(shared, session.protocol);
        if pipeline.queue.is_empty() {
            if closing {
                break;
            }
            input.reserve(READ_CHUNK);
            let read = reader.read_buf(&mut input);
            let read = if idle_timeout.is_zero() {
                read.await
            } else {
                match tokio::time::timeout(idle_timeout, read).await {
                    Ok(read) => read,
                    // Idle: closed without a reply, as Redis closes it.
                    Err(_) => break,
                }
            };
            if read? == 0 {
                break;
            }
            continue;
        }
        let can_read = !closing && !pipeline.full(settings);
        tokio::select! {
            biased;
            Some((protocol, count, replies)) = pipeline.next() => {
                let mut answered = count;
                encode(protocol, replies, &mut output);
                // Every reply ready now goes out in the same write, up to the bytes a
                // connection may hold.
                while output.len() < settings.max_pipeline_bytes {
                    let Some(Some((protocol, count, replies))) = pipeline.next().now_or_never()
                    else {
                        break;
                    };
                    encode(protocol, replies, &mut output);
                    answered += count;
                }
                shared.stats.commands.fetch_add(answered as u64, Ordering::Relaxed);
                writer.write_all(&output).await?;
                output.clear();
            }
            read = async {
                input.reserve(READ_CHUNK);
                reader.read_buf(&mut input).await
            }, if can_read => {
                if read? == 0 {
                    closing = true;
                }
            }
        }
    }
    writer.flush().await?;
    writer.shutdown().await
}

fn encode(protocol: Protocol, replies: Replies, output: &mut Vec<u8>) {
    match replies {
        Replies::One(reply) => reply.encode(protocol, output),
        Replies::Many(replies) => {
            for reply in replies {
                reply.encode(protocol, output);
            }
        }
        Replies::Encoded(encoded) => output.extend_from_slice(&encoded),
    }
}

/// The command `args` ask once the session may send it, or the reply when it is answered
/// at once: a command that does not parse, `AUTH`, `HELLO`, `QUIT`, or any other before the
/// session is authenticated.
fn admitted(shared: &Shared, session: &mut Session, args: &Args) -> Result<RespCommand, Reply> {
    let command = match geocount_resp::parse(args) {
        Ok(command) => command,
        Err(error) => {
            // An unknown command before AUTH is NOAUTH, as in Redis.
            session.authenticated()?;
            return Err(Reply::error(error.to_string()));
        }
    };
    let access = &shared.state.access;
    match command {
        RespCommand::Auth { username, password } => {
            Err(session.auth(access, username.as_deref(), &password))
        }
        RespCommand::Hello(hello) => Err(session.hello(access, hello)),
        RespCommand::Quit => Err(Reply::OK),
        command => session.authenticated().map(|()| command),
    }
}

/// Starts command `args` (its name first) on `session`: a connection command runs here and
/// now, a counter command's work starts when the queue first polls it.
fn dispatch(shared: &Shared, session: &mut Session, args: Args) -> Dispatched {
    let now = |reply| Dispatched::Answer(Either::Left(ready(Replies::One(reply))));
    let command = match admitted(shared, session, &args) {
        Ok(command) => command,
        Err(reply) => return now(reply),
    };
    let state = &shared.state;
    let counter = |right: Right, name: &str, work: BoxFuture<'static, Reply>| match session
        .may(right, name)
    {
        Ok(()) => Dispatched::Answer(Either::Right(work.map(Replies::One).boxed())),
        Err(refusal) => now(refusal),
    };
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    match command {
        RespCommand::Ping(None) => now(Reply::Simple("PONG")),
        RespCommand::Ping(Some(message)) | RespCommand::Echo(message) => now(Reply::Bulk(message)),
        RespCommand::Select(index) => now(Session::select(index)),
        RespCommand::Client(client) => now(session.client(client)),
        RespCommand::Command(query) => now(about::command(&query)),
        RespCommand::Info(sections) => now(about::info(shared, &sections)),
        RespCommand::ConfigGet(patterns) => now(about::config_get(shared, &patterns)),
        RespCommand::IncrBy { key, delta } => match session.may(Right::Write, &name) {
            Ok(()) => Dispatched::Batched(Batched::Increment(key, delta)),
            Err(refusal) => now(refusal),
        },
        RespCommand::Get(key) => match session.may(Right::Read, &name) {
            Ok(()) => Dispatched::Batched(Batched::Get(key)),
            Err(refusal) => now(refusal),
        },
        RespCommand::PfAdd { key, elements } => counter(
            Right::Write,
            &name,
            counters::pfadd(state.clone(), key, elements).boxed(),
        ),
        RespCommand::Del(keys) => counter(
            Right::Admin,
            &name,
            counters::del(state.clone(), keys).boxed(),
        ),
        RespCommand::Expire {
            key,
            millis,
            command,
        } => counter(
            Right::Admin,
            &name,
            counters::expire(state.clone(), key, millis, command).boxed(),
        ),
        RespCommand::Persist(key) => counter(
            Right::Admin,
            &name,
            counters::persist(state.clone(), key).boxed(),
        ),
        RespCommand::Ttl { key, millis } => counter(
            Right::Read,
            &name,
            counters::ttl(state.clone(), key, millis).boxed(),
        ),
        RespCommand::MGet(keys) => counter(
            Right::Read,
            &name,
            counters::mget(state.clone(), keys).boxed(),
        ),
        RespCommand::PfCount(keys) => counter(
            Right::Read,
            &name,
            counters::pfcount(state.clone(), keys).boxed(),
        ),
        RespCommand::Auth { .. } | RespCommand::Hello(_) | RespCommand::Quit => {
            unreachable!("answered above")
        }
    }
}
