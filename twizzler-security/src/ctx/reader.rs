//! The validating reader: the header ([`CtxHeader`]), the regions of the context it checks
//! ([`SecCtx::parse`]) and the lookups of the validated view ([`SecCtx`]).
//!
//! It reads through [`CtxMem`], copying the header, one table row or one record at a time into
//! buffers of its own, so it is sound over memory a writer changes concurrently; over a plain
//! slice the copies are small `memcpy`s.

use core::fmt;

use super::bytes::{le_u16, le_u32, le_u128};
use super::entry::Entry;
use super::error::CtxError;
use super::iter::EntryIter;
use super::mem::CtxMem;
use super::{
    CTX_MAGIC, CTX_VERSION, CTX_VERSION_LABEL, CTX_VERSION_OVERFLOW, CtxFlags, ENTRY_LEN,
    HEADER_LEN, HEADER_LEN_V3, HeaderFields, MASK_LEN, WRITING,
};
use crate::error::DecodeError;
use crate::ids::{ObjID, Protections};
use crate::label::{Label, MAX_LABEL_LEN};
use crate::record::RecordKind;

/// A per-object mask of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Mask {
    /// The object it applies to.
    pub target: ObjID,
    /// Rights this context may provide for the object at most.
    pub permmask: Protections,
    /// Rights for the object that the global mask does not remove.
    pub ovrmask: Protections,
}

/// A region of the context: `offset .. offset + len`, checked to lie inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Region {
    pub(super) offset: usize,
    pub(super) len: usize,
}

impl Region {
    /// `offset .. offset + len` if it lies inside `0 .. total`.
    #[inline]
    fn inside(total: usize, offset: u64, len: u64) -> Option<Self> {
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(len).ok()?;
        (offset.checked_add(len)? <= total).then_some(Self { offset, len })
    }

    /// Whether two non-empty regions share a byte (an empty region overlaps nothing).
    #[inline]
    fn overlaps(&self, other: &Self) -> bool {
        self.len != 0
            && other.len != 0
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }

    /// The sub-region `offset .. offset + len` of this one, in absolute terms.
    #[inline]
    pub(super) fn sub(&self, offset: u32, len: u32) -> Option<Self> {
        let inner = Self::inside(self.len, u64::from(offset), u64::from(len))?;
        Some(Self {
            offset: self.offset.checked_add(inner.offset)?,
            len: inner.len,
        })
    }

    /// The region's bytes within `all` (`None` if they are not all there).
    #[inline]
    pub(super) fn bytes<'m>(&self, all: &'m [u8]) -> Option<&'m [u8]> {
        all.get(self.offset..self.offset.checked_add(self.len)?)
    }

    /// The absolute offset of row `index` of `row_len` bytes, if the whole row is inside.
    #[inline]
    pub(super) fn row(&self, index: usize, row_len: usize) -> Option<usize> {
        let start = index.checked_mul(row_len)?;
        (start.checked_add(row_len)? <= self.len).then(|| self.offset + start)
    }
}

/// The decoded header of a context: everything a reader needs to find its tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtxHeader {
    /// The flags.
    pub flags: CtxFlags,
    /// The generation (without the [`WRITING`] bit, which a header in hand never has).
    pub generation: u64,
    /// The global mask.
    pub global_mask: Protections,
    entry_count: u32,
    mask_count: u32,
    entries_offset: u32,
    masks_offset: u32,
    heap_offset: u32,
    heap_len: u32,
    overflow_count: u32,
    /// Version 3's label section (offset, length); `(0, 0)` in versions 1 and 2.
    label_offset: u32,
    label_len: u32,
}

impl CtxHeader {
    /// The format version's header length: [`HEADER_LEN_V3`] with a label section, else
    /// [`HEADER_LEN`].
    pub fn header_len(&self) -> usize {
        if self.label_len != 0 {
            HEADER_LEN_V3
        } else {
            HEADER_LEN
        }
    }

    /// Whether the context has a label section (version 3).
    pub fn has_label(&self) -> bool {
        self.label_len != 0
    }

