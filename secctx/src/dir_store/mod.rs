//! [`DirStore`]: the previous object store format, one file per object in a directory.
//!
//! Kept to read stores written before the database store ([`crate::DbStore`]) and migrate
//! them ([`crate::db_store::migrate`], `keytool store migrate`). It is not an
//! [`crate::ObjectStore`]: each of its changes is atomic for one object, but several objects
//! cannot change together, and every change rewrites the whole object.
//!
//! # Layout
//!
//! Object `id` lives in `<id>.obj`, where `<id>` is the 32 lower-case hex digits of its `u128`
//! (the [`Display`](std::fmt::Display) form of [`ObjID`]). Next to it, `<id>.lock` is the
//! object's lock file: it is created on first use, never written and never removed (removing
//! it would let two processes lock two different files of the same name). Writes go through
//! temporary files named `.<id>.<pid>.<counter>.tmp`. [`DirStore::list`] only reports names of
//! the `<id>.obj` form; everything else in the directory is ignored.
//!
//! # File format
//!
//! Every integer is little-endian:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 4  | magic `TZOB` |
//! | 4  | 2  | format version, 1 |
//! | 6  | 2  | flags: bit 0 the object has a `kuid`, bit 1 it is secret; other bits rejected |
//! | 8  | 16 | object id; must match the file name |
//! | 24 | 16 | `kuid`; zero when the flag says there is none |
//! | 40 | 2  | default protections; bits that name no right are rejected |
//! | 42 | 2  | reserved, 0 |
//! | 44 | 8  | data length `n` |
//! | 52 | n  | data |
//! | 52 + n | 32 | BLAKE3 hash of bytes `0 .. 52 + n` |
//!
//! The encoding is canonical and decoding is total: [`decode_object`] gives an object or
//! [`StoreError::Corrupt`] for any byte string, never panics, and
//! `encode_object(&decode_object(id, b)?) == b` for every accepted `b`. A reader checks, in
//! this order, the magic, the version, the length (truncated or trailing bytes), the checksum,
//! and then every field; so random damage is reported as a checksum mismatch or a wrong
//! length, and a field error means the file was written that way.
//!
//! # Guarantees
//!
//! - **Atomic replacement.** A write goes to a fresh temporary file in the same directory
//!   (created with its final mode: 0600 for secret objects, 0644 otherwise, before any byte is
//!   written), which is fsynced, renamed over `<id>.obj`, and then the directory is fsynced.
//!   A reader sees the old object or the new one, also after a crash. A failed write removes
//!   its temporary file and leaves the old object as it was.
//! - **No lost updates.** [`DirStore::create`], [`DirStore::update`] and
//!   [`DirStore::remove`] hold an exclusive advisory lock ([`File::lock`], `flock(2)` on
//!   Linux) on `<id>.lock` for their whole read-modify-write, across threads and processes.
//!   The lock is released when the operation returns, whichever way, including when the
//!   caller's edit panics. [`DirStore::get`] takes no lock: thanks to the atomic rename it
//!   always reads a whole file. The locks are advisory: they only order processes that use
//!   this store.
//! - **Clear errors.** A missing object is [`StoreError::NotFound`]; a damaged file is
//!   [`StoreError::Corrupt`] naming the object and what is wrong (`"truncated: 37 of 90
//!   bytes"`, `"checksum mismatch"`, ...); an operating-system failure is [`StoreError::Io`]
//!   with the path and the operation.
//!
//! The directory is created with mode 0700 when it does not exist. File modes are Unix modes;
//! on other platforms the files get the platform's defaults and the directory is not fsynced.

mod format;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use twizzler_capsec::{ObjID, Protections};

use crate::store::{Object, StoreError};

pub use format::{
    CHECKSUM_LEN, FLAG_HAS_KUID, FLAG_SECRET, FORMAT_VERSION, HEADER_LEN, MAGIC, MIN_FILE_LEN,
    ObjectFileError, decode_object, decode_object_file, encode_object,
};

const OBJ_SUFFIX: &str = ".obj";
const LOCK_SUFFIX: &str = ".lock";
const SECRET_MODE: u32 = 0o600;
const PUBLIC_MODE: u32 = 0o644;
const LOCK_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;
/// Attempts at finding an unused temporary-file name before giving up.
const TEMP_ATTEMPTS: u32 = 64;

