//! The store's revocation list: revoked key objects and record ids, in one object that the
//! access simulator (and a kernel loading the store) applies before deciding.
//!
//! Layout (version 1, little-endian, 16 + 16 × `k` + 32 × `r` bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TZRV` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 4 | key count `k` |
//! | 12 | 4 | record count `r` |
//! | 16 | 16 × `k` | revoked key-object ids, ascending |
//! | 16 + 16`k` | 32 × `r` | revoked record ids ([`RecordId`]), ascending |
//!
//! Nothing is signed: the list is an object of the store, protected as the store is. The
//! encoder writes both lists ascending and without repeats, and the decoder refuses any other
//! order or a repeat, so a list has one encoding.

use std::collections::BTreeSet;
use std::fmt;

use twizzler_capsec::codec::{Reader, VecWriter};
use twizzler_capsec::{DecodeError, ObjID, RecordId};

use crate::store::{ObjMeta, Object, ObjectStore, StoreError, Txn};

/// The id of the revocation-list object.
pub const REVOCATIONS_ID: ObjID = ObjID::new(0x5245_564f_4b45_4400_0000_0000_0000_0001);

const MAGIC: u32 = u32::from_le_bytes(*b"TZRV");
const VERSION: u16 = 1;
const HEADER: usize = 16;

/// Revoked key objects and records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevocationList {
    /// Revoked key objects (kuids).
    pub keys: BTreeSet<ObjID>,
    /// Revoked records, by id.
    pub records: BTreeSet<RecordId>,
}

/// Why bytes are not a revocation list. In a store it becomes [`StoreError::Corrupt`] naming
/// [`REVOCATIONS_ID`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevocationsError {
    /// The bytes do not frame as the layout says (magic, version, header).
    Decode(DecodeError),
    /// The reserved field is not zero.
    Reserved(u16),
    /// The length does not match the counts in the header.
    Length {
        /// The bytes' length.
        found: usize,
        /// What the counts add up to (`None`: more than fits a `usize`).
        expected: Option<usize>,
    },
    /// The key ids are not strictly ascending.
    KeysOutOfOrder,
    /// The record ids are not strictly ascending.
    RecordsOutOfOrder,
}

impl fmt::Display for RevocationsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => write!(f, "not a revocation list: {e}"),
            Self::Reserved(v) => write!(f, "reserved field is {v:#06x}, not 0"),
            Self::Length {
                found,
                expected: Some(expected),
            } => write!(f, "{found} bytes, expected {expected}"),
            Self::Length { expected: None, .. } => f.write_str("counts overflow"),
            Self::KeysOutOfOrder => f.write_str("key ids not in ascending order, or repeated"),
            Self::RecordsOutOfOrder => {
                f.write_str("record ids not in ascending order, or repeated")
            }
        }
    }
}

impl std::error::Error for RevocationsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DecodeError> for RevocationsError {
    fn from(e: DecodeError) -> Self {
        Self::Decode(e)
    }
}

impl From<RevocationsError> for StoreError {
    fn from(e: RevocationsError) -> Self {
        StoreError::Corrupt {
            id: REVOCATIONS_ID,
            why: e.to_string(),
        }
    }
}

impl RevocationList {
    /// Parses the list's bytes.
    pub fn decode(d: &[u8]) -> Result<Self, RevocationsError> {
        let mut r = Reader::new(d);
        r.magic(MAGIC)?;
        r.version(VERSION)?;
        let reserved = r.u16()?;
        if reserved != 0 {
            return Err(RevocationsError::Reserved(reserved));
        }
        let nk = r.u32()?;
        let nr = r.u32()?;
        let expected = usize::try_from(nk)
            .ok()
            .and_then(|k| k.checked_mul(16))
            .and_then(|k| usize::try_from(nr).ok()?.checked_mul(32)?.checked_add(k))
            .and_then(|b| b.checked_add(HEADER));
        if expected != Some(d.len()) {
            return Err(RevocationsError::Length {
                found: d.len(),
                expected,
            });
        }
        // One encoding per list: each id strictly after the one before it, as `encode`
        // writes them (a list in another order, or with repeats, was not written here).
        let mut keys = BTreeSet::new();
        for _ in 0..nk {
            let k = ObjID::new(r.u128()?);
            if keys.last().is_some_and(|last| *last >= k) {
                return Err(RevocationsError::KeysOutOfOrder);
            }
            keys.insert(k);
        }
        let mut records = BTreeSet::new();
        for _ in 0..nr {
            let id = RecordId(r.array()?);
            if records.last().is_some_and(|last| *last >= id) {
                return Err(RevocationsError::RecordsOutOfOrder);
            }
            records.insert(id);
        }
        r.finish()?;
        Ok(Self { keys, records })
    }

    /// The list's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w =
            VecWriter::with_capacity(HEADER + 16 * self.keys.len() + 32 * self.records.len());
        // The list is built by this module; counts beyond u32 cannot arise in practice, and
        // saturating keeps the encoder total (the decoder would then reject the length).
        w.u32(MAGIC)
            .u16(VERSION)
            .u16(0)
            .u32(u32::try_from(self.keys.len()).unwrap_or(u32::MAX))
            .u32(u32::try_from(self.records.len()).unwrap_or(u32::MAX));
        for k in &self.keys {
            w.u128(k.raw());
        }
        for r in &self.records {
            w.bytes(&r.0);
        }
        w.into_vec()
    }

    /// The store's list (empty if it has none).
    pub fn load<S: ObjectStore>(store: &S) -> Result<Self, StoreError> {
        match store.get(REVOCATIONS_ID) {
            Ok(obj) => Ok(Self::decode(&obj.data)?),
            Err(StoreError::NotFound(_)) => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Adds to the store's list in one transaction; returns whether anything was new.
    pub fn add<S: ObjectStore>(
        store: &S,
        change: impl Fn(&mut RevocationList) -> bool,
    ) -> Result<bool, StoreError> {
        store.transact(|tx| Self::add_in(tx, change))
    }

    /// Adds to the list within transaction `tx` (creating it if the store has none), so a
    /// revocation can commit together with other changes; returns whether anything was new.
    pub fn add_in(
        tx: &mut dyn Txn,
        change: impl Fn(&mut RevocationList) -> bool,
    ) -> Result<bool, StoreError> {
        match tx.get(REVOCATIONS_ID) {
            Ok(mut obj) => {
                let mut list = Self::decode(&obj.data)?;
                let changed = change(&mut list);
                if changed {
                    obj.data = list.encode();
                    tx.put(&obj)?;
                }
                Ok(changed)
            }
            Err(StoreError::NotFound(_)) => {
                let mut list = RevocationList::default();
                let changed = change(&mut list);
                tx.create(&Object {
                    id: REVOCATIONS_ID,
                    meta: ObjMeta::plain(),
                    data: list.encode(),
                })?;
                Ok(changed)
            }
            Err(e) => Err(e),
        }
    }
}
