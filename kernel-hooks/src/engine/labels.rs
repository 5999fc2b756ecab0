//! Labels beyond one cache entry (`docs/DIFC.md` §3.2 step 5, §4.1, §5.4): which inactive
//! contexts a thread's search may consult, whether a switch is a permitted label change, and
//! ownership asked for a system call.

use core::cell::{Cell, RefCell};

use heapless::Vec;
use twizzler_capsec::{
    FlowDenial, Label, LabelId, NoOwnership, ObjID, Ownership, PrincipalLabels, Right, Verdict,
    check_switch, readable,
};

use super::Engine;
use super::build::fault_budget;
use crate::authority::EngineAuthority;
use crate::cache::Deps;
use crate::fault::Violation;
use crate::host::Host;

/// Ownership answers a switch check gathered, one question at a time (at most one per tag
/// the two labels differ in, in each of the two contexts).
const SWITCH_QUESTIONS: usize = 2 * 2 * twizzler_capsec::MAX_LABEL_TAGS;

/// One context's ownership as a table of answers already obtained; a question not in the
/// table is noted (the first one) and answered "not owned" for now.
struct Answers<'a> {
    known: &'a [(ObjID, Right, bool, Result<bool, Verdict>)],
    in_target: bool,
    missing: &'a Cell<Option<(ObjID, Right, bool)>>,
}

impl Ownership for Answers<'_> {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        let found = self
            .known
            .iter()
            .find(|(t, r, b, _)| *t == tag && *r == right && *b == self.in_target);
        match found {
            Some((_, _, _, answer)) => *answer,
            None => {
                if self.missing.get().is_none() {
                    self.missing.set(Some((tag, right, self.in_target)));
                }
                Ok(false)
            }
        }
    }
}

impl<H: Host> Engine<H> {
    /// Whether the search may consult inactive context `ctx` for a thread whose active
    /// context has `labels`: only if `ctx`'s bytes (its *data* label) flow to the thread
    /// (§3.2 step 5); otherwise whether it grants would tell the thread one bit written at a
    /// higher label. Without labels (both empty) every context may be consulted, and the host
    /// is not asked.
    pub(super) fn may_consult(&self, ctx: ObjID, labels: &PrincipalLabels<LabelId>) -> bool {
        let data = self.host.object(ctx).map_or(LabelId::EMPTY, |o| o.label);
        if data.is_empty() && labels.read.is_empty() {
            return true;
        }
        self.host
            .with_label(labels.read, |principal| {
                self.host
                    .with_label(data, |object| readable(&principal, &object).is_ok())
            })
            .flatten()
            .unwrap_or(false)
    }

    /// Whether a thread in `from` (at `a`) may switch to `to` (at `b`) (§5.4): what it sheds
    /// of secrecy needs `−`, what it gains of integrity `+`, owned by `from` or, when the
    /// switch is an entry through a code gate of `to`, by `to`. Ownership is asked one
    /// question at a time, each context read on its own (never one inside the other's
    /// scope), within one fault's budget of verifications.
    pub(super) fn switch_allowed(
        &self,
        from: ObjID,
        a: PrincipalLabels<LabelId>,
        to: ObjID,
        b: PrincipalLabels<LabelId>,
        entering: bool,
        now: u64,
    ) -> Result<(), FlowDenial> {
        if a.write.is_empty() && b.read.is_empty() {
            return Ok(());
        }
        let copy = |id| self.host.with_label(id, |l| l.to_label());
        let (Some(aw), Some(br)): (Option<Label>, Option<Label>) = (copy(a.write), copy(b.read))
        else {
            return Err(FlowDenial::LabelUnknown);
        };
        let pa = PrincipalLabels::steady(aw.as_ref());
        let pb = PrincipalLabels::steady(br.as_ref());
        let budget = fault_budget();
        let mut known: Vec<(ObjID, Right, bool, Result<bool, Verdict>), SWITCH_QUESTIONS> =
            Vec::new();
        loop {
            let missing = Cell::new(None);
            let mut own_a = Answers {
                known: &known,
                in_target: false,
                missing: &missing,
            };
            let verdict = if entering {
                let mut own_b = Answers {
                    known: &known,
                    in_target: true,
                    missing: &missing,
                };
                check_switch(to, &pa, &pb, &mut own_a, &mut own_b)
            } else {
                check_switch(to, &pa, &pb, &mut own_a, &mut NoOwnership)
            };
            let Some((tag, right, in_target)) = missing.get() else {
                return verdict;
            };
            let ctx = if in_target { to } else { from };
            let answer = self
                .owns_within(ctx, tag, right, now, &budget)
                .unwrap_or(Ok(false));
            if known.push((tag, right, in_target, answer)).is_err() {
                // Cannot happen (one question per tag and side); refuse rather than loop.
                return verdict;
            }
        }
    }

    /// Whether context `ctx` owns `right` of `tag` now (§2.3), for the kernel's
    /// `sys_sctx_label` and `sys_sctx_create`: reads the context through [`Host::with_ctx`]
    /// and verifies like a fault, within one fault's budget of verifications (a record past
    /// the budget does not count: `Err(Verdict::Invalid(Unchecked))`). `Ok(false)` when no
    /// record could count, `Err(verdict)` when one that would have counted did not.
    pub fn owns(
        &self,
        ctx: ObjID,
        tag: ObjID,
        right: Right,
    ) -> Result<Result<bool, Verdict>, Violation> {
        let now = self.now();
        let budget = fault_budget();
        self.owns_within(ctx, tag, right, now, &budget)
    }

    fn owns_within(
        &self,
        ctx: ObjID,
        tag: ObjID,
        right: Right,
        now: u64,
        budget: &Cell<u32>,
    ) -> Result<Result<bool, Verdict>, Violation> {
        let auth = EngineAuthority {
            host: &self.host,
            memo: &self.memo,
            failed: &self.failed,
            budget,
            counters: &self.counters,
            target: tag,
            target_object: None,
            deps: RefCell::new(Deps::EMPTY),
        };
        self.read_ctx(ctx, |c| {
            twizzler_capsec::owns(ctx, c, tag, right, &auth, now).map(|e| e.is_some())
        })
    }
}

impl<H: Host> Engine<H> {
    /// A switch of `thread` to its attached context `to` asked by a system call (not by a
    /// fault): allowed only if it is a permitted label change with no help from `to`
    /// (`E± = ∅`, §5.4: the thread keeps running its own code). Refused with the flow rule's
    /// reason ([`FlowDenial::LabelUnknown`] for a context without a principal row), else
    /// [`crate::SecCtxMgr::switch_context`]'s result.
    pub fn switch_context(
        &self,
        thread: &crate::SecCtxMgr,
        to: ObjID,
    ) -> Result<crate::SwitchResult, FlowDenial> {
        let from = thread.active_id();
        if from != to && from != crate::KERNEL_SCTX {
            let (Some(a), Some(b)) = (self.host.ctx_label(from), self.host.ctx_label(to)) else {
                return Err(FlowDenial::LabelUnknown);
            };
            self.switch_allowed(from, a, to, b, false, self.now())?;
        }
        Ok(thread.switch_context(to))
    }
}
