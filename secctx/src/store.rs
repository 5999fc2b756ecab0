//! The object store: objects by id, each with its metadata and bytes.

use std::fmt;
use std::io;
use std::path::PathBuf;

use twizzler_capsec::{ObjID, Protections};

/// What every object carries besides its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjMeta {
    /// The key object whose verifying key signs for this object, if any.
    pub kuid: Option<ObjID>,
    /// Rights every context has on the object.
    pub default_prots: Protections,
    /// The bytes are secret: the store keeps them readable by the owner only (mode 0600).
    pub secret: bool,
}

impl ObjMeta {
    /// A public object signed for by `kuid`, with no default rights.
    pub fn signed_by(kuid: ObjID) -> Self {
        Self {
            kuid: Some(kuid),
            default_prots: Protections::empty(),
            secret: false,
        }
    }

    /// A public object with no `kuid` and no default rights.
    pub fn plain() -> Self {
        Self {
            kuid: None,
            default_prots: Protections::empty(),
            secret: false,
        }
    }
}

/// An object: its id, metadata and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// Its id.
    pub id: ObjID,
    /// Its metadata.
    pub meta: ObjMeta,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Why a store operation failed. Every variant names the object it is about.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// There is no such object.
    NotFound(ObjID),
    /// An object with this id already exists.
    AlreadyExists(ObjID),
    /// The object's stored form is damaged: truncated, a bad checksum, a bad header.
    Corrupt {
        /// The object.
        id: ObjID,
        /// What is wrong.
        why: String,
    },
    /// The operating system refused an operation.
    Io {
        /// The object, when the operation was about one.
        id: Option<ObjID>,
        /// The path involved.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// An update was refused by the caller's edit (the object is unchanged).
    Rejected {
        /// The object.
        id: ObjID,
        /// Why.
        why: String,
    },
    /// A range reaches past the largest object.
    OutOfRange {
        /// The object.
        id: ObjID,
        /// Where the range starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// A name already names another object.
    NameTaken {
        /// The name.
        name: String,
        /// The object it names.
        id: ObjID,
    },
    /// A name that cannot be one (empty, too long, control characters, or an object id).
    BadName {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// The store's database failed or refused: it is damaged, from a newer version, full, or
    /// read-only. Committed data is left as it was.
    Database {
        /// The store's path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// What went wrong.
        why: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound(id) => write!(f, "object {id} does not exist"),
            Self::AlreadyExists(id) => write!(f, "object {id} already exists"),
            Self::Corrupt { id, why } => write!(f, "object {id} is corrupt: {why}"),
            Self::Io {
                id: Some(id),
                path,
                op,
                source,
            } => write!(f, "object {id}: {op} {}: {source}", path.display()),
            Self::Io {
                id: None,
                path,
                op,
                source,
            } => write!(f, "{op} {}: {source}", path.display()),
            Self::Rejected { id, why } => write!(f, "object {id} left unchanged: {why}"),
            Self::OutOfRange { id, offset, len } => write!(
                f,
                "object {id}: {len} bytes at offset {offset:#x} reach past the largest object ({MAX_OBJECT_LEN:#x} bytes)"
            ),
            Self::NameTaken { name, id } => write!(f, "the name {name:?} already names {id}"),
            Self::BadName { name, why } => write!(f, "{name:?} cannot be a name: {why}"),
            Self::Database { path, op, why } => {
                write!(f, "store {}: {op}: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// An object's metadata and length, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjInfo {
    /// Its metadata.
    pub meta: ObjMeta,
    /// Its length in bytes: everything past it reads as zeros.
    pub len: u64,
}

/// The largest object, in bytes (Twizzler's: 1 GiB). Bytes past an object's length read as
/// zeros, up to this.
pub const MAX_OBJECT_LEN: u64 = twizzler_capsec::MAX_OBJECT_SIZE;

/// Checks that `len` bytes at `offset` lie within the largest object.
pub fn check_range(id: ObjID, offset: u64, len: u64) -> Result<u64, StoreError> {
    match offset.checked_add(len) {
        Some(end) if end <= MAX_OBJECT_LEN => Ok(end),
        _ => Err(StoreError::OutOfRange { id, offset, len }),
    }
}

/// What one transaction may do: read and change any number of objects (and names). Nothing it
/// changes is seen by anyone else until [`ObjectStore::transact`] commits it, and then all of
/// it is, at once.
pub trait Txn {
    /// Reads object `id`, whole.
    fn get(&mut self, id: ObjID) -> Result<Object, StoreError>;

    /// Object `id`'s metadata and length.
    fn info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError>;

    /// `len` bytes of object `id` at `offset` (zeros past its length).
    fn read_at(&mut self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError>;

    /// Creates `obj`; [`StoreError::AlreadyExists`] if its id is taken.
    fn create(&mut self, obj: &Object) -> Result<(), StoreError>;

    /// Replaces object `obj.id` (which must exist) with `obj`: stores may write only what
    /// differs.
    fn put(&mut self, obj: &Object) -> Result<(), StoreError>;

    /// Writes `data` into object `id` at `offset`, extending it (with zeros up to `offset`) if
    /// it ends before; returns its new length. Writing nothing changes nothing.
    fn write_at(&mut self, id: ObjID, offset: u64, data: &[u8]) -> Result<u64, StoreError>;

    /// Removes object `id` (and every name that names it).
    fn remove(&mut self, id: ObjID) -> Result<(), StoreError>;

    /// The object `name` names, if any.
    fn name(&mut self, name: &str) -> Result<Option<ObjID>, StoreError>;

    /// Names `id` (which must exist) `name`; [`StoreError::NameTaken`] if `name` names another
    /// object already.
    fn set_name(&mut self, name: &str, id: ObjID) -> Result<(), StoreError>;
}

/// Whole-object reads from one consistent state of a store: a transaction (every [`Txn`]), or
/// one kept read snapshot ([`crate::db_store::SnapshotView`]). What judging a context's
/// ownership reads (`labels::owns_in`).
pub trait ReadState {
    /// Reads object `id`, whole.
    fn object(&mut self, id: ObjID) -> Result<Object, StoreError>;

    /// Object `id`'s metadata and length.
    fn object_info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError>;
}

/// A transaction seen as a [`ReadState`] (what [`ObjectStore::read_state`]'s default hands
/// out).
struct TxnState<'t, 'a>(&'t mut (dyn Txn + 'a));

impl ReadState for TxnState<'_, '_> {
    fn object(&mut self, id: ObjID) -> Result<Object, StoreError> {
        self.0.get(id)
    }

    fn object_info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        self.0.info(id)
    }
}

impl ReadState for dyn Txn + '_ {
    fn object(&mut self, id: ObjID) -> Result<Object, StoreError> {
        self.get(id)
    }

    fn object_info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        self.info(id)
    }
}

/// A store of objects.
///
/// Every change is a transaction ([`ObjectStore::transact`]): it commits whole or not at all,
/// also across a crash, and a reader sees the state before it or after it, never a mix.
/// Transactions are serialised, so two editors never lose each other's change. Readers do not
/// wait for writers.
pub trait ObjectStore {
    /// Runs `f` in a transaction and commits what it did if it returns `Ok`; when it fails
    /// nothing is changed and its error is returned.
    fn transact<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Txn) -> Result<R, E>,
    ) -> Result<R, E>;

    /// Runs `f` over one consistent state of the store, for reading only: nothing is
    /// committed or synced, and a store opened read-only answers as well. For questions that
    /// read several objects (whether a context owns a right: the context, the keys its
    /// records name, the revocation list). The default runs `f` in a transaction that
    /// changes nothing; a store whose transactions cost a write overrides it.
    fn read_state<R>(&self, f: impl FnOnce(&mut dyn ReadState) -> R) -> Result<R, StoreError> {
        self.transact(|tx| Ok::<R, StoreError>(f(&mut TxnState(tx))))
    }

    /// Reads object `id`, whole.
    fn get(&self, id: ObjID) -> Result<Object, StoreError>;

    /// Object `id`'s metadata and length.
    fn info(&self, id: ObjID) -> Result<ObjInfo, StoreError>;

    /// `len` bytes of object `id` at `offset` (zeros past its length): only the pages the
    /// range touches are read.
    fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError>;

    /// The ids of every object, in ascending order.
    fn list(&self) -> Result<Vec<ObjID>, StoreError>;

    /// The object `name` names, if any.
    fn name(&self, name: &str) -> Result<Option<ObjID>, StoreError>;

    /// Every name and the object it names, in name order.
    fn names(&self) -> Result<Vec<(String, ObjID)>, StoreError>;

    /// Creates `obj`; fails with [`StoreError::AlreadyExists`] if its id is taken.
    fn create(&self, obj: &Object) -> Result<(), StoreError> {
        self.transact(|tx| tx.create(obj))
    }

    /// Reads object `id`, lets `edit` change it, and writes the result, in one transaction.
    /// When `edit` fails nothing is written and its error is returned. The object keeps its id.
    fn update<E: From<StoreError>>(
        &self,
        id: ObjID,
        edit: impl FnOnce(&mut Object) -> Result<(), E>,
    ) -> Result<Object, E> {
        self.transact(|tx| {
            let mut obj = tx.get(id)?;
            edit(&mut obj)?;
            obj.id = id;
            tx.put(&obj)?;
            Ok(obj)
        })
    }

    /// Writes `data` into object `id` at `offset` (see [`Txn::write_at`]): only the pages
    /// the range touches are written. Returns the object's new length.
    fn write_at(&self, id: ObjID, offset: u64, data: &[u8]) -> Result<u64, StoreError> {
        self.transact(|tx| tx.write_at(id, offset, data))
    }

    /// Removes object `id`.
    fn remove(&self, id: ObjID) -> Result<(), StoreError> {
        self.transact(|tx| tx.remove(id))
    }
}

