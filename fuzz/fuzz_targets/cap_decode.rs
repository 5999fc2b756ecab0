//! `Cap::decode` on arbitrary bytes: total, canonical, and safe to verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{CAP_LEN, Cap, Record, RecordId, RecordKind};
use twizzler_capsec_fuzz::{keys, le_u64_at};

fuzz_target!(|data: &[u8]| {
    let decoded = Cap::decode(data);
    // Record::decode(Cap, ..) must agree with Cap::decode.
    match (&decoded, Record::decode(RecordKind::Cap, data)) {
        (Ok(c), Ok(Record::Cap(r))) => assert_eq!(*c, r),
        (Err(e), Err(f)) => assert_eq!(*e, f),
        (d, r) => panic!("Cap::decode and Record::decode(Cap) disagree: {d:?} vs {r:?}"),
    }
    let Ok(cap) = decoded else { return };

    // Canonical round trip: exactly one encoding per capability.
    assert_eq!(data.len(), CAP_LEN);
    let enc = cap.encode();
    assert_eq!(&enc[..], data, "encode(decode(b)) != b");
    assert_eq!(Cap::decode(&enc), Ok(cap));
    assert_eq!(cap.id(), RecordId::of(data));

    // The ownership flag (`docs/DIFC.md` §2.1): only PLUS|MINUS and the whole gate with it,
    // and ALL_CONTEXTS as the holder only with it.
    if cap.is_ownership() {
        assert!(cap.prots().bits() & !3 == 0 && cap.gate() == twizzler_capsec::Gate::WHOLE);
    } else {
        assert_ne!(cap.accessor(), twizzler_capsec::ALL_CONTEXTS);
    }

    // Accessors and formatting must not panic.
    let _ = (cap.target(), cap.accessor(), cap.prots(), cap.hash_alg());
    let _ = (cap.signed_message(), cap.grant().signed_message());
    let _ = format!("{cap:?} {} {}", cap.gate(), cap.expires());

    // Verification under both fixed keys. Signature checks are the expensive part, so each
    // key's signature result is computed once; `verify` (expiry, then signature) is checked
    // against it at one time before and one after the expiry.
    let k = keys();
    let sig_ed = cap.verify_signature(&k.ed25519);
    let sig_p = cap.verify_signature(&k.p256);
    // At most one scheme can verify a signature.
    assert!(
        !(sig_ed.is_ok() && sig_p.is_ok()),
        "one signature verified under both schemes"
    );
    let expires = cap.expires().raw();
    // (A key of the other scheme fails fast with SchemeMismatch, so this costs at most two
    // more signature checks.)
    for (key, sig) in [(&k.ed25519, sig_ed), (&k.p256, sig_p)] {
        for now in [expires.wrapping_sub(1).max(1), u64::MAX] {
            let want = cap.check_expiry(now).and(sig);
            assert_eq!(cap.verify(key, now), want);
        }
    }
    for now in [0, 1, expires, le_u64_at(data, 66)] {
        assert_eq!(
            cap.check_expiry(now).is_err(),
            cap.expires().is_expired(now)
        );
    }
});
