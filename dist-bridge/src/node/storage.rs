//! An invocation's effect on the store: a ranged read, or a ranged write in one transaction.

use super::service::internal;

use secctx::{DbStore, ObjectStore, StoreError};
use tonic::{Code, Status};

use crate::owner::Grant;
use crate::wire::{self, ErrorKind};

/// Reads `grant.len` bytes at `grant.offset`; bytes past the stored end read as zeros. Only
/// the pages the range touches are read.
pub(super) fn read_bytes(store: &DbStore, grant: &Grant) -> Result<Vec<u8>, Status> {
    store
        .read_at(grant.object, grant.offset, grant.len)
        .map_err(|e| wire::store_status(&e))
}

/// Why a write failed.
pub(super) enum WriteError {
    Store(StoreError),
    TooLarge { end: u64, max: u64 },
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Writes `data` at `grant.offset`, extending (zero-filled) as needed, up to `max_object`
/// bytes, in one transaction that touches only the pages of the range.
pub(super) fn write_bytes(
    store: &DbStore,
    grant: &Grant,
    data: &[u8],
    max_object: u64,
) -> Result<(), Status> {
    let end = grant
        .offset
        .checked_add(data.len() as u64)
        .ok_or_else(|| internal("write end overflows"))?;
    let result = store.transact(|tx| {
        let len = tx.info(grant.object)?.len;
        if end > len && end > max_object {
            return Err(WriteError::TooLarge {
                end,
                max: max_object,
            });
        }
        tx.write_at(grant.object, grant.offset, data)?;
        Ok(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(WriteError::Store(e)) => Err(wire::store_status(&e)),
        Err(WriteError::TooLarge { end, max }) => Err(wire::refusal(
            Code::ResourceExhausted,
            ErrorKind::ObjectTooLarge,
            format!(
                "write would grow object {} to {end} bytes; this node grows objects to at most {max}",
                grant.object
            ),
        )),
    }
}
