//! [`EntryIter`]: iteration over a context's entries, all of them or one target's run, in the
//! entry table and then (version 2) the overflow table.
//!
//! Besides `next`, it can pass over entries a scan does not need without making an [`Entry`]
//! for each: [`EntryIter::skip_caps`] with any predicate, and [`EntryIter::skip_useless_caps`]
//! for the engine's lazy scan, with the per-access work done once in `Wants`.

use super::ENTRY_LEN;
use super::bytes::{le_u16, le_u32, le_u64, le_u128};
use super::entry::{Entry, data_prots};
use super::mem::CtxMem;
use super::reader::{Region, SecCtx};
use crate::cap::{CAP_BODY_LEN, CAP_LEN, CAP_MAGIC};
use crate::gate::Gate;
use crate::ids::{MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, Protections};
use crate::perms::{Access, AccessKind, Grant};
use crate::record::RecordKind;

/// Iterator over context entries (all of them, or those of one target).
pub struct EntryIter<'a, M: ?Sized + CtxMem = [u8]> {
    pub(super) ctx: SecCtx<'a, M>,
    /// The table of the run in progress, the entry index of its first row, and the next row.
    pub(super) table: Region,
    pub(super) first: usize,
    pub(super) row: usize,
    /// Where the second run (in the overflow table) starts, once the first is done; `None`
    /// when there is none (no overflow table, or it is under way).
    pub(super) then: Option<usize>,
    pub(super) only: Option<ObjID>,
}

impl<M: ?Sized + CtxMem> Clone for EntryIter<'_, M> {
    fn clone(&self) -> Self {
        Self {
            ctx: self.ctx,
            table: self.table,
            first: self.first,
            row: self.row,
            then: self.then,
            only: self.only,
        }
    }
}

impl<M: ?Sized + CtxMem> EntryIter<'_, M> {
    /// Passes over the entries at the front of the run that read as capabilities and that
    /// `skip(target, holder, grant)` says to skip ([`Entry::peek_cap`]'s answer, read in place
    /// from the body at its fixed offsets: nothing decoded, nothing copied); stops at the
    /// first entry that does not read as a capability, that `skip` keeps, or that ends the
    /// run, which the next call to `next` returns. Returns how many were passed over.
    ///
    /// For a scan that reads most of an object's records only to learn they cannot matter:
    /// each costs a few loads and compares here, without an [`Entry`] made for it. Only over
    /// memory read in place ([`CtxMem::direct`]) and for one target's run; elsewhere it passes
    /// over nothing (the caller's `next` then sees every entry).
    pub fn skip_caps(&mut self, mut skip: impl FnMut(ObjID, ObjID, &Grant) -> bool) -> usize {
        let (Some(all), Some(only)) = (self.ctx.mem.direct(), self.only) else {
            return 0;
        };
        let (heap, table) = (self.ctx.heap, self.table);
        let mut passed = 0;
        while table
            .row(self.row, ENTRY_LEN)
            .and_then(|at| all.get(at..at.checked_add(ENTRY_LEN)?))
            .and_then(|row| {
                // The run's target, a capability's kind and length (as `Entry::peek_cap`).
                if le_u128(row, 0) != only.raw()
                    || le_u32(row, 16) != RecordKind::Cap.raw()
                    || le_u32(row, 24) as usize != CAP_LEN
                {
                    return None;
                }
                let item = heap.sub(le_u32(row, 20), le_u32(row, 24))?;
                let body = all.get(item.offset..item.offset.checked_add(CAP_BODY_LEN)?)?;
                if le_u32(body, 0) != CAP_MAGIC {
                    return None;
                }
                let prots = data_prots(le_u16(body, 6), le_u16(body, 40))?;
                let gate = Gate::new(le_u64(body, 42), le_u64(body, 50), le_u64(body, 58)).ok()?;
                let grant = Grant { prots, gate };
                let (target, holder) =
                    (ObjID::new(le_u128(body, 8)), ObjID::new(le_u128(body, 24)));
                skip(target, holder, &grant).then_some(())
            })
            .is_some()
        {
            self.row += 1;
            passed += 1;
        }
        passed
    }

    /// [`EntryIter::skip_caps`] for the question a lazy scan asks: passes over the entries at
    /// the front of the run that read as capabilities for the run's target, held by `holder`,
    /// whose grant adds no right in `want` to `access` ([`Grant::adds`]) and that `keep` (if
    /// given) does not keep; stops at the first other entry, which the next call to `next`
    /// returns. Returns how many were passed over.
    ///
    /// The same as `skip_caps(|t, h, g| t == target && h == holder && !g.adds(access, want) &&
    /// !keep.is_some_and(|k| k(g)))`, but cheaper per entry (about 50 instructions): the row
    /// and the body are read in place at fixed offsets, the gate is checked as `Gate::new`
    /// would and held against the access's page with what depends only on the access worked
    /// out once, no [`Grant`] is built and nothing is called, and `keep` is asked only of
    /// records that would otherwise be passed over. Only over memory read in place and for
    /// one target's run, as `skip_caps`.
    #[inline]
    pub fn skip_useless_caps(
        &mut self,
        holder: ObjID,
        access: &Access,
        want: Protections,
        mut keep: Option<impl FnMut(&Grant) -> bool>,
    ) -> usize {
        let (Some(all), Some(only)) = (self.ctx.mem.direct(), self.only) else {
            return 0;
        };
        let (Some(rows), Some(heap)) = (self.table.bytes(all), self.ctx.heap.bytes(all)) else {
            return 0;
        };
        let Some(rest) = self
            .row
            .checked_mul(ENTRY_LEN)
            .and_then(|at| rows.get(at..))
        else {
            return 0;
        };
        let wants = Wants::new(access, want);
        let mut id = [0u8; 32];
        id[..16].copy_from_slice(&only.raw().to_le_bytes());
        id[16..].copy_from_slice(&holder.raw().to_le_bytes());
        let only = only.raw();
        let mut passed = 0;
        for row in rest.chunks_exact(ENTRY_LEN) {
            // The row: the run's target, a capability's kind and length, inside the heap.
            if le_u128(row, 0) != only
                || le_u32(row, 16) != RecordKind::Cap.raw()
                || le_u32(row, 24) as usize != CAP_LEN
            {
                break;
            }
            let at = le_u32(row, 20) as usize;
            let Some(body) = at
                .checked_add(CAP_LEN)
                .and_then(|end| heap.get(at..end))
                .and_then(|b| b.first_chunk::<CAP_BODY_LEN>())
            else {
                break;
            };
            // The body, at the offsets `Entry::peek_cap` reads: magic, then target and holder
            // (32 bytes compared at once), protections and gate.
            if le_u32(body, 0) != CAP_MAGIC || body.get(8..40) != Some(&id[..]) {
                break;
            }
            let Some(prots) = data_prots(le_u16(body, 6), le_u16(body, 40)) else {
                break;
            };
            let (offset, length, align) = (le_u64(body, 42), le_u64(body, 50), le_u64(body, 58));
            // `Gate::new`'s checks (`0 < length <= MAX`, `offset <= MAX - length`, `align >
            // 0`): the subtractions cannot wrap once `length` is in range, nor the sum once
            // `offset` is.
            if length.wrapping_sub(1) >= MAX_OBJECT_SIZE
                || offset > MAX_OBJECT_SIZE - length
                || align == 0
                || wants.adds(prots, offset, offset + length, align)
            {
                break;
            }
            if let Some(keep) = keep.as_mut()
                && Gate::new(offset, length, align).is_ok_and(|gate| keep(&Grant { prots, gate }))
            {
                break;
            }
            passed += 1;
        }
        self.row += passed;
        passed
    }
}

