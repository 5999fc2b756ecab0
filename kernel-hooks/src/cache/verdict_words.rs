//! A record's [`Verdict`] as three mirror words, so a repeated denial is explained without
//! the set's lock.
//!
//! Layout: word 0 holds the tag (bits 0-7), a sub-tag for [`Verdict::Invalid`] (bits 8-15)
//! and small payloads (bits 16-31: rights, or an [`Amplification`]); words 1 and 2 hold an
//! object id (low, high half) or two numbers (an expiry and its check time, a chain link).
//!
//! Not every verdict is encoded: a [`Verdict::Malformed`] names a static string, and
//! `VerifyError` may grow variants. Those are written as [`UNCODABLE`], and a reader that
//! finds it explains the denial the slow way (under the lock). Decoding is total: any three
//! words give a verdict, "none", or "not here", never a panic, since a lock-free reader may
//! read words from two writes before its sequence check throws them away.

use twizzler_capsec::{Amplification, KeyLookupError, ObjID, Protections, Verdict, VerifyError};

/// Words one verdict takes.
pub(super) const VERDICT_WORDS: usize = 3;

const NONE: u64 = 0;
const COUNTED: u64 = 1;
const REDUNDANT: u64 = 2;
const WRONG_TARGET: u64 = 3;
const WRONG_HOLDER: u64 = 4;
const OUTSIDE_GATE: u64 = 5;
const NOT_AN_ENTRY: u64 = 6;
const NO_USEFUL_RIGHTS: u64 = 7;
const INVALID: u64 = 8;
const OWNERSHIP: u64 = 9;
/// A verdict the words do not carry.
pub(super) const UNCODABLE: u64 = 0xff;

// Sub-tags of `INVALID`.
const EXPIRED: u64 = 1;
const SCHEME_MISMATCH: u64 = 2;
const MALFORMED_SIGNATURE: u64 = 3;
const BAD_SIGNATURE: u64 = 4;
const NO_KUID: u64 = 5;
const UNKNOWN_KEY: u64 = 6;
const KEY_REVOKED: u64 = 7;
const REVOKED: u64 = 8;
const BROKEN_CHAIN: u64 = 9;
const UNCHECKED: u64 = 10;
const AMPLIFIES: u64 = 11;

fn id_words(id: ObjID) -> (u64, u64) {
    (id.raw() as u64, (id.raw() >> 64) as u64)
}

fn id_of(lo: u64, hi: u64) -> ObjID {
    ObjID::new(u128::from(lo) | (u128::from(hi) << 64))
}

fn invalid(sub: u64, small: u64, p0: u64, p1: u64) -> [u64; VERDICT_WORDS] {
    [INVALID | (sub << 8) | (small << 16), p0, p1]
}

/// The words of `v` (`None`: no verdict); `[UNCODABLE, 0, 0]` for one they do not carry.
pub(super) fn encode(v: Option<Verdict>) -> [u64; VERDICT_WORDS] {
    let uncodable = [UNCODABLE, 0, 0];
    let Some(v) = v else {
        return [NONE, 0, 0];
    };
    match v {
        Verdict::Counted(p) => [COUNTED | (u64::from(p.bits()) << 16), 0, 0],
        Verdict::Redundant => [REDUNDANT, 0, 0],
        Verdict::Malformed(_) => uncodable,
        Verdict::WrongTarget(id) => {
            let (lo, hi) = id_words(id);
            [WRONG_TARGET, lo, hi]
        }
        Verdict::WrongHolder(id) => {
            let (lo, hi) = id_words(id);
            [WRONG_HOLDER, lo, hi]
        }
        Verdict::OutsideGate => [OUTSIDE_GATE, 0, 0],
        Verdict::NotAnEntry => [NOT_AN_ENTRY, 0, 0],
        Verdict::NoUsefulRights => [NO_USEFUL_RIGHTS, 0, 0],
        Verdict::Ownership => [OWNERSHIP, 0, 0],
        Verdict::Invalid(e) => match e {
            VerifyError::Expired { expires, now } => invalid(EXPIRED, 0, expires, now),
            VerifyError::SchemeMismatch => invalid(SCHEME_MISMATCH, 0, 0, 0),
            VerifyError::MalformedSignature => invalid(MALFORMED_SIGNATURE, 0, 0, 0),
            VerifyError::BadSignature => invalid(BAD_SIGNATURE, 0, 0, 0),
            VerifyError::Key(k) => {
                let (sub, id) = match k {
                    KeyLookupError::NoKuid(id) => (NO_KUID, id),
                    KeyLookupError::UnknownKey(id) => (UNKNOWN_KEY, id),
                    KeyLookupError::KeyRevoked(id) => (KEY_REVOKED, id),
                    // A variant added later: explained under the lock.
                    _ => return uncodable,
                };
                let (lo, hi) = id_words(id);
                invalid(sub, 0, lo, hi)
            }
            VerifyError::Revoked => invalid(REVOKED, 0, 0, 0),
            VerifyError::BrokenChain { link } => invalid(BROKEN_CHAIN, 0, link as u64, 0),
            VerifyError::Unchecked => invalid(UNCHECKED, 0, 0, 0),
            VerifyError::Amplifies { link, what } => {
                let what = match what {
                    Amplification::Prots => 0,
                    Amplification::Gate => 1,
                    Amplification::Expiry => 2,
                };
                invalid(AMPLIFIES, what, link as u64, 0)
            }
            // A variant added later: explained under the lock.
            _ => uncodable,
        },
    }
}

