//! What every tier's binary does around its server, so that each `main.rs` only parses its
//! flags and resolves its configuration: logging to stderr, the exit codes, the runtime and
//! the listener, huge pages on or off, and a graceful stop on SIGTERM or Ctrl-C.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;

use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// The exit code of a configuration error (bad topology file, unknown datacenter).
pub const CONFIG_ERROR_EXIT: u8 = 2;

/// A future that completes when the process is asked to stop.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How a tier's process is set up before its server starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSetup {
    /// Where the server listens.
    pub listen: SocketAddr,
    /// Whether the heap may use transparent huge pages (`memory.huge_pages`).
    pub huge_pages: bool,
}

/// Runs the binary `name` of a tier whose configuration resolved to `config`.
///
/// On a configuration error it prints the one line `<name>: <error>` on stderr and exits 2.
/// Otherwise it logs to stderr (`RUST_LOG`, `info` by default), allows or refuses huge pages
/// for the process as `setup` says, starts the runtime (whose threads run
/// [`crate::idle::thread_parked`] when they run out of work), binds the address `setup`
/// gives, and runs `server` on that listener until SIGTERM or Ctrl-C, then exits 0 once
/// `server` returns (1 if it returns an error). It exits 1 when the address cannot be bound.
pub fn run_tier<C, E, S, F>(
    name: &str,
    config: Result<C, E>,
    setup: impl FnOnce(&C) -> ProcessSetup,
    server: S,
) -> ExitCode
where
    E: Display,
    S: FnOnce(C, TcpListener, Shutdown) -> F,
    F: Future,
    F::Output: TierExit,
{
    let config = match config {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{name}: {error}");
            return ExitCode::from(CONFIG_ERROR_EXIT);
        }
    };
    init_logging();
    let setup = setup(&config);
    set_huge_pages(setup.huge_pages);
    let addr = setup.listen;
    let failed = |what: String| {
        eprintln!("{name}: {what}");
        ExitCode::FAILURE
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::idle::thread_parked)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return failed(format!("cannot start the async runtime: {error}")),
    };
    runtime.block_on(async move {
        let shutdown = match shutdown_signal() {
            Ok(shutdown) => shutdown,
            Err(error) => return failed(format!("cannot listen for signals: {error}")),
        };
        let listener = match TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(error) => return failed(format!("cannot listen on {addr}: {error}")),
        };
        server(config, listener, shutdown).await.exit_code(name)
    })
}

/// How a tier's server ended, as the process's exit code.
pub trait TierExit {
    /// 0 for a clean stop; otherwise prints `<name>: <error>` on stderr and gives 1.
    fn exit_code(self, name: &str) -> ExitCode;
}

impl TierExit for () {
    fn exit_code(self, _name: &str) -> ExitCode {
        ExitCode::SUCCESS
    }
}

impl<E: Display> TierExit for Result<(), E> {
    fn exit_code(self, name: &str) -> ExitCode {
        match self {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{name}: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Allows or refuses transparent huge pages for the whole process (`PR_SET_THP_DISABLE`), for
/// memory the heap touches from now on. Refused, the kernel backs no mapping with them, even
/// where the allocator asks for them; allowed, the allocator's request stands. A kernel that
/// cannot say is warned about, and the process runs on.
pub fn set_huge_pages(allowed: bool) {
    if let Err(error) = nix::sys::prctl::set_thp_disable(!allowed) {
        tracing::warn!(%error, allowed, "cannot set whether huge pages are used");
    }
}

/// Logs to stderr at the level `RUST_LOG` says, `info` by default.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// A future that completes on SIGTERM or Ctrl-C (SIGINT). The handlers are installed at once,
/// so a signal arriving before the future is first polled is not lost.
pub fn shutdown_signal() -> std::io::Result<Shutdown> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(Box::pin(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("shutting down");
    }))
}
