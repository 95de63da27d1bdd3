//! The simulated side of every seam the tiers take: time ([`SimClock`]), incoming and outgoing
//! connections ([`SimListener`], [`SimConnect`]) and the shard node's disk ([`SimDisk`]), which
//! a scenario may lose whole ([`DiskLoss`]).
//!
//! Each is a thin adapter over turmoil, and must be used from inside a simulated host: turmoil
//! keeps the current host's network, clock and files in its thread-local world.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use geocount_model::Clock;
use geocount_net::{Connect, Connecting, Connector, Listener, connecting};
use shard_node::storage::utf8_names;
use shard_node::{AppendFile, Disk, Storage, Workers};
use turmoil::fs::shim::std::fs::{self as simfs, File, OpenOptions};

/// Wall-clock time of a simulated host: a fixed epoch plus the simulation's elapsed time, plus
/// the host's own skew (so that hosts disagree a little, as real clocks do).
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    /// Unix milliseconds at the start of the simulation, as this host sees it.
    pub epoch_ms: u64,
}

impl Clock for SimClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = turmoil::sim_elapsed().expect("the clock is read inside a simulated host");
        self.epoch_ms + elapsed.as_millis() as u64
    }
}

/// turmoil's TCP listener as a [`Listener`].
pub struct SimListener(turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener")
            .field(&self.0.local_addr())
            .finish()
    }
}

impl SimListener {
    /// Listens on `port` of the current host.
    pub async fn bind(port: u16) -> io::Result<Self> {
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        Ok(Self(turmoil::net::TcpListener::bind(any).await?))
    }
}

impl Listener for SimListener {
    type Io = turmoil::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        self.0.accept().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// turmoil's TCP as a [`Connect`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SimConnect;

impl Connect for SimConnect {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let host = host.to_owned();
        connecting(async move { turmoil::net::TcpStream::connect((host.as_str(), port)).await })
    }
}

/// The connector every simulated tier is given.
pub fn sim_connector() -> Connector {
    Arc::new(SimConnect)
}

/// A simulated host's filesystem as a shard node's [`Disk`]: writes are pending until synced,
/// and [`turmoil::Sim::crash`] loses what was not (file data, and directory entries whose
/// directory was not synced).
#[derive(Debug, Clone, Copy, Default)]
pub struct SimDisk;

/// The storage of a simulated shard node: its host's disk, its loops as tasks of the host's
/// runtime (the simulated disk may only be touched from the host's own thread).
pub fn sim_storage() -> Storage {
    Storage {
        disk: Arc::new(SimDisk),
        workers: Workers::Tasks,
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        simfs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(simfs::exists(path))
    }

    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>> {
        utf8_names(simfs::read_dir(dir)?.map(|entry| entry.map(|e| e.file_name())))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        simfs::read(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(SimFile(file)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        simfs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        simfs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        simfs::sync_dir(dir)
    }

    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(path)?;
        redb::Database::builder()
            .set_cache_size(shard_node::storage::STORE_CACHE_BYTES)
            .create_with_backend(SimBackend(file))
    }
}

/// The loss of a simulated host's disk, set by the driver and carried out by the host itself at
/// its next start (turmoil's files may only be touched from inside their host, and the driver
/// is not): [`DiskLoss::lose`] marks the disk lost, and the host's software calls
/// [`DiskLoss::wipe_if_lost`] before it starts, which removes the data directory whole, as if
/// the host came back with a new, empty disk.
#[derive(Debug, Clone, Default)]
pub struct DiskLoss(Arc<AtomicBool>);

impl DiskLoss {
    /// The disk is lost: the host's next start finds nothing on it.
    pub fn lose(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// If the disk was lost since the last start, removes `dir` and everything under it,
    /// durably. Returns whether it did. Must run inside the host.
    pub fn wipe_if_lost(&self, dir: &Path) -> io::Result<bool> {
        if !self.0.swap(false, Ordering::Relaxed) {
            return Ok(false);
        }
        remove_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            simfs::sync_dir(parent)?;
        }
        if simfs::exists(dir) {
            return Err(io::Error::other(format!(
                "{} is still there after its disk was lost",
                dir.display()
            )));
        }
        Ok(true)
    }
}

/// Removes `dir` and everything under it from the current host's disk, each directory's
/// removals synced before the directory itself goes (a missing `dir` is nothing to remove).
fn remove_dir_all(dir: &Path) -> io::Result<()> {
    if !simfs::exists(dir) {
        return Ok(());
    }
    for entry in simfs::read_dir(dir)? {
        let path = entry?.path();
        if simfs::metadata(&path)?.is_dir() {
            remove_dir_all(&path)?;
        } else {
            simfs::remove_file(&path)?;
        }
    }
    simfs::sync_dir(dir)?;
    simfs::remove_dir(dir)
}

/// A simulated log segment.
#[derive(Debug)]
struct SimFile(File);

impl AppendFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        io::Write::write_all(&mut self.0, bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// redb's storage on a simulated file. It takes no locks: one node owns each data directory.
#[derive(Debug)]
struct SimBackend(File);

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.0.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.0.read_exact_at(out, offset)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.0.write_all_at(data, offset)
    }
}
