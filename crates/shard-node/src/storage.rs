//! The storage seam: where the node's files live ([`Disk`]) and where the work that waits on
//! them runs ([`Workers`]).
//!
//! In production the disk is the operating system's ([`OsDisk`]) and the commit loop and the
//! checkpointer each run on a thread of their own ([`Workers::Threads`]), so an fsync never
//! stalls the HTTP runtime. A simulation gives a simulated disk, which only its host's thread
//! may touch, and runs the same loops as tasks of the host's runtime ([`Workers::Tasks`]).

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::error::StorageError;

/// The files of a node's data directory: the log's segments and the checkpoint store.
pub trait Disk: Send + Sync + fmt::Debug + 'static {
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The names of the entries of `dir` (those that are UTF-8).
    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The whole content of `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Opens `path` for appending, creating it if missing.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>>;
    /// Removes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames the file `from` to `to`, replacing `to` at once if it exists (not durable
    /// until [`Disk::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (files created or removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Opens (or creates) the redb database at `path`.
    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError>;
}

/// The store's page cache. redb's default (1 GiB) would keep a copy of every checkpointed
/// record in the node's memory beside the slot table; the store is read only at startup and
/// written by checkpoints, whose pages the operating system's cache serves well enough.
pub const STORE_CACHE_BYTES: usize = 1 << 20;

/// A file opened for appending: a log segment. Writes go after the last byte written, not
/// after space [reserved](AppendFile::reserve) ahead of them.
pub trait AppendFile: Send + fmt::Debug {
    /// Its size in bytes, reserved space included.
    fn size(&self) -> io::Result<u64>;
    /// Appends all of `bytes` (not yet durable).
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes what was written durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts or extends the file to `len` bytes; the next write goes at `len`.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Grows the file to `len` bytes ahead of the writes (it reads as zeros there), leaving
    /// where the next write goes unchanged, so that an fsync after a write need not also make
    /// a new file size durable: a write inside the reserved space changes no metadata, so
    /// `fdatasync` flushes the data alone. By default nothing: a disk that gains nothing from
    /// it.
    fn reserve(&mut self, len: u64) -> io::Result<()> {
        let _ = len;
        Ok(())
    }
}

/// Creates `dir` and its missing parents, and syncs the entry of each new one in its parent:
/// otherwise a machine crash can take the whole data directory with it, however well its
/// files were synced.
pub(crate) fn create_dir_durably(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    let mut created = Vec::new();
    for ancestor in dir.ancestors() {
        if ancestor.as_os_str().is_empty() || disk.exists(ancestor)? {
            break;
        }
        created.push(ancestor);
    }
    disk.create_dir_all(dir)?;
    for new_dir in created {
        match new_dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => disk.sync_dir(parent)?,
            _ => disk.sync_dir(Path::new("."))?,
        }
    }
    Ok(())
}

/// Writes `bytes` to a new file `path` in `dir`, and syncs it and its directory entry.
pub(crate) fn write_durably(
    disk: &dyn Disk,
    dir: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<(), StorageError> {
    disk.open_append(path)
        .and_then(|mut file| {
            file.set_len(0)?;
            file.write_all(bytes)?;
            file.sync_data()
        })
        .and_then(|()| disk.sync_dir(dir))
        .map_err(|e| StorageError::io(format!("writing {}", path.display()), e))
}

/// The names among `entries` that are UTF-8 (a directory listing, for [`Disk::file_names`]).
pub fn utf8_names(
    entries: impl IntoIterator<Item = io::Result<OsString>>,
) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in entries {
        if let Ok(name) = entry?.into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// The operating system's filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsDisk;

impl Disk for OsDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>> {
        utf8_names(fs::read_dir(dir)?.map(|entry| entry.map(|e| e.file_name())))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        // Not `O_APPEND`: writes must land inside reserved space rather than after it.
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)?;
        file.seek(SeekFrom::End(0))?;
        Ok(Box::new(LogFile(file)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        redb::Database::builder()
            .set_cache_size(STORE_CACHE_BYTES)
            .create(path)
    }
}

/// A log segment on the operating system's disk, written at its cursor.
#[derive(Debug)]
struct LogFile(File);

impl AppendFile for LogFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.seek(SeekFrom::Start(len))?;
        Ok(())
    }

    fn reserve(&mut self, len: u64) -> io::Result<()> {
        // A sparse extension: no block is written now. On ext4 here an fdatasync after a write
        // into it took 140 µs against 190 µs after an append that grew the file.
        if self.size()? < len {
            self.0.set_len(len)?;
        }
        Ok(())
    }
}

/// Where the commit loop, the checkpointer and recovery run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Each loop on an OS thread of its own (with a current-thread runtime), recovery on
    /// tokio's blocking pool: blocking file calls never stall the HTTP runtime.
    Threads,
    /// As tasks of the calling runtime, recovery inline: for a simulated host, whose disk only
    /// its own thread may touch and whose every step must be deterministic.
    Tasks,
}

/// A node's storage: its disk, and where the work that waits on it runs.
#[derive(Debug, Clone)]
pub struct Storage {
    /// The files.
    pub disk: Arc<dyn Disk>,
    /// Where the loops run.
    pub workers: Workers,
}

/// A worker started by [`Storage::spawn`]; await [`Worker::finished`] to wait for it.
#[derive(Debug)]
pub struct Worker(oneshot::Receiver<()>);

impl Worker {
    /// Waits until the worker's future has completed (or was dropped with its runtime).
    pub async fn finished(self) {
        let _ = self.0.await;
    }
}

impl Storage {
    /// The production storage: the OS filesystem, a thread per loop.
    pub fn os() -> Self {
        Self {
            disk: Arc::new(OsDisk),
            workers: Workers::Threads,
        }
    }

    /// Runs `work` to completion, on a thread named `name` or as a task.
    ///
    /// # Panics
    ///
    /// If the thread or its runtime cannot be started.
    pub fn spawn(&self, name: &str, work: impl Future<Output = ()> + Send + 'static) -> Worker {
        let (done, finished) = oneshot::channel();
        let work = async move {
            work.await;
            let _ = done.send(());
        };
        match self.workers {
            Workers::Threads => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .on_thread_park(geocount_net::idle::thread_parked)
                    .build()
                    .unwrap_or_else(|e| panic!("cannot start the {name} runtime: {e}"));
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || runtime.block_on(work))
                    .unwrap_or_else(|e| panic!("cannot start the {name} thread: {e}"));
            }
            Workers::Tasks => {
                tokio::spawn(work);
            }
        }
        Worker(finished)
    }

    /// Starts blocking `work` off the async runtime's threads (as a task with
    /// [`Workers::Tasks`]), without waiting for it.
    pub fn detach(&self, work: impl FnOnce() + Send + 'static) {
        match self.workers {
            Workers::Threads => drop(tokio::task::spawn_blocking(work)),
            Workers::Tasks => drop(tokio::spawn(async move { work() })),
        }
    }

    /// Runs blocking `work` off the async runtime's threads (inline with [`Workers::Tasks`]).
    pub async fn blocking<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        match self.workers {
            Workers::Threads => tokio::task::spawn_blocking(work)
                .await
                .expect("storage work does not panic"),
            Workers::Tasks => work(),
        }
    }
}
