//! The zero-copy validating reader.

use core::fmt;

use super::{CTX_MAGIC, CTX_VERSION, CtxFlags, ENTRY_LEN, HEADER_LEN, MASK_LEN};
use crate::codec::Reader;
use crate::error::DecodeError;
use crate::ids::{ObjID, Protections};
use crate::record::{Record, RecordKind};

/// Why context bytes were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtxError {
    /// The header itself is malformed (short, bad magic, unsupported version).
    Header(DecodeError),
    /// Flags with unknown bits.
    UnknownFlags(u16),
    /// A global mask with unknown bits.
    UnknownGlobalMask(u16),
    /// A reserved header field is not zero.
    NonZeroReserved,
    /// A table lies (partly) outside the buffer, or its size overflows.
    TableOutOfBounds(&'static str),
    /// Entry `index` has a smaller target than the entry before it.
    UnsortedEntries {
        /// Index of the offending entry.
        index: usize,
    },
    /// Entry `index` has an unknown kind.
    BadEntryKind {
        /// Index of the offending entry.
        index: usize,
        /// The kind found.
        kind: u32,
    },
    /// Entry `index` points outside the item heap.
    ItemOutOfBounds {
        /// Index of the offending entry.
        index: usize,
    },
    /// Mask `index` does not have a strictly greater target than the mask before it.
    UnsortedMasks {
        /// Index of the offending mask.
        index: usize,
    },
    /// Mask `index` has unknown protection bits.
    BadMask {
        /// Index of the offending mask.
        index: usize,
    },
    /// [`SecCtx::reopen`]: the bytes are no longer those validated (another generation or
    /// length); parse them again.
    Changed,
}

impl fmt::Display for CtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(e) => write!(f, "context header: {e}"),
            Self::UnknownFlags(b) => write!(f, "context flags {b:#x} have unknown bits"),
            Self::UnknownGlobalMask(b) => write!(f, "global mask {b:#x} has unknown bits"),
            Self::NonZeroReserved => f.write_str("a reserved context header field is not zero"),
            Self::Changed => f.write_str("the context changed since it was validated"),
            Self::TableOutOfBounds(t) => write!(f, "the {t} lies outside the context"),
            Self::UnsortedEntries { index } => {
                write!(
                    f,
                    "entry {index} is out of order (entries must be sorted by target)"
                )
            }
            Self::BadEntryKind { index, kind } => {
                write!(f, "entry {index} has unknown record kind {kind}")
            }
            Self::ItemOutOfBounds { index } => {
                write!(f, "entry {index} points outside the item heap")
            }
            Self::UnsortedMasks { index } => write!(
                f,
                "mask {index} is out of order or duplicated (masks must be strictly sorted)"
            ),
            Self::BadMask { index } => write!(f, "mask {index} has unknown protection bits"),
        }
    }
}

impl core::error::Error for CtxError {}

impl From<DecodeError> for CtxError {
    fn from(e: DecodeError) -> Self {
        Self::Header(e)
    }
}

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

/// One entry of a context: a record's kind and its (not yet decoded) bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Index in the entry table.
    pub index: usize,
    /// The target the entry is filed under.
    pub target: ObjID,
    /// The record's kind.
    pub kind: RecordKind,
    /// The record's encoded bytes, inside the item heap.
    pub bytes: &'a [u8],
}

impl Entry<'_> {
    /// Decodes the record.
    pub fn record(&self) -> Result<Record, DecodeError> {
        Record::decode(self.kind, self.bytes)
    }
}

/// A validated, zero-copy view of a security context's bytes.
///
/// Invariant, established by [`SecCtx::parse`] and relied on by every accessor: the tables lie
/// inside the buffer with exact lengths, every entry has a known kind and an item range inside
/// the heap, entries are sorted by target and masks strictly sorted with known bits.
#[derive(Clone, Copy)]
pub struct SecCtx<'a> {
    len: usize,
    flags: CtxFlags,
    generation: u64,
    global_mask: Protections,
    entries: &'a [u8],
    masks: &'a [u8],
    heap: &'a [u8],
}

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

/// The sub-slice `offset .. offset + len` of `bytes`, or `None` if it is not inside.
fn region(bytes: &[u8], offset: u32, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(len).ok()?;
    bytes.get(start..start.checked_add(len)?)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le_u128(b: &[u8], at: usize) -> Option<u128> {
    Some(u128::from_le_bytes(b.get(at..at + 16)?.try_into().ok()?))
}

/// A reader over the whole header of `bytes`, past its checked magic and version.
fn header_reader(bytes: &[u8]) -> Result<Reader<'_>, CtxError> {
    let header = bytes
        .get(..HEADER_LEN)
        .ok_or(CtxError::Header(DecodeError::Truncated {
            at: 0,
            needed: HEADER_LEN,
            available: bytes.len(),
        }))?;
    let mut r = Reader::new(header);
    r.magic(CTX_MAGIC)?;
    r.version(CTX_VERSION)?;
    Ok(r)
}