/// Distinguishes the temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// An object store in a directory: one file per object, atomic replacement, advisory locks.
///
/// See the [module documentation](self) for the layout, the file format and the guarantees.
/// A `DirStore` is only a path: it is cheap to clone, can be shared between threads, and any
/// number of processes can open the same directory.
#[derive(Clone, Debug)]
pub struct DirStore {
    dir: PathBuf,
}

impl DirStore {
    /// Opens the store in directory `dir`, creating it (and its missing parents) with mode
    /// 0700 when it does not exist. An existing directory keeps its mode.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DirStore, StoreError> {
        let dir = dir.into();
        let io_err = |op, source| StoreError::Io {
            id: None,
            path: dir.clone(),
            op,
            source,
        };
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(DIR_MODE);
        }
        builder
            .create(&dir)
            .map_err(|e| io_err("create directory", e))?;
        let meta = fs::metadata(&dir).map_err(|e| io_err("inspect directory", e))?;
        if !meta.is_dir() {
            return Err(io_err(
                "open store",
                io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        Ok(DirStore { dir })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The file that holds object `id`: `<dir>/<32 hex digits>.obj`.
    pub fn object_path(&self, id: ObjID) -> PathBuf {
        self.dir.join(format!("{id}{OBJ_SUFFIX}"))
    }

    fn lock_path(&self, id: ObjID) -> PathBuf {
        self.dir.join(format!("{id}{LOCK_SUFFIX}"))
    }

    /// Takes the exclusive lock of object `id`, waiting for it; released on drop.
    fn lock(&self, id: ObjID) -> Result<ObjLock, StoreError> {
        let path = self.lock_path(id);
        let io_err = |op, source| StoreError::Io {
            id: Some(id),
            path: path.clone(),
            op,
            source,
        };
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        let file = untrusting(with_mode(&mut opts, LOCK_MODE))
            .open(&path)
            .map_err(|e| io_err("open lock file (it must be a regular file, not a link)", e))?;
        if !file
            .metadata()
            .map_err(|e| io_err("inspect lock file", e))?
            .is_file()
        {
            return Err(StoreError::Corrupt {
                id,
                why: format!("{} is not a regular file", path.display()),
            });
        }
        loop {
            match file.lock() {
                Ok(()) => return Ok(ObjLock { file }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err("lock", e)),
            }
        }
    }

    /// Reads and decodes object `id`, without locking. The file is opened without following a
    /// link and without blocking, must be a regular file, and is read up to the largest
    /// encoding an object can have.
    fn read(&self, id: ObjID) -> Result<Object, StoreError> {
        let path = self.object_path(id);
        let io_err = |op, source| StoreError::Io {
            id: Some(id),
            path: path.clone(),
            op,
            source,
        };
        let not_regular = || StoreError::Corrupt {
            id,
            why: format!(
                "{} is not a regular file (a link, FIFO, device or directory)",
                path.display()
            ),
        };
        let file = match untrusting(OpenOptions::new().read(true)).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StoreError::NotFound(id)),
            // O_NOFOLLOW on a link: ELOOP.
            Err(e) if e.raw_os_error() == Some(ELOOP) => return Err(not_regular()),
            Err(e) => return Err(io_err("open", e)),
        };
        let meta = file.metadata().map_err(|e| io_err("inspect", e))?;
        if !meta.is_file() {
            return Err(not_regular());
        }
        let limit = MAX_FILE_LEN;
        if meta.len() > limit {
            return Err(StoreError::Corrupt {
                id,
                why: format!(
                    "{} is {} bytes, more than any object's encoding ({limit})",
                    path.display(),
                    meta.len()
                ),
            });
        }
        let mut bytes = Vec::new();
        // Bounded even if the file grows while it is read.
        io::Read::read_to_end(&mut io::Read::take(file, limit + 1), &mut bytes)
            .map_err(|e| io_err("read", e))?;
        if bytes.len() as u64 > limit {
            return Err(StoreError::Corrupt {
                id,
                why: format!(
                    "{} grew past any object's encoding while read",
                    path.display()
                ),
            });
        }
        decode_object(id, &bytes)
    }

    /// Encodes `obj`, refusing what could not be read back.
    fn encode_checked(obj: &Object) -> Result<Vec<u8>, StoreError> {
        let bits = obj.meta.default_prots.bits();
        if Protections::from_raw(bits).is_none() {
            return Err(StoreError::Rejected {
                id: obj.id,
                why: format!("default protections {bits:#06x} have bits that name no right"),
            });
        }
        Ok(encode_object(obj))
    }

    /// Replaces (or creates) the file of object `id` with `bytes`, atomically. The caller
    /// holds the object's lock.
    fn write_atomic(&self, id: ObjID, bytes: &[u8], secret: bool) -> Result<(), StoreError> {
        let mode = if secret { SECRET_MODE } else { PUBLIC_MODE };
        let (mut file, temp) = self.create_temp(id, mode)?;
        let io_err = |op, path: &Path, source| StoreError::Io {
            id: Some(id),
            path: path.to_path_buf(),
            op,
            source,
        };
        file.write_all(bytes)
            .map_err(|e| io_err("write", &temp.path, e))?;
        file.sync_all()
            .map_err(|e| io_err("fsync", &temp.path, e))?;
        drop(file);
        let target = self.object_path(id);
        fs::rename(&temp.path, &target).map_err(|e| io_err("rename into place", &target, e))?;
        temp.disarm();
        self.sync_dir(Some(id))
    }

    /// Creates a new temporary file for object `id`, with `mode`, under a name no one else
    /// uses; it is removed when the returned guard drops, unless disarmed.
    fn create_temp(&self, id: ObjID, mode: u32) -> Result<(File, TempFile), StoreError> {
        let pid = std::process::id();
        let mut last = None;
        for _ in 0..TEMP_ATTEMPTS {
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = self.dir.join(format!(".{id}.{pid}.{n}.tmp"));
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true);
            match with_mode(&mut opts, mode).open(&path) {
                Ok(file) => {
                    let temp = TempFile { path, armed: true };
                    return Ok((file, temp));
                }
                // A stale file of a crashed process that had our pid: try the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some((path, e)),
                Err(source) => {
                    return Err(StoreError::Io {
                        id: Some(id),
                        path,
                        op: "create temporary file",
                        source,
                    });
                }
            }
        }
        let (path, source) = last.unwrap_or_else(|| {
            (
                self.dir.clone(),
                io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name"),
            )
        });
        Err(StoreError::Io {
            id: Some(id),
            path,
            op: "create temporary file",
            source,
        })
    }

    /// Makes the directory's entries (a rename, a removal) durable.
    fn sync_dir(&self, id: Option<ObjID>) -> Result<(), StoreError> {
        #[cfg(unix)]
        {
            let io_err = |op, source| StoreError::Io {
                id,
                path: self.dir.clone(),
                op,
                source,
            };
            let dir = File::open(&self.dir).map_err(|e| io_err("open directory", e))?;
            dir.sync_all().map_err(|e| io_err("fsync directory", e))?;
        }
        #[cfg(not(unix))]
        let _ = id;
        Ok(())
    }
}

