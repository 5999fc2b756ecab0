//! Building and editing contexts (with `alloc`).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use super::bytes::le_u64;
use super::entry::GATE_AT;
use super::{
    CTX_MAGIC, CTX_VERSION, CTX_VERSION_LABEL, CtxFlags, ENTRY_LEN, HEADER_LEN, HEADER_LEN_V3,
    MASK_LEN, Mask, SecCtx,
};
use crate::cap::{CAP_LEN, Cap};
use crate::codec::Writer;
use crate::del::Del;
use crate::hash::RecordId;
use crate::ids::{MAX_OBJECT_SIZE, ObjID, Protections};
use crate::label::Label;
use crate::record::{Record, RecordKind};

/// Why a context cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The encoded context would exceed the 1 GiB object limit.
    TooLarge {
        /// The size it would have, in bytes.
        bytes: u64,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { bytes } => write!(
                f,
                "the context would take {bytes} bytes, more than the {MAX_OBJECT_SIZE}-byte object limit"
            ),
        }
    }
}

impl core::error::Error for BuildError {}

/// An entry of the editor: where its record's bytes lie in the editor's heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OwnedEntry {
    target: ObjID,
    kind: RecordKind,
    /// `at .. at + len` lies inside [`SecCtxEditor::heap`] (the editor's invariant).
    at: usize,
    len: usize,
}

/// Builds a new context or edits an existing one, writing exactly the format [`SecCtx`] reads.
///
/// Every change bumps the generation by one, so the kernel's caches, stamped with the
/// generation they were derived from, miss after any edit.
///
/// ```
/// use twizzler_capsec::{CtxFlags, ObjID, Protections, SecCtx, SecCtxEditor};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut ed = SecCtxEditor::new();
/// ed.set_global_mask(Protections::READ | Protections::WRITE);
/// ed.set_mask(ObjID::new(7), Protections::READ, Protections::empty());
/// ed.set_flags(CtxFlags::UNDETACHABLE);
/// let bytes = ed.encode()?;
///
/// let ctx = SecCtx::parse(&bytes)?;
/// assert_eq!(ctx.generation(), 3);
/// assert!(ctx.flags().contains(CtxFlags::UNDETACHABLE));
/// assert_eq!(ctx.mask(ObjID::new(7)).map(|m| m.permmask), Some(Protections::READ));
/// # Ok(())
/// # }
/// ```
///
/// # Memory
///
/// The editor holds one heap of record bytes and, per entry, a range in it. Loading a context
/// copies the span of its item heap that entries use once, however many entries name the same
/// (or overlapping) bytes, and [`SecCtxEditor::encode`] writes the union of the ranges still in
/// use, keeping overlaps: a context never grows by being loaded and written again, and the
/// editor's memory stays within a small constant factor of the context's size (a hostile
/// 1 MiB context whose 37,000 entries all name one range once cost 70 MB; see
/// `tests/editor_memory.rs`).
#[derive(Clone)]
pub struct SecCtxEditor {
    flags: CtxFlags,
    generation: u64,
    global_mask: Protections,
    /// Kept in insertion order; sorted (stably, by target, then within a target by
    /// [`SecCtxEditor::run_key`]) when encoded.
    entries: Vec<OwnedEntry>,
    /// Record bytes. Removing an entry leaves its bytes here until the next encode drops them.
    heap: Vec<u8>,
    masks: BTreeMap<ObjID, (Protections, Protections)>,
    /// The proposed initial label (version 3's section); empty: none, and version 1 is written.
    label: Label,
}

impl fmt::Debug for SecCtxEditor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the heap: it can be a gigabyte.
        f.debug_struct("SecCtxEditor")
            .field("flags", &self.flags)
            .field("generation", &self.generation)
            .field("global_mask", &self.global_mask)
            .field("entries", &self.entries.len())
            .field("heap_bytes", &self.heap.len())
            .field("masks", &self.masks)
            .field("label", &self.label)
            .finish()
    }
}

impl Default for SecCtxEditor {
    fn default() -> Self {
        Self::new()
    }
}

