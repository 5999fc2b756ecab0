//! Ownership records (`TAG` capabilities, `docs/DIFC.md` §2) against the permission rule and
//! the ownership lookup: one never counts as the other; domains, decoding, delegation,
//! revocation, expiry, masks and the verification budget; and, with every label empty,
//! [`evaluate_labelled`] decides exactly what [`evaluate`] decides.

use std::cell::Cell;
use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::test_runner::Config;
use twizzler_capsec::{
    ALL_CONTEXTS, Access, AccessKind, Authority, CAP_BODY_LEN, Cap, CapGrant, CtxFlags,
    DecodeError, Del, DelGrant, DelegateError, Expiry, FLAG_TAG, FlowResult, Gate, KeyLookupError,
    LabelRef, ObjID, OwnRights, OwnershipGrant, PrincipalLabels, Protections, Record,
    ReservedField, Right, SecCtx, SecCtxEditor, SignError, SigningKey, SigningScheme, TAG_DOMAIN,
    Verdict, VerifyError, VerifyingKey, evaluate, evaluate_explained, evaluate_labelled, owns,
};

use crate::common_keys::{TestAuth, key};

const T: ObjID = ObjID::new(0x7a9);
const A: ObjID = ObjID::new(0xa);
const B: ObjID = ObjID::new(0xb);
const OBJ: ObjID = ObjID::new(0x1000);
const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;

static TAG_KEY: LazyLock<SigningKey> = LazyLock::new(|| key(SigningScheme::Ed25519, 71));
static A_KEY: LazyLock<SigningKey> = LazyLock::new(|| key(SigningScheme::Ed25519, 72));
static OBJ_KEY: LazyLock<SigningKey> = LazyLock::new(|| key(SigningScheme::Ed25519, 73));

fn auth() -> TestAuth {
    TestAuth::new()
        .with_key(T, &TAG_KEY)
        .with_key(A, &A_KEY)
        .with_key(OBJ, &OBJ_KEY)
}

fn ownership(holder: ObjID, rights: OwnRights) -> Cap {
    Cap::mint_ownership(OwnershipGrant::new(T, holder, rights), &TAG_KEY).unwrap()
}

fn ctx_with(records: &[Record]) -> Vec<u8> {
    let mut ed = SecCtxEditor::new();
    for r in records {
        ed.add_record(r);
    }
    ed.encode().unwrap()
}

