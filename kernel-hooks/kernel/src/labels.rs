//! The kernel's label table (`docs/DIFC.md` §1.3, §1.4): interned labels, the principal row
//! of every context, and the per-context label lock `sys_sctx_label` holds.
//!
//! - **Interned labels** are append-only: [`LabelId`] `n` is entry `n` of a fixed array of
//!   set-once cells ([`MAX_LABELS`]), `LabelId(0)` the empty label. A label, once interned, is
//!   never changed or freed, so [`label`] lends it for `'static` without a lock and
//!   `Host::with_label` takes no lock at all (it is called inside `with_ctx`'s closure).
//! - **Object data labels** are a field of each object ([`crate::objects::Object::label`]),
//!   set when the kernel creates it and never written again: the fault path passes it with the
//!   fault (`Fault::labelled`), so a hit asks the host for nothing new.
//! - **Principal rows** `{read, write}` per context, set when the kernel creates the context
//!   and changed only by [`crate::difc::sctx_label`] (the transitional row, then the final
//!   one). A context without a row (the boot contexts, made before any label existed) is at
//!   the empty label.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use core::sync::atomic::{AtomicUsize, Ordering};

use spin::{Mutex, Once};
use twizzler_capsec::{Label, LabelId, LabelRef, ObjID, PrincipalLabels};

/// How many distinct labels the table can hold (the empty one included).
pub const MAX_LABELS: usize = 256;

/// The table has no room for another distinct label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

/// The kernel's label table.
struct Table {
    /// `interned[n]` is `LabelId(n)`; cells past `count` are unset.
    interned: Box<[Once<Label>]>,
    /// How many cells are set (published after the cell is).
    count: AtomicUsize,
    /// Held while a label is looked for and appended (never across a call out).
    interning: Mutex<()>,
    /// Principal rows; absent = the empty label, steady.
    principals: Mutex<BTreeMap<ObjID, PrincipalLabels<LabelId>>>,
    /// Contexts whose label is being changed: the per-context label lock ([`LabelLock`]).
    changing: Mutex<BTreeSet<ObjID>>,
}

static TABLE: Once<Table> = Once::new();

fn table() -> &'static Table {
    TABLE.call_once(|| {
        let interned: Box<[Once<Label>]> = (0..MAX_LABELS).map(|_| Once::new()).collect();
        if let Some(empty) = interned.first() {
            empty.call_once(|| Label::EMPTY);
        }
        Table {
            interned,
            count: AtomicUsize::new(1),
            interning: Mutex::new(()),
            principals: Mutex::new(BTreeMap::new()),
            changing: Mutex::new(BTreeSet::new()),
        }
    })
}

/// The label interned as `id`, lent for ever (interned labels are never changed or freed).
pub fn label(id: LabelId) -> Option<&'static Label> {
    let t = table();
    let n = usize::try_from(id.0).ok()?;
    if n >= t.count.load(Ordering::Acquire) {
        return None;
    }
    t.interned.get(n)?.get()
}

/// Runs `f` over the tags of label `id` (`Host::with_label`); `None` for an id never interned.
pub fn with_label<R>(id: LabelId, f: impl FnOnce(LabelRef<'_>) -> R) -> Option<R> {
    label(id).map(|l| f(l.as_ref()))
}

/// The id of `l`, interning it if it is new.
pub fn intern(l: &Label) -> Result<LabelId, TableFull> {
    if l.is_empty() {
        return Ok(LabelId::EMPTY);
    }
    let t = table();
    let _guard = t.interning.lock();
    let n = t.count.load(Ordering::Acquire);
    if let Some(i) = t
        .interned
        .iter()
        .take(n)
        .position(|c| c.get().is_some_and(|x| x == l))
    {
        return u32::try_from(i).map(LabelId).map_err(|_| TableFull);
    }
    let cell = t.interned.get(n).ok_or(TableFull)?;
    let id = u32::try_from(n).map_err(|_| TableFull)?;
    cell.call_once(|| *l);
    t.count.store(n + 1, Ordering::Release);
    Ok(LabelId(id))
}

/// How many labels are interned (the empty one included).
pub fn interned() -> usize {
    table().count.load(Ordering::Acquire)
}

/// Context `ctx`'s principal row (`Host::ctx_label`): its row, or the empty label for a
/// context with none.
pub fn principal(ctx: ObjID) -> PrincipalLabels<LabelId> {
    table()
        .principals
        .lock()
        .get(&ctx)
        .copied()
        .unwrap_or(PrincipalLabels::steady(LabelId::EMPTY))
}

/// Whether context `ctx` has a principal row (it was registered: made by the kernel with a
/// label, or attached once, §1.4).
pub fn is_registered(ctx: ObjID) -> bool {
    table().principals.lock().contains_key(&ctx)
}

/// Writes context `ctx`'s principal row (creation, and `sys_sctx_label`'s two steps).
pub fn set_principal(ctx: ObjID, row: PrincipalLabels<LabelId>) {
    table().principals.lock().insert(ctx, row);
}

/// The label lock of one context, held for the whole of a label change (§4.1): changes of one
/// context are serialised, so only steady rows are seen by the next one. Released on drop.
pub struct LabelLock {
    ctx: ObjID,
}

impl LabelLock {
    /// Takes context `ctx`'s label lock, waiting (holding nothing) while another change of
    /// the same context is in progress.
    pub fn take(ctx: ObjID) -> Self {
        let t = table();
        while !t.changing.lock().insert(ctx) {
            core::hint::spin_loop();
        }
        Self { ctx }
    }
}

impl Drop for LabelLock {
    fn drop(&mut self) {
        table().changing.lock().remove(&self.ctx);
    }
}
