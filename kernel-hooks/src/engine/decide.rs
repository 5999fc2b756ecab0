//! Deciding a fault: the hit path (the active context's fresh cache entry, read without a
//! lock), and the full search over the thread's contexts behind it.

use core::sync::atomic::Ordering;

use twizzler_capsec::{
    Access, AccessKind, CtxFlags, Expiry, FlowDenial, LabelId, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE,
    PermsInfo, PrincipalLabels, Protections,
};

use super::build::fault_budget;
use super::clock::DecisionClock;
use super::{Engine, Looked};
use crate::cache::{
    CachedPerms, Evaluated, Explained, FlowExplained, OBJECT_PAGES, Served, Stamp, SummaryHit,
    WhyRefused, unexpired,
};
use crate::fault::{Decision, DenyCause, Fault, Violation};
use crate::host::Host;
use crate::mgr::{KERNEL_SCTX, SecCtxMgr};
use crate::ticket::{MapTicket, Ticket};

impl<H: Host> Engine<H> {
    /// Decides what to do about `fault` by a thread with contexts `thread`: try the active
    /// context; if it does not grant and is not `UNDETACHABLE`, try the inactive ones (an
    /// instruction fetch must land on an entry point of the gate to switch). The thread is not
    /// switched: `Map::switch_to` names the context the kernel switches to.
    ///
    /// # Example
    ///
    /// A read fault is granted (the signature is verified once), the same fault again is a
    /// cache hit, and a write the capability does not grant is a violation:
    ///
    /// ```
    /// # use std::cell::{Cell, RefCell};
    /// # use std::collections::HashMap;
    /// # use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
    /// # use twizzler_capsec::*;
    /// # /// A toy kernel: objects, context bytes and keys in maps; one key can be revoked.
    /// # #[derive(Default)]
    /// # struct Kernel {
    /// #     objects: HashMap<ObjID, ObjectInfo>,
    /// #     contexts: HashMap<ObjID, Vec<u8>>,
    /// #     keys: HashMap<ObjID, VerifyingKey>,
    /// #     revoked: Cell<Option<ObjID>>,
    /// #     unmapped: RefCell<Vec<Unmap>>,
    /// # }
    /// # impl Host for Kernel {
    /// #     fn object(&self, id: ObjID) -> Option<ObjectInfo> { self.objects.get(&id).copied() }
    /// #     fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
    /// #         self.contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
    /// #     }
    /// #     fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
    /// #         self.keys.get(&kuid).map(f)
    /// #     }
    /// #     fn key_revoked(&self, kuid: ObjID) -> bool { self.revoked.get() == Some(kuid) }
    /// #     fn record_revoked(&self, _id: &RecordId) -> bool { false }
    /// #     fn monotonic_ns(&self) -> u64 { 1 }
    /// #     fn unmap(&self, what: Unmap) { self.unmapped.borrow_mut().push(what) }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Context `ctx` holds a read-only capability for `file`, signed by the key in `key_obj`.
    /// let (file, key_obj, ctx) = (ObjID::new(0x10), ObjID::new(0x11), ObjID::new(0x20));
    /// let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[9; 32])?;
    /// let mut editor = SecCtxEditor::new();
    /// editor.add_cap(&Cap::mint(CapGrant::new(file, ctx, Protections::READ), &key)?);
    /// let info = ObjectInfo::new(Some(key_obj), Protections::empty());
    /// let engine = Engine::new(Kernel {
    ///     objects: [(file, info)].into(),
    ///     contexts: [(ctx, editor.encode()?)].into(),
    ///     keys: [(key_obj, key.verifying_key())].into(),
    ///     ..Kernel::default() // `Kernel` is a toy `Host` (hidden above)
    /// });
    /// let thread = SecCtxMgr::new(ctx);
    /// let read = Fault::new(file, info, 0x1000, AccessKind::Read);
    ///
    /// let first = engine.decide(&thread, &read);
    /// assert!(matches!(first, Decision::Map { prots, .. } if prots == Protections::READ));
    /// let again = engine.decide(&thread, &read);
    /// assert_eq!(again, first);
    /// assert_eq!((engine.stats().hits, engine.stats().verifies), (1, 1));
    ///
    /// let write = Fault { kind: AccessKind::Write, ..read };
    /// assert!(matches!(engine.decide(&thread, &write), Decision::Violation(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn decide(&self, thread: &SecCtxMgr, fault: &Fault) -> Decision {
        // The common case first, kept small: the summary word of the active context's fresh
        // cache entry grants (`VerifyCache::serve_summary`). No lock is taken (the thread's
        // active id and the cache set are read under sequence counters), nothing is written
        // but the set's hit counter, and the host is asked nothing but the time, and that
        // only for an entry that expires (`DecisionClock`). What the hit carries
        // is three words and what it captures plain values, so that it stays in registers: a
        // larger answer was copied through the stack, and a copy of a value just written in
        // narrower pieces stalls the processor (`docs/BENCHMARKS.md`, *Seventh session*).
        // A refusal from the summary is decided by `summary_refused`; an entry the summary
        // does not answer (page-gated grants) by `decide_served`; anything else (a miss, a
        // switch, the kernel's context, a set being written) by `decide_slow`. (A labelled
        // block rather than a function returning `Option<Decision>`: the decision is built in
        // place, not copied out of an option.)
        // The time, read only when an answer depends on it (an entry that expires, a miss),
        // and at most once: the slow path reuses it.
        let clock = DecisionClock::new(self);
        'hit: {
            if fault.offset < PAGE_SIZE || fault.offset >= MAX_OBJECT_SIZE {
                break 'hit;
            }
            let (active, inactive) = thread.active_and_inactive_count();
            if active == KERNEL_SCTX {
                break 'hit;
            }
            let epoch = self.epoch.load(Ordering::Acquire);
            let now = || clock.now();
            let Some((hit, ticket)) = self.cache.serve_summary(active, fault, epoch, now) else {
                return self.decide_served(thread, fault, active, inactive, epoch, &clock);
            };
            let Some((provide, valid_until)) = hit.grant() else {
                let refused = (hit, ticket);
                return self.summary_refused(
                    thread,
                    fault,
                    (active, inactive),
                    (epoch, &clock),
                    refused,
                );
            };
            // As in `with_entry`: a hit counts only under an unchanged epoch (see `MapTicket`).
            if self.epoch.load(Ordering::Acquire) != epoch {
                break 'hit;
            }
            self.cache.count_hit(&ticket);
            return Decision::Map {
                prots: provide,
                pages: OBJECT_PAGES,
                ctx: active,
                switch_to: None,
                valid_until,
                ticket,
            };
        }
        self.decide_slow(thread, fault, clock.read())
    }

    /// A fault the active context's fresh entry refuses from its summary (`hit`, with its
    /// `ticket`): the violation the full search would give when there is nowhere else to
    /// look ([`Engine::deny_hit`], [`Engine::flow_deny_hit`]), from the words the hit carries
    /// that explain it; else the full path. `epoch` as the hit read it, `clock` the
    /// decision's. In line: out of line, the violation was built in one frame and copied
    /// into the caller's.
    #[inline(always)]
    fn summary_refused(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
        (active, inactive): (ObjID, usize),
        (epoch, clock): (u64, &DecisionClock<'_, H>),
        (hit, ticket): (SummaryHit, MapTicket),
    ) -> Decision {
        // A refusal whose words do not explain it is the full serve's to answer.
        let Some((provided, undetachable, why)) =
            hit.refusal().filter(|(_, _, why)| *why != WhyRefused::Full)
        else {
            return self.decide_served(thread, fault, active, inactive, epoch, clock);
        };
        // The only flag a served denial looks at.
        let flags = if undetachable {
            CtxFlags::UNDETACHABLE
        } else {
            CtxFlags::empty()
        };
        match self.refused_hit(
            (active, inactive),
            fault,
            (epoch, clock),
            (provided, flags, why),
        ) {
            Some(v) => {
                self.cache.count_hit(&ticket);
                Decision::Violation(v)
            }
            None => self.decide_slow(thread, fault, clock.read()),
        }
    }

    /// A fault the summary's hit did not answer: what the active context's fresh entry
    /// serves in full (a page-gated grant, or a denial the summary leaves to the full rule),
    /// else the slow path. `epoch` as the hit read it, `clock` the decision's.
    #[inline(never)]
    fn decide_served(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
        active: ObjID,
        inactive: usize,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
    ) -> Decision {
        'served: {
            let access = data_or_exec(fault);
            let now = || clock.now();
            let Some((served, ticket)) = self.cache.serve(active, fault, (epoch, now), &access)
            else {
                break 'served;
            };
            let why = match served {
                Served::Grant(granted) => {
                    // As in `with_entry`: a hit counts only under an unchanged epoch (see
                    // `MapTicket`).
                    if self.epoch.load(Ordering::Acquire) != epoch {
                        break 'served;
                    }
                    self.cache.count_hit(&ticket);
                    return Decision::Map {
                        prots: granted.provide,
                        pages: granted.pages,
                        ctx: active,
                        switch_to: None,
                        valid_until: granted.valid_until,
                        ticket,
                    };
                }
                Served::Deny {
                    provided,
                    flags,
                    explained,
                } => (provided, flags, WhyRefused::Capabilities(explained)),
                Served::FlowDeny {
                    provided,
                    flags,
                    explained,
                } => (provided, flags, WhyRefused::Flow(explained)),
            };
            if let Some(v) = self.refused_hit((active, inactive), fault, (epoch, clock), why) {
                self.cache.count_hit(&ticket);
                return Decision::Violation(v);
            }
        }
        self.decide_slow(thread, fault, clock.read())
    }

    /// A denial the active context's fresh entry served (`why`, with what it provides and
    /// the context's flags), as the violation the full search would give when there is
    /// nowhere else to look: [`Engine::deny_hit`] for the capabilities', [`Engine::flow_deny_hit`]
    /// for the flow's. `None` when the full search must decide.
    #[inline(always)]
    fn refused_hit(
        &self,
        (active, inactive): (ObjID, usize),
        fault: &Fault,
        (epoch, clock): (u64, &DecisionClock<'_, H>),
        (provided, flags, why): (Protections, CtxFlags, WhyRefused),
    ) -> Option<Violation> {
        match why {
            WhyRefused::Capabilities(explained) => self.deny_hit(
                active,
                inactive,
                fault,
                epoch,
                clock,
                (provided, flags, explained),
            ),
            WhyRefused::Flow(explained) => self.flow_deny_hit(
                active,
                inactive,
                fault,
                epoch,
                clock,
                (provided, flags, explained),
            ),
            WhyRefused::Full => None,
        }
    }

    /// A repeated denial, from the active context's complete entry, when there is nowhere
    /// else to look (the context is `UNDETACHABLE`, or the thread has no inactive context):
    /// the violation the full search would give, without the search's bookkeeping. `why` is
    /// what the lock-free lookup served: what the entry provides, the context's flags, and the
    /// cause if the mirror holds it; else the entry explains it under its set's lock. `None`
    /// when the thread has inactive contexts to try, or the entry changed meanwhile.
    #[inline(always)]
    fn deny_hit(
        &self,
        active: ObjID,
        inactive: usize,
        fault: &Fault,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
        why: (Protections, CtxFlags, Explained),
    ) -> Option<Violation> {
        let (provided, flags, explained) = why;
        let needed = fault.kind.required();
        let violation = if flags.contains(CtxFlags::UNDETACHABLE) {
            Violation::Undetachable {
                ctx: active,
                needed,
                provided,
            }
        } else if inactive == 0 {
            let cause = match explained.cause(data_or_exec(fault).page(), needed) {
                Some(c) => c,
                None => self.locked_deny_cause(active, fault, epoch, clock)?,
            };
            Violation::Denied {
                ctx: active,
                needed,
                provided,
                cause,
            }
        } else {
            return None;
        };
        (self.epoch.load(Ordering::Acquire) == epoch).then_some(violation)
    }

    /// Why the active context's fresh entry denies `fault`, read under its set's lock (when
    /// the mirror does not carry it). `None` when there is no such entry any more.
    #[cold]
    #[inline(never)]
    fn locked_deny_cause(
        &self,
        active: ObjID,
        fault: &Fault,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
    ) -> Option<DenyCause> {
        let access = data_or_exec(fault);
        let needed = fault.kind.required();
        self.locked_fresh(active, fault, epoch, clock, |e| {
            e.deny_cause(&access, needed)
        })
    }

    /// `f` on the active context's entry for `fault`'s object, under its set's lock, if the
    /// entry is fresh for the fault at the decision's time. The time is compared once the lock
    /// is released: `clock` may call the host's clock, never under a lock of ours.
    fn locked_fresh<R>(
        &self,
        active: ObjID,
        fault: &Fault,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
        f: impl FnOnce(&CachedPerms) -> R,
    ) -> Option<R> {
        let stamp = Stamp::of(epoch, &fault.object);
        let (r, valid_until) = self.cache.with_stamped(active, fault.target, &stamp, f)?;
        unexpired(valid_until, || clock.now()).then_some(r)
    }

    /// A repeated flow denial (`docs/DIFC.md` §3.3), from the active context's entry, when
    /// there is nowhere else to look (as [`Engine::deny_hit`]): the reason the mirror
    /// carries, else the entry's, read under its set's lock. `None` when the thread has inactive contexts to try, or the
    /// entry changed meanwhile.
    #[inline(always)]
    fn flow_deny_hit(
        &self,
        active: ObjID,
        inactive: usize,
        fault: &Fault,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
        why: (Protections, CtxFlags, FlowExplained),
    ) -> Option<Violation> {
        let (provided, flags, explained) = why;
        if !flags.contains(CtxFlags::UNDETACHABLE) && inactive != 0 {
            return None;
        }
        let denial = match explained.denial() {
            Some(d) => d,
            None => self.locked_flow_why(active, fault, epoch, clock)?,
        };
        let v = Violation::Flow {
            ctx: active,
            target: fault.target,
            needed: fault.kind.required(),
            provided,
            denial,
        };
        (self.epoch.load(Ordering::Acquire) == epoch).then_some(v)
    }

    /// Why the active context's fresh entry's flow refuses `fault`, read under its set's
    /// lock (when the mirror does not carry it). `None` when there is no such entry any
    /// more, or it says nothing.
    #[cold]
    #[inline(never)]
    fn locked_flow_why(
        &self,
        active: ObjID,
        fault: &Fault,
        epoch: u64,
        clock: &DecisionClock<'_, H>,
    ) -> Option<FlowDenial> {
        self.locked_fresh(active, fault, epoch, clock, |e| e.flow_why.get())?
    }

    /// Everything the common case at the top of [`Engine::decide`] does not serve.
    #[inline(never)]
    fn decide_slow(&self, thread: &SecCtxMgr, fault: &Fault, now: Option<u64>) -> Decision {
        match self.search(thread, fault, now) {
            Ok((looked, switch_to)) => Decision::Map {
                prots: looked.eval.perms.provide,
                pages: looked.eval.pages,
                ctx: looked.eval.perms.ctx,
                switch_to,
                valid_until: looked.eval.perms.valid_until,
                ticket: looked.ticket,
            },
            Err(v) => Decision::Violation(v),
        }
    }

    /// Whether a `Map` decision's ticket is still current: call it holding the lock that
    /// [`Host::unmap`] takes, and install the mapping only if it returns `true` (else decide
    /// again). See [`MapTicket`].
    pub fn is_current(&self, ticket: &MapTicket) -> bool {
        match ticket.0 {
            Ticket::Kernel => true,
            Ticket::Epoch(e) => self.epoch.load(Ordering::Acquire) == e,
            Ticket::Entry { .. } => self.cache.is_current(ticket).unwrap_or(false),
        }
    }

    /// The full decision: the active context, then (unless it is `UNDETACHABLE`) the
    /// inactive ones. `now` is the engine's time if the caller read it already.
    pub(super) fn search(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
        now: Option<u64>,
    ) -> Result<(Looked, Option<ObjID>), Violation> {
        check_bounds(fault)?;
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let active = thread.active_id();
        if active == KERNEL_SCTX {
            return Ok((kernel_grant(), None));
        }
        let now = now.unwrap_or_else(|| self.now());
        let budget = fault_budget();
        let looked = self.lookup_access(active, fault, access, now, &budget)?;
        if looked.eval.perms.grants(needed) {
            return Ok((looked, None));
        }
        // A refusal by the flow reports what is provided after the flow mask; one by the
        // capabilities what they provide (as the pure rule does).
        let provided = looked.caps_provided;
        let flow_violation = |denial| Violation::Flow {
            ctx: active,
            target: fault.target,
            needed,
            provided: looked.eval.perms.provide,
            denial,
        };
        if looked.flags.contains(CtxFlags::UNDETACHABLE) {
            // The flow reason if the capabilities granted, else today's.
            return Err(match looked.flow_denial {
                Some(d) => flow_violation(d),
                None => Violation::Undetachable {
                    ctx: active,
                    needed,
                    provided,
                },
            });
        }
        let mut refused_switch = None;
        let mut i = 0;
        while let Some(ctx) = thread.inactive_at(i) {
            i += 1;
            // An inactive context that is missing or malformed grants nothing; only the
            // active context's problems are the thread's violation. One whose bytes the
            // thread's label may not read is not consulted at all (§3.2 step 5).
            if ctx != active
                && self.may_consult(ctx, &looked.labels)
                && let Ok(l) = self.lookup_access(ctx, fault, access.as_entering(), now, &budget)
                && l.eval.perms.grants(needed)
            {
                // E± from the target only when entering through a code gate (§5.4).
                let entering = fault.kind == AccessKind::Exec;
                match self.switch_allowed(active, looked.labels, ctx, l.labels, entering, now) {
                    Ok(()) => return Ok((l, Some(ctx))),
                    Err(d) => {
                        refused_switch.get_or_insert(d);
                    }
                }
            }
        }
        if let Some(d) = looked.flow_denial.or(refused_switch) {
            return Err(flow_violation(d));
        }
        Err(Violation::Denied {
            ctx: active,
            needed,
            provided,
            // The active context's entry did not grant, so its lookup explained why, from what
            // the entry remembers: nothing is read or verified again.
            cause: looked.cause.unwrap_or(DenyCause::NoRecord),
        })
    }
}

