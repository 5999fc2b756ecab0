//! `kernel_hooks::conformance` on Twizzler's kernel: the suite every host runs, here through
//! the real fault handler (`do_page_fault`), the per-security-context page tables of a user
//! memory context, the kernel's clock, its timer's expiry, and the port's revocation calls.
//!
//! Twizzler derives an object's id from its `kuid` and a nonce, so the world's objects are
//! created first (key objects, then contexts, then data objects keyed by their key object)
//! and the world is built with their ids (`World::build_with`); the key and context bytes are
//! written into them after. The suite runs on a user thread whose active context is A, with
//! B and C attached; data objects are mapped in slots of its memory context with the
//! region's protections the world asks for (read, write and execute).
//!
//! The checks hand the harness a `kernel_hooks::SecCtxMgr` per simulated thread. The fault
//! handler decides with the *current* thread's manager, so before each fault the harness
//! makes the thread's manager hold what the check's does (the same active context, the same
//! attached ones) and afterwards carries a switch the fault made back to it: the decision,
//! the switch and the page tables are the kernel's own.

use alloc::{collections::BTreeMap, format, string::String, vec::Vec};
use core::sync::atomic::Ordering;

use kernel_hooks::{
    Engine,
    conformance::{self, Body, Calls, Harness, Ids, Outcome, World},
};
use twizzler_abi::{
    object::{MAX_SIZE, ObjID, Protections},
    upcall::MemoryAccessKind,
};
use twizzler_capsec::{AccessKind, RecordId};
use twizzler_kernel_macros::kernel_test;

use super::super::{
    COUNTED_THREAD, ENGINE, HOST_CALLS, HostCall, SecCtxMgr, SwitchResult, TwzHost, arm_expiry,
    clock_ns, get_sctx, revoke_key, revoke_record, to_abi_id, to_hooks_id, to_hooks_prots,
};
use super::fault_path::{map_at_slot_n, va};
use super::{keyed_object, object_with, pte, run_in_user_context, write_into};
use crate::{
    memory::context::virtmem::{PageFaultFlags, fault::do_page_fault},
    obj::{InvalidateMode, LookupFlags, LookupResult, ObjectRef, PageNumber, lookup_object},
    thread::{current_thread_ref, entry::run_closure_in_new_thread, priority::Priority},
};

/// The first slot the world's data objects are mapped in (the other port tests use 16-18).
const FIRST_SLOT: usize = 24;

/// Where a kernel-mode fault's instruction pointer is (a system call copying user memory).
const KERNEL_IP: u64 = 0xffff_ffff_8010_0000;

/// The suite's harness: the world's data objects by id, with the base address of the slot
/// each is mapped at in the job thread's memory context.
struct PortHarness {
    bases: BTreeMap<ObjID, u64>,
}

impl PortHarness {
    fn base(&self, target: twizzler_capsec::ObjID) -> Result<u64, String> {
        self.bases
            .get(&to_abi_id(target))
            .copied()
            .ok_or_else(|| format!("object {target:?} is not one the harness mapped"))
    }

    /// Makes the contexts of `port` (the current thread's) those of `t`: the same active
    /// context and the same attached ones.
    fn mirror(port: &SecCtxMgr, t: &kernel_hooks::SecCtxMgr) -> Result<(), String> {
        let h = port.hooks();
        let want_active = t.active_id();
        let want_inactive = t.inactive();
        for c in core::iter::once(want_active).chain(want_inactive.iter().copied()) {
            if h.active_id() != c && !h.inactive().contains(&c) {
                h.attach(c).map_err(|e| format!("attach {c:?}: {e:?}"))?;
            }
        }
        if port.switch_context(to_abi_id(want_active)) == SwitchResult::NotAttached {
            return Err(format!("cannot switch the thread to {want_active:?}"));
        }
        for c in h.inactive() {
            if !want_inactive.contains(&c) {
                h.detach(c).map_err(|e| format!("detach {c:?}: {e:?}"))?;
            }
        }
        Ok(())
    }

