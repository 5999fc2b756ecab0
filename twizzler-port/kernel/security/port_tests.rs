//! In-kernel tests of the port (twizzler-port): the engine with Twizzler's kernel as its host.
//!
//! Every test's name starts with `port_`, which is how `cargo xtask twizzler` tells ours from
//! upstream's in the runner's log (the runner prints bare function names).
//!
//! These drive `ENGINE.decide`, `check_fault` and the real fault handler (`do_page_fault`) on
//! a user memory context, with the kernel's object table, kernel mappings, clock and timer
//! behind them. `policy.rs` checks the rule's parts through the engine; `fault_path.rs` checks
//! what reaches the page tables; `timing.rs` prints the costs.

use alloc::{boxed::Box, sync::Arc};

use kernel_hooks::{Decision, Fault, Host, ObjectInfo, Violation};
use twizzler_abi::{
    object::{ObjID, Protections},
    upcall::{MemoryAccessKind, UpcallInfo},
};
use twizzler_capsec::AccessKind;
use twizzler_kernel_macros::kernel_test;

use super::{
    ENGINE, KERNEL_SCTX, SecCtxMgr, SecurityContext, TwzHost, check_fault, decide_for, revoke_key,
    to_abi_id, to_abi_prots, to_hooks_id, to_hooks_prots,
};
use twizzler_abi::{
    device::CacheType,
    meta::{MetaFlags, MetaInfo},
    object::{MAX_SIZE, NULLPAGE_SIZE},
    syscall::{LifetimeType, MapFlags},
};
use twizzler_capsec::{Cap, CapGrant, SecCtxEditor, SigningKey, SigningScheme};
use twizzler_rt_abi::object::Nonce;

use super::{SecurityContextRef, get_sctx};
use crate::{
    arch::{VirtAddr, context::ArchContext},
    condvar::CondVar,
    memory::{
        context::{
            Context, KernelMemoryContext, ObjectContextInfo, UserContext, kernel_context,
            virtmem::{PageFaultFlags, Slot, fault::do_page_fault},
        },
        pagetables::MappingCursor,
    },
    obj::{Object, ObjectRef, id::calculate_new_id},
    processor::sched::schedule_new_thread,
    spinlock::Spinlock,
    thread::{Thread, current_memory_context, priority::Priority},
};

mod conformance;
mod fault_path;
mod lifetimes;
mod policy;
mod timing;

fn no_key(prots: Protections) -> ObjectInfo {
    ObjectInfo::new(None, to_hooks_prots(prots))
}

#[kernel_test]
fn port_ids_and_protections_convert_both_ways() {
    for raw in [
        0u128,
        1,
        0x1234_5678_9abc_def0_1122_3344_5566_7788,
        u128::MAX,
    ] {
        let id = ObjID::new(raw);
        assert_eq!(to_abi_id(to_hooks_id(id)), id);
    }
    for bits in 0u16..8 {
        let p = Protections::from_bits_truncate(bits);
        assert_eq!(to_abi_prots(to_hooks_prots(p)), p);
        assert_eq!(to_hooks_prots(p).bits(), bits);
    }
}

#[kernel_test]
fn port_kernel_thread_gets_every_right_but_the_null_page() {
    let mgr = SecCtxMgr::new_kernel();
    assert_eq!(mgr.active_id(), KERNEL_SCTX);
    let target = to_hooks_id(ObjID::new(0x4242));
    for kind in [AccessKind::Read, AccessKind::Write, AccessKind::Exec] {
        let fault = Fault::new(target, no_key(Protections::empty()), 0x2000, kind);
        match ENGINE.decide(mgr.hooks(), &fault) {
            Decision::Map { prots, .. } => {
                assert!(prots.contains(kind.required()), "{kind:?} got {prots:?}")
            }
            Decision::Violation(v) => panic!("kernel thread denied {kind:?}: {v:?}"),
        }
    }
    let null = Fault::new(target, no_key(Protections::all()), 0x10, AccessKind::Read);
    assert!(matches!(
        ENGINE.decide(mgr.hooks(), &null),
        Decision::Violation(Violation::NullPage { .. })
    ));
}

