//! The engine's [`Authority`]: keys through the host, revocations, the verification memo, and
//! a record of what was consulted.

use core::cell::RefCell;

use spin::RwLock;
use twizzler_security::{Authority, KeyLookupError, ObjID, RecordId, VerifyingKey};

use crate::cache::Deps;
use crate::host::Host;
use crate::memo::RecordMemo;
use crate::revocation::Revocations;
use crate::stats::Counters;

/// An [`Authority`] for one evaluation, noting every key object and record id it is asked
/// about so the resulting cache entry knows what it depends on.
pub(crate) struct EngineAuthority<'e, H: Host> {
    pub host: &'e H,
    pub revoked: &'e RwLock<Revocations>,
    pub memo: &'e RecordMemo,
    pub counters: &'e Counters,
    pub deps: RefCell<Deps>,
}

impl<H: Host> Authority for EngineAuthority<'_, H> {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        let kuid = self
            .host
            .object(obj)
            .and_then(|o| o.kuid)
            .ok_or(KeyLookupError::NoKuid(obj))?;
        self.deps.borrow_mut().add_kuid(kuid);
        if self.revoked.read().key_revoked(kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.host
            .verifying_key(kuid)
            .ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.deps.borrow_mut().add_record(id);
        self.revoked.read().record_revoked(id)
    }

    fn is_verified(&self, id: &RecordId) -> bool {
        let known = self.memo.contains(id);
        if known {
            Counters::bump(&self.counters.memo_hits);
        }
        known
    }

    fn remember_verified(&self, id: &RecordId) {
        Counters::bump(&self.counters.verifies);
        self.memo.insert(id);
    }
}
