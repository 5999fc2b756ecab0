//! In-kernel tests through the real fault handler (`do_page_fault`) on a user memory context:
//! what reaches the page tables of each security context.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, Ordering};

use kernel_hooks::{Decision, Fault, Host as _};
use twizzler_abi::{
    device::CacheType,
    object::{MAX_SIZE, ObjID, Protections},
    syscall::MapFlags,
    upcall::{MemoryAccessKind, UpcallInfo},
};
use twizzler_capsec::{AccessKind, Gate, Protections as Caps, SecCtxEditor};
use twizzler_kernel_macros::kernel_test;

use super::super::{ENGINE, ctx_write, get_sctx, object_info, to_hooks_id};
use super::{context_object, keyed_object, mint, new_key, pte, run_in_user_context};
use crate::{
    arch::VirtAddr,
    memory::context::{
        ObjectContextInfo, UserContext,
        virtmem::{PageFaultFlags, Slot, fault::do_page_fault},
    },
    obj::ObjectRef,
    processor::sched::{SchedFlags, schedule},
    thread::{current_memory_context, entry::run_closure_in_new_thread, priority::Priority},
};

/// Maps `target` at slot 17 of the current (user) memory context with `prots`, and returns
/// the slot's base address.
fn map_at_slot(target: &ObjectRef, prots: Protections) -> u64 {
    map_at_slot_n(target, 17, prots)
}

/// Maps `target` at slot `n` of the current (user) memory context with `prots`, and returns
/// the slot's base address.
pub(super) fn map_at_slot_n(target: &ObjectRef, n: usize, prots: Protections) -> u64 {
    let Some(ctx) = current_memory_context() else {
        panic!("the job runs in a user memory context");
    };
    let base = (n * MAX_SIZE) as u64;
    let slot = Slot::try_from(VirtAddr::new(base).unwrap_or_else(|_| panic!("addr")))
        .unwrap_or_else(|_| panic!("slot"));
    ctx.insert_object(
        slot,
        &ObjectContextInfo::new(
            target.clone(),
            prots,
            CacheType::WriteBack,
            MapFlags::empty(),
        ),
    )
    .unwrap_or_else(|_| panic!("insert"));
    base
}

pub(super) fn va(raw: u64) -> VirtAddr {
    VirtAddr::new(raw).unwrap_or_else(|_| panic!("canonical address {raw:#x}"))
}

fn active_id() -> ObjID {
    let Some(ct) = crate::thread::current_thread_ref() else {
        panic!("on a thread");
    };
    ct.secctx.active_id()
}

/// A code object, signed by a fresh key, and a context holding `r-x` on it through a code
/// gate with entry points every 16 bytes of 0x2000..0x2100 (the reference kernel's).
fn code_gate() -> (ObjectRef, ObjID) {
    let key = new_key();
    let code = keyed_object(key.obj, &[0x90; 64]);
    let gate_ctx = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, code.id(), ctx, Caps::READ | Caps::EXEC, |g| {
            g.gate = Gate::new(0x2000, 0x100, 16).unwrap_or_else(|e| panic!("gate: {e:?}"));
        }));
        e
    });
    (code, gate_ctx)
}

