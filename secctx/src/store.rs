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

/// A store of objects.
///
/// Implementations make every change atomic (a reader sees the old object or the new one,
/// never a mix, also across a crash) and serialise [`ObjectStore::update`]s of one object, so
/// two editors never lose each other's change.
pub trait ObjectStore {
    /// Reads object `id`.
    fn get(&self, id: ObjID) -> Result<Object, StoreError>;

    /// Creates `obj`; fails with [`StoreError::AlreadyExists`] if its id is taken.
    fn create(&self, obj: &Object) -> Result<(), StoreError>;

    /// Reads object `id`, lets `edit` change it, and writes the result, holding the object's
    /// lock throughout. When `edit` fails nothing is written and its error is returned.
    fn update<E: From<StoreError>>(
        &self,
        id: ObjID,
        edit: impl FnOnce(&mut Object) -> Result<(), E>,
    ) -> Result<Object, E>;

    /// Removes object `id`.
    fn remove(&self, id: ObjID) -> Result<(), StoreError>;

    /// The ids of every object, in ascending order.
    fn list(&self) -> Result<Vec<ObjID>, StoreError>;
}
