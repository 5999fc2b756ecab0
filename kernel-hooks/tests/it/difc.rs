//! Information flow control in the engine (`docs/DIFC.md` §3, §4.2): the engine decides what
//! the pure rule (`twizzler_capsec::evaluate_labelled`) decides, cold and cached; flow
//! denials are cached and explained; ownership revocation and expiry take a declassifier's
//! write mapping away; a principal-label change narrows or removes what was granted.

use crate::common::*;
use kernel_hooks::{Decision, SecCtxMgr, Unmap, Violation};
use proptest::prelude::*;
use twizzler_capsec::{
    Access, AccessKind, Cap, Expiry, FlowDenial, Label, ObjID, OwnRights, OwnershipGrant,
    PAGE_SIZE, PrincipalLabels, Protections, RelabelClass, Right, SecCtx, SecCtxEditor, Verdict,
    VerifyError, classify, evaluate_labelled, transitional,
};

/// Tags, and their key objects.
pub const T: ObjID = ObjID::new(0x5000);
pub const U: ObjID = ObjID::new(0x5001);
const K_T: ObjID = ObjID::new(0x9500);
const K_U: ObjID = ObjID::new(0x9501);

/// Gives world `w` tag objects `T` and `U` (with keys); returns their signing keys. (The
/// world is not returned with them: an engine is large, and a debug build copies it.)
pub fn tag_keys(w: &World) -> SigningKey2 {
    add_tags(w.host())
}

/// Gives `host` tag objects `T` and `U` (with keys); returns their signing keys.
pub fn add_tags(host: &TestHost) -> SigningKey2 {
    let kt = key(twizzler_capsec::SigningScheme::Ed25519, 50);
    let ku = key(twizzler_capsec::SigningScheme::Ed25519, 51);
    host.set_object(T, Some(K_T), NONE);
    host.set_object(U, Some(K_U), NONE);
    host.set_key(K_T, &kt);
    host.set_key(K_U, &ku);
    SigningKey2 { t: kt, u: ku }
}

/// The tags' signing keys.
pub struct SigningKey2 {
    t: twizzler_capsec::SigningKey,
    u: twizzler_capsec::SigningKey,
}

impl SigningKey2 {
    /// An ownership record of `right` of `tag` for `holder`, expiring at `expires`.
    pub fn own(&self, tag: ObjID, holder: ObjID, right: Right, expires: Expiry) -> Cap {
        let k = if tag == T { &self.t } else { &self.u };
        let grant = OwnershipGrant {
            expires,
            ..OwnershipGrant::new(tag, holder, OwnRights::of(right))
        };
        Cap::mint_ownership(grant, k).unwrap()
    }
}

pub fn label(s: &[ObjID], i: &[ObjID]) -> Label {
    Label::from_tags(s, i).unwrap()
}

fn flow_denial(d: Decision) -> FlowDenial {
    match violation(d) {
        Violation::Flow { denial, .. } => denial,
        other => panic!("expected a flow violation, got {other:?}"),
    }
}

fn tags(bits: u8) -> Vec<ObjID> {
    [T, U]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, t)| t)
        .collect()
}

