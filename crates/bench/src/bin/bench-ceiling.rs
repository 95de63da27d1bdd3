//! `bench-ceiling ADDRESS`: the ceiling for HTTP on this machine. A minimal hyper 1.x server
//! (the same hyper, HTTP/1.1 with keep-alive and multi-threaded tokio runtime the geocount tiers
//! use) that answers every request, whatever its method and path, with a fixed tiny JSON body.
//! Driven by the same load tool and settings as a geocount node, the gap between the two is the
//! project's own cost.

use std::convert::Infallible;
use std::net::SocketAddr;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What every request gets: about the size of a shard node's answer to a write.
const BODY: &[u8] = br#"{"id":"bench-1","slot":"DC_BENCH_VAL_0","value":1,"version":1}"#;

async fn answer(_request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::from_static(BODY)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .context("usage: bench-ceiling ADDRESS (e.g. 127.0.0.1:7999)")?
        .parse()
        .context("ADDRESS must be IP:PORT")?;
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let (stream, _) = listener.accept().await.context("accept failed")?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        let connection = http.serve_connection(TokioIo::new(stream), service_fn(answer));
        tokio::spawn(async move {
            // A client closing its connection mid-request is not the server's concern here.
            let _ = connection.await;
        });
    }
}
