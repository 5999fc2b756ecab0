//! The kernel side of information flow control (`docs/DIFC.md` §4): the label change
//! (`sys_sctx_label`), the check on a labelled creation, and what kernel-side scenarios use to
//! set up tags, ownership records and labels.
//!
//! Ownership is asked of the engine ([`Engine::owns`](kernel_hooks::Engine::owns)): it reads the
//! context through `with_ctx` and verifies like a fault, budget included, so the kernel has no
//! verification code of its own.

use twizzler_capsec::{
    FlowDenial, Label, LabelError, LabelId, LabelRef, ObjID, Ownership, PrincipalLabels, Right,
    SecCtx, Verdict, check_registration, check_relabel, check_write_clauses, classify,
    transitional,
};

use crate::cpu::rdtsc;
use crate::labels::{self, LabelLock};
use crate::objects::{ENGINE, table};

/// A context's ownership, asked of the engine one tag at a time.
pub struct EngineOwnership {
    /// The context.
    pub ctx: ObjID,
}

impl Ownership for EngineOwnership {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        // A context the engine cannot read (malformed, or not a context) owns nothing.
        ENGINE.owns(self.ctx, tag, right).unwrap_or(Ok(false))
    }
}

/// Why a label change or a labelled creation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedLabel {
    /// The rule refused it (§4.1).
    Rule(LabelError),
    /// The creation's write clauses refused it (§4.1, `sys_object_create`).
    Flow(FlowDenial),
    /// The label table is full.
    TableFull,
    /// The id names no context object.
    NotContext,
}

/// `rdtsc` cycles of one label change, by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelabelCycles {
    /// The whole change, checks included.
    pub total: u64,
    /// `Engine::relabel_ctx`: the sweep, and the host's unmap it calls.
    pub engine: u64,
    /// Of `engine`: the host's page-table walk (write-protection or unmap).
    pub walk: u64,
    /// Of `engine`: the host's TLB shootdown.
    pub shootdown: u64,
    /// Pages the host's walk changed.
    pub pages: u64,
}

impl RelabelCycles {
    /// The engine's own part: its sweep of the cache (what `relabel_ctx` spent outside the
    /// host's walk and shootdown).
    pub fn sweep(&self) -> u64 {
        self.engine
            .saturating_sub(self.walk)
            .saturating_sub(self.shootdown)
    }

    /// The minimum of each part of `self` and `other` (of several runs).
    #[must_use]
    pub fn min_each(&self, other: &Self) -> Self {
        Self {
            total: self.total.min(other.total),
            engine: self.engine.min(other.engine),
            walk: self.walk.min(other.walk),
            shootdown: self.shootdown.min(other.shootdown),
            pages: self.pages.min(other.pages),
        }
    }
}

fn interned(id: LabelId) -> Result<&'static Label, RefusedLabel> {
    labels::label(id).ok_or(RefusedLabel::Rule(LabelError::TooManyTags))
}

fn intern(l: &Label) -> Result<LabelId, RefusedLabel> {
    labels::intern(l).map_err(|_| RefusedLabel::TableFull)
}

/// The data label of object `id` (the empty label for an id the table does not know).
fn data_label(id: ObjID) -> LabelId {
    table()
        .and_then(|t| t.get(id))
        .map_or(LabelId::EMPTY, |o| o.label)
}

/// `sys_sctx_label` (§4.1, §4.2): changes the principal label of context `ctx` (the calling
/// thread's active one) to `new`. With the context's label lock held: checks the change
/// (`check_relabel`, ownership through the engine), publishes the transitional row, has the
/// engine sweep its cache and the host write-protect or unmap (with shootdown) by
/// `Engine::relabel_ctx`, checks ownership again, and publishes the final row; if the second
/// check fails it publishes the old row again and refuses.
pub fn sctx_label(ctx: ObjID, new: &Label) -> Result<RelabelCycles, RefusedLabel> {
    change(ctx, new, Window::Transitional, &mut || {})
}

/// What the row holds while the engine sweeps and the host write-protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The transitional row of §4.2: what `sys_sctx_label` does.
    Transitional,
    /// The new label itself, published before the sweep: §4.2's hazard, for the raise-window
    /// scenario's mutation check only (never reached from a system call).
    NewFirst,
}