fn kind() -> impl Strategy<Value = AccessKind> {
    prop_oneof![
        Just(AccessKind::Read),
        Just(AccessKind::Write),
        Just(AccessKind::Exec)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Labels of the object and of the context over two tags, any ownership of them, any
    /// capability rights: every access, cold and then cached, is decided as
    /// `evaluate_labelled` decides it, a flow denial with the rule's reason, and nothing is
    /// mapped with more than the rule provides.
    #[test]
    fn engine_decides_what_the_labelled_rule_decides(
        (obj_s, obj_i, ctx_s, ctx_i) in (0u8..4, 0u8..4, 0u8..4, 0u8..4),
        owned in 0u8..16,
        cap in (0u16..8).prop_map(|b| Protections::from_raw(b).unwrap()),
        accesses in proptest::collection::vec((kind(), 1u64..4), 1..6),
    ) {
        let w = World::new();
    let k = tag_keys(&w);
        let object = label(&tags(obj_s), &tags(obj_i));
        let principal = label(&tags(ctx_s), &tags(ctx_i));
        w.host().set_object_label(FILE, object);
        w.host().set_ctx_label(CTX_A, principal);
        let mut e = SecCtxEditor::new();
        if !cap.is_empty() {
            e.add_cap(&w.cap(FILE, CTX_A, cap));
        }
        for (i, (tag, right)) in [(T, Right::Plus), (T, Right::Minus), (U, Right::Plus), (U, Right::Minus)].into_iter().enumerate() {
            if owned & (1 << i) != 0 {
                e.add_cap(&k.own(tag, CTX_A, right, Expiry::NEVER));
            }
        }
        w.host().set_ctx(CTX_A, &e);
        let bytes = w.host().ctx_bytes_of(CTX_A);
        let ctx = SecCtx::parse(&bytes).unwrap();
        let t = SecCtxMgr::new(CTX_A);
        let pl = PrincipalLabels::steady(principal);
        for pass in 0..2 {
            for &(kind, page) in &accesses {
                let offset = page * PAGE_SIZE;
                let rule = evaluate_labelled(
                    CTX_A, &ctx, FILE, NONE, &Keys(&w), Access { kind, offset, entering: false },
                    T0, &pl.as_ref(), &object.as_ref(),
                );
                let d = w.decide(&t, FILE, offset, kind);
                let needed = kind.required();
                if rule.grants(needed) {
                    // At most what the rule provides; `W` too if the rule grants a write there
                    // (the rule resolves `W`'s ownership only for a write, the engine keeps
                    // it once a write resolved it).
                    let write = evaluate_labelled(
                        CTX_A, &ctx, FILE, NONE, &Keys(&w), Access { kind: AccessKind::Write, offset, entering: false },
                        T0, &pl.as_ref(), &object.as_ref(),
                    );
                    let bound = rule.perms.provide | (write.perms.provide & W);
                    let prots = mapped(&d);
                    prop_assert!(prots.is_some_and(|p| bound.contains(p) && p.contains(needed)),
                        "pass {}: rule gives {:?}, engine {:?}", pass, rule.perms.provide, d);
                } else {
                    match (rule.flow.and_then(|f| f.denial), violation(d)) {
                        (Some(want), Violation::Flow { denial, needed: n, target, ctx, .. }) => {
                            prop_assert_eq!(denial, want, "pass {}", pass);
                            prop_assert_eq!((n, target, ctx), (needed, FILE, CTX_A));
                        }
                        (None, Violation::Denied { provided, .. }) => {
                            prop_assert_eq!(provided, rule.perms.provide, "pass {}", pass);
                        }
                        (want, got) => prop_assert!(false, "pass {}: rule {:?}, engine {:?}", pass, want, got),
                    }
                }
            }
        }
    }
}

/// A context at `{T}` reading a public object, and a public context reading a `{T}` object.
#[test]
fn secrecy_read_and_a_repeated_denial_is_cached() {
    let w = World::new();
    tag_keys(&w);
    w.host().set_object_label(FILE, label(&[T], &[]));
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    let first = w.decide(&t, FILE, 0x1000, AccessKind::Read);
    assert_eq!(
        flow_denial(first.clone()),
        FlowDenial::SecrecyRead { tag: T }
    );
    let (calls, verifies) = (w.host().host_calls(), w.engine.stats().verifies);
    let hits = w.engine.stats().hits;
    let again = w.decide(&t, FILE, 0x2000, AccessKind::Read);
    assert_eq!(again, first);
    assert_eq!(w.engine.stats().hits, hits + 1, "served by the hit path");
    assert_eq!(
        w.host().host_calls(),
        calls,
        "a repeated flow denial asks the host nothing"
    );
    assert_eq!(w.engine.stats().verifies, verifies);
    // The other way round: the context at {T} reads it.
    w.host().set_ctx_label(CTX_B, label(&[T], &[]));
    w.host()
        .set_ctx(CTX_B, &ctx_with(&[&w.cap(FILE, CTX_B, RW)]));
    let tb = SecCtxMgr::new(CTX_B);
    assert_eq!(
        mapped(&w.decide(&tb, FILE, 0x1000, AccessKind::Read)),
        Some(RW)
    );
}

// Every reason of `FlowDenial` the engine can give, each from the smallest world that
// shows it (one test each: a world's engine is large, and a debug build keeps every one on
// the stack).

#[test]
fn flow_denial_secrecy_read_and_must_raise() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // SecrecyRead, MustRaise.
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_object_label(FILE, label(&[T], &[]));
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::SecrecyRead { tag: T }
    );
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Plus, Expiry::NEVER));
    w.write_ctx(CTX_A, &e);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::MustRaise { tag: T }
    );
}

