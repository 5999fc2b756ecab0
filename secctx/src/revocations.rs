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

use twizzler_capsec::{ObjID, RecordId};

use crate::store::{ObjMeta, Object, ObjectStore, StoreError, Txn};

/// The id of the revocation-list object.
pub const REVOCATIONS_ID: ObjID = ObjID::new(0x5245_564f_4b45_4400_0000_0000_0000_0001);

const MAGIC: &[u8; 4] = b"TZRV";
const HEADER: usize = 16;

/// Revoked key objects and records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevocationList {
    /// Revoked key objects (kuids).
    pub keys: BTreeSet<ObjID>,
    /// Revoked records, by id.
    pub records: BTreeSet<RecordId>,
}

fn corrupt(why: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        id: REVOCATIONS_ID,
        why: why.into(),
    }
}

fn u32_at(d: &[u8], at: usize) -> Option<usize> {
    let v = u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?);
    usize::try_from(v).ok()
}

impl RevocationList {
    /// Parses the list's bytes.
    pub fn decode(d: &[u8]) -> Result<Self, StoreError> {
        if d.get(..4) != Some(&MAGIC[..]) {
            return Err(corrupt("not a revocation list (bad magic)"));
        }
        if d.get(4..8) != Some(&[1, 0, 0, 0][..]) {
            return Err(corrupt("unsupported version or non-zero reserved field"));
        }
        let nk = u32_at(d, 8).ok_or_else(|| corrupt("truncated header"))?;
        let nr = u32_at(d, 12).ok_or_else(|| corrupt("truncated header"))?;
        let expected = nk
            .checked_mul(16)
            .and_then(|k| nr.checked_mul(32)?.checked_add(k))
            .and_then(|b| b.checked_add(HEADER))
            .ok_or_else(|| corrupt("counts overflow"))?;
        if d.len() != expected {
            return Err(corrupt(format!("{} bytes, expected {expected}", d.len())));
        }
        let body = d.get(HEADER..).unwrap_or_default();
        let (kb, rb) = body.split_at(nk * 16);
        let keys: Vec<ObjID> = kb
            .chunks_exact(16)
            .filter_map(|c| <[u8; 16]>::try_from(c).ok().map(ObjID::from_le_bytes))
            .collect();
        let records: Vec<RecordId> = rb
            .chunks_exact(32)
            .filter_map(|c| <[u8; 32]>::try_from(c).ok().map(RecordId))
            .collect();
        // One encoding per list: each id strictly after the one before it, as `encode`
        // writes them (a list in another order, or with repeats, was not written here).
        if !keys.windows(2).all(|w| matches!(w, [a, b] if a < b)) {
            return Err(corrupt("key ids not in ascending order, or repeated"));
        }
        if !records.windows(2).all(|w| matches!(w, [a, b] if a < b)) {
            return Err(corrupt("record ids not in ascending order, or repeated"));
        }
        Ok(Self {
            keys: keys.into_iter().collect(),
            records: records.into_iter().collect(),
        })
    }

    /// The list's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 16 * self.keys.len() + 32 * self.records.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        // The list is built by this module; counts beyond u32 cannot arise in practice, and
        // saturating keeps the encoder total (the decoder would then reject the length).
        out.extend_from_slice(
            &u32::try_from(self.keys.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        out.extend_from_slice(
            &u32::try_from(self.records.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for k in &self.keys {
            out.extend_from_slice(&k.to_le_bytes());
        }
        for r in &self.records {
            out.extend_from_slice(&r.0);
        }
        out
    }

    /// The store's list (empty if it has none).
    pub fn load<S: ObjectStore>(store: &S) -> Result<Self, StoreError> {
        match store.get(REVOCATIONS_ID) {
            Ok(obj) => Self::decode(&obj.data),
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