    /// Reads and checks the header of `mem`: magic, version, known flags and mask bits, zero
    /// reserved fields, and no write in progress.
    pub fn read<M: ?Sized + CtxMem>(mem: &M) -> Result<Self, CtxError> {
        let mut raw = [0u8; HEADER_LEN];
        if !mem.read(0, &mut raw) {
            return Err(CtxError::Header(DecodeError::Truncated {
                at: 0,
                needed: HEADER_LEN,
                available: mem.len(),
            }));
        }
        let HeaderFields {
            magic,
            version,
            flags: raw_flags,
            generation,
            global_mask: raw_global,
            reserved: reserved_a,
            entry_count,
            mask_count,
            entries: entries_offset,
            masks: masks_offset,
            heap: heap_offset,
            heap_len,
            overflow: word_44,
        } = HeaderFields::decode(&raw)?;
        if magic != CTX_MAGIC {
            return Err(CtxError::Header(DecodeError::BadMagic {
                expected: CTX_MAGIC,
                found: magic,
            }));
        }
        if version != CTX_VERSION && version != CTX_VERSION_OVERFLOW && version != CTX_VERSION_LABEL
        {
            return Err(CtxError::Header(DecodeError::UnsupportedVersion {
                found: version,
                supported: CTX_VERSION_LABEL,
            }));
        }
        // Versions 2 and 3: the overflow table's entry count. Version 1: reserved, zero.
        let (reserved_b, overflow_count) = if version == CTX_VERSION {
            (word_44, 0)
        } else {
            (0, word_44)
        };
        // Version 3: the label section's offset and length, right after the version 2 header.
        let (label_offset, label_len) = if version == CTX_VERSION_LABEL {
            let mut more = [0u8; HEADER_LEN_V3 - HEADER_LEN];
            if !mem.read(HEADER_LEN, &mut more) {
                return Err(CtxError::Header(DecodeError::Truncated {
                    at: HEADER_LEN,
                    needed: HEADER_LEN_V3 - HEADER_LEN,
                    available: mem.len().saturating_sub(HEADER_LEN),
                }));
            }
            let (off, len) = (le_u32(&more, 0), le_u32(&more, 4));
            if len == 0 {
                return Err(CtxError::EmptyLabelSection);
            }
            (off, len)
        } else {
            (0, 0)
        };
        if generation & WRITING != 0 {
            return Err(CtxError::WriteInProgress);
        }
        let flags = CtxFlags::from_bits(raw_flags).ok_or(CtxError::UnknownFlags(raw_flags))?;
        let global_mask =
            Protections::from_raw(raw_global).ok_or(CtxError::UnknownGlobalMask(raw_global))?;
        if reserved_a != 0 || reserved_b != 0 {
            return Err(CtxError::NonZeroReserved);
        }
        Ok(Self {
            flags,
            generation,
            global_mask,
            entry_count,
            mask_count,
            entries_offset,
            masks_offset,
            heap_offset,
            heap_len,
            overflow_count,
            label_offset,
            label_len,
        })
    }
}

/// A validated view of a security context's bytes, read through a [`CtxMem`] (a plain `[u8]`
/// by default).
///
/// Invariant, established by [`SecCtx::parse`] over bytes that did not change while it ran:
/// the tables lie inside the bytes with exact lengths, every entry has a known kind and an
/// item range inside the heap, entries are sorted by target and masks strictly sorted with
/// known bits. Accessors still check every row they read, so bytes changed *after*
/// validation (a writer that keeps rewriting them) can make lookups miss rows, never read out
/// of bounds or panic. What such a writer can achieve is what it could achieve by writing
/// those bytes on purpose: records are still verified one by one, and only masks and flags
/// are unsigned, which the context's writer controls anyway. Kernels that need the view to
/// be one the writer actually wrote keep the bytes still while they read (see
/// `kernel-hooks`' host contract) and compare [`CtxHeader`]s before and after.
pub struct SecCtx<'a, M: ?Sized + CtxMem = [u8]> {
    pub(super) mem: &'a M,
    len: usize,
    header: CtxHeader,
    entries: Region,
    masks: Region,
    /// Version 2's overflow table (empty in version 1): right after the mask table.
    pub(super) overflow: Region,
    pub(super) heap: Region,
    /// Version 3's label section (empty in versions 1 and 2).
    label: Region,
}

impl<M: ?Sized + CtxMem> Clone for SecCtx<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: ?Sized + CtxMem> Copy for SecCtx<'_, M> {}