#[test]
fn flow_denial_integrity_read_and_must_lower() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // IntegrityRead, MustLower.
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_ctx_label(CTX_A, label(&[], &[T]));
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::IntegrityRead { tag: T }
    );
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Minus, Expiry::NEVER));
    w.write_ctx(CTX_A, &e);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::MustLower { tag: T }
    );
}

#[test]
fn flow_denial_secrecy_write_and_ownership() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // SecrecyWrite (a read is granted, the write is not), and Ownership (a T− record whose
    // signature does not verify: signed by U's key).
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_ctx_label(CTX_A, label(&[T], &[]));
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(mapped(&w.decide(&t, FILE, 0x1000, read)), Some(R));
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, write)),
        FlowDenial::SecrecyWrite { tag: T }
    );
    let forged = {
        let good = k.own(T, CTX_A, Right::Minus, Expiry::NEVER);
        let other = k.own(U, CTX_A, Right::Minus, Expiry::NEVER);
        Cap::ownership_from_parts(
            OwnershipGrant::new(T, CTX_A, OwnRights::of(Right::Minus)),
            *other.signature(),
        )
        .tap_ne(&good)
    };
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&forged);
    w.write_ctx(CTX_A, &e);
    assert!(matches!(
        flow_denial(w.decide(&t, FILE, 0x1000, write)),
        FlowDenial::Ownership {
            tag: T,
            why: Verdict::Invalid(_)
        }
    ));
}

#[test]
fn flow_denial_integrity_write() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // IntegrityWrite.
    let w = World::new();
    tag_keys(&w);
    w.host().set_object_label(FILE, label(&[], &[T]));
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, write)),
        FlowDenial::IntegrityWrite { tag: T }
    );
}

#[test]
fn flow_denial_label_unknown() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // LabelUnknown: an unregistered context; an object label the host does not know.
    let w = World::new();
    tag_keys(&w);
    w.host().set_ctx_row(CTX_A, None);
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::LabelUnknown
    );
    let w = World::new();
    tag_keys(&w);
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    let fault = w
        .fault(FILE, 0x1000, read)
        .labelled(twizzler_capsec::LabelId(77));
    assert_eq!(
        flow_denial(w.engine.decide(&t, &fault)),
        FlowDenial::LabelUnknown
    );
}

#[test]
fn flow_denial_switch() {
    let read = AccessKind::Read;
    let write = AccessKind::Write;
    let _ = (read, write);
    // Switch: the active context at {T} has no capability; the inactive public one grants,
    // but moving there would shed T without T−. With T− owned by the active context, the
    // switch is allowed.
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_ctx_label(CTX_A, label(&[T], &[]));
    w.host()
        .set_ctx(CTX_B, &ctx_with(&[&w.cap(FILE, CTX_B, R)]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, read)),
        FlowDenial::Switch { to: CTX_B, tag: T }
    );
    w.write_ctx(CTX_A, &{
        let mut e = SecCtxEditor::new();
        e.add_cap(&k.own(T, CTX_A, Right::Minus, Expiry::NEVER));
        e
    });
    let d = w.decide(&t, FILE, 0x1000, read);
    assert!(
        matches!(
            d,
            Decision::Map {
                switch_to: Some(CTX_B),
                ..
            }
        ),
        "{d:?}"
    );
}

/// `Cap` helper for the forged record: asserts it differs from the genuine one.
trait TapNe: Sized + PartialEq + core::fmt::Debug {
    fn tap_ne(self, other: &Self) -> Self {
        assert_ne!(&self, other);
        self
    }
}
impl TapNe for Cap {}

