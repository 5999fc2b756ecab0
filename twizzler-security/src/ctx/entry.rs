//! [`Entry`]: one row of a context's entry (or overflow) table, with where its record's
//! bytes lie in the item heap.
//!
//! An entry is made by the reader only after its row checked out (known kind, item inside the
//! heap); its record is decoded on demand ([`Entry::record`]) by copying the bytes out through
//! [`CtxMem`], or its capability body is peeked at fixed offsets ([`Entry::peek_cap`]) without
//! decoding the signature.

use core::fmt;

use super::bytes::{le_u16, le_u32, le_u64, le_u128};
use super::mem::CtxMem;
use crate::cap::{CAP_BODY_LEN, CAP_LEN, CAP_MAGIC, FLAG_TAG};
use crate::del::MAX_DEL_LEN;
use crate::error::DecodeError;
use crate::gate::Gate;
use crate::ids::{ObjID, Protections};
use crate::perms::Grant;
use crate::record::{Record, RecordKind};

/// The largest record the reader decodes: a delegation of the greatest depth. A longer item
/// cannot decode as any record.
pub const MAX_RECORD_LEN: usize = MAX_DEL_LEN;

/// One entry of a context: a record's kind and where its (not yet decoded) bytes lie.
pub struct Entry<'a, M: ?Sized + CtxMem = [u8]> {
    /// Index in the entry table.
    pub index: usize,
    /// The target the entry is filed under.
    pub target: ObjID,
    /// The record's kind.
    pub kind: RecordKind,
    pub(super) mem: &'a M,
    /// Absolute offset of the record's bytes in the context (checked to lie inside the heap).
    pub(super) at: usize,
    pub(super) len: usize,
}

impl<M: ?Sized + CtxMem> Clone for Entry<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: ?Sized + CtxMem> Copy for Entry<'_, M> {}

impl<M: ?Sized + CtxMem> fmt::Debug for Entry<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("index", &self.index)
            .field("target", &self.target)
            .field("kind", &self.kind)
            .field("len", &self.len)
            .finish()
    }
}

impl<M: ?Sized + CtxMem> Entry<'_, M> {
    /// The length of the record's bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the record's bytes are empty (such a record never decodes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the record's bytes out and decodes them.
    pub fn record(&self) -> Result<Record, DecodeError> {
        if self.kind == RecordKind::Cap && self.len <= CAP_LEN {
            // The common case, in a buffer its size: a scan decodes one record after
            // another, and clearing a buffer for the largest record (a delegation chain of the
            // greatest depth) for each capability is wasted work.
            let mut buf = [0u8; CAP_LEN];
            return self.decode_in(&mut buf);
        }
        let mut buf = [0u8; MAX_RECORD_LEN];
        self.decode_in(&mut buf)
    }

    /// What a capability's entry grants, to whom, read from its body alone (the signature is
    /// not decoded): its target, its holder (the accessor) and its [`Grant`]. `None` for a
    /// delegation, or bytes that do not read as a capability's body: [`Entry::record`] then
    /// says why. For a scan that decides whether a record is worth decoding and verifying;
    /// what it returns is unverified. An ownership record (`TAG` flag) grants no data rights:
    /// its grant's protections are empty.
    pub fn peek_cap(&self) -> Option<(ObjID, ObjID, Grant)> {
        if self.kind != RecordKind::Cap || self.len != CAP_LEN {
            return None;
        }
        // Read in place when the memory allows it (no one else writes it), else copied out.
        let mut copy = [0u8; CAP_BODY_LEN];
        let body: &[u8] = match self.mem.direct() {
            Some(all) => all.get(self.at..self.at.checked_add(CAP_BODY_LEN)?)?,
            None => {
                if !self.mem.read(self.at, &mut copy) {
                    return None;
                }
                &copy
            }
        };
        peek_body(body)
    }

    fn decode_in(&self, buf: &mut [u8]) -> Result<Record, DecodeError> {
        let dst = buf.get_mut(..self.len).ok_or(DecodeError::BadLength {
            what: "record",
            len: self.len,
        })?;
        if !self.mem.read(self.at, dst) {
            return Err(DecodeError::Truncated {
                at: 0,
                needed: self.len,
                available: 0,
            });
        }
        Record::decode(self.kind, dst)
    }
}

// A capability body's fixed offsets (the layout table in `cap.rs`).
/// Where a capability's flags are.
pub(super) const FLAGS_AT: usize = 6;
/// Where a capability's target is (16 bytes), followed by its accessor (16 bytes).
pub(super) const TARGET_AT: usize = 8;
/// Where a capability's accessor (the holder) is.
pub(super) const HOLDER_AT: usize = 24;
/// Where a capability's protections are, right after the holder.
pub(super) const PROTS_AT: usize = 40;
/// Where a capability's gate is: offset, length and alignment, 8 bytes each.
pub(super) const GATE_AT: usize = 42;

/// A capability body's (target, holder, grant), read at its fixed offsets: `None` unless
/// the magic is a capability's and the flags, protections and gate are valid. Nothing is
/// decoded or verified ([`Entry::peek_cap`]).
#[inline]
pub(super) fn peek_body(body: &[u8]) -> Option<(ObjID, ObjID, Grant)> {
    if le_u32(body, 0) != CAP_MAGIC {
        return None;
    }
    let prots = data_prots(le_u16(body, FLAGS_AT), le_u16(body, PROTS_AT))?;
    let (offset, length, align) = gate_fields(body);
    let gate = Gate::new(offset, length, align).ok()?;
    Some((
        ObjID::new(le_u128(body, TARGET_AT)),
        ObjID::new(le_u128(body, HOLDER_AT)),
        Grant { prots, gate },
    ))
}

/// A capability body's gate fields as written (offset, length, alignment), unchecked.
#[inline]
pub(super) fn gate_fields(body: &[u8]) -> (u64, u64, u64) {
    (
        le_u64(body, GATE_AT),
        le_u64(body, GATE_AT + 8),
        le_u64(body, GATE_AT + 16),
    )
}

/// The data rights a capability body's flags and protections fields grant: none for an
/// ownership record (its protections field holds `PLUS`/`MINUS`), `None` for unknown bits.
pub(super) fn data_prots(flags: u16, raw: u16) -> Option<Protections> {
    let prots = Protections::from_raw(raw)?;
    Some(if flags & FLAG_TAG != 0 {
        Protections::empty()
    } else {
        prots
    })
}

impl PartialEq for Entry<'_, [u8]> {
    fn eq(&self, other: &Self) -> bool {
        (self.index, self.target, self.kind, self.bytes())
            == (other.index, other.target, other.kind, other.bytes())
    }
}

impl Eq for Entry<'_, [u8]> {}

impl<'a> Entry<'a, [u8]> {
    /// The record's encoded bytes, inside the item heap (for contexts read from memory no one
    /// else writes).
    pub fn bytes(&self) -> &'a [u8] {
        // `at .. at + len` was checked to lie inside the heap, which lies inside `mem`.
        self.mem.get(self.at..self.at + self.len).unwrap_or(&[])
    }
}
