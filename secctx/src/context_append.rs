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
    CTX_MAGIC, CTX_VERSION, CTX_VERSION_OVERFLOW, ENTRY_LEN, HEADER_LEN, MASK_LEN, WRITING,
};
use twizzler_capsec::{MAX_OBJECT_SIZE, ObjID, RecordKind};

use crate::store::{StoreError, Txn};

/// The most rows an overflow table takes before an add edits the context in full (and so
/// merges them): bounds both a lookup's extra binary search and the rows an add shifts.
pub const MAX_OVERFLOW: u32 = 256;

use twizzler_capsec::ctx::field;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(dst) = b.get_mut(at..at + v.len()) {
        dst.copy_from_slice(v);
    }
}

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
    let mut head = tx.read_at(id, 0, HEADER_LEN as u64)?;
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
        let t = u128::from_le_bytes(
            row.get(..16)
                .and_then(|b| b.try_into().ok())
                .unwrap_or([0; 16]),
        );
        let (offset, item_len) = (u32_at(row, 20), u32_at(row, 24));
        let in_heap = offset
            .zip(item_len)
            .is_some_and(|(o, l)| u64::from(o) + u64::from(l) <= plan.heap_len);
        if t < prev
            || !in_heap
            || RecordKind::from_raw(u32_at(row, 16).unwrap_or(u32::MAX)).is_err()
        {
            return Ok(None);
        }
        prev = t;
        if t > target.raw() && pos == rows.len() / ENTRY_LEN {
            pos = i;
        }
    }
    let mut row = [0u8; ENTRY_LEN];
    put(&mut row, 0, &target.raw().to_le_bytes());
    put(&mut row, 16, &kind.raw().to_le_bytes());
    put(&mut row, 20, &(plan.heap_len as u32).to_le_bytes());
    put(&mut row, 24, &(item.len() as u32).to_le_bytes());
    let mut shifted = Vec::with_capacity(rows.len() - pos * ENTRY_LEN + ENTRY_LEN);
    shifted.extend_from_slice(&row);
    shifted.extend_from_slice(rows.get(pos * ENTRY_LEN..).unwrap_or(&[]));
    tx.write_at(id, plan.overflow_at + (pos * ENTRY_LEN) as u64, &shifted)?;
    tx.write_at(id, len, item)?;
    let generation = plan.generation.wrapping_add(1) & !WRITING;
    put(
        &mut head,
        field::VERSION,
        &CTX_VERSION_OVERFLOW.to_le_bytes(),
    );
    put(&mut head, field::GENERATION, &generation.to_le_bytes());
    put(
        &mut head,
        field::HEAP_LEN,
        &((plan.heap_len + item.len() as u64) as u32).to_le_bytes(),
    );
    put(
        &mut head,
        field::OVERFLOW,
        &(plan.overflow + 1).to_le_bytes(),
    );
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
    fn of(head: &[u8], len: u64, item_len: u64) -> Option<Plan> {
        if u32_at(head, field::MAGIC)? != CTX_MAGIC || u16_at(head, field::RESERVED_A)? != 0 {
            return None;
        }
        let overflow = match u16_at(head, field::VERSION)? {
            CTX_VERSION if u32_at(head, field::OVERFLOW)? == 0 => 0,
            CTX_VERSION_OVERFLOW => u32_at(head, field::OVERFLOW)?,
            _ => return None,
        };
        let generation = u64_at(head, field::GENERATION)?;
        let n = u64::from(u32_at(head, field::ENTRY_COUNT)?);
        let m = u64::from(u32_at(head, field::MASK_COUNT)?);
        let entries = u64::from(u32_at(head, field::ENTRIES)?);
        let masks = u64::from(u32_at(head, field::MASKS)?);
        let heap = u64::from(u32_at(head, field::HEAP)?);
        let heap_len = u64::from(u32_at(head, field::HEAP_LEN)?);
        let overflow_at = masks + m * MASK_LEN as u64;
        let overflow_end = overflow_at + (u64::from(overflow) + 1) * ENTRY_LEN as u64;
        let fits = generation & WRITING == 0
            && overflow < MAX_OVERFLOW
            && entries == HEADER_LEN as u64
            && masks == entries + n * ENTRY_LEN as u64
            && overflow_end <= heap
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
