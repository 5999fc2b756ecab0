//! In-kernel tests of the rule's parts through the port, as the reference kernel's scenarios
//! check them: masks, data gates, delegation, `UNDETACHABLE`, in-place context edits, record
//! revocation and expiry from the kernel's own timer, decided by the engine with upstream's
//! kernel as its host (`ENGINE.decide` over `TwzHost`). The tests through the real fault
//! handler are in `fault_path.rs`.

use kernel_hooks::{Decision, DenyCause, Fault, Violation};
use twizzler_capsec::{
    AccessKind, CtxFlags, Del, DelGrant, Expiry, Gate, Protections as Caps, SecCtxEditor, Verdict,
    VerifyError,
};
use twizzler_kernel_macros::kernel_test;

use super::super::{ENGINE, Host, TwzHost, object_info, revoke_record, to_hooks_id};
use super::{Key, context_object, keyed_object, mint, new_key, write_into};
use crate::{
    obj::ObjectRef,
    processor::sched::{SchedFlags, schedule},
};

/// The engine's decision for an access of `kind` at byte `offset` of `target` by a thread
/// whose contexts are `mgr`.
fn decide(
    mgr: &kernel_hooks::SecCtxMgr,
    target: &ObjectRef,
    offset: u64,
    kind: AccessKind,
) -> Decision {
    let fault = Fault::new(to_hooks_id(target.id()), object_info(target), offset, kind);
    ENGINE.decide(mgr, &fault)
}

/// What a decision maps, or `None` for a violation.
fn granted(d: &Decision) -> Option<Caps> {
    match d {
        Decision::Map { prots, .. } => Some(*prots),
        Decision::Violation(_) => None,
    }
}

/// A thread whose active context is `active`, with `inactive` attached.
fn thread(
    active: twizzler_abi::object::ObjID,
    inactive: &[twizzler_abi::object::ObjID],
) -> kernel_hooks::SecCtxMgr {
    let mgr = kernel_hooks::SecCtxMgr::new(to_hooks_id(active));
    for c in inactive {
        mgr.attach(to_hooks_id(*c))
            .unwrap_or_else(|e| panic!("attach: {e:?}"));
    }
    mgr
}

/// A target object signed by a fresh key, and a context holding one capability for it.
fn one_cap(
    prots: Caps,
    adjust: impl FnOnce(&mut twizzler_capsec::CapGrant),
) -> (Key, ObjectRef, twizzler_abi::object::ObjID) {
    let key = new_key();
    let target = keyed_object(key.obj, &[0x11; 64]);
    let ctx = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, prots, adjust));
        e
    });
    (key, target, ctx)
}

#[kernel_test]
fn port_masks_take_rights_away() {
    let key = new_key();
    let target = keyed_object(key.obj, &[0x22; 64]);
    let t = to_hooks_id(target.id());
    let rw = Caps::READ | Caps::WRITE;
    let per_object = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, rw, |_| {}));
        e.set_mask(t, Caps::READ, Caps::empty());
        e
    });
    let global = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, rw, |_| {}));
        e.set_global_mask(Caps::READ | Caps::EXEC);
        e
    });
    for (ctx, which) in [(per_object, "per-object"), (global, "global")] {
        let mgr = thread(ctx, &[]);
        let read = decide(&mgr, &target, 0x1000, AccessKind::Read);
        assert_eq!(granted(&read), Some(Caps::READ), "{which} mask: read");
        match decide(&mgr, &target, 0x1000, AccessKind::Write) {
            Decision::Violation(Violation::Denied {
                cause: DenyCause::Masked { removed },
                ..
            }) => assert!(
                removed.contains(Caps::WRITE),
                "{which} mask removed {removed:?}"
            ),
            other => panic!("{which} mask: a write through it: {other:?}"),
        }
    }
}

#[kernel_test]
fn port_data_gate_grants_only_pages_inside_it() {
    // The reference kernel's data gate: bytes 0x2800..0x5000.
    let (_key, target, ctx) = one_cap(Caps::READ | Caps::WRITE, |g| {
        g.gate = Gate::new(0x2800, 0x2800, 1).unwrap_or_else(|e| panic!("gate: {e:?}"));
    });
    let mgr = thread(ctx, &[]);
    assert!(
        granted(&decide(&mgr, &target, 0x3000, AccessKind::Read)).is_some(),
        "a page inside the gate"
    );
    for (offset, which) in [(0x6000, "outside"), (0x2800, "partly inside")] {
        match decide(&mgr, &target, offset, AccessKind::Read) {
            Decision::Violation(Violation::Denied {
                cause: DenyCause::Record(Verdict::OutsideGate),
                ..
            }) => {}
            other => panic!("a page {which} the gate: {other:?}"),
        }
    }
}