/// The store's operations. Each is atomic for its one object; several objects cannot change
/// together, which is why this is no longer an [`crate::ObjectStore`].
impl DirStore {
    /// Reads `<id>.obj`, without taking the lock. A missing file is
    /// [`StoreError::NotFound`]; a damaged one [`StoreError::Corrupt`].
    pub fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        self.read(id)
    }

    /// Writes `<id>.obj` under the object's lock, unless it exists. Fails with
    /// [`StoreError::Rejected`] if the default protections have unknown bits.
    pub fn create(&self, obj: &Object) -> Result<(), StoreError> {
        let bytes = Self::encode_checked(obj)?;
        let _lock = self.lock(obj.id)?;
        let path = self.object_path(obj.id);
        match fs::symlink_metadata(&path) {
            Ok(_) => return Err(StoreError::AlreadyExists(obj.id)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Io {
                    id: Some(obj.id),
                    path,
                    op: "inspect",
                    source,
                });
            }
        }
        self.write_atomic(obj.id, &bytes, obj.meta.secret)
    }

    /// Reads, edits and atomically rewrites `<id>.obj`, holding the object's lock from before
    /// the read until after the rename. The edit cannot move the object: its id is put back
    /// to `id` afterwards. Secret-ness may change: the new file gets the new mode.
    pub fn update<E: From<StoreError>>(
        &self,
        id: ObjID,
        edit: impl FnOnce(&mut Object) -> Result<(), E>,
    ) -> Result<Object, E> {
        let _lock = self.lock(id)?;
        let mut obj = self.read(id)?;
        edit(&mut obj)?;
        obj.id = id;
        let bytes = Self::encode_checked(&obj)?;
        self.write_atomic(id, &bytes, obj.meta.secret)?;
        Ok(obj)
    }

    /// Deletes `<id>.obj` under the object's lock and fsyncs the directory. The lock file
    /// stays.
    pub fn remove(&self, id: ObjID) -> Result<(), StoreError> {
        let _lock = self.lock(id)?;
        let path = self.object_path(id);
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(Some(id)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StoreError::NotFound(id)),
            Err(source) => Err(StoreError::Io {
                id: Some(id),
                path,
                op: "remove",
                source,
            }),
        }
    }

    /// The ids of the `<32 lower-case hex digits>.obj` names in the directory, sorted.
    /// Temporary files, lock files and any other name are ignored.
    pub fn list(&self) -> Result<Vec<ObjID>, StoreError> {
        let io_err = |op, source| StoreError::Io {
            id: None,
            path: self.dir.clone(),
            op,
            source,
        };
        let mut ids = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| io_err("read directory", e))? {
            let entry = entry.map_err(|e| io_err("read directory", e))?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_object_name) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }
}

