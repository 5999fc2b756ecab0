//! [`DbStore`]: the object store on an embedded, transactional database ([`redb`]).
//!
//! A store is a directory holding one database file, [`DB_FILE`]. Objects are kept by page
//! (see the `layout` module): a ranged read or write touches only the pages of its range, an update
//! writes only the pages that changed, and absent pages read as zeros, as in Twizzler's
//! sparse objects.
//!
//! # Guarantees
//!
//! - **Transactions.** [`ObjectStore::transact`](crate::ObjectStore::transact) commits
//!   everything it did at once, or nothing; a commit is durable when it returns (redb's
//!   two-phase commit, fsynced). A process killed mid-transaction leaves the last commit as
//!   it was: nothing to clean up.
//! - **Several processes.** The database is opened in redb's multi-writer mode: any number of
//!   processes may have the store open; write transactions take turns (one waits for the
//!   other, across processes), and readers read the last commit without waiting for writers.
//!   Opening read-write ([`DbStore::open`]) takes the writer's turn for a moment (redb checks
//!   whether the file needs a repair), so it waits for a write transaction in progress in
//!   another process; [`DbStore::open_read_only`] never waits, never writes, and never
//!   creates a store: a missing one is an error naming the path it looked at.
//! - **Only a regular file.** The database must be a regular file. Anything else at its path
//!   is refused at once with an error saying what is there: a FIFO (which would block a
//!   reader for ever), a directory, a socket, a device. A **symbolic link is refused too, not
//!   followed**, whether it points at a database or nowhere: to keep a store elsewhere, name
//!   (or link) its directory. The path is looked at without opening it, then opened with
//!   `O_NOFOLLOW | O_NONBLOCK`, then the open file is checked again, so a file swapped in
//!   between cannot make an open block or follow a link.
//! - **Creation.** A new database is created and initialised under a temporary name and
//!   linked into place only when complete: a process killed while creating a store leaves no
//!   file that cannot be opened (and the next open removes what it left).
//! - **Clear errors.** A damaged or truncated file, a store written by a newer version, a full
//!   disk, a read-only directory: each is one [`StoreError::Database`] naming the store's path;
//!   what was committed stays as it was. A directory that holds objects in the old
//!   one-file-per-object format ([`crate::DirStore`]) is refused until it is migrated
//!   ([`migrate`]), never converted silently.
//!
//! # Example
//!
//! ```
//! use secctx::{DbStore, ObjMeta, Object, ObjectStore};
//! use twizzler_capsec::ObjID;
//! let dir = std::env::temp_dir().join(format!("secctx-doc-{}", std::process::id()));
//! let store = DbStore::open(&dir).unwrap();
//! let id = ObjID::new(7);
//! store.create(&Object { id, meta: ObjMeta::plain(), data: vec![1; 10_000] }).unwrap();
//! store.write_at(id, 8192, b"hello").unwrap(); // touches one page
//! assert_eq!(store.read_at(id, 8190, 4).unwrap(), [1, 1, b'h', b'e']);
//! # drop(store); std::fs::remove_dir_all(&dir).unwrap();
//! ```

mod byte_cache;
mod create;
mod file;
mod layout;
mod migration;
mod object_store;
mod read;
mod snapshot;
mod txn;

use std::fmt::{self, Display};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{
    Builder, ConcurrencyMode, Database, DatabaseError, ReadOnlyDatabase, ReadTransaction,
    ReadableDatabase, ReadableTable, ReadableTableMetadata,
};
use twizzler_capsec::ObjID;

pub use byte_cache::{CacheLimits, ENTRY_OVERHEAD};
use create::{create_database, create_dir, remove_stale_creations};
pub use layout::{FORMAT_VERSION, PAGE};
use layout::{INFO, NAMES, OBJECTS, PAGES};
pub use migration::migrate;
use read::ReadError;
pub use snapshot::{DEFAULT_MAX_AGE, SnapshotReader, SnapshotView};

use crate::store::StoreError;

/// The database file in a store's directory.
pub const DB_FILE: &str = "store.redb";

/// An object store in a database file (see the [module documentation](self)). Clones share
/// one open database.
#[derive(Clone)]
pub struct DbStore {
    dir: PathBuf,
    path: PathBuf,
    db: Arc<Handle>,
    /// The database file redb has open (a duplicate of its descriptor: the same open file,
    /// so closing it releases none of redb's locks), for reading the header
    /// ([`SnapshotReader`]).
    file: Arc<File>,
}

/// The open database: for reading and writing, or only for reading (which never waits for a
/// writer in another process, even to open).
enum Handle {
    ReadWrite(Database),
    ReadOnly(ReadOnlyDatabase),
}

impl Handle {
    fn begin_read(&self) -> Result<ReadTransaction, redb::TransactionError> {
        match self {
            Self::ReadWrite(db) => db.begin_read(),
            Self::ReadOnly(db) => db.begin_read(),
        }
    }
}

impl fmt::Debug for DbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbStore").field("path", &self.path).finish()
    }
}

