//! Costs in upstream's kernel, printed as `port timing:` lines that `cargo xtask twizzler`
//! puts in its table: the engine's hit and miss, upstream's own cached check beside the hit
//! (and the same lookup behind the kernel's `Spinlock`, to show what upstream's `Mutex`
//! costs), the `kuid` read the adapter does per fault, the context lookup a grant with W
//! adds, one Ed25519 verification by our crate, and upstream's own benchmark (the ECDSA
//! verification its `bench_capability_verification` times, through upstream's
//! `twizzler_security`) in the same boot. Every figure is the median of several timed
//! blocks, read with the kernel's `Instant` (under TCG: emulated time, comparable only
//! within one boot).

use alloc::{collections::BTreeMap, sync::Arc, vec::Vec};
use core::hint::black_box;

use kernel_hooks::{Decision, Fault};
use twizzler_abi::object::{ObjID, Protections};
use twizzler_capsec::{AccessKind, Protections as Caps, SecCtxEditor};
use twizzler_kernel_macros::kernel_test;
use twizzler_security::PermsInfo;

use super::super::{ENGINE, object_info, to_hooks_id, upstream_security};
use super::{context_object, keyed_object, mint, new_key};
use crate::{instant::Instant, spinlock::Spinlock};

/// Nanoseconds per call of `f`, the median over `blocks` blocks of `per_block` calls.
fn per_call(blocks: usize, per_block: u32, mut f: impl FnMut()) -> u64 {
    let mut samples = Vec::with_capacity(blocks);
    for _ in 0..blocks {
        let start = Instant::now();
        for _ in 0..per_block {
            f();
        }
        let took = Instant::now() - start;
        samples.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX) / u64::from(per_block));
    }
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or(0)
}

/// Upstream's cached check with the kernel's `Spinlock` where upstream has its `Mutex`, for
/// reference: our own stand-in with the same steps (the active context's `Arc` cloned under
/// one lock, the cache's `BTreeMap` read under a second), so that upstream's figure less this
/// one is what its `Mutex` costs. (The kernel has no `spin` crate of its own; its `Spinlock`
/// also saves and restores the interrupt state, as the `Mutex`'s inner spinlock does.)
struct SpinlockedMgr {
    active: Spinlock<Arc<SpinlockedCtx>>,
}

/// The context of [`SpinlockedMgr`]: only the cache.
struct SpinlockedCtx {
    cache: Spinlock<BTreeMap<ObjID, PermsInfo>>,
}

impl SpinlockedMgr {
    /// The cached entry for `target` in the active context, or `default_prots` alone (what
    /// upstream grants on a miss in a context without an object).
    fn check(&self, target: ObjID, default_prots: Protections) -> PermsInfo {
        let active = self.active.lock().clone();
        let cached = active.cache.lock().get(&target).copied();
        cached.unwrap_or_else(|| PermsInfo::new(ObjID::new(0), default_prots, Protections::empty()))
    }
}