#[kernel_test]
fn port_delegation_grants_the_attenuated_right_only() {
    // The provider holds rw- and delegates r-- to the receiver, signing with the key its
    // context object's id verifies against.
    let target_key = new_key();
    let provider_key = new_key();
    let target = keyed_object(target_key.obj, &[0x33; 64]);
    let mut parent = None;
    let provider = context_object(Some(provider_key.obj), |ctx| {
        let cap = mint(
            &target_key,
            target.id(),
            ctx,
            Caps::READ | Caps::WRITE,
            |_| {},
        );
        let mut e = SecCtxEditor::new();
        e.add_cap(&cap);
        parent = Some(cap);
        e
    });
    let Some(parent) = parent else {
        panic!("the provider's context was built");
    };
    let receiver = context_object(None, |ctx| {
        let del = Del::from_cap(
            &parent,
            DelGrant::new(to_hooks_id(ctx), Caps::READ),
            &provider_key.sk,
        )
        .unwrap_or_else(|e| panic!("delegate: {e:?}"));
        let mut e = SecCtxEditor::new();
        e.add_del(&del);
        e
    });
    let mgr = thread(receiver, &[]);
    assert_eq!(
        granted(&decide(&mgr, &target, 0x1000, AccessKind::Read)),
        Some(Caps::READ),
        "the delegated read"
    );
    assert!(
        granted(&decide(&mgr, &target, 0x1000, AccessKind::Write)).is_none(),
        "the provider's write right was not delegated"
    );
    // The provider keeps its own rights.
    let mgr = thread(provider, &[]);
    assert!(granted(&decide(&mgr, &target, 0x1000, AccessKind::Write)).is_some());
}

#[kernel_test]
fn port_undetachable_context_keeps_a_thread_in() {
    let (_key, target, grants) = one_cap(Caps::READ, |_| {});
    let locked = context_object(None, |_| {
        let mut e = SecCtxEditor::new();
        e.set_flags(CtxFlags::UNDETACHABLE);
        e
    });
    let empty = context_object(None, |_| SecCtxEditor::new());
    // From an ordinary empty context, the attached one grants (and the thread would switch).
    match decide(&thread(empty, &[grants]), &target, 0x1000, AccessKind::Read) {
        Decision::Map { switch_to, .. } => assert_eq!(switch_to, Some(to_hooks_id(grants))),
        Decision::Violation(v) => panic!("from an ordinary context: {v:?}"),
    }
    // From an UNDETACHABLE one, it is never consulted.
    match decide(
        &thread(locked, &[grants]),
        &target,
        0x1000,
        AccessKind::Read,
    ) {
        Decision::Violation(Violation::Undetachable { ctx, .. }) => {
            assert_eq!(ctx, to_hooks_id(locked))
        }
        other => panic!("from an UNDETACHABLE context: {other:?}"),
    }
}

#[kernel_test]
fn port_context_edited_in_place_is_seen_after_its_invalidation() {
    // What a host does when a context object is written (the guide, section 5): the context's
    // cached decisions go, and the next fault reads the new bytes.
    let key = new_key();
    let target = keyed_object(key.obj, &[0x44; 64]);
    let mut ctx_obj = None;
    let ctx = context_object(None, |ctx| {
        ctx_obj = Some(ctx);
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, Caps::READ, |_| {}));
        e
    });
    let mgr = thread(ctx, &[]);
    assert!(granted(&decide(&mgr, &target, 0x1000, AccessKind::Read)).is_some());
    assert!(granted(&decide(&mgr, &target, 0x1000, AccessKind::Write)).is_none());

    let mut e = SecCtxEditor::new();
    e.add_cap(&mint(
        &key,
        target.id(),
        ctx,
        Caps::READ | Caps::WRITE,
        |_| {},
    ));
    let bytes = e.encode().unwrap_or_else(|e| panic!("encode: {e:?}"));
    let crate::obj::LookupResult::Found(obj) =
        crate::obj::lookup_object(ctx, crate::obj::LookupFlags::empty())
    else {
        panic!("the context object is in the object table");
    };
    write_into(&obj, &bytes);
    let _ = ENGINE.invalidate_ctx(to_hooks_id(ctx));
    assert!(
        granted(&decide(&mgr, &target, 0x1000, AccessKind::Write)).is_some(),
        "the edited context grants the write"
    );
}