/// A [`StoreError::Database`] for `op` on the store at `path`.
pub(crate) fn db_error(path: &Path, op: &'static str, e: impl Display) -> StoreError {
    StoreError::Database {
        path: path.to_owned(),
        op,
        why: e.to_string(),
    }
}

/// Sizes and counts of a store ([`DbStore::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Objects.
    pub objects: u64,
    /// Bytes of all objects (their lengths).
    pub object_bytes: u64,
    /// Pages stored (pages of zeros are not).
    pub pages: u64,
    /// Names.
    pub names: u64,
    /// The database file's size on disk.
    pub file_bytes: u64,
}

impl DbStore {
    /// Opens the store in directory `dir`, creating the directory (mode 0700) and an empty
    /// database (mode 0600) when there is none. Anything but a regular file at the database's
    /// path (a symbolic link included) is refused: see the [module documentation](self).
    ///
    /// # Example
    ///
    /// Create an object and read part of it; a second open of the directory sees it:
    ///
    /// ```
    /// use secctx::{DbStore, ObjMeta, Object, ObjectStore};
    /// use twizzler_capsec::ObjID;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let store = DbStore::open(dir.path().join("store"))?;
    ///
    /// let id = ObjID::new(0x42);
    /// store.create(&Object { id, meta: ObjMeta::plain(), data: b"hello, objects".to_vec() })?;
    /// assert_eq!(store.read_at(id, 7, 7)?, b"objects");
    /// drop(store);
    ///
    /// let again = DbStore::open(dir.path().join("store"))?;
    /// assert_eq!(again.list()?, [id]);
    /// assert_eq!(again.get(id)?.data, b"hello, objects");
    /// # Ok(())
    /// # }
    /// ```
    pub fn open(dir: impl Into<PathBuf>) -> Result<DbStore, StoreError> {
        Self::open_checked(dir.into(), true)
    }

    /// Opens (or creates) the database store in `dir` even when `dir` also holds objects in
    /// the old one-file-per-object format: for migrating them in place ([`migrate`]). The old
    /// files are left where they are.
    pub fn open_for_migration(dir: impl Into<PathBuf>) -> Result<DbStore, StoreError> {
        Self::open_checked(dir.into(), false)
    }

