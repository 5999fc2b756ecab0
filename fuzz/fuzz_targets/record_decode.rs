//! `Record::decode` for both kinds on the same bytes, then the record API and `verify`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{Cap, Del, Record, RecordId, RecordKind, VerifyError};
use twizzler_capsec_fuzz::{FuzzAuthority, le_u64_at};

fuzz_target!(|data: &[u8]| {
    let as_cap = Record::decode(RecordKind::Cap, data);
    let as_del = Record::decode(RecordKind::Del, data);
    // The magics differ, so no input is both.
    assert!(
        !(as_cap.is_ok() && as_del.is_ok()),
        "bytes decode as both kinds"
    );
    assert_eq!(as_cap.is_ok(), Cap::decode(data).is_ok());
    assert_eq!(as_del.is_ok(), Del::decode(data).is_ok());
    for kind in [0u32, 1, 2, u32::MAX] {
        if let Ok(k) = RecordKind::from_raw(kind) {
            assert_eq!(k.raw(), kind);
        }
    }

    let first = data.first().copied().unwrap_or(0);
    for (kind, rec) in [(RecordKind::Cap, as_cap), (RecordKind::Del, as_del)] {
        let Ok(rec) = rec else { continue };
        assert_eq!(rec.kind(), kind);
        assert_eq!(rec.id(), RecordId::of(data));
        let _ = (
            rec.target(),
            rec.holder(),
            rec.prots(),
            rec.gate(),
            rec.expires(),
        );
        let _ = format!("{rec:?}");

        // Revocation by the record's own id always wins (checked before any signature work).
        let own = FuzzAuthority::without_memo(Some(rec.id().0[0]));
        assert!(rec.is_revoked(&own));
        assert_eq!(rec.verify(&own, 1), Err(VerifyError::Revoked));
        assert!(!rec.is_revoked(&FuzzAuthority::plain()));

        // The memo must not change the outcome: verify twice with one memoising authority
        // (the second time skips signatures if the first succeeded) and once without.
        let revoke = data.get(data.len() / 3).copied().filter(|b| b % 3 == 0);
        let expires = rec.expires().raw();
        let memo = FuzzAuthority::with_memo(revoke);
        // The third time is one of a few interesting ones (mostly expired, so cheap).
        let third = match first % 4 {
            0 => le_u64_at(data, 66),
            1 => expires,
            2 => u64::MAX,
            _ => 0,
        };
        for now in [1, expires.wrapping_sub(1).max(1), third] {
            let fresh = FuzzAuthority::without_memo(revoke);
            let want = rec.verify(&fresh, now);
            if revoke.is_none() {
                assert_ne!(want, Err(VerifyError::Revoked));
            }
            assert_eq!(rec.verify(&memo, now), want);
            assert_eq!(rec.verify(&memo, now), want, "memoised verify differs");
            if want.is_ok() {
                assert!(!rec.expires().is_expired(now));
            }
        }
    }
});