#[kernel_test]
fn port_context_the_kernel_does_not_know_is_a_violation() {
    // A thread whose active context is an id with no mapped context behind it: the host's
    // `with_ctx` finds nothing, and the engine denies every access, even one the object's
    // default protections would allow (upstream granted the defaults here).
    let ctx_id = to_hooks_id(ObjID::new(0xdead_0001));
    let hooks = kernel_hooks::SecCtxMgr::new(ctx_id);
    let target = to_hooks_id(ObjID::new(0xdead_0002));
    for default in [Protections::empty(), Protections::READ] {
        let fault = Fault::new(target, no_key(default), 0x3000, AccessKind::Read);
        match ENGINE.decide(&hooks, &fault) {
            Decision::Violation(Violation::ContextMissing(c)) => assert_eq!(c, ctx_id),
            other => panic!("default {default:?}: expected ContextMissing, got {other:?}"),
        }
    }
}

#[kernel_test]
fn port_host_sees_a_real_object_and_its_default_protections() {
    // A kernel object made by the kernel's own object code: the host looks it up in the
    // object table and reads its metadata.
    let obj = Arc::new(Object::new_kernel());
    crate::obj::register_object(obj.clone());
    let info = TwzHost.object(to_hooks_id(obj.id()));
    let Some(info) = info else {
        panic!("the host did not find a registered object");
    };
    let (_, default_prot) = obj.check_id();
    assert_eq!(info.default_prots, to_hooks_prots(default_prot));
    assert!(
        TwzHost
            .object(to_hooks_id(ObjID::new(0xdead_beef_0003)))
            .is_none(),
        "an id with no object must not be found"
    );
}

#[kernel_test]
fn port_revoked_key_is_in_the_hosts_set() {
    let kuid = ObjID::new(0x5eed_0001);
    assert!(!TwzHost.key_revoked(to_hooks_id(kuid)));
    revoke_key(kuid);
    assert!(TwzHost.key_revoked(to_hooks_id(kuid)));
    assert!(!TwzHost.key_revoked(to_hooks_id(ObjID::new(0x5eed_0002))));
}

#[kernel_test]
fn port_clock_is_monotonic() {
    let a = TwzHost.monotonic_ns();
    let b = TwzHost.monotonic_ns();
    assert!(b >= a, "clock went back: {a} then {b}");
    assert!(
        ENGINE.now() >= b,
        "the engine's time is the host's plus its offset"
    );
}

#[kernel_test]
fn port_fault_path_denies_a_user_context_without_rights() {
    // The fault path's decision (decide_for, which check_fault calls with the faulting
    // thread's contexts) for a user context the kernel has no object for: the engine cannot
    // read it, so a read of a real object without default rights is a SecurityViolation
    // upcall naming the address and the access.
    let obj = Arc::new(Object::new_kernel());
    crate::obj::register_object(obj.clone());
    let user_ctx = ObjID::new(0xdead_0004);
    let hooks = kernel_hooks::SecCtxMgr::new(to_hooks_id(user_ctx));
    let addr = VirtAddr::new(0x4000_1008).unwrap_or_else(|_| panic!("canonical address"));
    let res = decide_for(&hooks, &obj, 0x1008, addr, MemoryAccessKind::Read);
    match res {
        Err(UpcallInfo::SecurityViolation(v)) => {
            assert_eq!(v.address, addr.raw());
            assert_eq!(v.access_kind, MemoryAccessKind::Read);
        }
        Err(_) => panic!("wrong upcall"),
        Ok(p) => panic!("granted {:?} without a context", p.provide),
    }
}

