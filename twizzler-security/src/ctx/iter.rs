//! [`EntryIter`]: iteration over a context's entries, all of them or one target's run, in the
//! entry table and then (version 2) the overflow table.
//!
//! Besides `next`, it can pass over entries a scan does not need without making an [`Entry`]
//! for each: [`EntryIter::skip_caps`] with any predicate, and [`EntryIter::skip_useless_caps`]
//! for the engine's lazy scan, with the per-access work done once in `Wants`.

use super::ENTRY_LEN;
use super::bytes::{le_u16, le_u32, le_u128};
use super::entry::{Entry, FLAGS_AT, PROTS_AT, TARGET_AT, data_prots, gate_fields, peek_body};
use super::mem::CtxMem;
use super::reader::{Region, SecCtx};
use crate::cap::{CAP_BODY_LEN, CAP_LEN, CAP_MAGIC};
use crate::gate::Gate;
use crate::ids::{MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, Protections};
use crate::perms::{Access, Grant, Wants};
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
    /// The row at which the run in progress ends early (`usize::MAX`: where the table or
    /// the target's rows end).
    pub(super) stop: usize,
    /// After the run in progress, the same table's rows `.0 .. .1` (the front of a run that
    /// [`EntryIter::start_near_page`] started in its middle).
    pub(super) wrap: Option<(usize, usize)>,
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
            stop: self.stop,
            wrap: self.wrap,
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
        while self.row < self.stop
            && cap_body(all, table, heap, only.raw(), self.row)
                .and_then(|body| peek_body(body))
                .is_some_and(|(target, holder, grant)| skip(target, holder, &grant))
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
        let end = self.stop.saturating_mul(ENTRY_LEN).min(rows.len());
        let Some(rest) = self
            .row
            .checked_mul(ENTRY_LEN)
            .and_then(|at| rows.get(at..end))
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
            if le_u32(body, 0) != CAP_MAGIC || body.get(TARGET_AT..PROTS_AT) != Some(&id[..]) {
                break;
            }
            let Some(prots) = data_prots(le_u16(body, FLAGS_AT), le_u16(body, PROTS_AT)) else {
                break;
            };
            let (offset, length, align) = gate_fields(body);
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

    /// For a scan looking for a grant on the page whose first byte is `page`: unless the run's
    /// next record is a capability whose gate covers the page, starts the run instead
    /// at a record whose gate covers it, or else nearest before it; the records it moved past
    /// come after the rest of the run, before the overflow table's run. Returns how many it
    /// moved behind (0: the order is unchanged).
    ///
    /// It looks first at the record whose gate starts nearest at or before the page in the
    /// run's order (the last such record if the gates ascend from the front's, the first if
    /// they descend), found by a galloping, then a binary, search over the records' gate
    /// offsets: in a run in gate order, ascending or descending (a context built page by
    /// page), that is the record for the page, found after about twice the logarithm of the
    /// run's length of reads. When that record does not cover the page (the run is in no
    /// order, or no record covers the page), it reads the run's gates from the front for the
    /// first that covers it (each row and two fields of its body: about 32 instructions a
    /// record, against about 54 for the scan's skip), and starts there, or at the searched
    /// record if none does.
    ///
    /// Only the order changes: the iterator returns the same entries as before, each once
    /// (the context was parsed, so every row of the run checks out). Nothing is trusted:
    /// the gates are read as written, and a record that covers the page by its gate may still
    /// be damaged, not a grant, or of another holder; the scan judges it, and reads on from
    /// there as it would have from the front.
    ///
    /// Only over memory read in place, for one target's run, and before the run was started
    /// in its middle once already; elsewhere it does nothing.
    pub fn start_near_page(&mut self, page: u64) -> usize {
        let (Some(all), Some(only)) = (self.ctx.mem.direct(), self.only) else {
            return 0;
        };
        if self.wrap.is_some() || self.stop != usize::MAX {
            return 0;
        }
        let (table, heap) = (self.table, self.ctx.heap);
        // The gate's offset and length of row `r`, if it is a capability of the run whose
        // body is inside the heap (the fields as written, not checked).
        let gate = |r: usize| {
            cap_body(all, table, heap, only.raw(), r).map(|b| {
                let (offset, length, _) = gate_fields(b);
                (offset, length)
            })
        };
        let start = self.row;
        let at = match gate(start) {
            // Covers the page (or may: what the scan finds out anyway): nothing to gain.
            Some((offset, length)) if covers(offset, length, page) => return 0,
            // Gates in ascending order: the last record whose gate starts at or before the
            // page.
            Some((offset, _)) if offset <= page => {
                last_where(start, |r| gate(r).is_some_and(|(o, _)| o <= page))
            }
            // In descending order: the first record whose gate starts at or before the page,
            // right after the last that starts past it (if it is one of the run's).
            Some(_) => {
                let past = last_where(start, |r| gate(r).is_some_and(|(o, _)| o > page));
                match past.checked_add(1) {
                    Some(next) if gate(next).is_some() => next,
                    _ => start,
                }
            }
            // Not a capability: no order to search by (the gates are read from the front).
            None => start,
        };
        let covering = |r: usize| gate(r).is_some_and(|(o, l)| covers(o, l, page));
        let at = if covering(at) {
            at
        } else {
            first_covering(all, table, heap, only.raw(), start, page).unwrap_or(at)
        };
        if at == start {
            return 0;
        }
        self.wrap = Some((start, at));
        self.row = at;
        at - start
    }
}