/// A raw entry row, before it becomes an [`Entry`].
struct RawEntry {
    target: u128,
    kind: u32,
    offset: u32,
    len: u32,
}

fn raw_entry(table: &[u8], index: usize) -> Option<RawEntry> {
    let row = table
        .get(index.checked_mul(ENTRY_LEN)?..)?
        .get(..ENTRY_LEN)?;
    Some(RawEntry {
        target: le_u128(row, 0)?,
        kind: le_u32(row, 16)?,
        offset: le_u32(row, 20)?,
        len: le_u32(row, 24)?,
    })
}

fn entry_target(table: &[u8], index: usize) -> Option<u128> {
    le_u128(table, index.checked_mul(ENTRY_LEN)?)
}

fn raw_mask(table: &[u8], index: usize) -> Option<(u128, u16, u16)> {
    let row = table.get(index.checked_mul(MASK_LEN)?..)?.get(..MASK_LEN)?;
    Some((le_u128(row, 0)?, le_u16(row, 16)?, le_u16(row, 18)?))
}

impl<'a> SecCtx<'a> {
    /// Validates `bytes` as a context. Cost is linear in the number of entries and masks;
    /// records themselves are decoded only when looked up.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CtxError> {
        let ctx = Self::parse_layout(bytes)?;
        ctx.validate_entries()?;
        ctx.validate_masks()?;
        Ok(ctx)
    }

    /// Re-opens bytes that [`SecCtx::parse`] validated as `validated`, in constant time: the
    /// header and the bounds of every table are checked again, and the generation and length
    /// must be the ones validated ([`CtxError::Changed`] otherwise); the linear checks of the
    /// rows are not repeated.
    ///
    /// The generation is the writer's promise that nothing else changed. A writer that edits
    /// rows without bumping it can make its own lookups miss entries, never read out of
    /// bounds: every accessor checks the row it reads, and a row that does not check out
    /// reads as absent.
    pub fn reopen(bytes: &'a [u8], validated: Validated) -> Result<Self, CtxError> {
        let ctx = Self::parse_layout(bytes)?;
        if ctx.generation != validated.generation || ctx.len != validated.len {
            return Err(CtxError::Changed);
        }
        Ok(ctx)
    }

    /// The stamp [`SecCtx::reopen`] takes. Only a value returned by [`SecCtx::parse`] carries
    /// one, so holding it means the full validation passed.
    pub fn validated(&self) -> Validated {
        Validated {
            generation: self.generation,
            len: self.len,
        }
    }

    /// The generation in the header of `bytes`, checking only the magic and the version: the
    /// cheapest way to tell whether a context changed since a decision was cached.
    pub fn peek_generation(bytes: &[u8]) -> Result<u64, CtxError> {
        let mut r = header_reader(bytes)?;
        r.u16()?;
        Ok(r.u64()?)
    }

    /// The header and the bounds of the three tables: everything but the rows.
    fn parse_layout(bytes: &'a [u8]) -> Result<Self, CtxError> {
        let mut r = header_reader(bytes)?;
        let raw_flags = r.u16()?;
        let flags = CtxFlags::from_bits(raw_flags).ok_or(CtxError::UnknownFlags(raw_flags))?;
        let generation = r.u64()?;
        let raw_global = r.u16()?;
        let global_mask =
            Protections::from_raw(raw_global).ok_or(CtxError::UnknownGlobalMask(raw_global))?;
        let reserved_a = r.u16()?;
        let entry_count = r.u32()?;
        let mask_count = r.u32()?;
        let entries_offset = r.u32()?;
        let masks_offset = r.u32()?;
        let heap_offset = r.u32()?;
        let heap_len = r.u32()?;
        let reserved_b = r.u32()?;
        r.finish()?;
        if reserved_a != 0 || reserved_b != 0 {
            return Err(CtxError::NonZeroReserved);
        }

        let entries = region(
            bytes,
            entries_offset,
            u64::from(entry_count) * ENTRY_LEN as u64,
        )
        .ok_or(CtxError::TableOutOfBounds("entry table"))?;
        let masks = region(bytes, masks_offset, u64::from(mask_count) * MASK_LEN as u64)
            .ok_or(CtxError::TableOutOfBounds("mask table"))?;
        let heap = region(bytes, heap_offset, u64::from(heap_len))
            .ok_or(CtxError::TableOutOfBounds("item heap"))?;

        Ok(Self {
            len: bytes.len(),
            flags,
            generation,
            global_mask,
            entries,
            masks,
            heap,
        })
    }

    fn validate_entries(&self) -> Result<(), CtxError> {
        let mut prev = 0u128;
        for index in 0..self.entry_count() {
            let e =
                raw_entry(self.entries, index).ok_or(CtxError::TableOutOfBounds("entry table"))?;
            if e.target < prev {
                return Err(CtxError::UnsortedEntries { index });
            }
            prev = e.target;
            RecordKind::from_raw(e.kind).map_err(|_| CtxError::BadEntryKind {
                index,
                kind: e.kind,
            })?;
            region(self.heap, e.offset, u64::from(e.len))
                .ok_or(CtxError::ItemOutOfBounds { index })?;
        }
        Ok(())
    }

    fn validate_masks(&self) -> Result<(), CtxError> {
        let mut prev: Option<u128> = None;
        for index in 0..self.mask_count() {
            let (target, perm, ovr) =
                raw_mask(self.masks, index).ok_or(CtxError::TableOutOfBounds("mask table"))?;
            if prev.is_some_and(|p| target <= p) {
                return Err(CtxError::UnsortedMasks { index });
            }
            prev = Some(target);
            if Protections::from_raw(perm).is_none() || Protections::from_raw(ovr).is_none() {
                return Err(CtxError::BadMask { index });
            }
        }
        Ok(())
    }

    /// The context's flags.
    pub fn flags(&self) -> CtxFlags {
        self.flags
    }

    /// The generation: changes on every edit.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The global mask.
    pub fn global_mask(&self) -> Protections {
        self.global_mask
    }

    /// Number of entries.
    pub fn entry_count(&self) -> usize {
        self.entries.len() / ENTRY_LEN
    }

    /// Number of per-object masks.
    pub fn mask_count(&self) -> usize {
        self.masks.len() / MASK_LEN
    }

    fn entry(&self, index: usize) -> Option<Entry<'a>> {
        let e = raw_entry(self.entries, index)?;
        Some(Entry {
            index,
            target: ObjID::new(e.target),
            kind: RecordKind::from_raw(e.kind).ok()?,
            bytes: region(self.heap, e.offset, u64::from(e.len))?,
        })
    }

    /// Index of the first entry whose target is not less than `target` (binary search).
    fn lower_bound(&self, target: u128) -> usize {
        let (mut lo, mut hi) = (0, self.entry_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match entry_target(self.entries, mid) {
                Some(t) if t < target => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// The entries filed under `target`, by binary search.
    pub fn entries_for(&self, target: ObjID) -> EntryIter<'a> {
        EntryIter {
            ctx: *self,
            next: self.lower_bound(target.raw()),
            only: Some(target),
        }
    }

    /// Every entry, in table order.
    pub fn entries(&self) -> EntryIter<'a> {
        EntryIter {
            ctx: *self,
            next: 0,
            only: None,
        }
    }

    /// The mask for `target`, if any, by binary search.
    pub fn mask(&self, target: ObjID) -> Option<Mask> {
        let want = target.raw();
        let (mut lo, mut hi) = (0, self.mask_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (t, perm, ovr) = raw_mask(self.masks, mid)?;
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
        let table = self.masks;
        (0..self.mask_count()).filter_map(move |i| {
            let (t, perm, ovr) = raw_mask(table, i)?;
            Some(Mask {
                target: ObjID::new(t),
                permmask: Protections::from_raw(perm)?,
                ovrmask: Protections::from_raw(ovr)?,
            })
        })
    }
}

impl fmt::Debug for SecCtx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecCtx")
            .field("flags", &self.flags)
            .field("generation", &self.generation)
            .field("global_mask", &self.global_mask)
            .field("entries", &self.entry_count())
            .field("masks", &self.mask_count())
            .finish()
    }
}

/// Iterator over context entries (all of them, or those of one target).
#[derive(Clone)]
pub struct EntryIter<'a> {
    ctx: SecCtx<'a>,
    next: usize,
    only: Option<ObjID>,
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        let e = self.ctx.entry(self.next)?;
        if self.only.is_some_and(|t| t != e.target) {
            return None;
        }
        self.next += 1;
        Some(e)
    }
}