impl SecCtxEditor {
    /// An empty context: generation 0, no flags, a global mask of every right.
    pub fn new() -> Self {
        Self {
            flags: CtxFlags::empty(),
            generation: 0,
            global_mask: Protections::all(),
            entries: Vec::new(),
            heap: Vec::new(),
            masks: BTreeMap::new(),
            label: Label::EMPTY,
        }
    }

    /// Loads a parsed context for editing, keeping its generation.
    ///
    /// The bytes the entries name are copied once, as the one span of the item heap that
    /// covers them all; entries keep their ranges in it (so overlapping entries cost nothing).
    ///
    /// # Example
    ///
    /// Editing a context that already exists: load it, take one capability out, add another,
    /// write it back. Every edit bumps the generation, so caches keyed on it miss.
    ///
    /// ```
    /// use twizzler_capsec::{
    ///     Cap, CapGrant, ObjID, Protections, SecCtx, SecCtxEditor, SigningKey, SigningScheme,
    /// };
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[3; 32])?;
    /// let ctx_id = ObjID::new(0x2000);
    /// let (old, new) = (ObjID::new(0x10), ObjID::new(0x11));
    /// let cap_old = Cap::mint(CapGrant::new(old, ctx_id, Protections::READ), &key)?;
    /// let cap_new = Cap::mint(CapGrant::new(new, ctx_id, Protections::READ), &key)?;
    ///
    /// let mut ed = SecCtxEditor::new();
    /// ed.add_cap(&cap_old);
    /// let stored = ed.encode()?; // the bytes of the context object
    ///
    /// let before = SecCtx::parse(&stored)?;
    /// let mut ed = SecCtxEditor::from_ctx(&before);
    /// assert_eq!(ed.remove(old, &cap_old.id()), 1);
    /// ed.add_cap(&cap_new);
    /// let edited = ed.encode()?;
    ///
    /// let after = SecCtx::parse(&edited)?;
    /// assert!(after.generation() > before.generation());
    /// assert_eq!(after.entries_for(old).count(), 0);
    /// assert_eq!(after.entries_for(new).count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_ctx(ctx: &SecCtx<'_>) -> Self {
        let lo = ctx.entries().map(|e| e.at).min().unwrap_or(0);
        let hi = ctx.entries().map(|e| e.at + e.len).max().unwrap_or(0);
        // The reader checked that every entry's range lies inside the context.
        let heap = ctx.all_bytes().get(lo..hi).unwrap_or(&[]).to_vec();
        let mut entries = Vec::with_capacity(ctx.entry_count());
        entries.extend(ctx.entries().map(|e| OwnedEntry {
            target: e.target,
            kind: e.kind,
            at: e.at - lo,
            len: e.len,
        }));
        Self {
            flags: ctx.flags(),
            generation: ctx.generation(),
            global_mask: ctx.global_mask(),
            entries,
            heap,
            masks: ctx
                .masks()
                .map(|m| (m.target, (m.permmask, m.ovrmask)))
                .collect(),
            // A parsed context's section was validated; an unreadable one proposes nothing.
            label: ctx.initial_label().unwrap_or(Label::EMPTY),
        }
    }

    /// The record bytes of `e`.
    /// The initial principal label the context proposes (empty: none).
    pub fn initial_label(&self) -> &Label {
        &self.label
    }

    /// Sets the initial principal label the context proposes (`docs/DIFC.md` §1.4). A
    /// non-empty label makes [`SecCtxEditor::encode`] write version 3 with a label section
    /// right after the header; the empty label removes the section (version 1, byte for byte
    /// what an editor that never had a label writes). Bumps the generation if it changes.
    pub fn set_initial_label(&mut self, label: Label) {
        if self.label != label {
            self.label = label;
            self.bump();
        }
    }

    fn bytes_of(&self, e: &OwnedEntry) -> &[u8] {
        // In range by the editor's invariant; `get` keeps a broken invariant from panicking.
        self.heap.get(e.at..e.at + e.len).unwrap_or(&[])
    }

    fn bump(&mut self) {
        // 2^64 edits cannot happen; wrapping keeps this total regardless.
        self.generation = self.generation.wrapping_add(1) & !super::WRITING;
    }

    /// The generation the next [`SecCtxEditor::encode`] writes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The flags.
    pub fn flags(&self) -> CtxFlags {
        self.flags
    }

    /// The global mask.
    pub fn global_mask(&self) -> Protections {
        self.global_mask
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a capability, filed under its target.
    pub fn add_cap(&mut self, cap: &Cap) {
        self.push(cap.target(), RecordKind::Cap, &cap.encode());
    }

    /// Adds a delegation, filed under its target.
    pub fn add_del(&mut self, del: &Del) {
        self.push(del.target(), RecordKind::Del, &del.encode());
    }

    /// Adds a record, filed under its target.
    pub fn add_record(&mut self, record: &Record) {
        match record {
            Record::Cap(c) => self.add_cap(c),
            Record::Del(d) => self.add_del(d),
        }
    }

    fn push(&mut self, target: ObjID, kind: RecordKind, bytes: &[u8]) {
        let at = self.heap.len();
        self.heap.extend_from_slice(bytes);
        self.entries.push(OwnedEntry {
            target,
            kind,
            at,
            len: bytes.len(),
        });
        self.bump();
    }

    /// Removes every entry under `target` whose record has id `id`; returns how many.
    pub fn remove(&mut self, target: ObjID, id: &RecordId) -> usize {
        let heap = &self.heap;
        let mut entries = core::mem::take(&mut self.entries);
        let before = entries.len();
        entries.retain(|e| {
            !(e.target == target
                && RecordId::of(heap.get(e.at..e.at + e.len).unwrap_or(&[])) == *id)
        });
        self.entries = entries;
        self.removed(before)
    }

    /// Removes every entry under `target`; returns how many.
    pub fn remove_target(&mut self, target: ObjID) -> usize {
        self.remove_where(|e| e.target == target)
    }

    fn remove_where(&mut self, mut pred: impl FnMut(&OwnedEntry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !pred(e));
        self.removed(before)
    }

    /// Bumps the generation if entries were removed since there were `before`; returns how
    /// many were.
    fn removed(&mut self, before: usize) -> usize {
        let removed = before - self.entries.len();
        if removed > 0 {
            self.bump();
        }
        removed
    }

    /// Sets the mask for `target`.
    pub fn set_mask(&mut self, target: ObjID, permmask: Protections, ovrmask: Protections) {
        self.masks.insert(target, (permmask, ovrmask));
        self.bump();
    }

    /// Removes the mask for `target`; returns whether there was one.
    pub fn remove_mask(&mut self, target: ObjID) -> bool {
        let had = self.masks.remove(&target).is_some();
        if had {
            self.bump();
        }
        had
    }

    /// Sets the global mask.
    pub fn set_global_mask(&mut self, mask: Protections) {
        self.global_mask = mask;
        self.bump();
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, flags: CtxFlags) {
        self.flags = flags;
        self.bump();
    }

    /// Every entry as (target, record id, decoded record or why it does not decode), in
    /// insertion order.
    pub fn records(
        &self,
    ) -> impl Iterator<Item = (ObjID, RecordId, Result<Record, crate::DecodeError>)> + '_ {
        self.entries.iter().map(|e| {
            let bytes = self.bytes_of(e);
            (e.target, RecordId::of(bytes), Record::decode(e.kind, bytes))
        })
    }

    /// Every mask, sorted by target.
    pub fn masks(&self) -> impl Iterator<Item = Mask> + '_ {
        self.masks
            .iter()
            .map(|(&target, &(permmask, ovrmask))| Mask {
                target,
                permmask,
                ovrmask,
            })
    }

    /// Writes the context: header, label section (version 3, only with a label), entry table
    /// (stably sorted by target, and within a target's run capabilities by the offset of
    /// their gate, then the other records), mask table, heap.
    ///
    /// The heap written is the union of the entries' ranges, laid out in the order the sorted
    /// entries first name them (for a context built record by record, each entry's bytes in
    /// entry order): bytes no entry names any more are dropped, and entries that shared or
    /// overlapped bytes still do.
    pub fn encode(&self) -> Result<Vec<u8>, BuildError> {
        self.write(Layout::Dense)
    }

    /// Writes the context laid out for changes in place, as a store that writes only the
    /// pages that differ wants it: the heap in storage order (the bytes of a loaded context
    /// where they were, records added since at its end), starting at `heap_offset` (where
    /// the loaded context's heap started) when the tables still fit before it, and otherwise
    /// at a page boundary past the tables with room for a quarter more of them (at least a
    /// page). Adding a record then changes the header, the entry table from its row on and
    /// the heap's end, not every byte after the tables. Readers see no difference: the reader
    /// allows room between the tables and the heap.
    pub fn encode_for_update(&self, heap_offset: Option<u64>) -> Result<Vec<u8>, BuildError> {
        self.write(Layout::InPlace { heap_offset })
    }

    /// Where an entry goes within its target's run: capabilities first, by the offset of
    /// their gate, then every other record; ties keep insertion order (the sort is stable).
    /// A run in gate order is what lets a data fault find the record for its page by a
    /// search instead of a read of the whole run (`EntryIter::start_near_page`).
    fn run_key(&self, e: &OwnedEntry) -> (bool, u64) {
        let gate_offset = (e.kind == RecordKind::Cap && e.len == CAP_LEN)
            .then(|| self.heap.get(e.at..e.at + e.len))
            .flatten()
            .map(|body| le_u64(body, GATE_AT));
        (gate_offset.is_none(), gate_offset.unwrap_or(0))
    }

    fn write(&self, layout: Layout) -> Result<Vec<u8>, BuildError> {
        let mut spans = Spans::of(&self.entries);
        let n = self.entries.len() as u64;
        let m = self.masks.len() as u64;
        let heap_len = spans.total as u64;
        // A label section (version 3) goes right after the longer header.
        let label = (!self.label.is_empty()).then(|| self.label.encode());
        let (version, header_len) = match label {
            Some(_) => (CTX_VERSION_LABEL, HEADER_LEN_V3),
            None => (CTX_VERSION, HEADER_LEN),
        };
        let label_len = label.as_ref().map_or(0, |l| l.len()) as u64;
        let entries_offset = header_len as u64 + label_len;
        let masks_offset = entries_offset + n * ENTRY_LEN as u64;
        let tables_end = masks_offset + m * MASK_LEN as u64;
        let heap_offset = match layout {
            Layout::Dense => tables_end,
            Layout::InPlace { heap_offset } => {
                spans.place_in_storage_order();
                match heap_offset {
                    Some(h) if h >= tables_end => h,
                    _ => {
                        let room = (tables_end / 4).max(ROOM_ALIGN);
                        (tables_end + room).div_ceil(ROOM_ALIGN) * ROOM_ALIGN
                    }
                }
            }
        };
        let total = heap_offset + heap_len;
        if total > MAX_OBJECT_SIZE {
            return Err(BuildError::TooLarge { bytes: total });
        }
        // total <= 1 GiB, so every offset and length below fits a u32 and a usize.
        let as_u32 = |v: usize| v as u32;

        // Each entry's key worked out once, in insertion order (the run key reads the
        // record's bytes: asked at every comparison, a million-record run took 6× longer).
        let mut keyed: Vec<_> = self
            .entries
            .iter()
            .map(|e| ((e.target, self.run_key(e)), e))
            .collect();
        keyed.sort_by_key(|(key, _)| *key);
        let order = keyed.iter().map(|(_, e)| *e);

        let mut out = alloc::vec![0u8; total as usize];
        let mut w = Writer::new(&mut out);
        w.u32(CTX_MAGIC)
            .u16(version)
            .u16(self.flags.bits())
            .u64(self.generation)
            .u16(self.global_mask.bits())
            .u16(0)
            .u32(n as u32)
            .u32(m as u32)
            .u32(entries_offset as u32)
            .u32(masks_offset as u32)
            .u32(heap_offset as u32)
            .u32(heap_len as u32)
            .u32(0);
        if let Some(label) = &label {
            w.u32(header_len as u32).u32(label_len as u32).bytes(label);
        }
        for e in order {
            w.u128(e.target.raw())
                .u32(e.kind.raw())
                .u32(as_u32(spans.place(e.at)))
                .u32(as_u32(e.len));
        }
        for (target, (perm, ovr)) in &self.masks {
            w.u128(target.raw()).u16(perm.bits()).u16(ovr.bits());
        }
        // The room between the tables and the heap stays zero.
        w.skip((heap_offset - tables_end) as usize);
        for span in spans.in_written_order() {
            w.bytes(self.heap.get(span.start..span.end).unwrap_or(&[]));
        }
        debug_assert_eq!(w.position() as u64, total);
        Ok(out)
    }
}