/// A declassifier: a context at `{T}` owning `T−` writes a public object. Its write is
/// granted (one more verification), and revoking the `T−` record takes the writable mapping
/// away: unmapped, the ticket stale, the next write refused.
#[test]
fn revoking_minus_stops_a_declassifier() {
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_ctx_label(CTX_A, label(&[T], &[]));
    let minus = k.own(T, CTX_A, Right::Minus, Expiry::NEVER);
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&minus);
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    // A read first: no ownership verified, W left unresolved.
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        Some(R)
    );
    assert_eq!(w.engine.stats().verifies, 1);
    let d = w.decide(&t, FILE, 0x1000, AccessKind::Write);
    let Decision::Map { prots, ticket, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(prots, RW);
    assert_eq!(w.engine.stats().verifies, 2, "the T− record, verified once");
    // Cached: the next write is a hit.
    let hits = w.engine.stats().hits;
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x2000, AccessKind::Write)),
        Some(RW)
    );
    assert_eq!(w.engine.stats().hits, hits + 1);
    w.host().take_unmapped();
    let inv = w.revoke_record(minus.id());
    assert_eq!(
        inv.unmapped(),
        &[Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }]
    );
    assert!(!w.engine.is_current(&ticket));
    assert!(matches!(
        flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        FlowDenial::Ownership {
            tag: T,
            why: Verdict::Invalid(VerifyError::Revoked)
        }
    ));
    // Reading is still allowed.
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        Some(R)
    );
}

/// A `T−` record that expires: the write's decision expires with it, and `expire` unmaps it.
#[test]
fn expiry_of_minus_stops_a_declassifier() {
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_ctx_label(CTX_A, label(&[T], &[]));
    let until = Expiry::from_raw(T0 + 1_000_000_000);
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Minus, until));
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    let d = w.decide(&t, FILE, 0x1000, AccessKind::Write);
    let Decision::Map {
        prots,
        ticket,
        valid_until,
        ..
    } = d
    else {
        panic!("{d:?}")
    };
    assert_eq!((prots, valid_until), (RW, until));
    w.host().advance(2_000_000_000);
    let inv = w.engine.expire();
    assert_eq!(
        inv.unmapped(),
        &[Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }]
    );
    assert!(!w.engine.is_current(&ticket));
    assert!(matches!(
        flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        FlowDenial::Ownership {
            tag: T,
            why: Verdict::Invalid(VerifyError::Expired { .. })
        }
    ));
}

/// The kernel's side of `sys_sctx_label` as §4.2 has it: the transitional row, the engine's
/// sweep, the final row.
fn relabel(w: &World, ctx: ObjID, old: Label, new: Label) -> kernel_hooks::Invalidation {
    let row = transitional(&old.as_ref(), &new.as_ref()).unwrap();
    w.host().set_ctx_row(ctx, Some(row));
    let inv = w
        .engine
        .relabel_ctx(ctx, classify(&old.as_ref(), &new.as_ref()));
    w.host().set_ctx_label(ctx, new);
    inv
}

/// A raise ∅ → {T} write-protects (the context's writes of public objects go; its reads
/// stay, served from the narrowed entry), and a drop {T} → ∅ unmaps.
#[test]
fn relabel_narrows_on_a_raise_and_removes_on_a_drop() {
    let w = World::new();
    let k = tag_keys(&w);
    w.host().set_object_label(OTHER, label(&[T], &[]));
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW), &w.cap(OTHER, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Plus, Expiry::NEVER));
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    let d = w.decide(&t, FILE, 0x1000, AccessKind::Write);
    let Decision::Map { ticket, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(
        flow_denial(w.decide(&t, OTHER, 0x1000, AccessKind::Read)),
        FlowDenial::MustRaise { tag: T }
    );
    let empty = Label::EMPTY;
    let secret = label(&[T], &[]);
    assert_eq!(
        classify(&empty.as_ref(), &secret.as_ref()),
        RelabelClass {
            reads_unsafe: false,
            writes_unsafe: true
        }
    );
    let inv = relabel(&w, CTX_A, empty, secret);
    assert_eq!(inv.unmapped(), &[Unmap::WriteProtectContext(CTX_A)]);
    assert!(
        !w.engine.is_current(&ticket),
        "the narrowing moved the set's counter"
    );
    let hits = w.engine.stats().hits;
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        Some(R)
    );
    assert_eq!(
        w.engine.stats().hits,
        hits + 1,
        "reads are served from the narrowed entry"
    );
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        FlowDenial::SecrecyWrite { tag: T }
    );
    assert_eq!(
        mapped(&w.decide(&t, OTHER, 0x1000, AccessKind::Read)),
        Some(RW),
        "the denial cached under the old label is not kept"
    );
    let inv = relabel(&w, CTX_A, secret, empty);
    assert_eq!(inv.unmapped(), &[Unmap::Context(CTX_A)]);
    assert_eq!(
        flow_denial(w.decide(&t, OTHER, 0x1000, AccessKind::Read)),
        FlowDenial::MustRaise { tag: T }
    );
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        Some(RW)
    );
}

