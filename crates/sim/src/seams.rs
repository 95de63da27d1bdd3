//! The simulated side of every seam the tiers take: time ([`SimClock`]), incoming and outgoing
//! connections ([`SimListener`], [`SimConnect`]) and the shard node's disk ([`SimDisk`]), which
//! a scenario may lose whole ([`DiskLoss`]) or make fail ([`DiskFaults`]).
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

use crate::disk_faults::{DiskFaults, Fsync};

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
/// directory was not synced). Its calls carry out the faults armed on the host's
/// [`DiskFaults`].
#[derive(Debug, Clone, Default)]
pub struct SimDisk(pub DiskFaults);

/// The storage of a simulated shard node: its host's disk, with the host's `faults`, its loops
/// as tasks of the host's runtime (the simulated disk may only be touched from the host's own
/// thread).
pub fn sim_storage(faults: DiskFaults) -> Storage {
    Storage {
        disk: Arc::new(SimDisk(faults)),
        workers: Workers::Tasks,
    }
}

/// Runs an fsync as `faults` say: `sync` makes the data durable; a failure is an error,
/// after `sync` if its data reaches the disk all the same.
fn fsync(verdict: Fsync, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    match verdict {
        Fsync::Normal => sync(),
        Fsync::Fail { reached } => {
            if reached {
                sync()?;
            }
            Err(io::Error::other("injected disk fault: fsync failed"))
        }
        Fsync::PowerCut { .. } => Err(io::Error::other(
            "injected disk fault: the power failed during the fsync",
        )),
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.alive()?;
        simfs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.0.alive()?;
        Ok(simfs::exists(path))
    }

    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.alive()?;
        utf8_names(simfs::read_dir(dir)?.map(|entry| entry.map(|e| e.file_name())))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.0.alive()?;
        let mut bytes = simfs::read(path)?;
        self.0.read(Some(path), &mut bytes);
        Ok(bytes)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        self.0.alive()?;
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let synced = file.metadata()?.len();
        Ok(Box::new(SimFile {
            file,
            synced,
            faults: self.0.clone(),
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.alive()?;
        simfs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.alive()?;
        simfs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        fsync(self.0.fsync(false)?, || simfs::sync_dir(dir))
    }

    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        self.0.alive()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(path)?;
        redb::Database::builder()
            .set_cache_size(shard_node::storage::STORE_CACHE_BYTES)
            .create_with_backend(SimBackend {
                file,
                faults: self.0.clone(),
            })
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
/// Each file is synced before it goes: turmoil overlays a removed file's unsynced writes on a
/// new file at the same path, which a new disk must not show.
fn remove_dir_all(dir: &Path) -> io::Result<()> {
    if !simfs::exists(dir) {
        return Ok(());
    }
    for entry in simfs::read_dir(dir)? {
        let path = entry?.path();
        if simfs::metadata(&path)?.is_dir() {
            remove_dir_all(&path)?;
        } else {
            File::open(&path)?.sync_all()?;
            simfs::remove_file(&path)?;
        }
    }
    simfs::sync_dir(dir)?;
    simfs::remove_dir(dir)
}

/// A simulated log segment.
#[derive(Debug)]
struct SimFile {
    file: File,
    /// Its size at its last good fsync (or when it was opened): a power cut in the middle of
    /// an fsync keeps part of what follows.
    synced: u64,
    faults: DiskFaults,
}

impl AppendFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        self.faults.alive()?;
        Ok(self.file.metadata()?.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.faults.alive()?;
        io::Write::write_all(&mut self.file, bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let verdict = self.faults.fsync(true)?;
        if let Fsync::PowerCut { kept_permille } = verdict {
            // A prefix of the unsynced bytes reaches the disk, as the sectors written before
            // the power failed.
            let len = self.file.metadata()?.len();
            let unsynced = len.saturating_sub(self.synced);
            if unsynced > 1 {
                let kept = (unsynced * u64::from(kept_permille) / 1_000).clamp(1, unsynced - 1);
                self.file.set_len(self.synced + kept)?;
            }
            self.file.sync_data()?;
        }
        fsync(verdict, || self.file.sync_data())?;
        self.synced = self.file.metadata()?.len();
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.faults.alive()?;
        self.file.set_len(len)
    }
}

/// redb's storage on a simulated file. It takes no locks: one node owns each data directory.
#[derive(Debug)]
struct SimBackend {
    file: File,
    faults: DiskFaults,
}

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.faults.alive()?;
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.faults.alive()?;
        self.file.read_exact_at(out, offset)?;
        self.faults.read(None, out);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.faults.alive()?;
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        fsync(self.faults.fsync(false)?, || self.file.sync_data())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.faults.alive()?;
        self.file.write_all_at(data, offset)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::disk_faults::DiskFault;

    /// A log segment written on a simulated host: 100 bytes synced, then 200 more; the power
    /// fails in the middle of their fsync, keeping `kept_permille` of them. Returns the
    /// segment's length after the crash and what the calls after the cut answered.
    fn after_a_power_cut(fault: DiskFault) -> (u64, Vec<bool>) {
        let faults = DiskFaults::default();
        let seen: Arc<Mutex<(u64, Vec<bool>)>> = Arc::default();
        let mut sim = turmoil::Builder::new().build();
        let (host_faults, host_seen) = (faults.clone(), seen.clone());
        let started = Arc::new(Mutex::new(0));
        sim.host("shard", move || {
            let (faults, seen, started) = (host_faults.clone(), host_seen.clone(), started.clone());
            async move {
                let disk = SimDisk(faults.clone());
                let (dir, path) = (PathBuf::from("/d"), PathBuf::from("/d/wal-1.log"));
                let run = {
                    let mut started = started.lock().expect("lock");
                    *started += 1;
                    *started
                };
                if run == 1 {
                    disk.create_dir_all(&dir)?;
                    disk.sync_dir(Path::new("/"))?;
                    let mut file = disk.open_append(&path)?;
                    disk.sync_dir(&dir)?;
                    file.write_all(&[1; 100])?;
                    file.sync_data()?;
                    file.write_all(&[2; 200])?;
                    faults.arm(fault, Duration::ZERO);
                    let cut = file.sync_data().is_err();
                    let after = [
                        file.write_all(&[3; 10]).is_err(),
                        file.sync_data().is_err(),
                        disk.read(&path).is_err(),
                    ];
                    seen.lock().expect("lock").1 = [vec![cut], after.to_vec()].concat();
                } else {
                    faults.started();
                    seen.lock().expect("lock").0 = simfs::metadata(&path)?.len();
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
        for _ in 0..3 {
            sim.step().expect("the host runs");
        }
        assert_eq!(faults.take_fired().len(), 1, "the power cut fired");
        sim.crash("shard");
        sim.bounce("shard");
        for _ in 0..3 {
            sim.step().expect("the host runs");
        }
        let seen = seen.lock().expect("lock");
        (seen.0, seen.1.clone())
    }

    #[test]
    fn a_power_cut_keeps_a_strict_prefix_of_the_unsynced_bytes_and_stops_the_disk() {
        for (kept_permille, length) in [(0, 101), (500, 200), (999, 299)] {
            let fault = DiskFault::PowerCut {
                kept_permille,
                down_for: Duration::from_millis(100),
            };
            let (len, failed) = after_a_power_cut(fault);
            assert_eq!(
                len, length,
                "{kept_permille}‰ of 200 unsynced bytes after 100 synced"
            );
            assert_eq!(
                failed,
                vec![true; 4],
                "the fsync and every call after it fail"
            );
        }
    }
}