/// The longest name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// What a string that names an object refers to: an object id, or a name the store gives one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjRef<'a> {
    /// The string reads as an object id (`ObjID::from_str`: up to 32 hex digits, `0x` or `0X`
    /// optional).
    Id(ObjID),
    /// The string is a name ([`check_name`] accepts it).
    Name(&'a str),
}

/// Reads `s` as an object id or a name: the one function that decides which a string is. An
/// id is whatever `ObjID::from_str` accepts, and a name is only ever tried when that fails, so
/// no string is both: [`check_name`] refuses every string this reads as an id. Fails with
/// [`StoreError::BadName`] when `s` is neither.
pub fn parse_obj_ref(s: &str) -> Result<ObjRef<'_>, StoreError> {
    if let Ok(id) = s.parse::<ObjID>() {
        return Ok(ObjRef::Id(id));
    }
    name_syntax(s)?;
    Ok(ObjRef::Name(s))
}

/// Checks that `name` can name an object: 1 to [`MAX_NAME_LEN`] bytes of letters, digits and
/// `-_.@+`, starting with a letter or digit, and not an object id ([`parse_obj_ref`] reads it
/// as a name), so that wherever an id is taken a name can be too.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    match parse_obj_ref(name)? {
        ObjRef::Name(_) => Ok(()),
        ObjRef::Id(_) => Err(bad_name(name, "it reads as an object id")),
    }
}