/// How [`SecCtxEditor::write`] lays a context out.
#[derive(Clone, Copy)]
enum Layout {
    /// The heap right after the tables, in the order the sorted entries name it.
    Dense,
    /// The heap in storage order, at `heap_offset` when the tables fit before it.
    InPlace { heap_offset: Option<u64> },
}

/// The room [`SecCtxEditor::encode_for_update`] leaves is in whole pages of this size
/// (Twizzler's page).
const ROOM_ALIGN: u64 = 4096;

/// The union of the entries' heap ranges, as disjoint spans, and where each span goes in the
/// written heap.
struct Spans {
    /// Sorted by `start` and disjoint.
    list: Vec<Span>,
    /// Indices into `list`, in the order the spans are written.
    written: Vec<usize>,
    /// The sum of the spans' lengths.
    total: usize,
    /// Where the next span to be placed goes.
    cursor: usize,
}

struct Span {
    start: usize,
    end: usize,
    /// Where `start` goes in the written heap, once placed.
    new_start: Option<usize>,
}

impl Spans {
    fn of(entries: &[OwnedEntry]) -> Self {
        let mut ranges: Vec<(usize, usize)> =
            entries.iter().map(|e| (e.at, e.at + e.len)).collect();
        ranges.sort_unstable();
        // Overlapping ranges merge; touching ones stay apart, so records keep their own order.
        let mut list: Vec<Span> = Vec::new();
        let mut total = 0;
        for (start, end) in ranges {
            match list.last_mut() {
                Some(last) if start < last.end => {
                    if end > last.end {
                        total += end - last.end;
                        last.end = end;
                    }
                }
                _ => {
                    list.push(Span {
                        start,
                        end,
                        new_start: None,
                    });
                    total += end - start;
                }
            }
        }
        Self {
            written: Vec::with_capacity(list.len()),
            list,
            total,
            cursor: 0,
        }
    }

    /// Where heap offset `at` (the start of some entry's range) goes in the written heap,
    /// placing its span after those placed so far if it has no place yet.
    fn place(&mut self, at: usize) -> usize {
        // The last span starting at or before `at` contains it: every entry's range was
        // merged into one.
        let i = self
            .list
            .partition_point(|s| s.start <= at)
            .saturating_sub(1);
        let Some(span) = self.list.get_mut(i) else {
            return 0;
        };
        let new_start = match span.new_start {
            Some(new_start) => new_start,
            None => {
                let new_start = self.cursor;
                span.new_start = Some(new_start);
                self.cursor += span.end - span.start;
                self.written.push(i);
                new_start
            }
        };
        new_start + (at - span.start)
    }

    /// Places every span in storage order (by where it is now), so that a heap written
    /// again keeps its bytes where they were.
    fn place_in_storage_order(&mut self) {
        for (i, span) in self.list.iter_mut().enumerate() {
            span.new_start = Some(self.cursor);
            self.cursor += span.end - span.start;
            self.written.push(i);
        }
    }

    /// The placed spans, in the order they were placed.
    fn in_written_order(&self) -> impl Iterator<Item = &Span> {
        self.written.iter().filter_map(|&i| self.list.get(i))
    }
}
