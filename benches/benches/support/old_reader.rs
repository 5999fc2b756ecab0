//! The context reader's lookup as it was at commit `207b6b0`, the commit before the overflow
//! table arrived (`b63dc39`): kept here, in the benchmark crate only, so `paired.rs` can time
//! it beside today's [`twizzler_capsec::SecCtx::entries_for`] in one interleaved binary.
//!
//! What the lookup runs is copied unchanged (the regions, the row copies, the binary search,
//! the entry and its iterator). What it does not run is reduced: the header is read with plain
//! little-endian loads instead of the crate's private codec (same fields, same checks), and
//! there is no record decoding, no mask lookup and no shared-memory chunking (the benchmark's
//! bytes are a plain slice, read in place through [`CtxMem::direct`] as before).

use twizzler_capsec::ctx::{CTX_MAGIC, CTX_VERSION, ENTRY_LEN, HEADER_LEN, MASK_LEN};
use twizzler_capsec::{CtxMem, ObjID, RecordKind, WRITING};

/// Why the bytes were refused (the old reader's errors, reduced to what the benchmark needs to
/// see: that a version-1 context parses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldError {
    /// Header, layout or row checks failed; the string says which.
    Bad(&'static str),
}

/// One entry: a record's kind and where its bytes lie (as at `207b6b0`; the benchmark reads
/// only the bytes, the other fields are built as the old reader built them).
#[allow(dead_code)]
pub struct Entry<'a, M: ?Sized + CtxMem = [u8]> {
    /// Index in the entry table.
    pub index: usize,
    /// The target the entry is filed under.
    pub target: ObjID,
    /// The record's kind.
    pub kind: RecordKind,
    mem: &'a M,
    at: usize,
    len: usize,
}

impl<M: ?Sized + CtxMem> Clone for Entry<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: ?Sized + CtxMem> Copy for Entry<'_, M> {}

impl<'a> Entry<'a, [u8]> {
    /// The record's encoded bytes, inside the item heap.
    pub fn bytes(&self) -> &'a [u8] {
        self.mem.get(self.at..self.at + self.len).unwrap_or(&[])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    offset: usize,
    len: usize,
}

impl Region {
    #[inline]
    fn inside(total: usize, offset: u64, len: u64) -> Option<Self> {
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(len).ok()?;
        (offset.checked_add(len)? <= total).then_some(Self { offset, len })
    }

    #[inline]
    fn sub(&self, offset: u32, len: u32) -> Option<Self> {
        let inner = Self::inside(self.len, u64::from(offset), u64::from(len))?;
        Some(Self {
            offset: self.offset.checked_add(inner.offset)?,
            len: inner.len,
        })
    }

    #[inline]
    fn row(&self, index: usize, row_len: usize) -> Option<usize> {
        let start = index.checked_mul(row_len)?;
        (start.checked_add(row_len)? <= self.len).then(|| self.offset + start)
    }
}

/// The old header (version 1 only), as `CtxHeader` was at `207b6b0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CtxHeader {
    flags: u16,
    generation: u64,
    global_mask: u16,
    entry_count: u32,
    mask_count: u32,
    entries_offset: u32,
    masks_offset: u32,
    heap_offset: u32,
    heap_len: u32,
}