fn bad_name(name: &str, why: &'static str) -> StoreError {
    StoreError::BadName {
        name: name.chars().take(MAX_NAME_LEN + 8).collect(),
        why,
    }
}

/// The rules of a name's characters and length (the part of [`check_name`] that is not about
/// ids).
fn name_syntax(name: &str) -> Result<(), StoreError> {
    let bad = |why| Err(bad_name(name, why));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("it is longer than 64 bytes");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or a digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.@+".contains(c))
    {
        return bad("only letters, digits and -_.@+ are allowed");
    }
    Ok(())
}

/// `len` bytes of `data` at `offset`, zeros past its end (for stores that hold objects whole).
pub(crate) fn read_range(
    id: ObjID,
    data: &[u8],
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, StoreError> {
    check_range(id, offset, len)?;
    let too_big = || StoreError::OutOfRange { id, offset, len };
    let mut out = vec![0u8; usize::try_from(len).map_err(|_| too_big())?];
    let start = usize::try_from(offset).map_err(|_| too_big())?;
    if let Some(have) = data.get(start..) {
        let n = have.len().min(out.len());
        out[..n].copy_from_slice(&have[..n]);
    }
    Ok(out)
}

/// Writes `bytes` into `data` at `offset`, growing it with zeros as needed; returns the new
/// length.
pub(crate) fn write_range(
    id: ObjID,
    data: &mut Vec<u8>,
    offset: u64,
    bytes: &[u8],
) -> Result<u64, StoreError> {
    let len = bytes.len() as u64;
    let end = check_range(id, offset, len)?;
    // Writing nothing changes nothing, past the end too (as `pwrite(2)` of 0 bytes).
    if bytes.is_empty() {
        return Ok(data.len() as u64);
    }
    let too_big = || StoreError::OutOfRange { id, offset, len };
    let end = usize::try_from(end).map_err(|_| too_big())?;
    let start = usize::try_from(offset).map_err(|_| too_big())?;
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
    Ok(data.len() as u64)
}