#[kernel_test]
fn port_real_fault_enters_a_code_gate_at_its_byte_offset_and_switches() {
    // An instruction fetch at entry point 0x2010 (not page-aligned) by a thread whose active
    // context is empty and which has the gate's context attached: the fault path passes the
    // fault's byte offset, the engine grants through the gate, and the thread is switched to
    // the gate's context, under whose page tables the page is mapped executable.
    let (code, gate_ctx) = code_gate();
    let empty = context_object(None, |_| SecCtxEditor::new());
    let active = get_sctx(empty).unwrap_or_else(|_| panic!("context"));
    let gate = get_sctx(gate_ctx).unwrap_or_else(|_| panic!("context"));
    let first_code = code.clone();
    run_in_user_context(active, &[gate.clone()], move || {
        let base = map_at_slot(&first_code, Protections::READ | Protections::EXEC);
        let entry = va(base + 0x2010);
        let fetch = do_page_fault(
            entry,
            MemoryAccessKind::InstructionFetch,
            PageFaultFlags::USER,
            entry,
        );
        assert!(fetch.is_ok(), "a fetch at an entry point is granted");
        assert_eq!(
            active_id(),
            gate_ctx,
            "the thread entered the gate's context"
        );
        let got = pte(gate_ctx, entry);
        assert!(
            got.is_some_and(|p| p.contains(Protections::EXEC)),
            "the page is executable under the gate's context: {got:?}"
        );
    });
    let empty = context_object(None, |_| SecCtxEditor::new());
    let active = get_sctx(empty).unwrap_or_else(|_| panic!("context"));
    run_in_user_context(active, &[gate], move || {
        let base = map_at_slot(&code, Protections::READ | Protections::EXEC);
        let between = va(base + 0x2008);
        let fetch = do_page_fault(
            between,
            MemoryAccessKind::InstructionFetch,
            PageFaultFlags::USER,
            between,
        );
        assert!(
            matches!(fetch, Err(UpcallInfo::SecurityViolation(_))),
            "a fetch between entry points does not enter the gate: the fault path gave \
             {fetch:?}, the engine now says {:?}",
            super::super::ENGINE.decide(
                &{
                    let m = kernel_hooks::SecCtxMgr::new(super::super::to_hooks_id(empty));
                    let _ = m.attach(super::super::to_hooks_id(gate_ctx));
                    m
                },
                &kernel_hooks::Fault::new(
                    super::super::to_hooks_id(code.id()),
                    super::super::object_info(&code),
                    0x2008,
                    twizzler_capsec::AccessKind::Exec,
                ),
            )
        );
        assert_eq!(active_id(), empty, "and the thread stays where it was");
    });
}

#[kernel_test]
fn port_two_contexts_on_one_read_only_object_each_see_their_own_grant() {
    // A read-only (no WRITE), non-STABLE region: upstream serves it through one shared page
    // table linked into every security context's tables. Context A holds r-- on one page
    // (a data gate over 0x2000..0x3000); context B holds r-x on the whole object. After A
    // reads its page and B reads another page and executes A's, A must see neither B's page
    // nor execute rights on its own.
    let key = new_key();
    let target = keyed_object(key.obj, &[0x77; 64]);
    let a = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, Caps::READ, |g| {
            g.gate = Gate::new(0x2000, 0x1000, 1).unwrap_or_else(|e| panic!("gate: {e:?}"));
        }));
        e
    });
    let b = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(
            &key,
            target.id(),
            ctx,
            Caps::READ | Caps::EXEC,
            |_| {},
        ));
        e
    });
    let a_ref = get_sctx(a).unwrap_or_else(|_| panic!("context"));
    let b_ref = get_sctx(b).unwrap_or_else(|_| panic!("context"));
    run_in_user_context(a_ref, &[b_ref], move || {
        let base = map_at_slot(&target, Protections::READ | Protections::EXEC);
        let ip = va(base + 0x8000);
        let a_page = va(base + 0x2008);
        let b_page = va(base + 0x3008);
        assert!(do_page_fault(a_page, MemoryAccessKind::Read, PageFaultFlags::USER, ip).is_ok());
        let got = pte(a, a_page);
        assert!(
            got.is_some_and(|p| !p.contains(Protections::EXEC)),
            "A's page is mapped for A without execute: {got:?}"
        );

        let Some(ct) = crate::thread::current_thread_ref() else {
            panic!("on a thread");
        };
        assert_eq!(
            ct.secctx.switch_context(b),
            super::super::SwitchResult::Switched
        );
        assert!(do_page_fault(b_page, MemoryAccessKind::Read, PageFaultFlags::USER, ip).is_ok());
        let fetch = do_page_fault(
            a_page,
            MemoryAccessKind::InstructionFetch,
            PageFaultFlags::USER,
            a_page,
        );
        assert!(fetch.is_ok(), "B may execute the object");

        assert_eq!(
            pte(a, b_page),
            None,
            "B's page must not show through in A's page tables (A's gate excludes it)"
        );
        let got = pte(a, a_page);
        assert!(
            !got.is_some_and(|p| p.contains(Protections::EXEC)),
            "B's execute right must not reach A's mapping: {got:?}"
        );
    });
}

