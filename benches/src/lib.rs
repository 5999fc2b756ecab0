//! Shared fixtures for the criterion benchmarks in `benches/benches/`.

use twizzler_security::{Authority, KeyLookupError, ObjID, VerifyingKey};

/// An authority that knows one object's key, with no revocation and no verification memo
/// (every decision verifies the signature): the uncached cost of the rule.
pub struct OneKey(pub ObjID, pub VerifyingKey);

impl Authority for OneKey {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        if obj == self.0 {
            Ok(&self.1)
        } else {
            Err(KeyLookupError::NoKuid(obj))
        }
    }
}
