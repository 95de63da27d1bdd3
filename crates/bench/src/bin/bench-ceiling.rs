//! `bench-ceiling ADDRESS [--durable DIR]`: the ceiling for HTTP on this machine. A minimal
//! hyper 1.x server (the same hyper, HTTP/1.1 with keep-alive and multi-threaded tokio runtime
//! the geocount tiers use) that answers every request, whatever its method and path, with a
//! fixed tiny JSON body. Driven by the same load tool and settings as a geocount node, the gap
//! between the two is the project's own cost.
//!
//! With `--durable`, it first makes each request's body durable the cheapest way a server can
//! that acknowledges only durable writes: one thread appends every body waiting into a log file
//! whose space is reserved ahead, calls `fdatasync` once for all of them, then releases their
//! answers (group commit, as Redis's `appendfsync always` and the shard node do). The gap
//! between this and the plain server is what the fsync itself costs on this disk; the gap
//! between this and a shard node's single writes is the node's own.

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// What every request gets: about the size of a shard node's answer to a write.
const BODY: &[u8] = br#"{"id":"bench-1","slot":"DC_BENCH_VAL_0","value":1,"version":1}"#;

/// How far ahead of its records the log file's size is set, so that an fsync need not make a
/// new file size durable too (as the shard node's log does).
const RESERVE_BYTES: u64 = 8 << 20;

/// A bare hyper server: the ceiling a geocount tier is measured against.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// Where to listen, e.g. 127.0.0.1:7999.
    address: SocketAddr,
    /// Acknowledge a request only once its body is fsynced into a log in this directory.
    #[arg(long, value_name = "DIR")]
    durable: Option<PathBuf>,
    /// With `--durable`: this many logs, each with its own thread, so that as many fsyncs can
    /// be in flight at once (requests take them in turn).
    #[arg(long, default_value_t = 1)]
    lanes: usize,
}

/// A request to make durable (its path and query, then its body), and where to say it is.
struct Pending {
    target: String,
    body: Bytes,
    durable: oneshot::Sender<()>,
}

/// The group-commit thread: takes every request waiting, appends them, one `fdatasync`, answers.
fn log_thread(mut file: File, pending: mpsc::Receiver<Pending>) -> std::io::Result<()> {
    let mut written = 0u64;
    let mut reserved = 0u64;
    let mut group = Vec::new();
    let mut buffer = Vec::new();
    while let Ok(first) = pending.recv() {
        group.push(first);
        group.extend(pending.try_iter());
        buffer.clear();
        for write in &group {
            for part in [write.target.as_bytes(), &write.body] {
                buffer.extend_from_slice(&(part.len() as u32).to_le_bytes());
                buffer.extend_from_slice(part);
            }
        }
        if written + buffer.len() as u64 > reserved {
            reserved = written + buffer.len() as u64 + RESERVE_BYTES;
            file.set_len(reserved)?;
        }
        file.write_all(&buffer)?;
        written += buffer.len() as u64;
        file.sync_data()?;
        for write in group.drain(..) {
            let _ = write.durable.send(());
        }
    }
    Ok(())
}

fn answer_with(status: StatusCode, body: &'static [u8]) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn answer(
    request: Request<Incoming>,
    lanes: Arc<Vec<mpsc::Sender<Pending>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if lanes.is_empty() {
        return Ok(answer_with(StatusCode::OK, BODY));
    }
    static TURN: AtomicUsize = AtomicUsize::new(0);
    let log = &lanes[TURN.fetch_add(1, Ordering::Relaxed) % lanes.len()];
    let failed = || {
        answer_with(
            StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"error":"not durable"}"#,
        )
    };
    let target = request.uri().to_string();
    let Ok(body) = request.into_body().collect().await else {
        return Ok(answer_with(StatusCode::BAD_REQUEST, br#"{"error":"body"}"#));
    };
    let (durable, made_durable) = oneshot::channel();
    let body = body.to_bytes();
    if log
        .send(Pending {
            target,
            body,
            durable,
        })
        .is_err()
    {
        return Ok(failed());
    }
    Ok(match made_durable.await {
        Ok(()) => answer_with(StatusCode::OK, BODY),
        Err(_) => failed(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut lanes = Vec::new();
    if let Some(dir) = &args.durable {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {dir:?}"))?;
        for lane in 0..args.lanes.max(1) {
            let path = dir.join(format!("ceiling-{lane}.log"));
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&path)
                .with_context(|| format!("cannot open {path:?}"))?;
            let (sender, receiver) = mpsc::channel();
            std::thread::Builder::new()
                .name("log".into())
                .spawn(move || {
                    if let Err(error) = log_thread(file, receiver) {
                        eprintln!("bench-ceiling: the log failed: {error}");
                        std::process::exit(1);
                    }
                })
                .context("cannot start the log thread")?;
            lanes.push(sender);
        }
    }
    let lanes = Arc::new(lanes);
    let listener = TcpListener::bind(args.address)
        .await
        .with_context(|| format!("cannot listen on {}", args.address))?;
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let (stream, _) = listener.accept().await.context("accept failed")?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        let lanes = Arc::clone(&lanes);
        let service = service_fn(move |request| answer(request, Arc::clone(&lanes)));
        let connection = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            // A client closing its connection mid-request is not the server's concern here.
            let _ = connection.await;
        });
    }
}