#[kernel_test]
fn port_check_fault_grants_the_kernels_context_everything_and_decides_the_rest() {
    // A thread in the kernel's context gets every right (upstream's rule, kept). A fault in
    // a user context with a kernel instruction pointer (the kernel copying user memory) is no
    // longer granted by the pointer alone: it is decided as the thread's access
    // (fault_path.rs has the same through the real fault handler on a user thread).
    let obj = Arc::new(Object::new_kernel());
    crate::obj::register_object(obj.clone());
    let user_addr = VirtAddr::new(0x4000_1000).unwrap_or_else(|_| panic!("addr"));
    let user_ip = VirtAddr::new(0x4000_0000).unwrap_or_else(|_| panic!("addr"));
    let perms = check_fault(
        &obj,
        0x1000,
        KERNEL_SCTX,
        user_addr,
        MemoryAccessKind::Write,
        user_ip,
    );
    assert!(matches!(perms, Ok(p) if p.provide == Protections::all()));
    let user_ctx = to_hooks_id(ObjID::new(0xdead_0005));
    let hooks = kernel_hooks::SecCtxMgr::new(user_ctx);
    assert!(
        decide_for(&hooks, &obj, 0x1000, user_addr, MemoryAccessKind::Write).is_err(),
        "a user context the kernel has no object for grants nothing, whoever asks"
    );
    let _ = SecurityContext::new(None);
}

/// A kernel object with `bytes` written at its base (past the null page), registered in the
/// object table.
fn object_with(id: Option<(ObjID, MetaInfo)>, bytes: &[u8]) -> ObjectRef {
    let obj = match id {
        Some((id, meta)) => {
            let obj = Arc::new(Object::new(id, LifetimeType::Volatile, &[]));
            assert!(obj.write_meta(meta, true), "metadata written");
            obj
        }
        None => Arc::new(Object::new_kernel()),
    };
    crate::obj::register_object(obj.clone());
    write_into(&obj, bytes);
    obj
}

/// Writes `bytes` at the base of `obj` (past the null page) through a kernel mapping of it.
fn write_into(obj: &ObjectRef, bytes: &[u8]) {
    write_into_at(obj, 0, bytes);
}

/// Writes `bytes` at byte `at` past the base of `obj` (past the null page) through a kernel
/// mapping of it.
fn write_into_at(obj: &ObjectRef, at: usize, bytes: &[u8]) {
    let handle = kernel_context().insert_kernel_object::<u8>(ObjectContextInfo::new(
        obj.clone(),
        Protections::READ | Protections::WRITE,
        CacheType::WriteBack,
        MapFlags::empty(),
    ));
    let base = handle
        .start_addr()
        .offset(NULLPAGE_SIZE + at)
        .unwrap_or_else(|_| panic!("object base"));
    assert!(at + bytes.len() < MAX_SIZE / 2);
    // SAFETY: the handle maps the object's whole slot read-write in the kernel context until
    // it drops at the end of this function, and the bytes (from `at`) lie within the slot
    // (checked above). A context being rewritten while the engine reads it is what `CtxBytes::shared`
    // is for: the engine reads with atomic byte loads, never through a reference.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), base.as_mut_ptr::<u8>(), bytes.len());
    }
}

/// A fresh object whose id verifies against key object `kuid` (so the engine trusts its
/// `kuid`), holding `bytes`.
fn keyed_object(kuid: ObjID, bytes: &[u8]) -> ObjectRef {
    let mut nonce = [0u8; 16];
    assert!(crate::random::getrandom(&mut nonce, false), "entropy");
    let nonce = u128::from_ne_bytes(nonce);
    let id = calculate_new_id(kuid, MetaFlags::default(), nonce, Protections::empty());
    let meta = MetaInfo {
        nonce: Nonce(nonce),
        kuid,
        default_prot: Protections::empty(),
        flags: MetaFlags::default(),
        fotcount: 0,
        extcount: 0,
    };
    let obj = object_with(Some((id, meta)), bytes);
    assert!(obj.check_id().0, "the id verifies against its kuid");
    obj
}

/// An Ed25519 signing key from the kernel's entropy and its key object.
struct Key {
    sk: SigningKey,
    obj: ObjID,
}

fn new_key() -> Key {
    let mut entropy = [0u8; 32];
    assert!(crate::random::getrandom(&mut entropy, false), "entropy");
    let sk = SigningKey::from_entropy(SigningScheme::Ed25519, &entropy)
        .unwrap_or_else(|e| panic!("key from entropy: {e:?}"));
    let obj = object_with(None, &sk.verifying_key().encode()).id();
    Key { sk, obj }
}