/// Proof that context bytes passed the full validation of [`SecCtx::parse`] at one generation
/// and length, so that [`SecCtx::reopen`] can skip the linear part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Validated {
    generation: u64,
    len: usize,
}

impl Validated {
    /// The generation that was validated.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Bytes of table rows copied out at once when validating shared memory (a whole number of
/// entry rows and of mask rows: 2,240 = 80 × 28 = 112 × 20).
const CHUNK_BYTES: usize = 2240;

/// A raw entry row, before it becomes an [`Entry`].
struct RawEntry {
    target: u128,
    kind: u32,
    offset: u32,
    len: u32,
}

impl<'a> SecCtx<'a, [u8]> {
    /// Validates `bytes` as a context (see [`SecCtx::parse_mem`]).
    ///
    /// # Example
    ///
    /// Reading a context: find the records filed under an object and decode them. Bytes that
    /// are not a context are refused, never half-read.
    ///
    /// ```
    /// use twizzler_capsec::{
    ///     Cap, CapGrant, ObjID, Protections, Record, SecCtx, SecCtxEditor, SigningKey,
    ///     SigningScheme,
    /// };
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[4; 32])?;
    /// # let (object, ctx_id) = (ObjID::new(0x1000), ObjID::new(0x2000));
    /// # let cap = Cap::mint(CapGrant::new(object, ctx_id, Protections::READ), &key)?;
    /// # let mut ed = SecCtxEditor::new();
    /// # ed.add_cap(&cap);
    /// let bytes: Vec<u8> = ed.encode()?; // e.g. read from the context object
    ///
    /// let ctx = SecCtx::parse(&bytes)?;
    /// assert_eq!(ctx.entry_count(), 1);
    /// for entry in ctx.entries_for(object) {
    ///     let record: Record = entry.record()?;
    ///     assert_eq!((record.target(), record.holder()), (object, ctx_id));
    ///     assert_eq!(record.prots(), Protections::READ);
    /// }
    ///
    /// assert!(SecCtx::parse(&bytes[..bytes.len() - 1]).is_err()); // truncated
    /// assert!(SecCtx::parse(b"not a context").is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CtxError> {
        Self::parse_mem(bytes)
    }

    /// The whole context's bytes (for the editor, which copies record bytes out of them).
    #[cfg(feature = "alloc")]
    pub(super) fn all_bytes(&self) -> &'a [u8] {
        self.mem
    }

    /// Re-opens `bytes` that [`SecCtx::parse`] validated (see [`SecCtx::reopen_mem`]).
    pub fn reopen(bytes: &'a [u8], validated: Validated) -> Result<Self, CtxError> {
        Self::reopen_mem(bytes, validated)
    }

    /// The generation in the header of `bytes` (see [`CtxHeader::read`]).
    pub fn peek_generation(bytes: &[u8]) -> Result<u64, CtxError> {
        Ok(CtxHeader::read(bytes)?.generation)
    }
}

impl<'a, M: ?Sized + CtxMem> SecCtx<'a, M> {
    /// Validates the bytes of `mem` as a context. Cost is linear in the number of entries and
    /// masks; records themselves are decoded only when looked up.
    pub fn parse_mem(mem: &'a M) -> Result<Self, CtxError> {
        let ctx = Self::parse_layout(mem)?;
        ctx.validate_entries()?;
        ctx.validate_masks()?;
        ctx.initial_label()?;
        Ok(ctx)
    }

    /// Re-opens bytes that [`SecCtx::parse_mem`] validated as `validated`, in constant time:
    /// the header and the bounds of every table are checked again, and the generation and
    /// length must be the ones validated ([`CtxError::Changed`] otherwise); the linear checks
    /// of the rows are not repeated.
    ///
    /// The generation is the writer's promise that nothing else changed. A writer that edits
    /// rows without bumping it can make its own lookups miss entries, never read out of
    /// bounds: every accessor checks the row it reads, and a row that does not check out
    /// reads as absent.
    pub fn reopen_mem(mem: &'a M, validated: Validated) -> Result<Self, CtxError> {
        let ctx = Self::parse_layout(mem)?;
        if ctx.header.generation != validated.generation || ctx.len != validated.len {
            return Err(CtxError::Changed);
        }
        Ok(ctx)
    }