/// The checks that need no context: the null page and the object's bounds.
pub(super) fn check_bounds(fault: &Fault) -> Result<(), Violation> {
    if fault.offset < PAGE_SIZE {
        return Err(Violation::NullPage {
            target: fault.target,
        });
    }
    if fault.offset >= MAX_OBJECT_SIZE {
        return Err(Violation::OutOfBounds {
            target: fault.target,
            offset: fault.offset,
        });
    }
    Ok(())
}

/// What a kernel thread gets: everything, on every page but the null page (as upstream).
fn kernel_grant() -> Looked {
    Looked {
        eval: Evaluated {
            perms: PermsInfo {
                ctx: KERNEL_SCTX,
                provide: Protections::all(),
                restrict: Protections::empty(),
                valid_until: Expiry::NEVER,
            },
            pages: 1..MAX_OBJECT_SIZE / PAGE_SIZE,
        },
        // The kernel's context is never left through the fault path.
        flags: CtxFlags::UNDETACHABLE,
        ticket: MapTicket(Ticket::Kernel),
        cause: None,
        flow_denial: None,
        labels: PrincipalLabels::steady(LabelId::EMPTY),
        caps_provided: Protections::all(),
    }
}

/// The access a fault makes, before any switch: fetches by a thread already in the
/// context are not entries.
pub(super) fn data_or_exec(fault: &Fault) -> Access {
    Access {
        kind: fault.kind,
        offset: fault.offset,
        entering: false,
    }
}
