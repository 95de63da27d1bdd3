//! [`run`]: every link's proxy and the control API, until shutdown. The binary and the tests
//! call it; [`Emulator`] splits it in two for callers that need the links' bound addresses
//! before serving.

use std::future::Future;
use std::sync::Arc;

use geocount_net::Listener;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::WanConfig;
use crate::control::Control;
use crate::error::WanError;
use crate::link::Link;

/// Binds every link of `config`, then serves their proxies and the control API on `control`
/// until `shutdown` completes; then closes every link and connection. A link whose address
/// cannot be bound stops it before anything is served.
pub async fn run<L: Listener>(
    config: WanConfig,
    control: L,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WanError> {
    Emulator::bind(&config)
        .await?
        .serve(control, shutdown)
        .await;
    Ok(())
}

/// The links of a configuration, bound and ready to serve.
#[derive(Debug)]
pub struct Emulator {
    links: Vec<(Arc<Link>, TcpListener)>,
}

impl Emulator {
    /// Binds every link's `listen` address (port 0: a free port).
    pub async fn bind(config: &WanConfig) -> Result<Self, WanError> {
        let mut links = Vec::with_capacity(config.links.len());
        for link in &config.links {
            let bind_error = |source| WanError::Bind {
                link: link.name.clone(),
                address: link.listen,
                source,
            };
            let listener = TcpListener::bind(link.listen).await.map_err(bind_error)?;
            let listen = listener.local_addr().map_err(bind_error)?;
            links.push((Arc::new(Link::new(link, listen)), listener));
        }
        Ok(Self { links })
    }

    /// The links, in configuration order.
    pub fn links(&self) -> impl Iterator<Item = &Arc<Link>> {
        self.links.iter().map(|(link, _)| link)
    }

    /// Serves every link and the control API on `control` until `shutdown` completes; then
    /// closes every link and connection.
    pub async fn serve<L: Listener>(self, control: L, shutdown: impl Future<Output = ()>) {
        let (stop, stopped) = watch::channel(false);
        let mut proxies = JoinSet::new();
        let mut links = Vec::with_capacity(self.links.len());
        for (link, listener) in self.links {
            links.push(link.clone());
            proxies.spawn(link.serve(listener, stopped.clone()));
        }
        match control.local_addr() {
            Ok(addr) => tracing::info!(control = %addr, links = links.len(), "serving"),
            Err(error) => tracing::warn!(%error, "serving on a listener without an address"),
        }
        let api = Arc::new(Control::new(links));
        geocount_net::serve(
            control,
            move |request| {
                let api = api.clone();
                async move { api.handle(request).await }
            },
            shutdown,
        )
        .await;
        stop.send_replace(true);
        while proxies.join_next().await.is_some() {}
        tracing::info!("stopped");
    }
}