impl CtxHeader {
    fn read<M: ?Sized + CtxMem>(mem: &M) -> Result<Self, OldError> {
        let mut raw = [0u8; HEADER_LEN];
        if !mem.read(0, &mut raw) {
            return Err(OldError::Bad("header truncated"));
        }
        let u16_at = |at: usize| u16::from_le_bytes([raw[at], raw[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(le(&raw, at));
        if u32_at(0) != CTX_MAGIC {
            return Err(OldError::Bad("magic"));
        }
        if u16_at(4) != CTX_VERSION {
            return Err(OldError::Bad("version"));
        }
        let generation = u64::from_le_bytes(le(&raw, 8));
        if generation & WRITING != 0 {
            return Err(OldError::Bad("write in progress"));
        }
        if u16_at(18) != 0 || u32_at(44) != 0 {
            return Err(OldError::Bad("reserved"));
        }
        Ok(Self {
            flags: u16_at(6),
            generation,
            global_mask: u16_at(16),
            entry_count: u32_at(20),
            mask_count: u32_at(24),
            entries_offset: u32_at(28),
            masks_offset: u32_at(32),
            heap_offset: u32_at(36),
            heap_len: u32_at(40),
        })
    }
}

/// The old validated view (no overflow table).
pub struct SecCtx<'a, M: ?Sized + CtxMem = [u8]> {
    mem: &'a M,
    #[allow(dead_code)]
    len: usize,
    #[allow(dead_code)]
    header: CtxHeader,
    entries: Region,
    #[allow(dead_code)]
    masks: Region,
    heap: Region,
}

impl<M: ?Sized + CtxMem> Clone for SecCtx<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: ?Sized + CtxMem> Copy for SecCtx<'_, M> {}

#[inline]
fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = at.checked_add(N).and_then(|end| b.get(at..end)) {
        a.copy_from_slice(s);
    }
    a
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(le(b, at))
}

#[inline]
fn le_u128(b: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(le(b, at))
}

struct RawEntry {
    target: u128,
    kind: u32,
    offset: u32,
    len: u32,
}

impl<'a> SecCtx<'a, [u8]> {
    /// Validates `bytes` as a version-1 context (header, table bounds, sorted rows of known
    /// kinds with items inside the heap).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, OldError> {
        let header = CtxHeader::read(bytes)?;
        let len = bytes.len();
        let entries = Region::inside(
            len,
            u64::from(header.entries_offset),
            u64::from(header.entry_count) * ENTRY_LEN as u64,
        )
        .ok_or(OldError::Bad("entry table"))?;
        let masks = Region::inside(
            len,
            u64::from(header.masks_offset),
            u64::from(header.mask_count) * MASK_LEN as u64,
        )
        .ok_or(OldError::Bad("mask table"))?;
        let heap = Region::inside(
            len,
            u64::from(header.heap_offset),
            u64::from(header.heap_len),
        )
        .ok_or(OldError::Bad("item heap"))?;
        let ctx = Self {
            mem: bytes,
            len,
            header,
            entries,
            masks,
            heap,
        };
        let mut prev = 0u128;
        let rows = bytes
            .get(entries.offset..entries.offset + entries.len)
            .ok_or(OldError::Bad("entry table"))?;
        for row in rows.chunks_exact(ENTRY_LEN) {
            let target = le_u128(row, 0);
            if target < prev {
                return Err(OldError::Bad("unsorted"));
            }
            prev = target;
            RecordKind::from_raw(le_u32(row, 16)).map_err(|_| OldError::Bad("kind"))?;
            heap.sub(le_u32(row, 20), le_u32(row, 24))
                .ok_or(OldError::Bad("item"))?;
        }
        Ok(ctx)
    }
}

impl<'a, M: ?Sized + CtxMem> SecCtx<'a, M> {
    fn row<const N: usize>(&self, table: Region, index: usize) -> Option<[u8; N]> {
        let at = table.row(index, N)?;
        if let Some(all) = self.mem.direct() {
            return all.get(at..at + N)?.try_into().ok();
        }
        let mut row = [0u8; N];
        self.mem.read(at, &mut row).then_some(row)
    }

    fn raw_entry(&self, index: usize) -> Option<RawEntry> {
        let row: [u8; ENTRY_LEN] = self.row(self.entries, index)?;
        Some(RawEntry {
            target: le_u128(&row, 0),
            kind: le_u32(&row, 16),
            offset: le_u32(&row, 20),
            len: le_u32(&row, 24),
        })
    }

    fn entry_target(&self, index: usize) -> Option<u128> {
        let at = self.entries.row(index, ENTRY_LEN)?;
        if let Some(all) = self.mem.direct() {
            return Some(u128::from_le_bytes(all.get(at..at + 16)?.try_into().ok()?));
        }
        let mut t = [0u8; 16];
        self.mem.read(at, &mut t).then(|| u128::from_le_bytes(t))
    }

    /// Number of entries.
    pub fn entry_count(&self) -> usize {
        self.entries.len / ENTRY_LEN
    }

    fn entry(&self, index: usize) -> Option<Entry<'a, M>> {
        let e = self.raw_entry(index)?;
        let item = self.heap.sub(e.offset, e.len)?;
        Some(Entry {
            index,
            target: ObjID::new(e.target),
            kind: RecordKind::from_raw(e.kind).ok()?,
            mem: self.mem,
            at: item.offset,
            len: item.len,
        })
    }

    fn lower_bound(&self, target: u128) -> usize {
        let (mut lo, mut hi) = (0, self.entry_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry_target(mid) {
                Some(t) if t < target => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// The entries filed under `target`, by binary search.
    pub fn entries_for(&self, target: ObjID) -> EntryIter<'a, M> {
        EntryIter {
            ctx: *self,
            next: self.lower_bound(target.raw()),
            only: Some(target),
        }
    }
}

/// Iterator over the entries of one target (as at `207b6b0`).
pub struct EntryIter<'a, M: ?Sized + CtxMem = [u8]> {
    ctx: SecCtx<'a, M>,
    next: usize,
    only: Option<ObjID>,
}

impl<'a, M: ?Sized + CtxMem> Iterator for EntryIter<'a, M> {
    type Item = Entry<'a, M>;

    fn next(&mut self) -> Option<Entry<'a, M>> {
        let e = self.ctx.entry(self.next)?;
        if self.only.is_some_and(|t| t != e.target) {
            return None;
        }
        self.next += 1;
        Some(e)
    }
}