#[kernel_test]
fn port_revoked_record_denies_at_the_next_fault() {
    let key = new_key();
    let target = keyed_object(key.obj, &[0x55; 64]);
    let mut record = None;
    let ctx = context_object(None, |ctx| {
        let cap = mint(&key, target.id(), ctx, Caps::READ, |_| {});
        record = Some(cap.id());
        let mut e = SecCtxEditor::new();
        e.add_cap(&cap);
        e
    });
    let Some(record) = record else {
        panic!("the context was built");
    };
    let mgr = thread(ctx, &[]);
    assert!(granted(&decide(&mgr, &target, 0x1000, AccessKind::Read)).is_some());
    revoke_record(record);
    match decide(&mgr, &target, 0x1000, AccessKind::Read) {
        Decision::Violation(Violation::Denied {
            cause: DenyCause::Record(Verdict::Invalid(VerifyError::Revoked)),
            ..
        }) => {}
        other => panic!("after revoking the record: {other:?}"),
    }
}

/// How long an expiring capability lives in the expiry test.
const EXPIRY_IN_NS: u64 = 300_000_000;

/// A read capability for a new object that expires [`EXPIRY_IN_NS`] from now (or later, see
/// below), granted once through the adapter (`decide_for`, which arms the kernel's timer for
/// a grant that expires): the deadline on the host's clock, the object and the thread.
fn expiring_grant() -> (u64, ObjectRef, kernel_hooks::SecCtxMgr) {
    // Making the key, the objects and the context takes time (signing, in an unoptimised
    // kernel under TCG, on a machine that may be busy): if that took the capability's whole
    // life, it is denied as expired before it could be granted, and the fixture starts again
    // with twice the life. The outcome does not depend on the machine's speed.
    let mut life = EXPIRY_IN_NS;
    let addr = crate::arch::VirtAddr::new(0x4000_1000).unwrap_or_else(|_| panic!("addr"));
    loop {
        let deadline = TwzHost.monotonic_ns() + life;
        let expires = Expiry::from_raw(deadline + ENGINE.wall_clock_offset());
        let (_key, target, ctx) = one_cap(Caps::READ, |g| g.expires = expires);
        let mgr = thread(ctx, &[]);
        let perms = super::super::decide_for(
            &mgr,
            &target,
            0x1000,
            addr,
            twizzler_abi::upcall::MemoryAccessKind::Read,
        );
        if perms.is_ok() {
            return (deadline, target, mgr);
        }
        assert!(
            TwzHost.monotonic_ns() >= deadline,
            "granted before its expiry: {perms:?}"
        );
        life *= 2;
        assert!(
            life <= 20_000_000_000,
            "the fixtures never took less than 10 s"
        );
    }
}

#[kernel_test]
fn port_expiry_from_the_kernels_timer() {
    // A capability that expires 300 ms from now: the grant carries its deadline, the engine
    // reports it as its next deadline, and the kernel's timer (armed by the adapter from the
    // engine's own clock) runs `expire` without anyone calling it. Lateness is printed.
    // Deadlines are in the host's clock (monotonic_ns); a capability's expiry is in the
    // engine's (that clock plus the wall-clock offset the kernel set, if any).
    let (deadline, target, mgr) = expiring_grant();
    assert!(
        ENGINE.next_deadline().is_some_and(|d| d <= deadline),
        "the engine knows the deadline"
    );
    // Wait for the timer: nothing here calls expire. The bound is generous (TCG, loaded
    // machine); it only turns a hang into a failure.
    let give_up = TwzHost.monotonic_ns() + 60_000_000_000;
    while ENGINE.next_deadline().is_some_and(|d| d <= deadline) {
        assert!(
            TwzHost.monotonic_ns() < give_up,
            "the timer never ran expire for a deadline 60 s past"
        );
        schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
    }
    let late_ns = TwzHost.monotonic_ns().saturating_sub(deadline);
    let ran = super::super::last_expiry();
    assert!(
        ran.is_some_and(|(at, _)| at >= deadline),
        "expire ran at or after the deadline, never before: {ran:?}"
    );
    let lateness_us = ran.map(|(at, _)| (at - deadline) / 1000).unwrap_or(0);
    logln!(
        "port timing: expiry lateness: {} us (timer's expire after the deadline; the test saw it after {} us)",
        lateness_us,
        late_ns / 1000
    );
    match decide(&mgr, &target, 0x1000, AccessKind::Read) {
        Decision::Violation(Violation::Denied {
            cause: DenyCause::Record(Verdict::Invalid(VerifyError::Expired { .. })),
            ..
        }) => {}
        other => panic!("after its expiry: {other:?}"),
    }
}

