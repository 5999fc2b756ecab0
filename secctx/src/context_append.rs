//! Adding a record to a stored context in place: one overflow row, the record at the heap's
//! end and the header, written through the store's ranged API, instead of decoding, sorting
//! and re-encoding the whole context (see `twizzler_capsec::ctx::CTX_VERSION_OVERFLOW`).
//!
//! Taken only when the context is laid out as `SecCtxEditor::encode_for_update` writes it (the
//! tables first, then room, then the heap, which ends the object) and its overflow table has
//! room and fewer than [`MAX_OVERFLOW`] rows; otherwise the caller edits the context in full,
//! which merges the overflow rows into the entry table. The header and the overflow rows are
//! checked here; the entry table's rows are not read (the kernel validates the whole context
//! whenever it reads it, and every full edit does too).

use twizzler_capsec::ctx::{
    CTX_MAGIC, CTX_VERSION, CTX_VERSION_OVERFLOW, ENTRY_LEN, EntryRow, HEADER_LEN, HeaderFields,
    WRITING,
};
use twizzler_capsec::{MAX_OBJECT_SIZE, ObjID, RecordKind};

use crate::store::{StoreError, Txn};

/// The most rows an overflow table takes before an add edits the context in full (and so
/// merges them): bounds both a lookup's extra binary search and the rows an add shifts.
pub const MAX_OVERFLOW: u32 = 256;

/// Adds the record `item` (of `kind`, filed under `target`) to context `id` in place, within
/// transaction `tx`, and returns the context's new generation; `None` (nothing written) when
/// the context is not laid out for it, and the caller edits it in full.
pub fn append(
    tx: &mut dyn Txn,
    id: ObjID,
    target: ObjID,
    kind: RecordKind,
    item: &[u8],
) -> Result<Option<u64>, StoreError> {
    let len = tx.info(id)?.len;
    if (len as usize) < HEADER_LEN {
        return Ok(None);
    }
    let head = tx.read_at(id, 0, HEADER_LEN as u64)?;
    let Ok(head) = HeaderFields::decode(&head) else {
        return Ok(None);
    };
    let Some(plan) = Plan::of(&head, len, item.len() as u64) else {
        return Ok(None);
    };
    // The overflow rows, which must be sorted and well-formed: the new row goes after the
    // last one whose target is not greater.
    let rows = tx.read_at(
        id,
        plan.overflow_at,
        u64::from(plan.overflow) * ENTRY_LEN as u64,
    )?;
    let mut prev = 0u128;
    let mut pos = rows.len() / ENTRY_LEN;
    for (i, row) in rows.chunks_exact(ENTRY_LEN).enumerate() {
        let Ok(row) = EntryRow::decode(row) else {
            return Ok(None);
        };
        let t = row.target;
        let in_heap = u64::from(row.offset) + u64::from(row.len) <= plan.heap_len;
        if t < prev || !in_heap || RecordKind::from_raw(row.kind).is_err() {
            return Ok(None);
        }
        prev = t;
        if t > target.raw() && pos == rows.len() / ENTRY_LEN {
            pos = i;
        }
    }
    let row = EntryRow {
        target: target.raw(),
        kind: kind.raw(),
        offset: plan.heap_len as u32,
        len: item.len() as u32,
    }
    .encode();
    let mut shifted = Vec::with_capacity(rows.len() - pos * ENTRY_LEN + ENTRY_LEN);
    shifted.extend_from_slice(&row);
    shifted.extend_from_slice(rows.get(pos * ENTRY_LEN..).unwrap_or(&[]));
    tx.write_at(id, plan.overflow_at + (pos * ENTRY_LEN) as u64, &shifted)?;
    tx.write_at(id, len, item)?;
    let generation = plan.generation.wrapping_add(1) & !WRITING;
    let head = HeaderFields {
        version: CTX_VERSION_OVERFLOW,
        generation,
        heap_len: (plan.heap_len + item.len() as u64) as u32,
        overflow: plan.overflow + 1,
        ..head
    }
    .encode();
    tx.write_at(id, 0, &head)?;
    Ok(Some(generation))
}

/// What the header says, when the context can take a row in place.
struct Plan {
    generation: u64,
    overflow: u32,
    overflow_at: u64,
    heap_len: u64,
}

impl Plan {
    fn of(head: &HeaderFields, len: u64, item_len: u64) -> Option<Plan> {
        if head.magic != CTX_MAGIC || head.reserved != 0 {
            return None;
        }
        let overflow = match head.version {
            CTX_VERSION if head.overflow == 0 => 0,
            CTX_VERSION_OVERFLOW => head.overflow,
            _ => return None,
        };
        let generation = head.generation;
        let heap = u64::from(head.heap);
        let heap_len = u64::from(head.heap_len);
        let overflow_at = head.overflow_offset();
        let fits = generation & WRITING == 0
            && overflow < MAX_OVERFLOW
            && head.tables_packed()
            && head.overflow_end(overflow + 1) <= heap
            && heap.checked_add(heap_len)? == len
            && len.checked_add(item_len)? <= MAX_OBJECT_SIZE
            && heap_len + item_len <= u64::from(u32::MAX);
        fits.then_some(Plan {
            generation,
            overflow,
            overflow_at,
            heap_len,
        })
    }
}
