//! Export: a signed capability, checked against the object's kuid key, becomes a guard.

use crate::common::*;
use dist_bridge::*;
use secctx::keypair::{self, KdfParams};
use secctx::revocations::RevocationList;
use secctx::{MemStore, ObjMeta, Object, ObjectStore};
use twizzler_capsec::{
    Cap, CapGrant, Expiry, Gate, KeyLookupError, ObjID, Protections, SigningKey, SigningScheme,
    VerifyError,
};

fn request(f: &Fixture, rights: Rights, range: ByteRange) -> ExportRequest {
    ExportRequest::new(f.ctx, rights, range)
}

#[test]
fn export_checks_the_capability() {
    let f = fixture();
    let ok = request(&f, Rights::all(), ByteRange::WHOLE);
    assert!(f.owner.export(&f.cap, &f.keys, &ok, NOW).is_ok());

    // Signed by another key than the object's kuid key.
    let other = SigningKey::generate(SigningScheme::Ed25519, &mut rng(9));
    let forged = Cap::mint(*f.cap.grant(), &other).unwrap();
    assert!(matches!(
        f.owner.export(&forged, &f.keys, &ok, NOW),
        Err(ExportError::Cap(VerifyError::BadSignature))
    ));
    // No key for the target.
    let stranger = Cap::mint(
        CapGrant::new(ObjID::new(1), f.ctx, Protections::READ),
        &f.key,
    )
    .unwrap();
    assert!(matches!(
        f.owner.export(&stranger, &f.keys, &ok, NOW),
        Err(ExportError::Key(KeySourceError::Lookup(
            KeyLookupError::NoKuid(_)
        )))
    ));
    // For another context.
    let err = f
        .owner
        .export(
            &f.cap,
            &f.keys,
            &ExportRequest {
                context: ObjID::new(5),
                ..ok
            },
            NOW,
        )
        .unwrap_err();
    assert!(matches!(err, ExportError::WrongContext { .. }), "{err}");
    // Expired.
    let mut g = *f.cap.grant();
    g.expires = Expiry::from_raw(NOW);
    let expired = Cap::mint(g, &f.key).unwrap();
    assert!(matches!(
        f.owner.export(&expired, &f.keys, &ok, NOW),
        Err(ExportError::Cap(VerifyError::Expired { .. }))
    ));
}

#[test]
fn the_guard_lies_within_the_capability() {
    let f = fixture();
    // A read-only capability for bytes 4096..8192 of the object, expiring at NOW + 50.
    let mut g = CapGrant::new(f.object, f.ctx, Protections::READ);
    g.gate = Gate::new(4096, 4096, 1).unwrap();
    g.expires = Expiry::from_raw(NOW + 50);
    let cap = Cap::mint(g, &f.key).unwrap();
    let ask = |rights, range| {
        f.owner
            .export(&cap, &f.keys, &request(&f, rights, range), NOW)
    };

    assert!(matches!(
        ask(Rights::READ | Rights::WRITE, range(4096, 4096)),
        Err(ExportError::RightsExceeded { .. })
    ));
    assert!(matches!(
        ask(Rights::READ, range(0, 8192)),
        Err(ExportError::OutOfRange { .. })
    ));
    assert!(matches!(
        ask(Rights::READ, range(4096, 4097)),
        Err(ExportError::OutOfRange { .. })
    ));
    // Guard rights need no protections; the expiry is clamped to the capability's.
    let t = ask(
        Rights::READ | Rights::DERIVE | Rights::REVOKE,
        range(4096, 4096),
    )
    .unwrap();
    assert_eq!(t.scope().expires, Expiry::from_raw(NOW + 50));
    assert!(f.owner.check(&t, Op::Read, 4096, 4096, NOW).is_ok());
    assert!(f.owner.check(&t, Op::Read, 4096, 1, NOW + 50).is_err());
    // An explicit expiry in the past is refused.
    let past = ExportRequest {
        context: f.ctx,
        scope: Scope::new(Rights::READ, range(4096, 1), Expiry::from_raw(NOW)),
    };
    assert!(matches!(
        f.owner.export(&cap, &f.keys, &past, NOW),
        Err(ExportError::Expired { .. })
    ));
}

#[test]
fn keys_from_a_secctx_store() {
    let store = MemStore::new();
    let mut r = rng(3);
    let (ids, key) = keypair::create_keypair(
        &store,
        SigningScheme::Ed25519,
        None,
        KdfParams::DEFAULT,
        &mut r,
    )
    .unwrap();
    let object = ObjID::new(0x0b1);
    store
        .create(&Object {
            id: object,
            meta: ObjMeta::signed_by(ids.verifying),
            data: vec![0; 8192],
        })
        .unwrap();
    let plain = ObjID::new(0x0b2);
    store
        .create(&Object {
            id: plain,
            meta: ObjMeta::plain(),
            data: Vec::new(),
        })
        .unwrap();
    let ctx = ObjID::new(0xc7);
    let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
    let owner = owner(ControllerId::new(1, 1), GuardTableConfig::default());
    let req = ExportRequest::new(ctx, Rights::READ, ByteRange::WHOLE);

    let keys = StoreKeys::new(&store).unwrap();
    let t = owner.export(&cap, &keys, &req, NOW).unwrap();
    assert!(owner.check(&t, Op::Read, 0, 8192, NOW).is_ok());

    // An object without a kuid cannot be exported.
    let no_kuid = Cap::mint(CapGrant::new(plain, ctx, Protections::READ), &key).unwrap();
    assert!(matches!(
        owner.export(&no_kuid, &keys, &req, NOW),
        Err(ExportError::Key(KeySourceError::Lookup(
            KeyLookupError::NoKuid(_)
        )))
    ));

    // The capability is revoked in the store's list: export refuses, and the service revokes
    // the guards already exported from it.
    RevocationList::add(&store, |l| l.records.insert(cap.id())).unwrap();
    let keys = StoreKeys::new(&store).unwrap();
    assert!(matches!(
        owner.export(&cap, &keys, &req, NOW),
        Err(ExportError::CapRevoked(_))
    ));
    assert_eq!(owner.revoke_source(&cap.id()).unwrap().guards_revoked, 1);
    assert!(owner.check(&t, Op::Read, 0, 1, NOW).is_err());

    // The key is revoked.
    RevocationList::add(&store, |l| l.keys.insert(ids.verifying)).unwrap();
    let keys = StoreKeys::new(&store).unwrap();
    assert!(matches!(
        owner.export(&cap, &keys, &req, NOW),
        Err(ExportError::Key(KeySourceError::Lookup(
            KeyLookupError::KeyRevoked(_)
        )))
    ));
}
