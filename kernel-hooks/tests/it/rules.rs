//! The permission rule as the engine enforces it, one case per rule, with the reason for
//! every denial.

use crate::common::*;
use kernel_hooks::{Decision, DenyCause, SecCtxMgr, Violation};
use twizzler_capsec::{
    AccessKind::{Exec, Read, Write},
    CapGrant, CtxFlags, Del, DelGrant, Expiry, Gate, KeyLookupError, Protections, SecCtxEditor,
    Verdict, VerifyError,
};

const PAGE: u64 = 4096;

fn cause(v: Violation) -> DenyCause {
    match v {
        Violation::Denied { cause, .. } => cause,
        other => panic!("expected Denied, got {other:?}"),
    }
}

#[test]
fn read_allowed_write_denied_by_read_only_cap() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    w.write_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);

    let d = w.decide(&t, FILE, 2 * PAGE, Read);
    assert_eq!(mapped(&d), Some(R));
    let v = violation(w.decide(&t, FILE, 2 * PAGE, Write));
    assert_eq!(
        v,
        Violation::Denied {
            ctx: CTX_A,
            needed: RW,
            provided: R,
            cause: DenyCause::Record(Verdict::NoUsefulRights)
        }
    );
    assert!(v.to_string().contains("needs"), "{v}");
}

#[test]
fn no_record_denies_with_reason_and_default_prots_grant() {
    let w = World::new();
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        cause(violation(w.decide(&t, FILE, PAGE, Read))),
        DenyCause::NoRecord
    );
    // Default protections grant without any record.
    w.host().set_object(FILE, Some(K_FILE), R);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Write),
        Decision::Violation(_)
    ));
}

#[test]
fn data_gate_inside_outside_and_partial_page() {
    let w = World::new();
    // Bytes 0x2000..0x4800: pages 2 and 3 whole, page 4 partly.
    let mut g = CapGrant::new(FILE, CTX_A, RW);
    g.gate = Gate::new(0x2000, 0x2800, 1).unwrap();
    let cap = w.cap_with(g);
    w.write_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);

    match w.decide(&t, FILE, 0x2010, Write) {
        Decision::Map { prots, pages, .. } => {
            assert_eq!(prots, RW);
            assert_eq!(pages, 2..4, "only the pages wholly inside the gate");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mapped(&w.decide(&t, FILE, 0x3fff, Read)), Some(RW));
    assert_eq!(
        cause(violation(w.decide(&t, FILE, 0x4000, Read))),
        DenyCause::Record(Verdict::OutsideGate),
        "page 4 is only partly inside the gate"
    );
    assert_eq!(
        cause(violation(w.decide(&t, FILE, 0x1000, Read))),
        DenyCause::Record(Verdict::OutsideGate)
    );
}

#[test]
fn per_object_mask_with_override_and_global_mask() {
    let w = World::new();
    let file = w.cap(FILE, CTX_A, RW);
    let other = w.cap(OTHER, CTX_A, RW);
    let mut e = ctx_with(&[&file, &other]);
    e.set_global_mask(R);
    // FILE: permmask RW, ovrmask W: the global mask's loss of W is overridden.
    e.set_mask(FILE, RW, W);
    w.write_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);

    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Write)), Some(RW));
    assert_eq!(
        cause(violation(w.decide(&t, OTHER, PAGE, Write))),
        DenyCause::Masked { removed: W },
        "the global mask removes W from OTHER"
    );
    assert_eq!(mapped(&w.decide(&t, OTHER, PAGE, Read)), Some(R));

    // A permmask of R takes W away even with an override.
    e.set_mask(FILE, R, W);
    w.write_ctx(CTX_A, &e);
    assert_eq!(
        cause(violation(w.decide(&t, FILE, PAGE, Write))),
        DenyCause::Masked { removed: W }
    );
}

#[test]
fn expired_cap_denied() {
    let w = World::new();
    let mut g = CapGrant::new(FILE, CTX_A, R);
    g.expires = Expiry::from_raw(T0 - 1);
    let cap = w.cap_with(g);
    w.write_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(matches!(
        cause(violation(w.decide(&t, FILE, PAGE, Read))),
        DenyCause::Record(Verdict::Invalid(VerifyError::Expired { .. }))
    ));
}

#[test]
fn tampered_cap_denied() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    let mut bytes = ctx_with(&[&cap]).encode().unwrap();
    // Upgrade the capability in place: its prots field (after magic, version, flags, target
    // and accessor: byte 40) from R to RW.
    let enc = cap.encode();
    let at = bytes
        .windows(enc.len())
        .position(|w| w == enc)
        .expect("the cap is in the heap")
        + 40;
    assert_eq!(bytes[at], R.bits() as u8);
    bytes[at] |= W.bits() as u8;
    w.host().set_ctx_bytes(CTX_A, bytes);
    let t = SecCtxMgr::new(CTX_A);
    for kind in [Read, Write] {
        assert_eq!(
            cause(violation(w.decide(&t, FILE, PAGE, kind))),
            DenyCause::Record(Verdict::Invalid(VerifyError::BadSignature))
        );
    }
}