/// A security context object (keyed by `kuid` when it must sign delegations), its bytes
/// built by `build` once its id is known (a capability names its context), mapped for the
/// engine as the attach syscall would (`get_sctx`).
fn context_object(kuid: Option<ObjID>, build: impl FnOnce(ObjID) -> SecCtxEditor) -> ObjID {
    let obj = match kuid {
        Some(kuid) => keyed_object(kuid, &[]),
        None => object_with(None, &[]),
    };
    let bytes = build(obj.id())
        .encode()
        .unwrap_or_else(|e| panic!("encode context: {e:?}"));
    write_into(&obj, &bytes);
    let id = obj.id();
    assert!(get_sctx(id).is_ok(), "context mapped");
    id
}

/// Mints a capability for `target` held by context `ctx`, after `adjust` sets its gate or
/// expiry.
fn mint(
    key: &Key,
    target: ObjID,
    ctx: ObjID,
    prots: twizzler_capsec::Protections,
    adjust: impl FnOnce(&mut CapGrant),
) -> Cap {
    let mut grant = CapGrant::new(to_hooks_id(target), to_hooks_id(ctx), prots);
    adjust(&mut grant);
    Cap::mint(grant, &key.sk).unwrap_or_else(|e| panic!("mint: {e:?}"))
}

/// A signing key and its key object, a target object whose id verifies against that key
/// object (so the engine trusts its `kuid`), and a context object holding `prots` for the
/// target signed by the key.
struct Signed {
    key_obj: ObjID,
    target: ObjectRef,
    ctx: ObjID,
}

fn signed_setup(prots: twizzler_capsec::Protections) -> Signed {
    let key = new_key();
    let target = keyed_object(key.obj, &[0x5a; 64]);
    let ctx = context_object(None, |ctx| {
        let mut editor = SecCtxEditor::new();
        editor.add_cap(&mint(&key, target.id(), ctx, prots, |_| {}));
        editor
    });
    Signed {
        key_obj: key.obj,
        target,
        ctx,
    }
}

#[kernel_test]
fn port_signed_capability_grants_exactly_its_rights() {
    let s = signed_setup(twizzler_capsec::Protections::READ);
    let hooks = kernel_hooks::SecCtxMgr::new(to_hooks_id(s.ctx));
    let addr = VirtAddr::new(0x4000_2000).unwrap_or_else(|_| panic!("addr"));
    let read = decide_for(&hooks, &s.target, 0x2000, addr, MemoryAccessKind::Read);
    match read {
        Ok(p) => {
            assert_eq!(
                p.provide,
                Protections::READ,
                "exactly the capability's rights"
            );
            assert_eq!(p.ctx, s.ctx);
        }
        Err(_) => panic!("a read the capability grants was denied"),
    }
    for cause in [MemoryAccessKind::Write, MemoryAccessKind::InstructionFetch] {
        assert!(
            matches!(
                decide_for(&hooks, &s.target, 0x2000, addr, cause),
                Err(UpcallInfo::SecurityViolation(_))
            ),
            "{cause:?} is not granted by a read capability"
        );
    }
    // The null page is never granted.
    assert!(decide_for(&hooks, &s.target, 0x10, addr, MemoryAccessKind::Read).is_err());
    // A second read is a cache hit.
    let before = ENGINE.stats();
    assert!(decide_for(&hooks, &s.target, 0x2000, addr, MemoryAccessKind::Read).is_ok());
    let after = ENGINE.stats();
    assert_eq!(after.hits, before.hits + 1, "the repeat is a hit");
    assert_eq!(after.verifies, before.verifies, "and verifies nothing");
}

