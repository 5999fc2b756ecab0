//! Costs in upstream's kernel, printed as `port timing:` lines that `cargo xtask twizzler`
//! puts in its table: the engine's hit and miss, the `kuid` read the adapter does per fault,
//! the context lookup a grant with W adds,
//! one Ed25519 verification by our crate, and upstream's own benchmark (the ECDSA
//! verification its `bench_capability_verification` times, through upstream's
//! `twizzler_security`) in the same boot. Every figure is the median of several timed
//! blocks, read with the kernel's `Instant` (under TCG: emulated time, comparable only
//! within one boot).

use alloc::vec::Vec;
use core::hint::black_box;

use kernel_hooks::{Decision, Fault};
use twizzler_capsec::{AccessKind, Protections as Caps, SecCtxEditor};
use twizzler_kernel_macros::kernel_test;

use super::super::{ENGINE, object_info, to_hooks_id};
use super::{context_object, keyed_object, mint, new_key};
use crate::instant::Instant;

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