    /// The stamp [`SecCtx::reopen_mem`] takes. Only a value returned by a full parse carries
    /// one, so holding it means the full validation passed.
    pub fn validated(&self) -> Validated {
        Validated {
            generation: self.header.generation,
            len: self.len,
        }
    }

    /// The header and the bounds of the three tables: everything but the rows.
    fn parse_layout(mem: &'a M) -> Result<Self, CtxError> {
        let header = CtxHeader::read(mem)?;
        let len = mem.len();
        let entries = Region::inside(
            len,
            u64::from(header.entries_offset),
            u64::from(header.entry_count) * ENTRY_LEN as u64,
        )
        .ok_or(CtxError::TableOutOfBounds("entry table"))?;
        let masks = Region::inside(
            len,
            u64::from(header.masks_offset),
            u64::from(header.mask_count) * MASK_LEN as u64,
        )
        .ok_or(CtxError::TableOutOfBounds("mask table"))?;
        let overflow = Region::inside(
            len,
            u64::from(header.masks_offset) + u64::from(header.mask_count) * MASK_LEN as u64,
            u64::from(header.overflow_count) * ENTRY_LEN as u64,
        )
        .ok_or(CtxError::TableOutOfBounds("overflow table"))?;
        let heap = Region::inside(
            len,
            u64::from(header.heap_offset),
            u64::from(header.heap_len),
        )
        .ok_or(CtxError::TableOutOfBounds("item heap"))?;
        let label = Region::inside(
            len,
            u64::from(header.label_offset),
            u64::from(header.label_len),
        )
        .ok_or(CtxError::TableOutOfBounds("label section"))?;
        if label.len != 0 {
            let head = Region {
                offset: 0,
                len: HEADER_LEN_V3,
            };
            for (part, what) in [
                (head, "header"),
                (entries, "entry table"),
                (masks, "mask table"),
                (overflow, "overflow table"),
                (heap, "item heap"),
            ] {
                if label.overlaps(&part) {
                    return Err(CtxError::LabelOverlaps(what));
                }
            }
        }
        Ok(Self {
            mem,
            len,
            header,
            entries,
            masks,
            overflow,
            heap,
            label,
        })
    }

    /// The initial principal label the context proposes (`docs/DIFC.md` §1.4): version 3's
    /// label section, decoded (copied out through [`CtxMem`], never read by reference), or
    /// the empty label for versions 1 and 2. The kernel reads it once, at registration.
    pub fn initial_label(&self) -> Result<Label, CtxError> {
        if self.label.len == 0 {
            return Ok(Label::EMPTY);
        }
        let mut buf = [0u8; MAX_LABEL_LEN];
        let dst =
            buf.get_mut(..self.label.len)
                .ok_or(CtxError::BadLabel(DecodeError::BadLength {
                    what: "label section",
                    len: self.label.len,
                }))?;
        if !self.mem.read(self.label.offset, dst) {
            return Err(CtxError::TableOutOfBounds("label section"));
        }
        Label::decode(dst).map_err(CtxError::BadLabel)
    }

    /// Copies row `index` of `table` (`N` bytes a row).
    #[inline]
    fn row<const N: usize>(&self, table: Region, index: usize) -> Option<[u8; N]> {
        let at = table.row(index, N)?;
        if let Some(all) = self.mem.direct() {
            return all.get(at..at + N)?.try_into().ok();
        }
        let mut row = [0u8; N];
        self.mem.read(at, &mut row).then_some(row)
    }

    /// Rows of the entry table (without the overflow table's).
    pub(super) fn main_count(&self) -> usize {
        self.entries.len / ENTRY_LEN
    }

    /// Row `row` of `table` (the entry table or the overflow table).
    #[inline]
    fn raw_entry(&self, table: Region, row: usize) -> Option<RawEntry> {
        let row: [u8; ENTRY_LEN] = self.row(table, row)?;
        Some(RawEntry {
            target: le_u128(&row, 0),
            kind: le_u32(&row, 16),
            offset: le_u32(&row, 20),
            len: le_u32(&row, 24),
        })
    }