#[kernel_test]
fn port_revoking_the_key_denies_at_the_next_fault() {
    let s = signed_setup(twizzler_capsec::Protections::READ | twizzler_capsec::Protections::WRITE);
    let hooks = kernel_hooks::SecCtxMgr::new(to_hooks_id(s.ctx));
    let addr = VirtAddr::new(0x4000_3000).unwrap_or_else(|_| panic!("addr"));
    assert!(decide_for(&hooks, &s.target, 0x3000, addr, MemoryAccessKind::Write).is_ok());
    revoke_key(s.key_obj);
    let fault = Fault::new(
        to_hooks_id(s.target.id()),
        super::object_info(&s.target),
        0x3000,
        AccessKind::Write,
    );
    match ENGINE.decide(&hooks, &fault) {
        Decision::Violation(Violation::Denied { ctx, .. }) => assert_eq!(ctx, to_hooks_id(s.ctx)),
        other => panic!("after revoking the key: {other:?}"),
    }
}

#[kernel_test]
fn port_a_context_for_another_holder_grants_nothing() {
    // The capability names context A; a thread whose active context is B (holding the same
    // bytes would need B's id in the capability) gets nothing from it.
    let s = signed_setup(twizzler_capsec::Protections::READ);
    let other = signed_setup(twizzler_capsec::Protections::READ);
    let hooks = kernel_hooks::SecCtxMgr::new(to_hooks_id(other.ctx));
    let addr = VirtAddr::new(0x4000_4000).unwrap_or_else(|_| panic!("addr"));
    assert!(
        decide_for(&hooks, &s.target, 0x4000, addr, MemoryAccessKind::Read).is_err(),
        "B's context holds no capability for A's target"
    );
    assert!(decide_for(&hooks, &other.target, 0x4000, addr, MemoryAccessKind::Read).is_ok());
}

/// The job a thread with a user memory context runs (one at a time: tests run in sequence).
static JOB: Spinlock<Option<Box<dyn FnOnce() + Send>>> = Spinlock::new(None);
static JOB_DONE: Spinlock<bool> = Spinlock::new(false);
static JOB_SIGNAL: CondVar = CondVar::new();

extern "C" fn job_trampoline() {
    let job = JOB.lock().take();
    if let Some(job) = job {
        job();
    }
    *JOB_DONE.lock() = true;
    JOB_SIGNAL.signal();
    // The thread exits; its memory context goes with its last reference (the reaped
    // thread's), and its page tables are freed then.
    crate::thread::exit(0);
}

/// Runs `job` on a new thread whose memory context is a fresh user context and whose active
/// security context is `sctx`, and waits for it. The thread then exits, and its memory context
/// goes with it. A failed assertion in `job` panics the kernel, which fails the run.
fn run_in_user_context(
    sctx: SecurityContextRef,
    attached: &[SecurityContextRef],
    job: impl FnOnce() + Send + 'static,
) {
    *JOB_DONE.lock() = false;
    *JOB.lock() = Some(Box::new(job));
    // As the attach syscall does: the memory context gets page tables for each security
    // context before a thread with it attached runs in it.
    let sctx_id = sctx.id();
    let mem = Arc::new(Context::new());
    mem.register_sctx(sctx_id, ArchContext::new());
    super::note_sctx_in(&mem, sctx.id());
    let secctx = SecCtxMgr::new(sctx);
    for other in attached {
        mem.register_sctx(other.id(), ArchContext::new());
        super::note_sctx_in(&mem, other.id());
        assert!(secctx.attach(other.clone()).is_ok(), "attach");
    }
    let roots: alloc::vec::Vec<u64> = core::iter::once(sctx_id)
        .chain(attached.iter().map(|a| a.id()))
        .chain(core::iter::once(KERNEL_SCTX))
        .map(|id| mem.with_arch(id, |arch| arch.with_mapper(|m| m.root_address().raw())))
        .collect();
    let mut thread = Thread::new(Some(mem), None, Priority::USER);
    thread.secctx = secctx;
    // SAFETY: the thread is new and not yet scheduled; `job_trampoline` never returns (it
    // ends in `exit`), as `init` requires of its entry.
    unsafe { thread.init(job_trampoline) };
    schedule_new_thread(thread);
    loop {
        let done = JOB_DONE.lock();
        if *done {
            break;
        }
        JOB_SIGNAL.wait(done);
    }
    // This kernel thread has no memory context of its own: it must not run on the job's page
    // tables, which are freed once the exited thread is reaped. A CPU left on a freed root
    // runs on whatever the frame holds next (upstream switched only to threads with a memory
    // context; `0008` switches kernel threads to the kernel's tables).
    // SAFETY: reading CR3 in ring 0 has no side effect.
    let cr3 = unsafe { x86::controlregs::cr3() } & !0xfff;
    assert!(
        !roots.contains(&cr3),
        "a kernel thread runs on the exited job's page tables (CR3 {cr3:#x})"
    );
}