#[kernel_test]
fn port_revocation_between_a_decision_and_its_install_leaves_no_mapping() {
    // The key is revoked after the engine granted the read and before the fault path
    // installs the page (the window a revocation on another CPU can land in). Its unmap then
    // finds nothing to remove; the fault path must see that the decision is no longer
    // current (the ticket, checked under the lock the unmap takes) and install nothing.
    let s = super::signed_setup(Caps::READ);
    let sctx = get_sctx(s.ctx).unwrap_or_else(|_| panic!("context"));
    let (target, ctx_id, kuid) = (s.target.clone(), s.ctx, s.key_obj);
    run_in_user_context(sctx, &[], move || {
        let base = map_at_slot(&target, Protections::READ | Protections::WRITE);
        let addr = va(base + 0x2008);
        let ip = va(base + 0x8000);
        super::super::after_next_decision(alloc::boxed::Box::new(move || {
            super::super::revoke_key(kuid)
        }));
        let first = do_page_fault(addr, MemoryAccessKind::Read, PageFaultFlags::USER, ip);
        assert!(
            first.is_ok(),
            "the fault itself returns (the access is retried)"
        );
        assert_eq!(
            pte(ctx_id, addr),
            None,
            "a grant decided before a revocation is never installed after it"
        );
        let again = do_page_fault(addr, MemoryAccessKind::Read, PageFaultFlags::USER, ip);
        assert!(
            matches!(again, Err(UpcallInfo::SecurityViolation(_))),
            "the retried access is denied"
        );
        assert_eq!(pte(ctx_id, addr), None);
    });
}

#[kernel_test]
fn port_kernel_access_to_user_memory_is_decided_as_the_threads() {
    // A kernel-mode fault (no USER flag, a kernel instruction pointer) on a user address, as a
    // system call copying from a user buffer takes: upstream maps the page with the region's
    // full protections without asking security. It must get what the thread could get, and
    // no more: here nothing (the thread's context holds no capability for the object).
    let (_, target, _) = {
        let s = super::signed_setup(Caps::READ);
        (s.key_obj, s.target, s.ctx)
    };
    let empty = context_object(None, |_| SecCtxEditor::new());
    let sctx = get_sctx(empty).unwrap_or_else(|_| panic!("context"));
    run_in_user_context(sctx, &[], move || {
        let base = map_at_slot(&target, Protections::READ | Protections::WRITE);
        let addr = va(base + 0x2008);
        let kernel_ip = va(0xffff_ffff_8010_0000);
        let copy = do_page_fault(
            addr,
            MemoryAccessKind::Read,
            PageFaultFlags::empty(),
            kernel_ip,
        );
        assert!(
            matches!(copy, Err(UpcallInfo::SecurityViolation(_))),
            "the kernel reading for a thread without rights is refused: got {copy:?}, \
             PTE {:?}",
            pte(empty, addr)
        );
        assert_eq!(pte(empty, addr), None, "and nothing is mapped");
    });
}