#[test]
fn cap_copied_to_another_context_denied() {
    let w = World::new();
    let for_b = w.cap(FILE, CTX_B, RW);
    w.write_ctx(CTX_A, &ctx_with(&[&for_b]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        cause(violation(w.decide(&t, FILE, PAGE, Read))),
        DenyCause::Record(Verdict::WrongHolder(CTX_B))
    );
}

#[test]
fn cap_signed_by_the_wrong_key_denied() {
    let w = World::new();
    // A cap for FILE signed with OTHER's key.
    let cap = twizzler_capsec::Cap::mint(CapGrant::new(FILE, CTX_A, R), w.key(OTHER)).unwrap();
    w.write_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(matches!(
        cause(violation(w.decide(&t, FILE, PAGE, Read))),
        DenyCause::Record(Verdict::Invalid(VerifyError::BadSignature))
    ));
}

#[test]
fn objects_without_kuid_or_key_denied_with_reason() {
    let w = World::new();
    let a = twizzler_capsec::Cap::mint(CapGrant::new(NOKUID, CTX_A, R), w.key(FILE)).unwrap();
    let b = twizzler_capsec::Cap::mint(CapGrant::new(NOKEY, CTX_A, R), w.key(FILE)).unwrap();
    w.write_ctx(CTX_A, &ctx_with(&[&a, &b]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        cause(violation(w.decide(&t, NOKUID, PAGE, Read))),
        DenyCause::Record(Verdict::Invalid(VerifyError::Key(KeyLookupError::NoKuid(
            NOKUID
        ))))
    );
    assert_eq!(
        cause(violation(w.decide(&t, NOKEY, PAGE, Read))),
        DenyCause::Record(Verdict::Invalid(VerifyError::Key(
            KeyLookupError::UnknownKey(NOKEY)
        )))
    );
}

#[test]
fn null_page_out_of_bounds_unknown_object_missing_and_malformed_context() {
    let w = World::new();
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        violation(w.decide(&t, FILE, 0xfff, Read)),
        Violation::NullPage { target: FILE }
    );
    assert_eq!(
        violation(w.decide(&t, FILE, 1 << 30, Read)),
        Violation::OutOfBounds {
            target: FILE,
            offset: 1 << 30
        }
    );
    // The fault handler holds the object; one whose id did not verify against its metadata
    // comes without a kuid, and no capability can then grant anything on it.
    let ghost = twizzler_capsec::ObjID::new(0xdead);
    w.write_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let unverified = kernel_hooks::Fault::new(
        FILE,
        kernel_hooks::ObjectInfo::new(None, Protections::empty()),
        PAGE,
        Read,
    );
    assert!(matches!(
        violation(w.engine.decide(&t, &unverified)),
        Violation::Denied { ctx: CTX_A, .. }
    ));
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(RW));
    let nowhere = SecCtxMgr::new(ghost);
    assert_eq!(
        violation(w.decide(&nowhere, FILE, PAGE, Read)),
        Violation::ContextMissing(ghost)
    );
    for bytes in [vec![], vec![0u8; 48], b"TSCX\x01\x00".to_vec()] {
        w.host().set_ctx_bytes(CTX_A, bytes);
        w.engine.invalidate_ctx(CTX_A);
        assert!(matches!(
            violation(w.decide(&t, FILE, PAGE, Read)),
            Violation::MalformedContext { ctx: CTX_A, .. }
        ));
    }
}

#[test]
fn delegation_grants_its_subset_only() {
    let w = World::new();
    // A holds RW on FILE and delegates R on bytes 0x2000..0x4000 to B.
    let parent = w.cap(FILE, CTX_A, RW);
    let mut g = DelGrant::new(CTX_B, R);
    g.gate = Gate::new(0x2000, 0x2000, 1).unwrap();
    let del = Del::from_cap(&parent, g, w.key(CTX_A)).unwrap();
    let mut e = SecCtxEditor::new();
    e.add_del(&del);
    w.write_ctx(CTX_B, &e);
    let t = SecCtxMgr::new(CTX_B);

    assert_eq!(mapped(&w.decide(&t, FILE, 0x2000, Read)), Some(R));
    assert_eq!(mapped(&w.decide(&t, FILE, 0x3000, Read)), Some(R));
    assert!(matches!(
        w.decide(&t, FILE, 0x2000, Write),
        Decision::Violation(_)
    ));
    assert_eq!(
        cause(violation(w.decide(&t, FILE, 0x4000, Read))),
        DenyCause::Record(Verdict::OutsideGate)
    );

    // The same delegation copied into C grants nothing there.
    w.write_ctx(CTX_C, &e);
    let c = SecCtxMgr::new(CTX_C);
    assert_eq!(
        cause(violation(w.decide(&c, FILE, 0x2000, Read))),
        DenyCause::Record(Verdict::WrongHolder(CTX_B))
    );
}

