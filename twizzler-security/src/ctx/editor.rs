//! Building and editing contexts (with `alloc`).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use super::{CTX_MAGIC, CTX_VERSION, CtxFlags, ENTRY_LEN, HEADER_LEN, MASK_LEN, Mask, SecCtx};
use crate::cap::Cap;
use crate::codec::Writer;
use crate::del::Del;
use crate::hash::RecordId;
use crate::ids::{MAX_OBJECT_SIZE, ObjID, Protections};
use crate::record::{Record, RecordKind};

/// Why a context cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnedEntry {
    target: ObjID,
    kind: RecordKind,
    bytes: Vec<u8>,
}

/// Builds a new context or edits an existing one, writing exactly the format [`SecCtx`] reads.
///
/// Every change bumps the generation by one, so the kernel's caches, stamped with the
/// generation they were derived from, miss after any edit.
///
/// ```
/// use twizzler_capsec::{CtxFlags, ObjID, Protections, SecCtx, SecCtxEditor};
///
/// let mut ed = SecCtxEditor::new();
/// ed.set_global_mask(Protections::READ | Protections::WRITE);
/// ed.set_mask(ObjID::new(7), Protections::READ, Protections::empty());
/// ed.set_flags(CtxFlags::UNDETACHABLE);
/// let bytes = ed.encode().unwrap();
///
/// let ctx = SecCtx::parse(&bytes).unwrap();
/// assert_eq!(ctx.generation(), 3);
/// assert!(ctx.flags().contains(CtxFlags::UNDETACHABLE));
/// assert_eq!(ctx.mask(ObjID::new(7)).unwrap().permmask, Protections::READ);
/// ```
#[derive(Clone, Debug)]
pub struct SecCtxEditor {
    flags: CtxFlags,
    generation: u64,
    global_mask: Protections,
    /// Kept in insertion order; sorted (stably, by target) when encoded.
    entries: Vec<OwnedEntry>,
    masks: BTreeMap<ObjID, (Protections, Protections)>,
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
            masks: BTreeMap::new(),
        }
    }

    /// Loads a parsed context for editing, keeping its generation.
    pub fn from_ctx(ctx: &SecCtx<'_>) -> Self {
        Self {
            flags: ctx.flags(),
            generation: ctx.generation(),
            global_mask: ctx.global_mask(),
            entries: ctx
                .entries()
                .map(|e| OwnedEntry {
                    target: e.target,
                    kind: e.kind,
                    bytes: e.bytes().to_vec(),
                })
                .collect(),
            masks: ctx
                .masks()
                .map(|m| (m.target, (m.permmask, m.ovrmask)))
                .collect(),
        }
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
        self.push(cap.target(), RecordKind::Cap, cap.encode().to_vec());
    }

    /// Adds a delegation, filed under its target.
    pub fn add_del(&mut self, del: &Del) {
        self.push(del.target(), RecordKind::Del, del.encode().to_vec());
    }

    /// Adds a record, filed under its target.
    pub fn add_record(&mut self, record: &Record) {
        match record {
            Record::Cap(c) => self.add_cap(c),
            Record::Del(d) => self.add_del(d),
        }
    }

    fn push(&mut self, target: ObjID, kind: RecordKind, bytes: Vec<u8>) {
        self.entries.push(OwnedEntry {
            target,
            kind,
            bytes,
        });
        self.bump();
    }

    /// Removes every entry under `target` whose record has id `id`; returns how many.
    pub fn remove(&mut self, target: ObjID, id: &RecordId) -> usize {
        self.remove_where(|e| e.target == target && RecordId::of(&e.bytes) == *id)
    }

    /// Removes every entry under `target`; returns how many.
    pub fn remove_target(&mut self, target: ObjID) -> usize {
        self.remove_where(|e| e.target == target)
    }

    fn remove_where(&mut self, mut pred: impl FnMut(&OwnedEntry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !pred(e));
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
            (
                e.target,
                RecordId::of(&e.bytes),
                Record::decode(e.kind, &e.bytes),
            )
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

    /// Writes the context: header, entry table (stably sorted by target), mask table, heap.
    pub fn encode(&self) -> Result<Vec<u8>, BuildError> {
        let n = self.entries.len() as u64;
        let m = self.masks.len() as u64;
        let heap_len: u64 = self.entries.iter().map(|e| e.bytes.len() as u64).sum();
        let entries_offset = HEADER_LEN as u64;
        let masks_offset = entries_offset + n * ENTRY_LEN as u64;
        let heap_offset = masks_offset + m * MASK_LEN as u64;
        let total = heap_offset + heap_len;
        if total > MAX_OBJECT_SIZE {
            return Err(BuildError::TooLarge { bytes: total });
        }
        // total <= 1 GiB, so every offset and length below fits a u32 and a usize.
        let as_u32 = |v: u64| v as u32;

        let mut order: Vec<&OwnedEntry> = self.entries.iter().collect();
        order.sort_by_key(|e| e.target);

        let mut out = alloc::vec![0u8; total as usize];
        let mut w = Writer::new(&mut out);
        w.u32(CTX_MAGIC)
            .u16(CTX_VERSION)
            .u16(self.flags.bits())
            .u64(self.generation)
            .u16(self.global_mask.bits())
            .u16(0)
            .u32(as_u32(n))
            .u32(as_u32(m))
            .u32(as_u32(entries_offset))
            .u32(as_u32(masks_offset))
            .u32(as_u32(heap_offset))
            .u32(as_u32(heap_len))
            .u32(0);
        let mut item_offset = 0u64;
        for e in &order {
            w.u128(e.target.raw())
                .u32(e.kind.raw())
                .u32(as_u32(item_offset))
                .u32(as_u32(e.bytes.len() as u64));
            item_offset += e.bytes.len() as u64;
        }
        for (target, (perm, ovr)) in &self.masks {
            w.u128(target.raw()).u16(perm.bits()).u16(ovr.bits());
        }
        for e in &order {
            w.bytes(&e.bytes);
        }
        debug_assert_eq!(w.position() as u64, total);
        Ok(out)
    }
}