/// The verdict `w` holds: `Some(None)` for none, `None` when the words do not carry it
/// ([`UNCODABLE`], or words that no [`encode`] wrote).
#[inline(always)]
pub(super) fn decode(w: [u64; VERDICT_WORDS]) -> Option<Option<Verdict>> {
    let [head, p0, p1] = w;
    let small = (head >> 16) as u16;
    let link = || usize::try_from(p0).ok();
    let v = match head & 0xff {
        NONE => return Some(None),
        COUNTED => Verdict::Counted(Protections::from_bits_retain(small)),
        REDUNDANT => Verdict::Redundant,
        WRONG_TARGET => Verdict::WrongTarget(id_of(p0, p1)),
        WRONG_HOLDER => Verdict::WrongHolder(id_of(p0, p1)),
        OUTSIDE_GATE => Verdict::OutsideGate,
        NOT_AN_ENTRY => Verdict::NotAnEntry,
        NO_USEFUL_RIGHTS => Verdict::NoUsefulRights,
        OWNERSHIP => Verdict::Ownership,
        INVALID => Verdict::Invalid(match (head >> 8) & 0xff {
            EXPIRED => VerifyError::Expired {
                expires: p0,
                now: p1,
            },
            SCHEME_MISMATCH => VerifyError::SchemeMismatch,
            MALFORMED_SIGNATURE => VerifyError::MalformedSignature,
            BAD_SIGNATURE => VerifyError::BadSignature,
            NO_KUID => VerifyError::Key(KeyLookupError::NoKuid(id_of(p0, p1))),
            UNKNOWN_KEY => VerifyError::Key(KeyLookupError::UnknownKey(id_of(p0, p1))),
            KEY_REVOKED => VerifyError::Key(KeyLookupError::KeyRevoked(id_of(p0, p1))),
            REVOKED => VerifyError::Revoked,
            BROKEN_CHAIN => VerifyError::BrokenChain { link: link()? },
            UNCHECKED => VerifyError::Unchecked,
            AMPLIFIES => VerifyError::Amplifies {
                link: link()?,
                what: match small {
                    0 => Amplification::Prots,
                    1 => Amplification::Gate,
                    2 => Amplification::Expiry,
                    _ => return None,
                },
            },
            _ => return None,
        }),
        _ => return None,
    };
    Some(Some(v))
}

/// Strategies for verdicts (every one the words carry).
#[cfg(test)]
pub(crate) mod strategies {
    // `prop_oneof!` of more than ten arms builds a `vec!`.
    use alloc::vec;
    use proptest::prelude::*;
    use twizzler_capsec::{
        Amplification, KeyLookupError, ObjID, Protections, Verdict, VerifyError,
    };

    pub(crate) fn verify_error() -> impl Strategy<Value = VerifyError> {
        let id = any::<u128>().prop_map(ObjID::new);
        prop_oneof![
            (any::<u64>(), any::<u64>())
                .prop_map(|(expires, now)| VerifyError::Expired { expires, now }),
            Just(VerifyError::SchemeMismatch),
            Just(VerifyError::MalformedSignature),
            Just(VerifyError::BadSignature),
            id.clone()
                .prop_map(|i| VerifyError::Key(KeyLookupError::NoKuid(i))),
            id.clone()
                .prop_map(|i| VerifyError::Key(KeyLookupError::UnknownKey(i))),
            id.prop_map(|i| VerifyError::Key(KeyLookupError::KeyRevoked(i))),
            Just(VerifyError::Revoked),
            any::<usize>().prop_map(|link| VerifyError::BrokenChain { link }),
            Just(VerifyError::Unchecked),
            (
                any::<usize>(),
                prop_oneof![
                    Just(Amplification::Prots),
                    Just(Amplification::Gate),
                    Just(Amplification::Expiry)
                ]
            )
                .prop_map(|(link, what)| VerifyError::Amplifies { link, what }),
        ]
    }

    pub(crate) fn verdict() -> impl Strategy<Value = Verdict> {
        let id = any::<u128>().prop_map(ObjID::new);
        prop_oneof![
            any::<u16>().prop_map(|b| Verdict::Counted(Protections::from_bits_retain(b))),
            Just(Verdict::Redundant),
            id.clone().prop_map(Verdict::WrongTarget),
            id.prop_map(Verdict::WrongHolder),
            Just(Verdict::OutsideGate),
            Just(Verdict::NotAnEntry),
            Just(Verdict::NoUsefulRights),
            verify_error().prop_map(Verdict::Invalid),
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use twizzler_capsec::{DecodeError, Verdict};

    use super::strategies::verdict;
    use super::{UNCODABLE, decode, encode};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Every verdict but a malformed record's comes back from its words.
        #[test]
        fn round_trip(v in prop::option::of(verdict())) {
            prop_assert_eq!(decode(encode(v)), Some(v));
        }

        /// Any words decode without panicking; a verdict read back encodes to words that
        /// decode to it again.
        #[test]
        fn any_words_decode(w in any::<[u64; 3]>()) {
            if let Some(v) = decode(w) {
                prop_assert_eq!(decode(encode(v)), Some(v));
            }
        }
    }

    #[test]
    fn malformed_is_not_carried() {
        let v = Verdict::Malformed(DecodeError::InvalidKey);
        assert_eq!(encode(Some(v))[0], UNCODABLE);
        assert_eq!(decode(encode(Some(v))), None);
    }
}
