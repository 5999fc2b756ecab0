//! In-kernel tests of the port (twizzler-port): the engine with Twizzler's kernel as its host.
//!
//! Every test's name starts with `port_`, which is how `cargo xtask twizzler` tells ours from
//! upstream's in the runner's log (the runner prints bare function names).
//!
//! These drive `ENGINE.decide` and `check_fault` directly, with the kernel's object table,
//! kernel mappings and clock behind them. Tests through the real fault handler on a user
//! memory context are not written yet (README, "Status").

use alloc::sync::Arc;

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
use crate::{arch::VirtAddr, obj::Object};

fn no_key(prots: Protections) -> ObjectInfo {
    ObjectInfo {
        kuid: None,
        default_prots: to_hooks_prots(prots),
    }
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
fn port_check_fault_keeps_upstreams_kernel_rules() {
    // Kernel-mode ip, or a thread in the kernel's context: everything (upstream's rule; the
    // README's gap 7 says what should change).
    let obj = Arc::new(Object::new_kernel());
    crate::obj::register_object(obj.clone());
    let kernel_ip = VirtAddr::new(0xffff_ffff_8010_0000).unwrap_or_else(|_| panic!("addr"));
    let user_addr = VirtAddr::new(0x4000_1000).unwrap_or_else(|_| panic!("addr"));
    let user_ip = VirtAddr::new(0x4000_0000).unwrap_or_else(|_| panic!("addr"));
    let user_ctx = ObjID::new(0xdead_0005);
    for (sctx, ip) in [(user_ctx, kernel_ip), (KERNEL_SCTX, user_ip)] {
        let perms = check_fault(&obj, 0x1000, sctx, user_addr, MemoryAccessKind::Write, ip);
        assert!(matches!(perms, Ok(p) if p.provide == Protections::all()));
    }
    let _ = SecurityContext::new(None);
}