    /// The target of row `row` of `table` (the entry table or the overflow table).
    #[inline]
    fn row_target(&self, table: Region, row: usize) -> Option<u128> {
        let at = table.row(row, ENTRY_LEN)?;
        if let Some(all) = self.mem.direct() {
            return Some(u128::from_le_bytes(all.get(at..at + 16)?.try_into().ok()?));
        }
        let mut t = [0u8; 16];
        self.mem.read(at, &mut t).then(|| u128::from_le_bytes(t))
    }

    fn raw_mask(&self, index: usize) -> Option<(u128, u16, u16)> {
        let row: [u8; MASK_LEN] = self.row(self.masks, index)?;
        Some((le_u128(&row, 0), le_u16(&row, 16), le_u16(&row, 18)))
    }

    /// Calls `check(index, row)` for every row of `table` (`N` bytes a row): in place when the
    /// memory is [`CtxMem::direct`], else copying the rows out a chunk ([`CHUNK_BYTES`]) at a
    /// time, so shared memory costs one copy per chunk rather than one per row.
    fn each_row<const N: usize>(
        &self,
        table: Region,
        what: &'static str,
        mut check: impl FnMut(usize, &[u8]) -> Result<(), CtxError>,
    ) -> Result<(), CtxError> {
        let rows = table.len / N;
        if let Some(all) = self.mem.direct() {
            // Memory no one else writes: scan the rows in place.
            let bytes = all
                .get(table.offset..table.offset + rows * N)
                .ok_or(CtxError::TableOutOfBounds(what))?;
            for (i, row) in bytes.chunks_exact(N).enumerate() {
                check(i, row)?;
            }
            return Ok(());
        }
        let mut buf = [0u8; CHUNK_BYTES];
        let per_chunk = CHUNK_BYTES / N;
        let mut first = 0;
        while first < rows {
            let n = per_chunk.min(rows - first);
            let at = table
                .row(first, N)
                .ok_or(CtxError::TableOutOfBounds(what))?;
            let chunk = buf
                .get_mut(..n * N)
                .ok_or(CtxError::TableOutOfBounds(what))?;
            if !self.mem.read(at, chunk) {
                return Err(CtxError::TableOutOfBounds(what));
            }
            for (i, row) in chunk.chunks_exact(N).enumerate() {
                check(first + i, row)?;
            }
            first += n;
        }
        Ok(())
    }

    fn validate_entries(&self) -> Result<(), CtxError> {
        self.validate_rows(self.entries, "entry table", 0)?;
        self.validate_rows(self.overflow, "overflow table", self.main_count())
    }

    /// Checks the rows of an entry-format table (`first` is the index of its first entry):
    /// sorted by target, known kinds, items inside the heap.
    fn validate_rows(
        &self,
        table: Region,
        name: &'static str,
        first: usize,
    ) -> Result<(), CtxError> {
        let mut prev = 0u128;
        self.each_row::<ENTRY_LEN>(table, name, |row_index, row| {
            let index = first + row_index;
            let target = le_u128(row, 0);
            let kind = le_u32(row, 16);
            if target < prev {
                return Err(CtxError::UnsortedEntries { index });
            }
            prev = target;
            RecordKind::from_raw(kind).map_err(|_| CtxError::BadEntryKind { index, kind })?;
            self.heap
                .sub(le_u32(row, 20), le_u32(row, 24))
                .ok_or(CtxError::ItemOutOfBounds { index })?;
            Ok(())
        })
    }

    fn validate_masks(&self) -> Result<(), CtxError> {
        let mut prev: Option<u128> = None;
        self.each_row::<MASK_LEN>(self.masks, "mask table", |index, row| {
            let target = le_u128(row, 0);
            if prev.is_some_and(|p| target <= p) {
                return Err(CtxError::UnsortedMasks { index });
            }
            prev = Some(target);
            let (perm, ovr) = (le_u16(row, 16), le_u16(row, 18));
            if Protections::from_raw(perm).is_none() || Protections::from_raw(ovr).is_none() {
                return Err(CtxError::BadMask { index });
            }
            Ok(())
        })
    }

    /// The header read when the view was made.
    pub fn header(&self) -> CtxHeader {
        self.header
    }

    /// Where the item heap starts (a writer that keeps the layout puts it there again).
    pub fn heap_offset(&self) -> u64 {
        self.heap.offset as u64
    }

