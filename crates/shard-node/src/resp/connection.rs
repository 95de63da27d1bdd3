//! One client connection: commands taken off its bytes as they arrive, each started at once
//! (so a pipeline's writes reach the commit loop together and share its group commits), up to
//! `resp.max_pipeline` in flight, and answered in the order they came, each in the protocol
//! version the connection spoke when it was sent.
//!
//! A malformed or oversized frame is answered with its protocol error, the commands before it
//! are answered, and the connection is closed; so is one that sent `QUIT`. Nothing else ends a
//! connection but the client.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use futures_util::future::{BoxFuture, Either, FutureExt, Ready, ready};
use futures_util::stream::{FuturesOrdered, StreamExt};
use geocount_model::Right;
use geocount_resp::{Protocol, Reply, RespCommand, take_command};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::session::Session;
use super::{Shared, about, counters};

/// A command's reply: ready at once, or once its work is done.
type Answer = Either<Ready<Reply>, BoxFuture<'static, Reply>>;

/// A reply to come, with the protocol version it is sent in.
type Queued = futures_util::future::Join<Ready<Protocol>, Answer>;

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

async fn serve<S>(io: S, shared: &Shared, session: &mut Session) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let settings = &shared.settings;
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = Vec::with_capacity(READ_CHUNK);
    let mut queue: FuturesOrdered<Queued> = FuturesOrdered::new();
    // No more commands are taken: QUIT, a bad frame, or the client closed its side.
    let mut closing = false;
    loop {
        while !closing && queue.len() < settings.max_pipeline {
            match take_command(&mut input, settings.max_frame_bytes) {
                Ok(Some(args)) if args.is_empty() => {}
                Ok(Some(args)) => {
                    let quit = args[0].eq_ignore_ascii_case(b"quit");
                    let answer = dispatch(shared, session, args);
                    queue.push_back(futures_util::future::join(ready(session.protocol), answer));
                    closing = quit;
                }
                Ok(None) => break,
                Err(error) => {
                    let reply = Reply::error(error.to_string());
                    let answer = Either::Left(ready(reply));
                    queue.push_back(futures_util::future::join(ready(session.protocol), answer));
                    closing = true;
                }
            }
        }
        if queue.is_empty() {
            if closing {
                break;
            }
            input.reserve(READ_CHUNK);
            if reader.read_buf(&mut input).await? == 0 {
                break;
            }
            continue;
        }
        let can_read = !closing && queue.len() < settings.max_pipeline;
        tokio::select! {
            biased;
            Some((protocol, reply)) = queue.next() => {
                reply.encode(protocol, &mut output);
                let mut answered = 1;
                // Every reply ready now goes out in the same write.
                while let Some(Some((protocol, reply))) = queue.next().now_or_never() {
                    reply.encode(protocol, &mut output);
                    answered += 1;
                }
                shared.stats.commands.fetch_add(answered, Ordering::Relaxed);
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

/// Starts command `args` (its name first) on `session`: a connection command runs here and
/// now, a counter command's work starts when the queue first polls it.
fn dispatch(shared: &Shared, session: &mut Session, args: Vec<Bytes>) -> Answer {
    let now = |reply| Either::Left(ready(reply));
    let command = match geocount_resp::parse(&args) {
        Ok(command) => command,
        Err(error) => {
            // An unknown command before AUTH is NOAUTH, as in Redis.
            if let Err(refusal) = session.authenticated() {
                return now(refusal);
            }
            return now(Reply::error(error.to_string()));
        }
    };
    let access = &shared.state.access;
    match command {
        RespCommand::Auth { username, password } => {
            return now(session.auth(access, username.as_deref(), &password));
        }
        RespCommand::Hello(hello) => return now(session.hello(access, hello)),
        RespCommand::Quit => return now(Reply::OK),
        _ => {}
    }
    if let Err(refusal) = session.authenticated() {
        return now(refusal);
    }
    let state = &shared.state;
    let counter = |right: Right, name: &str, work: BoxFuture<'static, Reply>| match session
        .may(right, name)
    {
        Ok(()) => Either::Right(work),
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
        RespCommand::IncrBy { key, delta } => counter(
            Right::Write,
            &name,
            counters::incr(state.clone(), key, delta).boxed(),
        ),
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
        RespCommand::Get(key) => counter(
            Right::Read,
            &name,
            counters::get(state.clone(), vec![key], false).boxed(),
        ),
        RespCommand::MGet(keys) => counter(
            Right::Read,
            &name,
            counters::get(state.clone(), keys, true).boxed(),
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