#[test]
fn switch_to_the_first_inactive_context_that_grants() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_B, RW);
    w.write_ctx(CTX_B, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_C).unwrap();
    t.attach(CTX_B).unwrap();

    match w.decide(&t, FILE, PAGE, Write) {
        Decision::Map {
            prots, switch_to, ..
        } => {
            assert_eq!(prots, RW);
            assert_eq!(switch_to, Some(CTX_B));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.active_id(), CTX_B);
    assert!(t.inactive().contains(&CTX_A));
    // Now active: no further switch.
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Map {
            switch_to: None,
            ..
        }
    ));
}

#[test]
fn undetachable_active_context_blocks_the_switch() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_B, R);
    w.write_ctx(CTX_B, &ctx_with(&[&cap]));
    let mut a = SecCtxEditor::new();
    a.set_flags(CtxFlags::UNDETACHABLE);
    w.write_ctx(CTX_A, &a);
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();

    assert_eq!(
        violation(w.decide(&t, FILE, PAGE, Read)),
        Violation::Undetachable {
            ctx: CTX_A,
            needed: R,
            provided: NONE
        }
    );
    assert_eq!(t.active_id(), CTX_A);
}

#[test]
fn code_entry_gate_aligned_allowed_misaligned_denied_free_execution_inside() {
    let w = World::new();
    // LIB (P-256) exposes entry points 0x1000, 0x1040, ... 0x10c0 to context B.
    let mut g = CapGrant::new(LIB, CTX_B, RX);
    g.gate = Gate::new(0x1000, 0x100, 0x40).unwrap();
    let cap = w.cap_with(g);
    w.write_ctx(CTX_B, &ctx_with(&[&cap]));

    let misaligned = SecCtxMgr::new(CTX_A);
    misaligned.attach(CTX_B).unwrap();
    assert!(matches!(
        w.decide(&misaligned, LIB, 0x1044, Exec),
        Decision::Violation(Violation::Denied { ctx, .. }) if ctx == CTX_A
    ));
    assert_eq!(misaligned.active_id(), CTX_A);
    let outside = SecCtxMgr::new(CTX_A);
    outside.attach(CTX_B).unwrap();
    assert!(matches!(
        w.decide(&outside, LIB, 0x2000, Exec),
        Decision::Violation(_)
    ));

    let aligned = SecCtxMgr::new(CTX_A);
    aligned.attach(CTX_B).unwrap();
    let d = w.decide(&aligned, LIB, 0x1040, Exec);
    assert!(
        matches!(d, Decision::Map { prots, switch_to: Some(c), .. } if prots == RX && c == CTX_B),
        "{d:?}"
    );
    // Inside B, execution anywhere in the object is free.
    assert_eq!(mapped(&w.decide(&aligned, LIB, 0x2344, Exec)), Some(RX));
    // A data gate-less exec cap does not grant data writes.
    assert!(matches!(
        w.decide(&aligned, LIB, 0x2000, Write),
        Decision::Violation(_)
    ));
}

#[test]
fn check_active_and_search_access_mirror_twizzler() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_B, RW);
    w.write_ctx(CTX_B, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    let f = w.fault(FILE, PAGE, Write);
    let active = t.check_active_access(&w.engine, &f).unwrap();
    assert_eq!((active.ctx, active.provide), (CTX_A, Protections::empty()));
    let found = t.search_access(&w.engine, &f).unwrap();
    assert_eq!((found.ctx, found.provide), (CTX_B, RW));
    // search_access does not switch.
    assert_eq!(t.active_id(), CTX_A);
}

#[test]
fn a_fetch_between_entry_points_is_denied_after_another_thread_entered_the_gate() {
    // The order the port's in-kernel test found: a thread enters B through an entry point
    // (B's decision for LIB is then cached), then a fresh thread in A fetches between two
    // entry points. The cached entry must not let it in.
    let w = World::new();
    let mut g = CapGrant::new(LIB, CTX_B, RX);
    g.gate = Gate::new(0x1000, 0x100, 0x40).unwrap();
    let cap = w.cap_with(g);
    w.write_ctx(CTX_B, &ctx_with(&[&cap]));

    let first = SecCtxMgr::new(CTX_A);
    first.attach(CTX_B).unwrap();
    assert_eq!(mapped(&w.decide(&first, LIB, 0x1040, Exec)), Some(RX));
    assert_eq!(first.active_id(), CTX_B);

    let second = SecCtxMgr::new(CTX_A);
    second.attach(CTX_B).unwrap();
    let d = w.decide(&second, LIB, 0x1044, Exec);
    assert!(
        matches!(d, Decision::Violation(Violation::Denied { ctx, .. }) if ctx == CTX_A),
        "a fetch between entry points entered B: {d:?}"
    );
    assert_eq!(second.active_id(), CTX_A);
}