    /// The context's flags.
    pub fn flags(&self) -> CtxFlags {
        self.header.flags
    }

    /// The generation: changes on every edit.
    pub fn generation(&self) -> u64 {
        self.header.generation
    }

    /// The global mask.
    pub fn global_mask(&self) -> Protections {
        self.header.global_mask
    }

    /// Number of entries (of the entry table and, in version 2, of the overflow table).
    pub fn entry_count(&self) -> usize {
        self.main_count() + self.overflow.len / ENTRY_LEN
    }

    /// Number of entries in version 2's overflow table.
    pub fn overflow_count(&self) -> usize {
        self.overflow.len / ENTRY_LEN
    }

    /// Number of per-object masks.
    pub fn mask_count(&self) -> usize {
        self.masks.len / MASK_LEN
    }

    /// Row `row` of `table`, whose first row is entry `first`, as an [`Entry`], if its target
    /// is `only` (any target when `None`) and the row checks out.
    #[inline]
    pub(super) fn entry(
        &self,
        table: Region,
        first: usize,
        row: usize,
        only: Option<ObjID>,
    ) -> Option<Entry<'a, M>> {
        let e = self.raw_entry(table, row)?;
        if only.is_some_and(|t| t.raw() != e.target) {
            return None;
        }
        let item = self.heap.sub(e.offset, e.len)?;
        Some(Entry {
            index: first + row,
            target: ObjID::new(e.target),
            kind: RecordKind::from_raw(e.kind).ok()?,
            mem: self.mem,
            at: item.offset,
            len: item.len,
        })
    }

    /// Index of the first row of `table` (one sorted table of `rows` rows) whose target is not
    /// less than `target` (binary search).
    #[inline]
    fn lower_bound(&self, table: Region, rows: usize, target: u128) -> usize {
        let (mut lo, mut hi) = (0, rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.row_target(table, mid) {
                Some(t) if t < target => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// The entries filed under `target`, by binary search of the entry table, then, in
    /// version 2 and only if it has rows, of the overflow table: a context without one pays
    /// nothing for it.
    #[inline]
    pub fn entries_for(&self, target: ObjID) -> EntryIter<'a, M> {
        let main = self.main_count();
        let overflow = self.overflow_count();
        EntryIter {
            ctx: *self,
            table: self.entries,
            first: 0,
            row: self.lower_bound(self.entries, main, target.raw()),
            then: (overflow != 0).then(|| self.lower_bound(self.overflow, overflow, target.raw())),
            only: Some(target),
            stop: usize::MAX,
            wrap: None,
        }
    }

    /// Every entry, in table order (the entry table's, then the overflow table's).
    pub fn entries(&self) -> EntryIter<'a, M> {
        EntryIter {
            ctx: *self,
            table: self.entries,
            first: 0,
            row: 0,
            then: (self.overflow_count() != 0).then_some(0),
            only: None,
            stop: usize::MAX,
            wrap: None,
        }
    }

    /// The mask for `target`, if any, by binary search.
    pub fn mask(&self, target: ObjID) -> Option<Mask> {
        let want = target.raw();
        let (mut lo, mut hi) = (0, self.mask_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (t, perm, ovr) = self.raw_mask(mid)?;
            match t.cmp(&want) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => {
                    return Some(Mask {
                        target,
                        permmask: Protections::from_raw(perm)?,
                        ovrmask: Protections::from_raw(ovr)?,
                    });
                }
            }
        }
        None
    }

    /// Every mask, in table order.
    pub fn masks(&self) -> impl Iterator<Item = Mask> + 'a {
        let ctx = *self;
        (0..self.mask_count()).filter_map(move |i| {
            let (t, perm, ovr) = ctx.raw_mask(i)?;
            Some(Mask {
                target: ObjID::new(t),
                permmask: Protections::from_raw(perm)?,
                ovrmask: Protections::from_raw(ovr)?,
            })
        })
    }
}

impl<M: ?Sized + CtxMem> fmt::Debug for SecCtx<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecCtx")
            .field("flags", &self.header.flags)
            .field("generation", &self.header.generation)
            .field("global_mask", &self.header.global_mask)
            .field("entries", &self.entry_count())
            .field("masks", &self.mask_count())
            .finish()
    }
}
