//! Another writer's order within a target's run (feature `test-support`): the editor writes a
//! target's capabilities by gate offset, but a reader takes the rows of a run in any order, so
//! tests and benchmarks that must cover the orders another tool may write relist the rows of
//! a context the editor wrote. Only the entry table's rows move; the overflow table, the heap
//! and every other byte stay.

use alloc::vec::Vec;

use super::{CtxError, ENTRY_LEN, HEADER_LEN, HeaderFields, SecCtx};
use crate::ids::ObjID;

/// `bytes`, a context, with the rows of its entry table (not the overflow table's) listed
/// within each target's run in the order their records' encodings have in `listed` (rows
/// whose record is not there, or there fewer times, after the others, in their order).
///
/// # Errors
///
/// `bytes` is not a context [`SecCtx::parse`] accepts.
pub fn as_listed(mut bytes: Vec<u8>, listed: &[impl AsRef<[u8]>]) -> Result<Vec<u8>, CtxError> {
    let ctx = SecCtx::parse(&bytes)?;
    let header =
        HeaderFields::decode(bytes.get(..HEADER_LEN).unwrap_or(&[])).map_err(CtxError::Header)?;
    // The parse checked that the entry table lies inside `bytes`: the rows below are in it.
    let table = header.entries as usize;
    let row_at = |i: usize| table + i * ENTRY_LEN;
    let main = ctx.entry_count() - ctx.overflow_count();
    let mut used = alloc::vec![false; listed.len()];
    let mut rows: Vec<(ObjID, usize, Vec<u8>)> = Vec::with_capacity(main);
    for e in ctx.entries().take(main) {
        let place = (0..listed.len()).find(|&i| !used[i] && listed[i].as_ref() == e.bytes());
        if let Some(i) = place {
            used[i] = true;
        }
        let row = bytes[row_at(e.index)..row_at(e.index + 1)].to_vec();
        rows.push((e.target, place.unwrap_or(usize::MAX), row));
    }
    // Stable: rows of one target not in `listed` keep their order.
    rows.sort_by_key(|(target, place, _)| (*target, *place));
    for (i, (_, _, row)) in rows.into_iter().enumerate() {
        bytes[row_at(i)..row_at(i + 1)].copy_from_slice(&row);
    }
    Ok(bytes)
}