    /// Opens the store in `dir` for reading only: unlike [`DbStore::open`], this does not wait
    /// for a write transaction in another process (redb's read-write open takes the writer's
    /// turn, in case the file needs a repair), and it writes nothing.
    /// [`ObjectStore::transact`](crate::ObjectStore::transact) then fails. A store that does
    /// not exist is an error naming the path looked at: reading never creates one.
    ///
    /// One exception: a file that a writer left marked unclean with no writer alive (a writer
    /// killed mid-way) is refused to readers by redb, since only a writer may repair it. Then
    /// the file is opened read-write once to be repaired, taking the writer's turn, and
    /// opened read-only again.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> Result<DbStore, StoreError> {
        let dir = dir.into();
        let path = dir.join(DB_FILE);
        if !file::exists(&path)? {
            refuse_old_format(&dir)?;
        }
        let mut repairs = 0;
        let (db, fd) = loop {
            let (be, fd) = backend(&path, file::Access::Read)?;
            match builder().open_read_only_with_backend(be) {
                // Unclean and no writer alive to repair it: repair it as a writer, then retry
                // (another writer may die in between; a few rounds, then the error stands).
                Err(DatabaseError::RepairAborted) if repairs < READ_ONLY_REPAIRS => {
                    repairs += 1;
                    let writer = builder()
                        .create_with_backend(backend(&path, file::Access::ReadWrite)?.0)
                        .map_err(|e| db_error(&path, "repair", e))?;
                    drop(writer);
                }
                opened => break (opened.map_err(|e| db_error(&path, "open", e))?, fd),
            }
        };
        let store = DbStore {
            dir,
            path,
            db: Arc::new(Handle::ReadOnly(db)),
            file: Arc::new(fd),
        };
        match store.format()? {
            Some(_) => store.check_format().map(|()| store),
            None => Err(store.err("open", "it was never initialised")),
        }
    }

    fn open_checked(dir: PathBuf, refuse_old: bool) -> Result<DbStore, StoreError> {
        let path = dir.join(DB_FILE);
        create_dir(&dir).map_err(|source| StoreError::Io {
            id: None,
            path: dir.clone(),
            op: "create the store directory",
            source,
        })?;
        if !file::exists(&path)? {
            if refuse_old {
                refuse_old_format(&dir)?;
            }
            create_database(&dir, &path)?;
        }
        remove_stale_creations(&dir);
        let (be, fd) = backend(&path, file::Access::ReadWrite)?;
        let db = builder()
            .create_with_backend(be)
            .map_err(|e| db_error(&path, "open", e))?;
        let store = DbStore {
            dir,
            path,
            db: Arc::new(Handle::ReadWrite(db)),
            file: Arc::new(fd),
        };
        store.check_format()?;
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version the store records, if any.
    fn format(&self) -> Result<Option<u64>, StoreError> {
        let r = self.read()?;
        match r.open_table(INFO) {
            Ok(t) => txn::format_of(&t).map_err(|e| self.err("read the format version", e)),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(self.err("read the format version", e)),
        }
    }

    /// Refuses a store of a newer format (or of none: every store is created with one).
    fn check_format(&self) -> Result<(), StoreError> {
        match self.format()? {
            Some(v) if v == FORMAT_VERSION => Ok(()),
            Some(v) => Err(self.err(
                "open",
                format!(
                    "it is in format version {v}, written by a newer version (this one reads {FORMAT_VERSION})"
                ),
            )),
            None => Err(self.err("open", "it records no format version: not a store of ours")),
        }
    }

    fn err(&self, op: &'static str, e: impl Display) -> StoreError {
        db_error(&self.path, op, e)
    }

    fn read(&self) -> Result<ReadTransaction, StoreError> {
        self.db
            .begin_read()
            .map_err(|e| self.err("begin a read", e))
    }

    /// The first [`snapshot::HEADER_BYTES`] of the database file, read without any lock
    /// (see [`SnapshotReader`]); `None` if they cannot be read.
    fn header_bytes(&self) -> Option<snapshot::Header> {
        let mut h = [0; snapshot::HEADER_BYTES];
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.read_exact_at(&mut h, 0).ok().map(|()| h)
        }
        #[cfg(not(unix))]
        {
            let _ = &mut h;
            None
        }
    }

    /// A reader that serves ranged reads from a kept snapshot, at the cost of a header read
    /// while no commit intervenes (see [`SnapshotReader`]), keeping one at most `max_age`.
    pub fn snapshot_reader(&self, max_age: std::time::Duration) -> SnapshotReader {
        SnapshotReader::new(self.clone(), max_age)
    }

    fn read_err(&self, op: &'static str) -> impl Fn(ReadError) -> StoreError + '_ {
        move |e| match e {
            ReadError::Store(e) => e,
            ReadError::Db(e) => self.err(op, e),
        }
    }

    /// Several ranged reads in one read transaction: each answer is what
    /// [`ObjectStore::read_at`](crate::ObjectStore::read_at) would give for it, all from one
    /// snapshot. A server with many small reads in flight pays for one transaction (in
    /// multi-writer mode a header lock and read each) instead of one per read. Fails as a
    /// whole only if no transaction can begin.
    pub fn read_batch(
        &self,
        reads: &[(ObjID, u64, u64)],
    ) -> Result<Vec<Result<Vec<u8>, StoreError>>, StoreError> {
        let r = self.read()?;
        let op = "read an object";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        Ok(reads
            .iter()
            .map(|&(id, offset, len)| {
                read::read_at(&objects, &pages, id, offset, len).map_err(self.read_err(op))
            })
            .collect())
    }

    /// Counts and sizes of what the store holds.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let r = self.read()?;
        let op = "read statistics";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        let names = r.open_table(NAMES).map_err(|e| self.err(op, e))?;
        let mut s = StoreStats::default();
        for entry in objects.iter().map_err(|e| self.err(op, e))? {
            let (k, v) = entry.map_err(|e| self.err(op, e))?;
            let id = ObjID::new(k.value());
            s.objects += 1;
            s.object_bytes += layout::decode_meta(id, v.value())?.len;
        }
        s.pages = pages.len().map_err(|e| self.err(op, e))?;
        s.names = names.len().map_err(|e| self.err(op, e))?;
        s.file_bytes = fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        Ok(s)
    }
}

/// How many times [`DbStore::open_read_only`] has a file repaired before giving up.
const READ_ONLY_REPAIRS: u32 = 3;

/// How every handle opens the file: the multi-writer mode, which all must share.
fn builder() -> Builder {
    let mut b = Database::builder();
    b.set_concurrency_mode(ConcurrencyMode::MultiWriter);
    b
}

/// Refuses a directory `dir` that has no database but holds objects in the old
/// one-file-per-object format: they are migrated ([`migrate`]), never converted silently.
fn refuse_old_format(dir: &Path) -> Result<(), StoreError> {
    if crate::dir_store::holds_objects(dir) {
        return Err(db_error(
            dir,
            "open",
            "it holds objects in the old one-file-per-object format; migrate them into a database store first (keytool store migrate)",
        ));
    }
    Ok(())
}

/// The existing database file at `path`, opened as [`file::open`] does (a regular file only,
/// never blocking), for redb; and a duplicate of its descriptor, for reading the header.
fn backend(path: &Path, access: file::Access) -> Result<(FileBackend, File), StoreError> {
    let file = file::open(path, access)?;
    let dup = file.try_clone().map_err(|source| StoreError::Io {
        id: None,
        path: path.to_owned(),
        op: "open the database",
        source,
    })?;
    let backend = FileBackend::new(file).map_err(|e| db_error(path, "open", e))?;
    Ok((backend, dup))
}