#[test]
fn an_ownership_record_is_never_a_data_grant() {
    // PLUS|MINUS share the bits of READ|WRITE; filed under an object, the record grants
    // nothing, is skipped before any signature work, and the reader's scan sees no rights.
    let rec = Cap::mint_ownership(
        OwnershipGrant::new(OBJ, A, OwnRights::all()),
        &OBJ_KEY, // even signed by the object's own key
    )
    .unwrap();
    let bytes = ctx_with(&[Record::Cap(rec)]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let keys = auth();
    for access in [Access::read(0x1000), Access::write(0x1000)] {
        let mut verdicts = Vec::new();
        let p = evaluate_explained(A, &ctx, OBJ, Protections::empty(), &keys, access, 1, |r| {
            verdicts.push(r.verdict)
        });
        assert_eq!(p.provide, Protections::empty());
        assert_eq!(verdicts, vec![Verdict::Ownership]);
    }
    let entry = ctx.entries_for(OBJ).next().unwrap();
    assert_eq!(entry.peek_cap().unwrap().2.prots, Protections::empty());
    assert_eq!(
        twizzler_capsec::Grant::of(&entry.record().unwrap()).prots,
        Protections::empty()
    );
}

#[test]
fn a_data_record_is_never_ownership() {
    // A read-write data capability on the tag object, for A: no PLUS, no MINUS.
    let data = Cap::mint(CapGrant::new(T, A, R | W), &TAG_KEY).unwrap();
    let bytes = ctx_with(&[Record::Cap(data)]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    for right in [Right::Plus, Right::Minus] {
        assert_eq!(owns(A, &ctx, T, right, &auth(), 1), Ok(None));
    }
    // And it still grants data access to the tag object as an object.
    let p = evaluate(
        A,
        &ctx,
        T,
        Protections::empty(),
        &auth(),
        Access::write(0x1000),
        1,
    );
    assert!(p.grants(AccessKind::Write.required()));
}

#[test]
fn the_domains_are_separate() {
    let rec = ownership(A, OwnRights::MINUS);
    assert_eq!(rec.signed_message(), {
        let b = rec.encode();
        twizzler_capsec::HashAlg::Blake3.digest(&[TAG_DOMAIN, &b[..CAP_BODY_LEN]])
    });
    // Clearing the flag turns the bytes into a data capability (READ|WRITE bits aside, here
    // WRITE) whose signature no longer verifies.
    let mut b = rec.encode();
    b[6] &= !(FLAG_TAG as u8);
    let data = Cap::decode(&b).unwrap();
    assert!(!data.is_ownership());
    assert_eq!(
        data.verify(&TAG_KEY.verifying_key(), 0),
        Err(VerifyError::BadSignature)
    );
    // Setting it on a data capability (with rights that fit) does the converse.
    let cap = Cap::mint(CapGrant::new(T, A, W), &TAG_KEY).unwrap();
    let mut b = cap.encode();
    b[6] |= FLAG_TAG as u8;
    let forged = Cap::decode(&b).unwrap();
    assert_eq!(forged.ownership_rights(), Some(OwnRights::MINUS));
    assert_eq!(
        forged.verify(&TAG_KEY.verifying_key(), 0),
        Err(VerifyError::BadSignature)
    );
    let ctx_bytes = ctx_with(&[Record::Cap(forged)]);
    let ctx = SecCtx::parse(&ctx_bytes).unwrap();
    assert_eq!(
        owns(A, &ctx, T, Right::Minus, &auth(), 0),
        Err(Verdict::Invalid(VerifyError::BadSignature))
    );
}

#[test]
fn decoding_refuses_what_ownership_cannot_be() {
    let rec = ownership(A, OwnRights::all());
    let good = rec.encode();
    // Rights beyond PLUS|MINUS.
    let mut b = good;
    b[40] = 4;
    assert_eq!(
        Cap::decode(&b),
        Err(DecodeError::BadOwnership("protections"))
    );
    // A gate other than the whole object (length 4096).
    let mut b = good;
    b[50..58].copy_from_slice(&4096u64.to_le_bytes());
    assert_eq!(Cap::decode(&b), Err(DecodeError::BadOwnership("gate")));
    // A data capability for ALL_CONTEXTS (built by hand: minting refuses it, below).
    let mut g = CapGrant::new(OBJ, ALL_CONTEXTS, R);
    g.gate = Gate::WHOLE;
    let data = Cap::from_parts(g, *rec.signature());
    assert_eq!(
        Cap::decode(&data.encode()),
        Err(DecodeError::ReservedAccessor)
    );
    // An ownership record whose tag is ALL_CONTEXTS: no label can hold that tag.
    let no_tag = Cap::ownership_from_parts(
        OwnershipGrant::new(ALL_CONTEXTS, A, OwnRights::PLUS),
        *rec.signature(),
    );
    assert_eq!(Cap::decode(&no_tag.encode()), Err(DecodeError::ReservedTag));
    // An ownership root may name it.
    let public = ownership(ALL_CONTEXTS, OwnRights::PLUS);
    assert_eq!(Cap::decode(&public.encode()), Ok(public));
    // Unknown flag bits stay refused with the TAG bit.
    let mut b = good;
    b[6] |= 8;
    assert!(matches!(Cap::decode(&b), Err(DecodeError::BadFlags(_))));
}

#[test]
fn minting_refuses_what_decoding_would_refuse() {
    // A record that no decoder accepts is never signed: a data capability for ALL_CONTEXTS,
    // an ownership record for the reserved tag.
    let g = CapGrant::new(OBJ, ALL_CONTEXTS, R);
    assert_eq!(
        Cap::mint(g, &OBJ_KEY),
        Err(SignError::Reserved(ReservedField::Accessor))
    );
    assert_eq!(
        Cap::mint_ownership(
            OwnershipGrant::new(ALL_CONTEXTS, A, OwnRights::PLUS),
            &TAG_KEY
        ),
        Err(SignError::Reserved(ReservedField::Tag))
    );
    // What is minted decodes.
    let ok = Cap::mint_ownership(
        OwnershipGrant::new(T, ALL_CONTEXTS, OwnRights::PLUS),
        &TAG_KEY,
    )
    .unwrap();
    assert_eq!(Cap::decode(&ok.encode()), Ok(ok));
}

#[test]
fn ownership_delegates_by_attenuation() {
    let root = ownership(A, OwnRights::all());
    // A hands B only MINUS, expiring.
    let mut g = DelGrant::new(B, OwnRights::MINUS.as_prots());
    g.expires = Expiry::from_raw(500);
    let del = Del::from_cap(&root, g, &A_KEY).unwrap();
    let bytes = ctx_with(&[Record::Del(del.clone())]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let keys = auth();
    assert_eq!(
        owns(B, &ctx, T, Right::Minus, &keys, 1),
        Ok(Some(Expiry::from_raw(500)))
    );
    assert_eq!(owns(B, &ctx, T, Right::Plus, &keys, 1), Ok(None));
    assert_eq!(owns(A, &ctx, T, Right::Minus, &keys, 1), Ok(None));
    assert_eq!(
        twizzler_capsec::owns_explained(B, &ctx, T, Right::Minus, &keys, 1),
        Ok(Some(twizzler_capsec::OwnedBy {
            index: 0,
            id: del.id(),
            expires: Expiry::from_raw(500)
        }))
    );
    assert!(matches!(
        owns(B, &ctx, T, Right::Minus, &keys, 500),
        Err(Verdict::Invalid(VerifyError::Expired { .. }))
    ));
    // Revoking the root revokes the delegation.
    let revoked = auth().with_revoked_record(root.id());
    assert_eq!(
        owns(B, &ctx, T, Right::Minus, &revoked, 1),
        Err(Verdict::Invalid(VerifyError::Revoked))
    );
    // Widening is refused when signing, as is a partial gate or a public receiver.
    assert!(matches!(
        Del::from_cap(
            &ownership(A, OwnRights::MINUS),
            DelGrant::new(B, OwnRights::all().as_prots()),
            &A_KEY
        ),
        Err(DelegateError::Amplifies(_))
    ));
    let mut partial = DelGrant::new(B, OwnRights::MINUS.as_prots());
    partial.gate = Gate::new(0x1000, 0x1000, 1).unwrap();
    assert_eq!(
        Del::from_cap(&root, partial, &A_KEY),
        Err(DelegateError::BadOwnership)
    );
    assert_eq!(
        Del::from_cap(
            &root,
            DelGrant::new(ALL_CONTEXTS, OwnRights::MINUS.as_prots()),
            &A_KEY
        ),
        Err(DelegateError::Reserved)
    );
    // A public root cannot be delegated: nobody's key speaks for ALL_CONTEXTS.
    assert_eq!(
        Del::from_cap(
            &ownership(ALL_CONTEXTS, OwnRights::MINUS),
            DelGrant::new(B, OwnRights::MINUS.as_prots()),
            &A_KEY
        ),
        Err(DelegateError::Reserved)
    );
    // A delegation whose link names ALL_CONTEXTS as receiver does not decode.
    let mut b = del.encode().to_vec();
    let receiver = 8 + twizzler_capsec::CAP_LEN + 2;
    b[receiver..receiver + 16].copy_from_slice(&u128::MAX.to_le_bytes());
    assert_eq!(Del::decode(&b), Err(DecodeError::ReservedAccessor));
}

#[test]
fn public_rights_count_for_every_context_that_copies_them() {
    let public = ownership(ALL_CONTEXTS, OwnRights::PLUS);
    let bytes = ctx_with(&[Record::Cap(public)]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    for c in [A, B, ObjID::new(0x77)] {
        assert_eq!(
            owns(c, &ctx, T, Right::Plus, &auth(), 1),
            Ok(Some(Expiry::NEVER))
        );
        assert_eq!(owns(c, &ctx, T, Right::Minus, &auth(), 1), Ok(None));
    }
}

#[test]
fn masks_remove_ownership_only_through_per_tag_rows() {
    let rec = ownership(A, OwnRights::all());
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&rec);
    // A read-only jail's global mask does not touch ownership.
    ed.set_global_mask(R);
    let bytes = ed.encode().unwrap();
    let ctx = SecCtx::parse(&bytes).unwrap();
    for right in [Right::Plus, Right::Minus] {
        assert!(owns(A, &ctx, T, right, &auth(), 1).unwrap().is_some());
    }
    // A row for the tag whose permmask keeps only PLUS removes MINUS (ovrmask ignored).
    ed.set_mask(T, OwnRights::PLUS.as_prots(), Protections::all());
    let bytes = ed.encode().unwrap();
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert!(owns(A, &ctx, T, Right::Plus, &auth(), 1).unwrap().is_some());
    assert_eq!(owns(A, &ctx, T, Right::Minus, &auth(), 1), Ok(None));
}

/// An authority whose verification budget is `budget` signatures.
struct Budget(TestAuth, Cell<u32>);

impl Authority for Budget {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        self.0.key_for(obj)
    }
    fn may_verify(&self) -> bool {
        let left = self.1.get();
        self.1.set(left.saturating_sub(1));
        left > 0
    }
}

#[test]
fn ownership_checks_count_against_the_budget() {
    let bytes = ctx_with(&[Record::Cap(ownership(A, OwnRights::MINUS))]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let spent = Budget(auth(), Cell::new(0));
    assert_eq!(
        owns(A, &ctx, T, Right::Minus, &spent, 1),
        Err(Verdict::Invalid(VerifyError::Unchecked))
    );
    let one = Budget(auth(), Cell::new(1));
    assert!(owns(A, &ctx, T, Right::Minus, &one, 1).unwrap().is_some());
    assert_eq!(one.1.get(), 0);
}

#[test]
fn a_declassifying_write_is_valid_until_its_right_expires() {
    let mut g = OwnershipGrant::new(T, A, OwnRights::MINUS);
    g.expires = Expiry::from_raw(900);
    let rec = Cap::mint_ownership(g, &TAG_KEY).unwrap();
    let bytes = ctx_with(&[Record::Cap(rec)]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let secret = twizzler_capsec::Label::from_tags(&[T], &[]).unwrap();
    let principal = PrincipalLabels::steady(secret.as_ref());
    let d = evaluate_labelled(
        A,
        &ctx,
        OBJ,
        Protections::all(),
        &auth(),
        Access::write(0x1000),
        1,
        &principal,
        &LabelRef::EMPTY,
    );
    assert!(d.grants(AccessKind::Write.required()));
    assert_eq!(d.perms.valid_until, Expiry::from_raw(900));
    // A read of the same object asks no ownership and leaves W unresolved.
    let r = evaluate_labelled(
        A,
        &ctx,
        OBJ,
        Protections::all(),
        &auth(),
        Access::read(0x1000),
        1,
        &principal,
        &LabelRef::EMPTY,
    );
    assert_eq!(r.perms.provide, R | Protections::EXEC);
    assert!(r.flow.is_some_and(|f| f.write_unresolved));
    assert_eq!(r.perms.valid_until, Expiry::NEVER);
    // Capabilities refuse first: no flow is evaluated.
    let none = evaluate_labelled(
        A,
        &ctx,
        OBJ,
        Protections::empty(),
        &auth(),
        Access::write(0x1000),
        1,
        &principal,
        &LabelRef::EMPTY,
    );
    assert_eq!(none.flow, None);
}

// ---- With every label empty, the labelled rule is today's rule. ----

/// Data capabilities and ownership records on three objects for two contexts, minted once.
static POOL: LazyLock<Vec<Record>> = LazyLock::new(|| {
    let objs = [OBJ, ObjID::new(0x2000), T];
    let mut out = Vec::new();
    for &o in &objs {
        for &c in &[A, B] {
            for bits in [1u16, 2, 3, 4, 5, 7] {
                let mut g = CapGrant::new(o, c, Protections::from_bits_truncate(bits));
                if bits == 5 {
                    g.gate = Gate::new(0x1000, 0x2000, 0x1000).unwrap();
                }
                if bits == 2 {
                    g.expires = Expiry::from_raw(50);
                }
                let k = if o == T { &*TAG_KEY } else { &*OBJ_KEY };
                out.push(Record::Cap(Cap::mint(g, k).unwrap()));
            }
            for rights in [OwnRights::PLUS, OwnRights::all()] {
                let g = OwnershipGrant::new(o, c, rights);
                out.push(Record::Cap(Cap::mint_ownership(g, &TAG_KEY).unwrap()));
            }
        }
    }
    out
});

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Over arbitrary contexts (records, masks, global mask, flags), objects, default
    /// protections, accesses and times: with empty labels the labelled rule decides exactly
    /// what `evaluate` decides, and the flow, when evaluated, restricts nothing.
    #[test]
    fn empty_labels_decide_as_today(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        masks in prop::collection::vec((0usize..3, 0u16..8, 0u16..8), 0..3),
        global in 0u16..8,
        undetachable: bool,
        target in 0usize..3,
        default in 0u16..8,
        kind in 0u8..4,
        page in 0u64..4,
        ctx in prop_oneof![Just(A), Just(B)],
        now in prop_oneof![Just(1u64), Just(100)],
    ) {
        let objs = [OBJ, ObjID::new(0x2000), T];
        let mut ed = SecCtxEditor::new();
        for p in &picks {
            ed.add_record(p.get(&POOL));
        }
        for &(o, perm, ovr) in &masks {
            ed.set_mask(
                objs[o],
                Protections::from_bits_truncate(perm),
                Protections::from_bits_truncate(ovr),
            );
        }
        ed.set_global_mask(Protections::from_bits_truncate(global));
        if undetachable {
            ed.set_flags(CtxFlags::UNDETACHABLE);
        }
        let bytes = ed.encode().unwrap();
        let parsed = SecCtx::parse(&bytes).unwrap();
        let offset = page * 0x1000 + 8;
        let access = match kind {
            0 => Access::read(offset),
            1 => Access::write(offset),
            2 => Access::exec(offset),
            _ => Access::enter(offset),
        };
        let default = Protections::from_bits_truncate(default);
        let keys = auth();
        let today = evaluate(ctx, &parsed, objs[target], default, &keys, access, now);
        let empty = PrincipalLabels::steady(LabelRef::EMPTY);
        let labelled = evaluate_labelled(
            ctx, &parsed, objs[target], default, &keys, access, now, &empty, &LabelRef::EMPTY,
        );
        prop_assert_eq!(labelled.perms, today);
        prop_assert!(labelled.flow.is_none() || labelled.flow == Some(FlowResult::ALL));
    }
}