#[kernel_test]
fn port_expiry_chain_recovers_a_lost_step() {
    // A chain armed for a deadline whose step never runs (a callback upstream's queue lost:
    // here armed with no step at all) must not stop expiry for ever: once it is long overdue
    // (`CHAIN_LOST_AFTER_NS`), the next grant that expires arms a new chain, and its
    // `expire` runs.
    let lost = 1;
    assert!(
        TwzHost.monotonic_ns() > lost + super::super::CHAIN_LOST_AFTER_NS,
        "the kernel has run for longer than a chain may be overdue"
    );
    super::super::ARMED_DEADLINE.store(lost, core::sync::atomic::Ordering::Release);
    let (deadline, _target, _mgr) = expiring_grant();
    let give_up = TwzHost.monotonic_ns() + 60_000_000_000;
    while ENGINE.next_deadline().is_some_and(|d| d <= deadline) {
        assert!(
            TwzHost.monotonic_ns() < give_up,
            "no expire for a grant 60 s past its deadline: the lost chain was never replaced \
             (armed deadline {})",
            super::super::ARMED_DEADLINE.load(core::sync::atomic::Ordering::Acquire)
        );
        schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
    }
    // The new chain's deadline is the engine's earliest when it was armed, or the time of
    // arming when that had already passed (the fixture may grant just before its deadline),
    // so only when `expire` ran is compared with the grant's deadline.
    let ran = super::super::last_expiry();
    assert!(
        ran.is_some_and(|(at, d)| at >= deadline && d != lost),
        "a new chain ran expire, at or after the grant's deadline {deadline}: {ran:?}"
    );
}

#[kernel_test]
fn port_expiry_chain_survives_full_timeout_windows() {
    // Upstream's timeout queue holds 32 timeouts per window (one tick); past that, `insert`
    // runs the new timeout's callback at once, under the queue's lock. The windows around a
    // wait are filled, then the expiry chain is armed for a deadline at that wait: its step
    // must not run the chain (arming again there would take the queue's lock a second time:
    // a hang) and must not lose the deadline either: `expire` still runs for it.
    const TICK: u64 = super::super::TICK_NS;
    let wait = 400 * TICK;
    for k in 0..28u64 {
        for _ in 0..32 {
            crate::clock::register_timeout_callback(wait - 4 * TICK + k * TICK, |_| {}, ());
        }
    }
    let deadline = TwzHost.monotonic_ns() + wait;
    super::super::ARMED_DEADLINE.store(deadline, core::sync::atomic::Ordering::Release);
    let ticks_at_arming = crate::clock::get_current_ticks();
    super::super::arm_step(deadline, wait);
    // The chain's step runs when the queue has counted its ticks, and the queue's ticks can
    // fall far behind the clock (under TCG on a loaded machine, runs 61 and 90: 301 ticks in
    // 60 s of the kernel's clock, against the 400 the step asked for). So the test gives up
    // when the queue has counted twice the step's ticks and more without the chain running
    // `expire` (the step was lost), or, if the queue's ticks stop altogether, after ten
    // minutes of the kernel's clock.
    let give_up_ticks = ticks_at_arming + 2 * (wait / TICK) + 100;
    let give_up = TwzHost.monotonic_ns() + 600_000_000_000;
    while !super::super::last_expiry().is_some_and(|(_, d)| d == deadline) {
        if crate::clock::get_current_ticks() >= give_up_ticks || TwzHost.monotonic_ns() >= give_up
        {
            // What tells a stalled timeout queue (its ticks stopped, or its thread asleep
            // with work: upstream's `print_info` warns) from a chain that lost its step.
            crate::clock::print_info();
            panic!(
                "the chain never ran expire for its deadline: the queue's ticks {} at arming, \
                 {} now (the step asked for about {}); armed deadline {} (ours {}); \
                 last expiry {:?}",
                ticks_at_arming,
                crate::clock::get_current_ticks(),
                wait / TICK,
                super::super::ARMED_DEADLINE.load(core::sync::atomic::Ordering::Acquire),
                deadline,
                super::super::last_expiry(),
            );
        }
        schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
    }
    let ran = super::super::last_expiry();
    assert!(
        ran.is_some_and(|(at, _)| at >= deadline),
        "expire ran at or after the deadline, never before: {ran:?}"
    );
}