#[kernel_test]
fn port_revocation_unmaps_only_the_context_it_concerns() {
    // Gap 4: Twizzler keeps page tables per security context, so taking a grant away from
    // one context must leave another context's pages of the same object in place (the port
    // unmaps per context). Contexts A and B each hold their own read capability for the same
    // object; both read the same page, each into its own page tables. Revoking A's record
    // takes A's page only. Then, at the host: unmapping context B (what an edit of B's
    // context object sends) takes every page B mapped, of every object, and none of A's.
    let key = new_key();
    let target = keyed_object(key.obj, &[0x31; 64]);
    let other = keyed_object(key.obj, &[0x32; 64]);
    let mut a_record = None;
    let a = context_object(None, |ctx| {
        let cap = mint(&key, target.id(), ctx, Caps::READ, |_| {});
        a_record = Some(cap.id());
        let mut e = SecCtxEditor::new();
        e.add_cap(&cap);
        e.add_cap(&mint(&key, other.id(), ctx, Caps::READ, |_| {}));
        e
    });
    let Some(a_record) = a_record else {
        panic!("A's context was built");
    };
    let b = context_object(None, |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, target.id(), ctx, Caps::READ, |_| {}));
        e.add_cap(&mint(&key, other.id(), ctx, Caps::READ, |_| {}));
        e
    });
    let a_ref = get_sctx(a).unwrap_or_else(|_| panic!("context"));
    let b_ref = get_sctx(b).unwrap_or_else(|_| panic!("context"));
    run_in_user_context(a_ref, &[b_ref], move || {
        // Mapped writable (never through a shared page table), granted read.
        let base = map_at_slot(&target, Protections::READ | Protections::WRITE);
        let other_base = map_at_slot_n(&other, 18, Protections::READ | Protections::WRITE);
        let ip = va(base + 0x8000);
        let page = va(base + 0x2008);
        let other_page = va(other_base + 0x2008);
        let read = |addr| do_page_fault(addr, MemoryAccessKind::Read, PageFaultFlags::USER, ip);
        assert!(
            read(page).is_ok() && read(other_page).is_ok(),
            "A reads both"
        );
        let Some(ct) = crate::thread::current_thread_ref() else {
            panic!("on a thread");
        };
        assert_eq!(
            ct.secctx.switch_context(b),
            super::super::SwitchResult::Switched
        );
        assert!(
            read(page).is_ok() && read(other_page).is_ok(),
            "B reads both"
        );
        for (ctx, addr) in [(a, page), (b, page), (a, other_page), (b, other_page)] {
            assert!(pte(ctx, addr).is_some(), "mapped before the revocation");
        }

        super::super::revoke_record(a_record);
        assert_eq!(pte(a, page), None, "A's grant of the page was revoked");
        assert!(
            pte(b, page).is_some_and(|p| p.contains(Protections::READ)),
            "B's own grant of the same page must stay mapped"
        );
        assert!(
            pte(a, other_page).is_some(),
            "A's other object is untouched"
        );

        super::super::TwzHost.unmap(kernel_hooks::Unmap::Context(super::super::to_hooks_id(b)));
        assert_eq!(pte(b, page), None, "unmapping context B takes its pages");
        assert_eq!(pte(b, other_page), None, "of every object");
        assert!(pte(a, other_page).is_some(), "and none of A's");
    });
}

#[kernel_test]
fn port_a_thread_writing_its_context_is_seen_at_its_next_fault() {
    // The guide's section 5 in upstream's fault path (`ctx_write`). Context C (keyed by the
    // key, so a capability may name it as its target) holds r-- on data D, r-x on code K and
    // rw- on itself. A thread under C reads D, then reads C's header: mapped read-only,
    // though the engine grants rw-. It writes C: the write fault invalidates C (D's page
    // goes), faults the instruction's page in again (the thread edits its own context), and
    // maps C's page writable. The thread's store empties C's entry table. Its next read of D
    // faults, the engine reads C anew (re-protected first) and finds no record.
    let key = new_key();
    let data = keyed_object(key.obj, &[0x44; 64]);
    let code = keyed_object(key.obj, &[0x90; 64]);
    let c = context_object(Some(key.obj), |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, data.id(), ctx, Caps::READ, |_| {}));
        e.add_cap(&mint(&key, code.id(), ctx, Caps::READ | Caps::EXEC, |_| {}));
        e.add_cap(&mint(&key, ctx, ctx, Caps::READ | Caps::WRITE, |_| {}));
        e
    });
    let crate::obj::LookupResult::Found(c_obj) =
        crate::obj::lookup_object(c, crate::obj::LookupFlags::empty())
    else {
        panic!("the context object is in the object table");
    };
    let sctx = get_sctx(c).unwrap_or_else(|_| panic!("context"));
    run_in_user_context(sctx, &[], move || {
        let rw = Protections::READ | Protections::WRITE;
        let d_base = map_at_slot_n(&data, 20, rw);
        let k_base = map_at_slot_n(&code, 21, Protections::READ | Protections::EXEC);
        let c_base = map_at_slot_n(&c_obj, 22, rw);
        let ip = va(k_base + 0x1000);
        let d = va(d_base + 0x1008);
        // The context's bytes start past the null page: its header's entry count is at 20.
        let count = va(c_base + 0x1000 + 20);
        let user = PageFaultFlags::USER;
        assert!(do_page_fault(d, MemoryAccessKind::Read, user, ip).is_ok());
        assert!(do_page_fault(count, MemoryAccessKind::Read, user, ip).is_ok());
        let got = pte(c, count);
        assert!(
            got.is_some_and(|p| !p.contains(Protections::WRITE)),
            "a context page is mapped read-only at first, though rw- is granted: {got:?}"
        );

        let write = do_page_fault(
            count,
            MemoryAccessKind::Write,
            user | PageFaultFlags::PRESENT,
            ip,
        );
        assert!(
            write.is_ok(),
            "C's rw- on itself allows the write: {write:?}"
        );
        assert_eq!(
            pte(c, d),
            None,
            "the write's invalidation unmapped D's page"
        );
        let got = pte(c, ip);
        assert!(
            got.is_some_and(|p| p.contains(Protections::EXEC)),
            "the instruction's page was faulted in again: {got:?}"
        );
        let got = pte(c, count);
        assert!(
            got.is_some_and(|p| p.contains(Protections::WRITE)),
            "C's page is writable now: {got:?}"
        );

        // The store the write fault was for: the entry count to 0, a new generation.
        super::write_into_at(&c_obj, 20, &[0; 4]);
        super::write_into_at(&c_obj, 8, &0x5eed_0001_u64.to_le_bytes());

        let again = do_page_fault(d, MemoryAccessKind::Read, user, ip);
        assert!(
            matches!(again, Err(UpcallInfo::SecurityViolation(_))),
            "the edit removed D's record, and the next read sees it: {again:?}"
        );
        let got = pte(c, count);
        assert!(
            !got.is_some_and(|p| p.contains(Protections::WRITE)),
            "C was write-protected again before the engine read it: {got:?}"
        );
    });
}