    /// The fault handler on the current thread, as `t`, at byte `offset` of `target`:
    /// `Ok` with what the page tables of the (possibly new) active context then hold.
    fn handle(
        &self,
        t: &kernel_hooks::SecCtxMgr,
        target: twizzler_capsec::ObjID,
        offset: u64,
        kind: AccessKind,
        user: bool,
    ) -> Result<Option<Protections>, String> {
        let ct = current_thread_ref().ok_or("no current thread")?;
        let port = &ct.secctx;
        Self::mirror(port, t)?;
        let addr = va(self.base(target)? + offset);
        let mut flags = if user {
            PageFaultFlags::USER
        } else {
            PageFaultFlags::empty()
        };
        if pte(port.active_id(), addr).is_some() {
            flags |= PageFaultFlags::PRESENT;
        }
        let (cause, ip) = match kind {
            AccessKind::Read => (MemoryAccessKind::Read, va(self.base(target)? + 0x8000)),
            AccessKind::Write => (MemoryAccessKind::Write, va(self.base(target)? + 0x8000)),
            AccessKind::Exec => (MemoryAccessKind::InstructionFetch, addr),
        };
        let ip = if user { ip } else { va(KERNEL_IP) };
        let res = do_page_fault(addr, cause, flags, ip);
        // The fault may have switched the thread (a gate): `t` switches with it.
        let now_active = to_hooks_id(port.active_id());
        if now_active != t.active_id() {
            let _ = t.switch_context(now_active);
        }
        match res {
            Ok(()) => Ok(pte(port.active_id(), addr)),
            Err(upcall) => Err(format!("{upcall:?}")),
        }
    }
}

impl Harness for PortHarness {
    type Host = TwzHost;

    fn engine(&self) -> &Engine<TwzHost> {
        &ENGINE
    }