impl<'a, M: ?Sized + CtxMem> Iterator for EntryIter<'a, M> {
    type Item = Entry<'a, M>;

    #[inline]
    fn next(&mut self) -> Option<Entry<'a, M>> {
        loop {
            // A row that is past the table, for another target or that does not check out
            // ends the run.
            if let Some(e) = self.ctx.entry(self.table, self.first, self.row, self.only) {
                self.row += 1;
                return Some(e);
            }
            self.row = self.then.take()?;
            self.table = self.ctx.overflow;
            self.first = self.ctx.main_count();
        }
    }
}

/// What [`Grant::adds`] asks of every record of a scan, worked out once for the access: the
/// rights wanted for data (none if the access's page ends past the last address), the page's
/// bytes, and the rights wanted for code (none unless the access is a fetch).
struct Wants {
    data: Protections,
    page: (u64, u64),
    code: Protections,
    entering: bool,
    offset: u64,
}

impl Wants {
    #[inline]
    fn new(access: &Access, want: Protections) -> Self {
        // The page's first byte (`page() * PAGE_SIZE`, which cannot overflow).
        let start = access.offset & !(PAGE_SIZE - 1);
        let (data, end) = match start.checked_add(PAGE_SIZE) {
            Some(end) => (want & (Protections::READ | Protections::WRITE), end),
            None => (Protections::empty(), u64::MAX),
        };
        let code = if access.kind == AccessKind::Exec {
            want & (Protections::READ | Protections::EXEC)
        } else {
            Protections::empty()
        };
        Self {
            data,
            page: (start, end),
            code,
            entering: access.entering,
            offset: access.offset,
        }
    }

    /// [`Grant::adds`] for a grant of `prots` over `offset .. end` with entry alignment
    /// `align` (a valid gate's fields).
    #[inline]
    fn adds(&self, prots: Protections, offset: u64, end: u64, align: u64) -> bool {
        let covers = offset <= self.page.0 && self.page.1 <= end;
        if covers && prots.intersects(self.data) {
            return true;
        }
        prots.contains(Protections::EXEC)
            && prots.intersects(self.code)
            && (!self.entering
                || (self.offset >= offset
                    && self.offset < end
                    && self.offset.is_multiple_of(align)))
    }
}