/// [`sctx_label`], with the row published during the sweep chosen by `window`, and
/// `in_window` run right after that row is published, before the engine's sweep: the
/// raise-window scenario widens the window there (the system call passes nothing).
pub fn change(
    ctx: ObjID,
    new: &Label,
    window: Window,
    in_window: &mut dyn FnMut(),
) -> Result<RelabelCycles, RefusedLabel> {
    let t0 = rdtsc();
    table()
        .and_then(|t| t.get(ctx))
        .and_then(|o| o.as_context())
        .ok_or(RefusedLabel::NotContext)?;
    let _lock = LabelLock::take(ctx);
    let old_row = labels::principal(ctx);
    let old = PrincipalLabels {
        read: interned(old_row.read)?.as_ref(),
        write: interned(old_row.write)?.as_ref(),
    };
    let data = interned(data_label(ctx))?.as_ref();
    let new_ref = new.as_ref();
    let check = |old: &PrincipalLabels<LabelRef<'_>>| {
        check_relabel(old, &new_ref, &data, &mut EngineOwnership { ctx })
            .map_err(RefusedLabel::Rule)
    };
    check(&old)?;
    let new_id = intern(new)?;
    // Outside a change the row is steady: `read` is the old label.
    let trans = transitional(&old.read, &new_ref).map_err(RefusedLabel::Rule)?;
    let row = match window {
        Window::Transitional => PrincipalLabels {
            read: intern(&trans.read)?,
            write: intern(&trans.write)?,
        },
        Window::NewFirst => PrincipalLabels::steady(new_id),
    };
    labels::set_principal(ctx, row);
    in_window();
    let before = crate::objects::wp_cycles();
    let t1 = rdtsc();
    ENGINE.relabel_ctx(ctx, classify(&old.read, &new_ref));
    let t2 = rdtsc();
    let after = crate::objects::wp_cycles();
    if let Err(e) = check(&old) {
        // Revoked meanwhile: back to the old row (a loosening from the transitional one).
        labels::set_principal(ctx, old_row);
        return Err(e);
    }
    labels::set_principal(ctx, PrincipalLabels::steady(new_id));
    Ok(RelabelCycles {
        total: rdtsc().wrapping_sub(t0),
        engine: t2.wrapping_sub(t1),
        walk: after.walk.wrapping_sub(before.walk),
        shootdown: after.shootdown.wrapping_sub(before.shootdown),
        pages: after.pages.wrapping_sub(before.pages),
    })
}

/// The label of an object context `creator` creates (§4.1): `label`, or the creator's
/// principal label when `None`; a label other than the default must pass the write clauses of
/// `writable(creator, label)` (ownership through the engine). Returns it interned.
pub fn creation_label(creator: ObjID, label: Option<&Label>) -> Result<LabelId, RefusedLabel> {
    let row = labels::principal(creator);
    let Some(label) = label else {
        // The creator's own label: its `write` half (the restrictive one during a change).
        return Ok(row.write);
    };
    let principal = PrincipalLabels {
        read: interned(row.read)?.as_ref(),
        write: interned(row.write)?.as_ref(),
    };
    check_write_clauses(
        &principal,
        &label.as_ref(),
        &mut EngineOwnership { ctx: creator },
    )
    .map_err(RefusedLabel::Flow)?;
    intern(label)
}

/// §4.4: a system call by context `ctx` that changes state every principal can observe (a
/// revocation) is a write to public state: the two write clauses against the empty label,
/// `S_C − own⁻(C) = ∅` with the row's `write` label. Refused with `WouldLeak` naming the first
/// secrecy tag the context carries and cannot declassify.
pub fn check_public_write(ctx: ObjID) -> Result<(), RefusedLabel> {
    let row = labels::principal(ctx);
    let principal = PrincipalLabels {
        read: interned(row.read)?.as_ref(),
        write: interned(row.write)?.as_ref(),
    };
    check_write_clauses(&principal, &LabelRef::EMPTY, &mut EngineOwnership { ctx }).map_err(|d| {
        RefusedLabel::Rule(LabelError::WouldLeak {
            tag: d.tag().unwrap_or_default(),
        })
    })
}

/// §1.4: the first time a thread attaches context `ctx` that has no principal row, the kernel
/// registers it: it reads the initial label the context's version-3 section proposes (the
/// empty label for versions 1 and 2, and for bytes or a section that do not decode), and adopts
/// it if `registrar` (the attaching thread's active context) could have reached it
/// (`check_registration`, ownership of either context asked of the engine). The row is then
/// the context's label for good: its section is never read again. A context registered at a
/// label other than the empty one has the engine forget what it decided under the empty row.
pub fn register(registrar: ObjID, ctx: ObjID) -> Result<(), RefusedLabel> {
    let object = table()
        .and_then(|t| t.get(ctx))
        .ok_or(RefusedLabel::NotContext)?;
    let c = object.as_context().ok_or(RefusedLabel::NotContext)?;
    let _lock = LabelLock::take(ctx);
    if labels::is_registered(ctx) {
        return Ok(());
    }
    let bytes = c.snapshot();
    let initial = SecCtx::parse(&bytes)
        .ok()
        .and_then(|s| s.initial_label().ok())
        .unwrap_or(Label::EMPTY);
    let row = labels::principal(registrar);
    let r = PrincipalLabels {
        read: interned(row.read)?.as_ref(),
        write: interned(row.write)?.as_ref(),
    };
    let data = interned(object.label)?.as_ref();
    check_registration(
        &r,
        &initial.as_ref(),
        &data,
        &mut EngineOwnership { ctx: registrar },
        &mut EngineOwnership { ctx },
    )
    .map_err(RefusedLabel::Rule)?;
    let id = intern(&initial)?;
    labels::set_principal(ctx, PrincipalLabels::steady(id));
    if !id.is_empty() {
        ENGINE.relabel_ctx(ctx, classify(&LabelRef::EMPTY, &initial.as_ref()));
    }
    Ok(())
}