/// A context at `I = {T}` refused a read of unvetted input drops `T` (it owns `T−`): after the
/// drop every label involved is empty, and the read is granted. (The reference kernel's row
/// 4/14 found the engine keeping the refused read's flow across the drop: the entry rebuilt
/// for an unlabelled decision kept the flow the sweep had emptied, and the read stayed
/// refused, as `LabelUnknown`.)
#[test]
fn dropping_integrity_lets_the_refused_read_through() {
    let w = World::new();
    let k = tag_keys(&w);
    let vetted = label(&[], &[T]);
    w.host().set_ctx_label(CTX_A, vetted);
    let mut e = ctx_with(&[&w.cap(FILE, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Minus, Expiry::NEVER));
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        FlowDenial::MustLower { tag: T }
    );
    relabel(&w, CTX_A, vetted, Label::EMPTY);
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        Some(RW),
        "after the drop nothing is labelled: the read is today's decision"
    );
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        Some(RW)
    );
}

/// A fault decided while a raise is in progress (the transitional row) is refused for the
/// rule's reason, not as an unresolvable label: the denial is not cached as final, but the
/// violation still says which tag refused it. (The reference kernel's raise-window row
/// reported `LabelUnknown` for these writes.)
#[test]
fn a_denial_under_the_transitional_row_names_its_tag() {
    let w = World::new();
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    let secret = label(&[T], &[]);
    let row = transitional(&Label::EMPTY.as_ref(), &secret.as_ref()).unwrap();
    w.host().set_ctx_row(CTX_A, Some(row));
    for _ in 0..2 {
        assert_eq!(
            flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Write)),
            FlowDenial::SecrecyWrite { tag: T }
        );
    }
    // Once the final row is published the write is decided again (not served from a
    // denial made under the transitional row), and is refused for the same reason.
    w.host().set_ctx_label(CTX_A, secret);
    assert_eq!(
        flow_denial(w.decide(&t, FILE, 0x1000, AccessKind::Write)),
        FlowDenial::SecrecyWrite { tag: T }
    );
    assert_eq!(
        mapped(&w.decide(&t, FILE, 0x1000, AccessKind::Read)),
        Some(R)
    );
}

/// `Engine::owns` answers as the rule's ownership lookup, and a system call's switch checks
/// the label change with no help from the target.
#[test]
fn owns_and_syscall_switch() {
    let w = World::new();
    let k = tag_keys(&w);
    let mut e = SecCtxEditor::new();
    e.add_cap(&k.own(T, CTX_A, Right::Minus, Expiry::NEVER));
    w.host().set_ctx(CTX_A, &e);
    assert_eq!(w.engine.owns(CTX_A, T, Right::Minus), Ok(Ok(true)));
    assert_eq!(w.engine.owns(CTX_A, T, Right::Plus), Ok(Ok(false)));
    assert_eq!(w.engine.owns(CTX_A, U, Right::Minus), Ok(Ok(false)));
    assert!(w.engine.owns(ObjID::new(0xdead), T, Right::Minus).is_err());

    // B (at {U}) may not be left for the public C without U−; C may not be entered from B,
    // but A (at {T}, owning T−) may switch to C.
    w.host().set_ctx_label(CTX_A, label(&[T], &[]));
    w.host().set_ctx_label(CTX_B, label(&[U], &[]));
    let t = SecCtxMgr::new(CTX_B);
    t.attach(CTX_C).unwrap();
    assert_eq!(
        w.engine.switch_context(&t, CTX_C),
        Err(FlowDenial::Switch { to: CTX_C, tag: U })
    );
    assert_eq!(t.active_id(), CTX_B);
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_C).unwrap();
    assert_eq!(
        w.engine.switch_context(&t, CTX_C),
        Ok(kernel_hooks::SwitchResult::Switched)
    );
}