/// The protections of the page-table entry for `addr` under security context `sctx` in the
/// current memory context, if one is present.
fn pte(sctx: ObjID, addr: VirtAddr) -> Option<Protections> {
    let ctx = current_memory_context()?;
    let cursor = MappingCursor::new(addr.align_down(0x1000u64).ok()?, 0x1000);
    ctx.with_arch(sctx, |arch| {
        arch.readmap(cursor, |mut r| r.next().map(|m| m.settings().perms()))
    })
}

#[kernel_test]
fn port_real_fault_maps_exactly_the_granted_rights_and_revocation_unmaps() {
    // The real fault handler (do_page_fault: region lookup, our check_fault, the object's
    // pages, the page tables of the security context) on a user memory context, for a
    // user-mode access to an object mapped read-write-execute whose capability grants read
    // only. The page-table entry is read back.
    let s = signed_setup(twizzler_capsec::Protections::READ);
    let sctx = get_sctx(s.ctx).unwrap_or_else(|_| panic!("context"));
    let (target, ctx_id, kuid) = (s.target.clone(), s.ctx, s.key_obj);
    run_in_user_context(sctx, &[], move || {
        let Some(ctx) = current_memory_context() else {
            panic!("the job runs in a user memory context");
        };
        let Some(ct) = crate::thread::current_thread_ref() else {
            panic!("on a thread");
        };
        assert_eq!(ct.secctx.active_id(), ctx_id);
        let base = (16 * MAX_SIZE) as u64;
        let slot_addr = VirtAddr::new(base).unwrap_or_else(|_| panic!("addr"));
        let slot = Slot::try_from(slot_addr).unwrap_or_else(|_| panic!("slot"));
        ctx.insert_object(
            slot,
            &ObjectContextInfo::new(
                target.clone(),
                Protections::READ | Protections::WRITE | Protections::EXEC,
                CacheType::WriteBack,
                MapFlags::empty(),
            ),
        )
        .unwrap_or_else(|_| panic!("insert"));
        let addr = VirtAddr::new(base + 0x2008).unwrap_or_else(|_| panic!("addr"));
        let ip = VirtAddr::new(base + 0x3000).unwrap_or_else(|_| panic!("addr"));
        assert_eq!(pte(ctx_id, addr), None, "nothing mapped before the fault");

        let read = do_page_fault(addr, MemoryAccessKind::Read, PageFaultFlags::USER, ip);
        assert!(read.is_ok(), "the capability grants the read");
        let got = pte(ctx_id, addr);
        assert!(
            got.is_some_and(|p| p.contains(Protections::READ) && !p.contains(Protections::WRITE)),
            "PTE must be readable and not writable in an RWX region: {got:?}"
        );

        let flags = PageFaultFlags::USER | PageFaultFlags::PRESENT;
        let write = do_page_fault(addr, MemoryAccessKind::Write, flags, ip);
        assert!(
            matches!(write, Err(UpcallInfo::SecurityViolation(_))),
            "a write to a read capability is a security violation"
        );
        assert!(!pte(ctx_id, addr).is_some_and(|p| p.contains(Protections::WRITE)));

        revoke_key(kuid);
        assert_eq!(pte(ctx_id, addr), None, "revocation unmapped the page");
        let again = do_page_fault(addr, MemoryAccessKind::Read, PageFaultFlags::USER, ip);
        assert!(
            matches!(again, Err(UpcallInfo::SecurityViolation(_))),
            "after revocation the read is denied"
        );
        assert_eq!(pte(ctx_id, addr), None);
    });
}
