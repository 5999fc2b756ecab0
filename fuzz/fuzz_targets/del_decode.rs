//! `Del::decode` on arbitrary bytes: total, canonical, and safe to check and verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{Del, MAX_CHAIN_DEPTH, Record, RecordId, RecordKind, VerifyError, del_len};
use twizzler_capsec_fuzz::{keys, le_u64_at};

fuzz_target!(|data: &[u8]| {
    let decoded = Del::decode(data);
    match (&decoded, Record::decode(RecordKind::Del, data)) {
        (Ok(d), Ok(Record::Del(r))) => assert_eq!(*d, r),
        (Err(e), Err(f)) => assert_eq!(*e, f),
        (d, r) => panic!("Del::decode and Record::decode(Del) disagree: {d:?} vs {r:?}"),
    }
    let Ok(del) = decoded else { return };

    // Shape.
    let depth = del.depth();
    assert!((1..=MAX_CHAIN_DEPTH).contains(&depth));
    assert_eq!(del.links().count(), depth);
    assert_eq!(del.encoded_len(), del_len(depth));
    assert_eq!(data.len(), del_len(depth));

    // Canonical round trip.
    let enc = del.encode();
    assert_eq!(&enc[..], data, "encode(decode(b)) != b");
    let mut buf = vec![0u8; data.len()];
    assert_eq!(del.encode_to(&mut buf), Some(data.len()));
    assert_eq!(buf, data);
    if !data.is_empty() {
        assert_eq!(del.encode_to(&mut buf[..data.len() - 1]), None);
    }
    assert_eq!(Del::decode(&enc).as_ref(), Ok(&del));

    // Ids: the root's, then one per prefix, ending with this delegation's own id.
    let mut ids: Vec<RecordId> = Vec::new();
    assert!(!del.any_prefix_id(|id| {
        ids.push(*id);
        false
    }));
    assert_eq!(ids.len(), depth + 1);
    assert_eq!(ids[0], del.root().id());
    assert_eq!(*ids.last().unwrap(), RecordId::of(data));
    assert_eq!(del.id(), RecordId::of(data));
    // Early stop.
    let mut calls = 0;
    assert!(del.any_prefix_id(|_| {
        calls += 1;
        calls == 2
    }));
    assert_eq!(calls, 2);

    // Signed messages exist exactly for the links.
    for i in 0..depth {
        assert!(del.signed_message(i).is_some());
    }
    assert!(del.signed_message(depth).is_none());

    // Accessors and formatting.
    let _ = (
        del.target(),
        del.receiver(),
        del.provider(),
        del.prots(),
        del.gate(),
    );
    let expires = del.expires();
    assert!(expires.within(del.root().expires()));
    for l in del.links() {
        assert!(expires.within(l.grant().expires));
        let _ = (l.provider(), l.signature());
    }
    let _ = format!("{del:?}");

    // Chain checks at a few times, and signatures under the fixed key map.
    let root_exp = del.root().expires().raw();
    for now in [
        0,
        1,
        root_exp,
        root_exp.wrapping_sub(1),
        expires.raw(),
        u64::MAX,
        le_u64_at(data, 8),
    ] {
        match del.check_chain(now) {
            Ok(()) => {
                // A continuous, attenuating chain that has not expired: the last link's
                // expiry is the earliest, and nothing is expired at `now`.
                assert!(!expires.is_expired(now));
                assert_eq!(expires, del.last_expiry_for_test());
            }
            Err(VerifyError::BrokenChain { link } | VerifyError::Amplifies { link, .. }) => {
                assert!((1..=depth).contains(&link));
            }
            Err(_) => {}
        }
    }
    let k = keys();
    let res = del.verify_signatures(|obj| k.key_for(obj));
    if res.is_ok() {
        // Every signature verified, so the root's does on its own.
        assert_eq!(
            del.root()
                .verify_signature(k.key_for(del.target()).unwrap()),
            Ok(())
        );
    }
});

trait LastExpiry {
    fn last_expiry_for_test(&self) -> twizzler_capsec::Expiry;
}

impl LastExpiry for Del {
    fn last_expiry_for_test(&self) -> twizzler_capsec::Expiry {
        self.links().last().map(|l| l.grant().expires).unwrap()
    }
}
