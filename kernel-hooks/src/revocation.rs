//! Revoked keys and records: bounded tables the engine consults on every verification.

use core::fmt;

use heapless::Vec;
use twizzler_capsec::{ObjID, RecordId};

/// Key objects that can be revoked at once.
pub const MAX_REVOKED_KEYS: usize = 64;
/// Records that can be revoked at once.
pub const MAX_REVOKED_RECORDS: usize = 512;

/// Why a revocation was not recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RevokeError {
    /// The table of revoked keys is full.
    TooManyKeys,
    /// The table of revoked records is full.
    TooManyRecords,
}

impl fmt::Display for RevokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyKeys => write!(f, "already {MAX_REVOKED_KEYS} revoked keys"),
            Self::TooManyRecords => write!(f, "already {MAX_REVOKED_RECORDS} revoked records"),
        }
    }
}

impl core::error::Error for RevokeError {}

/// The revoked key objects and record ids. Records are kept sorted for binary search.
pub struct Revocations {
    keys: Vec<ObjID, MAX_REVOKED_KEYS>,
    records: Vec<RecordId, MAX_REVOKED_RECORDS>,
}

impl Default for Revocations {
    fn default() -> Self {
        Self::new()
    }
}

impl Revocations {
    /// Nothing revoked.
    pub const fn new() -> Self {
        Self {
            keys: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Whether key object `kuid` is revoked.
    pub fn key_revoked(&self, kuid: ObjID) -> bool {
        self.keys.contains(&kuid)
    }

    /// Whether record `id` is revoked.
    pub fn record_revoked(&self, id: &RecordId) -> bool {
        self.records.binary_search(id).is_ok()
    }

    /// Revokes key object `kuid`; `Ok(false)` if it already was.
    pub fn revoke_key(&mut self, kuid: ObjID) -> Result<bool, RevokeError> {
        if self.key_revoked(kuid) {
            return Ok(false);
        }
        self.keys.push(kuid).map_err(|_| RevokeError::TooManyKeys)?;
        Ok(true)
    }

    /// Revokes record `id`; `Ok(false)` if it already was.
    pub fn revoke_record(&mut self, id: RecordId) -> Result<bool, RevokeError> {
        match self.records.binary_search(&id) {
            Ok(_) => Ok(false),
            Err(at) => {
                self.records
                    .insert(at, id)
                    .map_err(|_| RevokeError::TooManyRecords)?;
                Ok(true)
            }
        }
    }
}