#[kernel_test]
fn port_a_miss_under_a_context_waits_out_another_threads_write_window() {
    // The window's second half (`ctx_write`, step 2): while thread A's write to context C is
    // in its window, thread B's miss under C waits, and decides from the bytes A leaves. C
    // grants r-- on D. A opens the window (as its write fault does), starts B (a miss on D
    // under C), waits until B is held, empties C's entry table and closes the window. B must
    // be denied: without the window it reads the old bytes, is granted, and caches a grant
    // the edit removed (nothing sweeps it: the edit no longer faults).
    let key = new_key();
    let data = keyed_object(key.obj, &[0x44; 64]);
    let c = context_object(Some(key.obj), |ctx| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&mint(&key, data.id(), ctx, Caps::READ, |_| {}));
        e
    });
    let crate::obj::LookupResult::Found(c_obj) =
        crate::obj::lookup_object(c, crate::obj::LookupFlags::empty())
    else {
        panic!("the context object is in the object table");
    };
    let sctx = get_sctx(c).unwrap_or_else(|_| panic!("context"));
    let scope = ctx_write::fault_scope();
    ctx_write::open_window(&sctx);
    let held_before = ctx_write::held_reads();
    let b_done = Arc::new(AtomicBool::new(false));
    let (_, b) = run_closure_in_new_thread(Priority::USER, {
        let (b_done, data) = (b_done.clone(), data.clone());
        move || {
            let granted = reads_under(c, &data);
            b_done.store(true, Ordering::Release);
            granted
        }
    });
    while ctx_write::held_reads() == held_before {
        assert!(
            !b_done.load(Ordering::Acquire),
            "B's miss under C was decided while A's write window on C was open"
        );
        schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
    }
    // The edit A's write fault was for: the entry count to 0, a new generation.
    super::write_into_at(&c_obj, 20, &[0; 4]);
    super::write_into_at(&c_obj, 8, &0x5eed_0002_u64.to_le_bytes());
    drop(scope);
    assert!(
        !b.wait(),
        "B waited out the window and decided from the edited context: no record for D"
    );
    assert!(
        !reads_under(c, &data),
        "and nothing granted under the old bytes was cached"
    );
}

/// Whether the engine grants a read of `data`'s first page to a thread whose active context
/// is `ctx` (a decision only: nothing is mapped).
fn reads_under(ctx: ObjID, data: &ObjectRef) -> bool {
    let hooks = kernel_hooks::SecCtxMgr::new(to_hooks_id(ctx));
    let fault = Fault::new(
        to_hooks_id(data.id()),
        object_info(data),
        0x1000,
        AccessKind::Read,
    );
    matches!(ENGINE.decide(&hooks, &fault), Decision::Map { .. })
}