/// Whether directory `dir` holds any object file of this format (`<id>.obj`): a store to
/// migrate, not to open as a database store.
pub fn holds_objects(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_str().and_then(parse_object_name).is_some())
    })
}

/// The id named by an object file name: exactly 32 lower-case hex digits, then `.obj`.
fn parse_object_name(name: &str) -> Option<ObjID> {
    let hex = name.strip_suffix(OBJ_SUFFIX)?;
    let canonical = hex.len() == 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !canonical {
        return None;
    }
    u128::from_str_radix(hex, 16).ok().map(ObjID::new)
}

/// The largest file an object can be stored in: the largest object plus the header and
/// checksum.
const MAX_FILE_LEN: u64 = twizzler_capsec::MAX_OBJECT_SIZE + (HEADER_LEN + CHECKSUM_LEN) as u64;

/// `ELOOP`: what opening a symbolic link with `O_NOFOLLOW` fails with.
#[cfg(unix)]
const ELOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const ELOOP: i32 = -1;

/// Opens without following a final symbolic link and without blocking (a FIFO opens at once
/// and is then refused as not a regular file). A no-op elsewhere than Unix.
fn untrusting(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
    }
    #[cfg(not(unix))]
    {
        opts
    }
}

/// Sets the Unix mode new files are created with (before the umask); a no-op elsewhere.
fn with_mode(opts: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        opts
    }
}

/// An object's exclusive lock; released (and the lock file closed) on drop, also when
/// unwinding.
struct ObjLock {
    file: File,
}

impl Drop for ObjLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first is explicit and harmless.
        let _ = self.file.unlock();
    }
}

/// A temporary file that is removed on drop unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    /// The file was renamed: there is nothing left to remove.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names() {
        let id = ObjID::new(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(parse_object_name(&format!("{id}.obj")), Some(id));
        assert_eq!(
            parse_object_name("0123456789ABCDEF0011223344556677.obj"),
            None
        );
        assert_eq!(
            parse_object_name("+123456789abcdef0011223344556677.obj"),
            None
        );
        assert_eq!(
            parse_object_name("123456789abcdef0011223344556677.obj"),
            None
        );
        assert_eq!(parse_object_name(&format!("{id}.lock")), None);
        assert_eq!(parse_object_name(&format!(".{id}.1.2.tmp")), None);
        assert_eq!(parse_object_name(".obj"), None);
        assert_eq!(parse_object_name("é"), None);
    }
}
