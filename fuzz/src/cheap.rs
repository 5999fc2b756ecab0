//! [`CheapAuthority`]: an [`Authority`] that answers every signature check from the check's id,
//! without signature work, so the rule, the reader and the editor are fuzzed at full speed.
//!
//! # How a check is answered
//!
//! The rule asks an authority about a signature check only through its id, a BLAKE3 hash:
//! [`cap_check_id`](twizzler_capsec::cap_check_id)`(key, record id)` for a capability (the
//! record id hashes its body and signature), and
//! [`signature_check_id`](twizzler_capsec::signature_check_id)`(key, message, signature)` for
//! each signature of a delegation; first [`Authority::is_verified`], then [`Authority::is_known_bad`], then
//! [`Authority::may_verify`] before it would verify for real. The trait never shows the
//! authority the signature bytes, so a "cheap relation between signature and message" cannot
//! be checked here; the id is all there is. A [`CheckRule`], chosen by one input byte, maps
//! the id to an outcome:
//!
//! - `0x00..=0x3f`: every check passes (the mode the seeds use: the whole rule past the
//!   signatures is reachable, with any record the fuzzer builds or mutates);
//! - `0x40..=0x7f`: every check fails (`BadSignature`);
//! - `0x80..=0xbf`: a check passes iff the first byte of its id is below `4 × (b & 63)`, and
//!   fails otherwise: a mix that is a pure function of the check (its key and what it signs), so a record
//!   keeps its outcome through re-encoding and a mutation of any signed byte re-draws it;
//! - `0xc0..=0xff`: the same split, but the checks that do not pass are left unanswered and
//!   `may_verify` refuses, so they come back as `Unchecked` (the budget path of the rule).
//!
//! No check ever reaches real verification: `may_verify` is always `false`, and
//! `remember_verified` / `remember_failed` panic (they are only called after a real check).
//! The verifying keys are still the fixtures' (built once per process), because the check id
//! hashes the key: a record signed "by" another object's key gets another id.

use twizzler_capsec::{Authority, KeyLookupError, ObjID, RecordId, VerifyingKey};

use crate::{Keys, keys};

/// What a [`CheckRule`] says about one signature check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The check passes (`is_verified`).
    Pass,
    /// The check fails (`is_known_bad`).
    Fail,
    /// No answer; `may_verify` refuses, so the check is `Unchecked`.
    Unanswered,
}

/// How a [`CheapAuthority`] answers checks; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckRule(u8);

impl CheckRule {
    /// Every check passes.
    pub const ALL_PASS: Self = Self(0);
    /// Every check fails.
    pub const ALL_FAIL: Self = Self(0x40);

    /// The rule selected by an input byte.
    pub const fn from_byte(b: u8) -> Self {
        Self(b)
    }

    /// The selector byte (what the seed generator writes).
    pub const fn byte(self) -> u8 {
        self.0
    }

    /// The outcome of the check with id `id`.
    pub fn outcome(self, id: &RecordId) -> CheckOutcome {
        let below = u16::from(self.0 & 0x3f) * 4;
        match self.0 >> 6 {
            0 => CheckOutcome::Pass,
            1 => CheckOutcome::Fail,
            mode => {
                if u16::from(id.0[0]) < below {
                    CheckOutcome::Pass
                } else if mode == 2 {
                    CheckOutcome::Fail
                } else {
                    CheckOutcome::Unanswered
                }
            }
        }
    }
}

/// An [`Authority`] over the fixture keys whose signature checks are answered by a
/// [`CheckRule`]; revocation as in [`crate::FuzzAuthority`] (first id byte equals
/// `revoke_byte`).
#[derive(Clone, Copy)]
pub struct CheapAuthority {
    keys: &'static Keys,
    rule: CheckRule,
    revoke_byte: Option<u8>,
}

impl CheapAuthority {
    /// An authority answering checks by `rule`, revoking ids whose first byte is
    /// `revoke_byte`.
    pub fn new(rule: CheckRule, revoke_byte: Option<u8>) -> Self {
        Self {
            keys: keys(),
            rule,
            revoke_byte,
        }
    }

    /// The rule it answers by.
    pub fn rule(&self) -> CheckRule {
        self.rule
    }
}

impl Authority for CheapAuthority {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        self.keys.key_for(obj)
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoke_byte.is_some_and(|b| id.0[0] == b)
    }

    fn is_verified(&self, id: &RecordId) -> bool {
        self.rule.outcome(id) == CheckOutcome::Pass
    }

    fn is_known_bad(&self, id: &RecordId) -> bool {
        self.rule.outcome(id) == CheckOutcome::Fail
    }

    fn may_verify(&self) -> bool {
        false
    }

    fn remember_verified(&self, _id: &RecordId) {
        panic!("the cheap authority never lets a signature be verified");
    }

    fn remember_failed(&self, _id: &RecordId) {
        panic!("the cheap authority never lets a signature be verified");
    }
}
