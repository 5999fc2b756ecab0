//! [`DbStore`]: the object store on an embedded, transactional database ([`redb`]).
//!
//! A store is a directory holding one database file, [`DB_FILE`]. Objects are kept by page
//! (see [`layout`]): a ranged read or write touches only the pages of its range, an update
//! writes only the pages that changed, and absent pages read as zeros, as in Twizzler's
//! sparse objects.
//!
//! # Guarantees
//!
//! - **Transactions.** [`ObjectStore::transact`] commits everything it did at once, or
//!   nothing; a commit is durable when it returns (redb's two-phase commit, fsynced). A
//!   process killed mid-transaction leaves the last commit as it was: nothing to clean up.
//! - **Several processes.** The database is opened in redb's multi-writer mode: any number of
//!   processes may have the store open; write transactions take turns (one waits for the
//!   other, across processes), and readers read the last commit without waiting for writers.
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

mod layout;
mod read;
mod txn;

use std::fmt::{self, Display};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{
    ConcurrencyMode, Database, ReadTransaction, ReadableDatabase, ReadableTable,
    ReadableTableMetadata,
};
use twizzler_capsec::ObjID;

pub use layout::{FORMAT_VERSION, PAGE};
use layout::{INFO, NAMES, OBJECTS, PAGES};
use read::ReadError;
use txn::DbTxn;

use crate::store::{ObjInfo, Object, ObjectStore, StoreError, Txn};

/// The database file in a store's directory.
pub const DB_FILE: &str = "store.redb";

