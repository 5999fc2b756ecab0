//! Reading objects out of the tables, the same in a read transaction and in a write one.

use redb::{ReadableTable, StorageError};
use twizzler_capsec::ObjID;

use super::layout::{PAGE, decode_meta, page_of};
use crate::store::{ObjInfo, Object, StoreError, check_range};

/// What a read failed on: the store's own error, or the database's (which the caller names
/// with the store's path).
pub(super) enum ReadError {
    Store(StoreError),
    Db(StorageError),
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<StorageError> for ReadError {
    fn from(e: StorageError) -> Self {
        Self::Db(e)
    }
}

/// Object `id`'s metadata and length.
pub(super) fn info(
    objects: &impl ReadableTable<u128, &'static [u8]>,
    id: ObjID,
) -> Result<ObjInfo, ReadError> {
    let rec = objects.get(id.raw())?.ok_or(StoreError::NotFound(id))?;
    Ok(decode_meta(id, rec.value())?)
}

/// Copies the stored pages of `id` that overlap `offset .. offset + out.len()` into `out`
/// (zeros elsewhere: `out` starts zeroed). A stored page longer than a page is corrupt.
fn fill(
    pages: &impl ReadableTable<(u128, u32), &'static [u8]>,
    id: ObjID,
    offset: u64,
    out: &mut [u8],
) -> Result<(), ReadError> {
    if out.is_empty() {
        return Ok(());
    }
    let end = offset + out.len() as u64;
    let (first, last) = (page_of(offset), page_of(end - 1));
    for entry in pages.range((id.raw(), first)..=(id.raw(), last))? {
        let (key, value) = entry?;
        let (_, index) = key.value();
        let bytes = value.value();
        if bytes.len() as u64 > PAGE {
            return Err(StoreError::Corrupt {
                id,
                why: format!("page {index} holds {} bytes", bytes.len()),
            }
            .into());
        }
        let page_start = u64::from(index) * PAGE;
        // The part of the page inside the range, and where it goes in `out`.
        let from = offset.max(page_start);
        let to = end.min(page_start + bytes.len() as u64);
        if from >= to {
            continue;
        }
        let src = &bytes[(from - page_start) as usize..(to - page_start) as usize];
        out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
    }
    Ok(())
}

/// `len` bytes of `id` at `offset`: zeros past its length and in absent pages.
pub(super) fn read_at(
    objects: &impl ReadableTable<u128, &'static [u8]>,
    pages: &impl ReadableTable<(u128, u32), &'static [u8]>,
    id: ObjID,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, ReadError> {
    let end = check_range(id, offset, len)?;
    let info = info(objects, id)?;
    read_range(pages, id, info.len, offset, end)
}

/// Bytes `offset .. end` (a range [`check_range`] allowed) of `id`, an object of `stored`
/// bytes: zeros past them and in absent pages.
pub(super) fn read_range(
    pages: &impl ReadableTable<(u128, u32), &'static [u8]>,
    id: ObjID,
    stored: u64,
    offset: u64,
    end: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut out = vec![0u8; (end - offset) as usize];
    // Only what lies before the object's length is stored.
    let stored = end.min(stored).saturating_sub(offset);
    if stored > 0 {
        fill(pages, id, offset, &mut out[..stored as usize])?;
    }
    Ok(out)
}

/// Bytes `offset .. end` (a range [`check_range`] allowed) of an object whose whole stored
/// bytes are `data`, as [`read_range`] reads them: zeros past them.
pub(super) fn slice_of(data: &[u8], offset: u64, end: u64) -> Vec<u8> {
    let mut out = vec![0u8; (end - offset) as usize];
    let to = end.min(data.len() as u64);
    if let (Some(src), Some(dst)) = (
        data.get(offset.min(to) as usize..to as usize),
        out.get_mut(..to.saturating_sub(offset) as usize),
    ) {
        dst.copy_from_slice(src);
    }
    out
}

/// Object `id`, whole.
pub(super) fn get(
    objects: &impl ReadableTable<u128, &'static [u8]>,
    pages: &impl ReadableTable<(u128, u32), &'static [u8]>,
    id: ObjID,
) -> Result<Object, ReadError> {
    let info = info(objects, id)?;
    let mut data = vec![0u8; info.len as usize];
    fill(pages, id, 0, &mut data)?;
    Ok(Object {
        id,
        meta: info.meta,
        data,
    })
}