    fn fault(
        &self,
        thread: &kernel_hooks::SecCtxMgr,
        target: twizzler_capsec::ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Result<twizzler_capsec::Protections, String> {
        match self.handle(thread, target, offset, kind, true)? {
            Some(p) => Ok(to_hooks_prots(p)),
            None => Err(String::from(
                "the fault returned, and nothing was installed (the decision was no longer current)",
            )),
        }
    }

    fn mapped(
        &self,
        ctx: twizzler_capsec::ObjID,
        target: twizzler_capsec::ObjID,
        offset: u64,
    ) -> Option<twizzler_capsec::Protections> {
        let base = self.base(target).ok()?;
        pte(to_abi_id(ctx), va(base + offset)).map(to_hooks_prots)
    }

    fn write_protect(&self, target: twizzler_capsec::ObjID) {
        // Upstream's write-protection of an object's mappings, in every memory context and
        // every security context's page tables.
        if let LookupResult::Found(obj) = lookup_object(to_abi_id(target), LookupFlags::empty()) {
            let whole = PageNumber::from(0usize)..PageNumber::meta_page().next();
            obj.invalidate(whole, InvalidateMode::WriteProtect);
        }
    }

    fn now(&self) -> u64 {
        clock_ns()
    }

    fn wait_until(&self, t: u64) {
        while clock_ns() < t {
            core::hint::spin_loop();
        }
    }

    fn expire(&self) {
        // What the timer chain's last step does (`on_step`).
        ENGINE.expire();
        arm_expiry();
    }

    fn revoke_key(&self, kuid: twizzler_capsec::ObjID) {
        revoke_key(to_abi_id(kuid));
    }

    fn revoke_record(&self, id: RecordId) {
        revoke_record(id);
    }

    fn calls(&self) -> Calls {
        let n = |k: HostCall| {
            HOST_CALLS
                .get(k as usize)
                .map_or(0, |c| c.load(Ordering::Relaxed))
        };
        Calls {
            clock: n(HostCall::Clock),
            metadata: n(HostCall::Metadata),
            other: n(HostCall::Other),
        }
    }

    fn race(&self, a: &(dyn Fn() + Sync), b: &(dyn Fn() + Sync)) -> bool {
        // SAFETY: `b` is borrowed for this call only; the new thread runs it and this
        // function waits for that thread's result before it returns, so the borrow outlives
        // every use. A panic on either side panics the kernel (the run fails): nothing
        // returns from here early with the thread still running.
        let b: &'static (dyn Fn() + Sync) =
            unsafe { core::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(b) };
        let (_, done) = run_closure_in_new_thread(Priority::USER, move || b());
        a();
        done.wait();
        true
    }

    fn kernel_access(
        &self,
        thread: &kernel_hooks::SecCtxMgr,
        target: twizzler_capsec::ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Option<Result<(), String>> {
        Some(match self.handle(thread, target, offset, kind, false) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(String::from(
                "the fault returned, and nothing was installed",
            )),
            Err(why) => Err(why),
        })
    }
}

/// The world's objects created in the kernel's object table, keyed as the world says, and
/// the ids they got.
fn create_objects() -> (Ids, BTreeMap<ObjID, ObjectRef>) {
    let mut made = BTreeMap::new();
    let mut plain = || {
        let o = object_with(None, &[]);
        made.insert(o.id(), o.clone());
        to_hooks_id(o.id())
    };
    let (k_targets, k_race) = (plain(), plain());
    let (ctx_a, ctx_b, ctx_c) = (plain(), plain(), plain());
    let mut keyed = |kuid: twizzler_capsec::ObjID| {
        let o = keyed_object(to_abi_id(kuid), &[0x5a; 64]);
        made.insert(o.id(), o.clone());
        to_hooks_id(o.id())
    };
    let ids = Ids {
        expiring: keyed(k_targets),
        rwx: keyed(k_targets),
        code: keyed(k_targets),
        plain: keyed(k_targets),
        shared: keyed(k_targets),
        race: keyed(k_race),
        k_targets,
        k_race,
        ctx_a,
        ctx_b,
        ctx_c,
    };
    (ids, made)
}

#[kernel_test]
fn port_passes_the_hosts_conformance_suite() {
    let (ids, made) = create_objects();
    let world = World::build_with(ENGINE.now(), ids)
        .unwrap_or_else(|e| panic!("the conformance world: {e:?}"));
    for o in &world.objects {
        let Some(obj) = made.get(&to_abi_id(o.id)) else {
            panic!("object {:?} was not created", o.id);
        };
        match &o.body {
            Body::Key(k) => write_into(obj, &k.encode()),
            Body::Context(bytes) => write_into(obj, bytes),
            Body::Data => {}
        }
    }
    let sctx = |id| get_sctx(to_abi_id(id)).unwrap_or_else(|_| panic!("context {id:?}"));
    let (a, b, c) = (sctx(ids.ctx_a), sctx(ids.ctx_b), sctx(ids.ctx_c));
    let data: Vec<(ObjID, ObjectRef, Protections)> = world
        .objects
        .iter()
        .filter(|o| matches!(o.body, Body::Data))
        .filter_map(|o| {
            let obj = made.get(&to_abi_id(o.id))?.clone();
            let region = super::super::to_abi_prots(o.region);
            Some((obj.id(), obj, region))
        })
        .collect();
    run_in_user_context(a, &[b, c], move || {
        let mut bases = BTreeMap::new();
        for (n, (id, obj, region)) in data.iter().enumerate() {
            bases.insert(*id, map_at_slot_n(obj, FIRST_SLOT + n, *region));
        }
        assert!(
            bases.values().all(|b| *b % MAX_SIZE as u64 == 0),
            "slot bases"
        );
        let harness = PortHarness { bases };
        if let Some(ct) = current_thread_ref() {
            COUNTED_THREAD.store(ct.id(), Ordering::Relaxed);
        }
        let reports = conformance::run(&harness, &world);
        COUNTED_THREAD.store(u64::MAX, Ordering::Relaxed);
        for r in &reports {
            logln!("{}", r);
        }
        logln!("{}", conformance::summary(&reports));
        // The port takes interrupts in kernel mode but cannot place one inside the engine on
        // demand; its answer to gap 8 is that `expire` runs in the timeout thread, never in
        // an interrupt handler (README). Every other check must pass.
        let bad: Vec<String> = reports
            .iter()
            .filter(|r| match &r.outcome {
                Outcome::Pass => false,
                Outcome::Skipped(_) => !r.name.contains("interrupt"),
                Outcome::Fail(_) => true,
            })
            .map(|r| format!("{r}"))
            .collect();
        assert!(
            bad.is_empty(),
            "conformance checks that did not pass:\n{}",
            bad.join("\n")
        );
    });
}
