//! The engine's [`Authority`]: keys and revocations from the host, the memory of signature
//! checks, and a record of what was consulted.

use core::cell::{Cell, RefCell};

use twizzler_capsec::{Authority, KeyLookupError, ObjID, RecordId, VerifyingKey};

use crate::cache::Deps;
use crate::host::{Host, ObjectInfo};
use crate::memo::RecordMemo;
use crate::stats::Counters;

/// An [`Authority`] for one evaluation of one object, noting every key object and record id
/// it is asked about so the resulting cache entry knows what it depends on.
pub(crate) struct EngineAuthority<'e, H: Host> {
    pub host: &'e H,
    pub memo: &'e RecordMemo,
    /// Signature checks that failed.
    pub failed: &'e RecordMemo,
    /// Signature verifications this fault may still do.
    pub budget: &'e Cell<u32>,
    pub counters: &'e Counters,
    /// The faulting object, and its metadata if it came with the fault (else the host is
    /// asked, like for any other object).
    pub target: ObjID,
    pub target_object: Option<ObjectInfo>,
    pub deps: RefCell<Deps>,
}

impl<H: Host> Authority for EngineAuthority<'_, H> {
    fn with_key<R>(
        &self,
        obj: ObjID,
        f: impl FnOnce(&VerifyingKey) -> R,
    ) -> Result<R, KeyLookupError> {
        let kuid = match self.target_object {
            Some(o) if obj == self.target => o.kuid,
            _ => self.host.object(obj).and_then(|o| o.kuid),
        }
        .ok_or(KeyLookupError::NoKuid(obj))?;
        self.deps.borrow_mut().add_kuid(kuid);
        if self.host.key_revoked(kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.host
            .with_key(kuid, f)
            .ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.deps.borrow_mut().add_record(id);
        self.host.record_revoked(id)
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

    fn is_known_bad(&self, id: &RecordId) -> bool {
        let known = self.failed.contains(id);
        if known {
            Counters::bump(&self.counters.failed_memo_hits);
        }
        known
    }

    fn remember_failed(&self, id: &RecordId) {
        Counters::bump(&self.counters.failed_verifies);
        self.failed.insert(id);
    }

    fn may_verify(&self) -> bool {
        match self.budget.get().checked_sub(1) {
            Some(left) => {
                self.budget.set(left);
                true
            }
            None => false,
        }
    }
}