/// An object store in a database file (see the [module documentation](self)). Clones share
/// one open database.
#[derive(Clone)]
pub struct DbStore {
    dir: PathBuf,
    path: PathBuf,
    db: Arc<Database>,
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
    /// database (mode 0600) when there is none.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DbStore, StoreError> {
        let dir = dir.into();
        let path = dir.join(DB_FILE);
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| StoreError::Io {
                id: None,
                path: path.clone(),
                op,
                source,
            }
        };
        create_dir(&dir).map_err(|source| StoreError::Io {
            id: None,
            path: dir.clone(),
            op: "create the store directory",
            source,
        })?;
        if !path.exists() {
            if crate::dir_store::holds_objects(&dir) {
                return Err(db_error(
                    &dir,
                    "open",
                    "it holds objects in the old one-file-per-object format; migrate them into a database store first (keytool store migrate)",
                ));
            }
            // The file gets its mode before redb writes anything into it.
            let mut opts = OpenOptions::new();
            opts.write(true).create(true).truncate(false);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            opts.open(&path).map_err(io("create the database"))?;
        }
        let db = Database::builder()
            .set_concurrency_mode(ConcurrencyMode::MultiWriter)
            .create(&path)
            .map_err(|e| db_error(&path, "open", e))?;
        let store = DbStore {
            dir,
            path,
            db: Arc::new(db),
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

    /// Refuses a store of a newer format; writes the version into a new one.
    fn check_format(&self) -> Result<(), StoreError> {
        let found = {
            let r = self.read()?;
            match r.open_table(INFO) {
                Ok(t) => txn::format_of(&t).map_err(|e| self.err("read the format version", e))?,
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(self.err("read the format version", e)),
            }
        };
        match found {
            Some(v) if v == FORMAT_VERSION => Ok(()),
            Some(v) => Err(self.err(
                "open",
                format!(
                    "it is in format version {v}, written by a newer version (this one reads {FORMAT_VERSION})"
                ),
            )),
            None => {
                let w = self.db.begin_write().map_err(|e| self.err("begin", e))?;
                {
                    let mut t = w.open_table(INFO).map_err(|e| self.err("initialise", e))?;
                    if txn::format_of(&t)
                        .map_err(|e| self.err("initialise", e))?
                        .is_none()
                    {
                        t.insert(layout::FORMAT_KEY, FORMAT_VERSION)
                            .map_err(|e| self.err("initialise", e))?;
                    }
                    // Create the other tables, so readers find them.
                    w.open_table(OBJECTS).map_err(|e| self.err("initialise", e))?;
                    w.open_table(PAGES).map_err(|e| self.err("initialise", e))?;
                    w.open_table(NAMES).map_err(|e| self.err("initialise", e))?;
                }
                w.commit().map_err(|e| self.err("initialise", e))
            }
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

    fn read_err(&self, op: &'static str) -> impl Fn(ReadError) -> StoreError + '_ {
        move |e| match e {
            ReadError::Store(e) => e,
            ReadError::Db(e) => self.err(op, e),
        }
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

fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

impl ObjectStore for DbStore {
    fn transact<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Txn) -> Result<R, E>,
    ) -> Result<R, E> {
        let w = self
            .db
            .begin_write()
            .map_err(|e| self.err("begin a write", e))?;
        let r = {
            let mut t = DbTxn::open(&self.path, &w)?;
            f(&mut t)?
        };
        // Returning the error drops (aborts) the transaction: nothing it did is kept.
        w.commit().map_err(|e| self.err("commit", e))?;
        Ok(r)
    }

    fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        let r = self.read()?;
        let op = "read an object";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        read::get(&objects, &pages, id).map_err(self.read_err(op))
    }

    fn info(&self, id: ObjID) -> Result<ObjInfo, StoreError> {
        let r = self.read()?;
        let op = "read metadata";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        read::info(&objects, id).map_err(self.read_err(op))
    }

    fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let r = self.read()?;
        let op = "read an object";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        read::read_at(&objects, &pages, id, offset, len).map_err(self.read_err(op))
    }

    fn list(&self) -> Result<Vec<ObjID>, StoreError> {
        let r = self.read()?;
        let op = "list objects";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        objects
            .iter()
            .map_err(|e| self.err(op, e))?
            .map(|e| e.map(|(k, _)| ObjID::new(k.value())))
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(op, e))
    }

    fn name(&self, name: &str) -> Result<Option<ObjID>, StoreError> {
        let r = self.read()?;
        let op = "read a name";
        let names = r.open_table(NAMES).map_err(|e| self.err(op, e))?;
        Ok(names
            .get(name)
            .map_err(|e| self.err(op, e))?
            .map(|v| ObjID::new(v.value())))
    }

    fn names(&self) -> Result<Vec<(String, ObjID)>, StoreError> {
        let r = self.read()?;
        let op = "list names";
        let names = r.open_table(NAMES).map_err(|e| self.err(op, e))?;
        names
            .iter()
            .map_err(|e| self.err(op, e))?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), ObjID::new(v.value()))))
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(op, e))
    }
}

/// Copies every object of the directory store at `from` into `to`, in one transaction, and
/// returns how many it copied; `progress` hears (objects done, objects in all) after each.
/// Objects already in `to` with the same bytes and metadata are skipped (so a migration that
/// was interrupted can be run again); one that differs is an error, and then nothing is
/// copied. `from` is only read, one object at a time.
pub fn migrate(
    from: &crate::DirStore,
    to: &DbStore,
    mut progress: impl FnMut(usize, usize),
) -> Result<usize, StoreError> {
    let ids = from.list()?;
    to.transact(|tx| {
        let mut copied = 0;
        for (done, &id) in ids.iter().enumerate() {
            let obj = from.get(id)?;
            match tx.get(id) {
                Ok(existing) if existing == obj => {}
                Ok(_) => {
                    return Err(StoreError::Rejected {
                        id,
                        why: "the database store holds a different object with this id".into(),
                    });
                }
                Err(StoreError::NotFound(_)) => {
                    tx.create(&obj)?;
                    copied += 1;
                }
                Err(e) => return Err(e),
            }
            progress(done + 1, ids.len());
        }
        Ok(copied)
    })
}