#[kernel_test]
fn port_timings_in_upstreams_kernel() {
    let key = new_key();
    let target = keyed_object(key.obj, &[0x66; 64]);
    let mut cap = None;
    let ctx = context_object(None, |ctx| {
        let c = mint(&key, target.id(), ctx, Caps::READ, |_| {});
        cap = Some(c);
        let mut e = SecCtxEditor::new();
        e.add_cap(&c);
        e
    });
    let Some(cap) = cap else {
        panic!("the context was built");
    };
    let mgr = kernel_hooks::SecCtxMgr::new(to_hooks_id(ctx));
    let t = to_hooks_id(target.id());

    // The kuid as the adapter reads it on every fault today: check_id (cached by upstream)
    // and read_meta.
    let kuid = per_call(15, 2_000, || {
        black_box(object_info(black_box(&target)));
    });

    // A hit with the object's metadata already in hand (what a host caching the kuid beside
    // check_id's result pays), and a hit as the adapter does it (the kuid read included).
    let info = object_info(&target);
    let fault = Fault::new(t, info, 0x1000, AccessKind::Read);
    assert!(matches!(ENGINE.decide(&mgr, &fault), Decision::Map { .. }));
    let hit = per_call(15, 20_000, || {
        let _ = black_box(ENGINE.decide(black_box(&mgr), black_box(&fault)));
    });

    // Upstream's cached check, on upstream's own code (its `security.rs` at the pinned commit,
    // which the xtask copies into the checkout as `security/upstream_security.rs`), called as
    // upstream's fault path calls it (`check_security`): `check_active_access` with the
    // object's default protections, then the same comparison. It locks upstream's kernel
    // `Mutex` twice, to clone the active context's `Arc` and to read the cache. The context
    // has no object behind it (it never caches a lookup itself), so the entry is put in by
    // the copy's one addition (`patches/upstream-copy/`); the entry names our context object,
    // which an uncached answer (upstream's `KERNEL_SCTX`) would not.
    let default_prot = target.check_id().1;
    let access_kind = Protections::READ;
    let access_info = upstream_security::AccessInfo {
        target_id: target.id(),
        access_kind,
        // Upstream's lookup reads the target only; the fault path's exec fields are unused.
        exec_id: None,
        exec_off: 0,
    };
    let cached = PermsInfo::new(ctx, Protections::READ, Protections::empty());
    let up_ctx = Arc::new(upstream_security::SecurityContext::new(None));
    up_ctx.port_insert_cached(target.id(), cached);
    let up_mgr = upstream_security::SecCtxMgr::new(up_ctx);
    let first = up_mgr.check_active_access(&access_info, default_prot);
    assert!(
        first.ctx == ctx && first.provide & !first.restrict & access_kind == access_kind,
        "upstream's check answers from its cache and grants"
    );
    let upstream_hit = per_call(15, 20_000, || {
        let perms = black_box(&up_mgr).check_active_access(black_box(&access_info), default_prot);
        black_box(perms.provide & !perms.restrict & access_kind == access_kind);
    });

    // The same steps behind the kernel's `Spinlock` ([`SpinlockedMgr`]).
    let spin_mgr = SpinlockedMgr {
        active: Spinlock::new(Arc::new(SpinlockedCtx {
            cache: Spinlock::new(BTreeMap::from([(target.id(), cached)])),
        })),
    };
    let spinlocked = per_call(15, 20_000, || {
        let perms = black_box(&spin_mgr).check(black_box(target.id()), default_prot);
        black_box(perms.provide & !perms.restrict & access_kind == access_kind);
    });
    let hit_with_kuid = per_call(15, 2_000, || {
        let fault = Fault::new(t, object_info(black_box(&target)), 0x1000, AccessKind::Read);
        let _ = black_box(ENGINE.decide(&mgr, &fault));
    });

    // What a grant with W adds to a fault: the question whether its object is a context the
    // kernel has mapped (`context_of`, one spin-locked table lookup); for a data object the
    // answer is no, as here.
    let ctx_lookup = per_call(15, 20_000, || {
        black_box(super::super::context_of(black_box(target.id())));
    });

    // A miss: the context's cached decisions dropped, then one decision (one verification).
    let mut misses = Vec::new();
    for _ in 0..15 {
        let _ = ENGINE.invalidate_ctx(to_hooks_id(ctx));
        let start = Instant::now();
        let d = ENGINE.decide(&mgr, &fault);
        let took = Instant::now() - start;
        assert!(matches!(d, Decision::Map { .. }), "the miss grants");
        misses.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }
    misses.sort_unstable();
    let miss = misses.get(misses.len() / 2).copied().unwrap_or(0);

    // One Ed25519 verification by our crate.
    let vk = key.sk.verifying_key();
    let verify = per_call(15, 20, || {
        assert!(black_box(&cap).verify_signature(&vk).is_ok());
    });

    // Upstream's own benchmark's operation: an ECDSA (P-256) capability verified by
    // upstream's twizzler_security.
    let mut rand_bytes = [0u8; twizzler_security::MAX_KEY_SIZE];
    assert!(crate::random::getrandom(&mut rand_bytes, false), "entropy");
    let (up_sk, up_vk) = twizzler_security::SigningKey::new_kernel_keypair(
        &twizzler_security::SigningScheme::Ecdsa,
        rand_bytes,
    )
    .unwrap_or_else(|_| panic!("upstream key pair"));
    let up_cap = twizzler_security::Cap::new(
        0x123.into(),
        0x100.into(),
        twizzler_abi::object::Protections::all(),
        &up_sk,
        Default::default(),
        Default::default(),
        Default::default(),
    )
    .unwrap_or_else(|_| panic!("upstream capability"));
    let upstream_verify = per_call(15, 10, || {
        assert!(black_box(&up_cap).verify_sig(&up_vk).is_ok());
    });

    logln!("port timing: hit, kuid in hand: {} ns", hit);
    logln!(
        "port timing: upstream's cached check (check_active_access, upstream's kernel Mutex): {} ns",
        upstream_hit
    );
    logln!(
        "port timing: the same lookup behind the kernel's Spinlock (for reference): {} ns",
        spinlocked
    );
    // The ratio is what compares across boots (TCG's clock rate differs between boots).
    let ratio = upstream_hit.saturating_mul(100) / hit.max(1);
    logln!(
        "port timing: upstream's cached check against our hit: {}.{:02}x",
        ratio / 100,
        ratio % 100
    );
    logln!(
        "port timing: hit, kuid read per fault (Fault::new; the adapter now uses Fault::lazy): {} ns",
        hit_with_kuid
    );
    logln!("port timing: kuid read (check_id + read_meta): {} ns", kuid);
    logln!(
        "port timing: is the object a context (asked by a grant with W): {} ns",
        ctx_lookup
    );
    logln!("port timing: miss (one Ed25519 verification): {} ns", miss);
    logln!("port timing: Ed25519 verify, our crate: {} ns", verify);
    logln!(
        "port timing: upstream's benchmark (P-256 verify_sig, upstream's crate): {} ns",
        upstream_verify
    );
}