impl<'a, M: ?Sized + CtxMem> Iterator for EntryIter<'a, M> {
    type Item = Entry<'a, M>;

    #[inline]
    fn next(&mut self) -> Option<Entry<'a, M>> {
        loop {
            // A row that is past the table or the run's early stop, for another target or
            // that does not check out ends the run.
            if self.row < self.stop
                && let Some(e) = self.ctx.entry(self.table, self.first, self.row, self.only)
            {
                self.row += 1;
                return Some(e);
            }
            // The front of a run started in its middle, then the overflow table's run.
            if let Some((row, stop)) = self.wrap.take() {
                (self.row, self.stop) = (row, stop);
                continue;
            }
            self.row = self.then.take()?;
            self.stop = usize::MAX;
            self.table = self.ctx.overflow;
            self.first = self.ctx.main_count();
        }
    }
}

/// The last row `r >= start` such that `holds` holds for every row from `start` to `r`,
/// given that it holds for `start`, when `holds` holds for a prefix of the rows from
/// `start` on (a galloping search, then a binary one: about twice the logarithm of the
/// distance, in calls). When `holds` is not such a prefix, some row where it holds.
fn last_where(start: usize, holds: impl Fn(usize) -> bool) -> usize {
    // `lo` holds; `hi` does not (it may be past the table).
    let (mut lo, mut step) = (start, 1usize);
    let mut hi = loop {
        let probe = lo.saturating_add(step);
        if probe == lo || !holds(probe) {
            break probe;
        }
        lo = probe;
        step = step.saturating_mul(2);
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Whether a gate of `offset` and `length`, as written (unchecked), covers the page whose
/// first byte is `page`.
#[inline]
fn covers(offset: u64, length: u64, page: u64) -> bool {
    offset <= page
        && offset
            .checked_add(length)
            .is_none_or(|end| end >= page.saturating_add(PAGE_SIZE))
}

/// The first row from `from` on of the run of target `only` in `table` (it ends at the
/// first row for another target, or at the table's end) that names a capability ([`cap_of`])
/// whose gate, as written, covers the page at `page` ([`covers`]); rows of the run that are
/// not capabilities are passed over. The time is each body's cache line, as in the scan's
/// skip; only two of its fields are read.
fn first_covering(
    all: &[u8],
    table: Region,
    heap: Region,
    only: u128,
    from: usize,
    page: u64,
) -> Option<usize> {
    // The run's rows in one slice, read in turn (not looked up one by one).
    let rows = table.bytes(all)?.get(from.checked_mul(ENTRY_LEN)?..)?;
    let i = rows
        .chunks_exact(ENTRY_LEN)
        .take_while(|row| le_u128(row, 0) == only)
        .position(|row| {
            cap_of(all, heap, row).is_some_and(|body| {
                let (offset, length, _) = gate_fields(body);
                covers(offset, length, page)
            })
        })?;
    from.checked_add(i)
}

/// Row `r` of `table` (in `all`), if it is inside the table and filed under the target
/// `only`: a row of the run.
#[inline]
fn run_row(all: &[u8], table: Region, only: u128, r: usize) -> Option<&[u8]> {
    let at = table.row(r, ENTRY_LEN)?;
    let row = all.get(at..at.checked_add(ENTRY_LEN)?)?;
    (le_u128(row, 0) == only).then_some(row)
}

/// The body a table row names, if the row names a capability (its kind and length, as
/// [`Entry::peek_cap`] reads them) whose bytes are inside `heap`: the bytes at the body's
/// fixed offsets, nothing checked.
#[inline]
fn cap_of<'m>(all: &'m [u8], heap: Region, row: &[u8]) -> Option<&'m [u8; CAP_BODY_LEN]> {
    if le_u32(row, 16) != RecordKind::Cap.raw() || le_u32(row, 24) as usize != CAP_LEN {
        return None;
    }
    let item = heap.sub(le_u32(row, 20), le_u32(row, 24))?;
    all.get(item.offset..item.offset.checked_add(CAP_BODY_LEN)?)?
        .first_chunk::<CAP_BODY_LEN>()
}

/// The body of row `r` of `table` (in `all`) if the row is of the run of target `only` and
/// names a capability ([`cap_of`]).
#[inline]
fn cap_body(
    all: &[u8],
    table: Region,
    heap: Region,
    only: u128,
    r: usize,
) -> Option<&[u8; CAP_BODY_LEN]> {
    run_row(all, table, only, r).and_then(|row| cap_of(all, heap, row))
}
