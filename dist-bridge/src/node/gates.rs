//! Per-object revocation gates. An invocation holds its object's gate shared from before its
//! check until its effect is done; a revocation holds the gate of the object whose guards it
//! revokes exclusively. So a revocation waits only for invocations on its object, and an
//! invocation it lets through has completed when it returns.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use twizzler_capsec::ObjID;

use crate::owner::{InvokeError, Owner, RevokeReport};
use crate::token::GuardedToken;

/// One gate per object, kept in the map (so that invocations one after another on the same
/// object find the gate made for the first, without allocating one or taking the map's write
/// lock each time) until the map grows to [`SWEEP_AT`] entries and nobody holds it.
#[derive(Debug, Default)]
pub(super) struct Gates {
    map: RwLock<HashMap<ObjID, Arc<Gate>>>,
}

/// An object's gate.
pub(super) type Gate = tokio::sync::RwLock<()>;

/// Entries kept before those nobody holds are swept.
const SWEEP_AT: usize = 1024;

impl Gates {
    /// The gate of `object`: the one in the map, if any, else a new one. (Two holders of one
    /// object always get the same gate: a holder's gate is only ever taken from the map, under
    /// its lock; an entry is removed only under the write lock, when the map's is its only
    /// reference, so nobody holds it and nobody can take it meanwhile; and a new one is only
    /// made under the write lock, after looking again.)
    pub(super) fn of(&self, object: ObjID) -> Arc<Gate> {
        // A panic elsewhere cannot leave the map half-updated: every change is one call.
        // The common case, an object invoked before, takes the shared lock only.
        if let Some(gate) = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&object)
        {
            return gate.clone();
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if let Some(gate) = map.get(&object) {
            return gate.clone();
        }
        if map.len() >= SWEEP_AT {
            map.retain(|_, g| Arc::strong_count(g) > 1);
        }
        let gate = Arc::new(Gate::default());
        map.insert(object, gate.clone());
        gate
    }
}

/// A `Revoke` of `token`: [`Owner::revoke`] with the gate of the token's object held
/// exclusively, so that it returns only after every invocation on the object it let through
/// has completed. The token is checked first ([`Owner::check_revoke`]: its tag is a keyed
/// hash, cheap to check and impossible to forge): the object a token names is only known to
/// be its object once the tag verifies, and the gate is only for revocations that will
/// happen, so a forged or useless token never waits for, nor holds up, that object's
/// invocations.
pub(super) async fn revoke(
    owner: &Owner,
    gates: &Gates,
    token: &GuardedToken,
    now: u64,
) -> Result<RevokeReport, InvokeError> {
    owner.check_revoke(token, now)?;
    let gate = gates.of(token.object());
    let _held = gate.write().await;
    owner.revoke(token, now)
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use rand_core::SeedableRng;
    use twizzler_capsec::{Cap, CapGrant, Protections, SigningKey, SigningScheme};

    use super::*;
    use crate::controller::ControllerId;
    use crate::crypto::NodeSecret;
    use crate::keys::MapKeys;
    use crate::owner::ExportRequest;
    use crate::rights::{ByteRange, Rights};
    use crate::table::GuardTableConfig;

    const NOW: u64 = 1_000_000_000;

    /// Polls `f` once: `Ready` only if it finished without waiting for anything.
    fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
        pin!(f)
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
    }

    /// An owner and a token for object 1 that may revoke.
    fn owner_and_token() -> (Owner, GuardedToken) {
        let (object, ctx) = (ObjID::new(1), ObjID::new(0xc7));
        let key = SigningKey::generate(
            SigningScheme::Ed25519,
            &mut rand_chacha::ChaCha20Rng::seed_from_u64(2),
        );
        let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
        let keys = MapKeys([(object, key.verifying_key())].into());
        let owner = Owner::new(
            ControllerId::new(1, 1),
            NodeSecret::generate().unwrap(),
            GuardTableConfig::default(),
        )
        .unwrap();
        let request = ExportRequest::new(ctx, Rights::READ | Rights::REVOKE, ByteRange::WHOLE);
        let token = owner.export(&cap, &keys, &request, NOW).unwrap();
        (owner, token)
    }

    /// Issue 25, defect 2: a revocation whose token the owner did not issue (a wrong tag) is
    /// refused at once, even while an invocation on the object it names is in flight; a
    /// genuine one waits for that invocation.
    #[test]
    fn a_forged_revoke_does_not_wait_for_the_gate() {
        let (owner, token) = owner_and_token();
        let gates = Gates::default();
        let mut bytes = token.encode();
        if let Some(last) = bytes.last_mut() {
            *last ^= 1;
        }
        let forged = GuardedToken::decode(&bytes).unwrap();
        assert_eq!(forged.object(), token.object());

        // An invocation on the object is in flight: it holds the gate shared.
        let invoking = gates.of(token.object()).try_read_owned().unwrap();
        match poll_once(revoke(&owner, &gates, &forged, NOW)) {
            Poll::Ready(r) => assert_eq!(r, Err(InvokeError::BadTag)),
            Poll::Pending => panic!("a forged revoke waited for an invocation in flight"),
        }
        // So is a genuine token without `REVOKE`: it would revoke nothing.
        let read_only = token.with_rights(Rights::READ).unwrap();
        match poll_once(revoke(&owner, &gates, &read_only, NOW)) {
            Poll::Ready(r) => assert!(matches!(r, Err(InvokeError::RightsExceeded { .. }))),
            Poll::Pending => panic!("a revoke without REVOKE waited for an invocation in flight"),
        }
        // A revocation that will happen waits for the invocation.
        assert!(
            poll_once(revoke(&owner, &gates, &token, NOW)).is_pending(),
            "a genuine revoke passed an invocation in flight"
        );
        drop(invoking);
        match poll_once(revoke(&owner, &gates, &token, NOW)) {
            Poll::Ready(r) => assert_eq!(r.map(|r| r.guards_revoked), Ok(1)),
            Poll::Pending => panic!("a genuine revoke waited with no invocation in flight"),
        }
        // Revoked now: a second revoke with it is refused without waiting either.
        let _again = gates.of(token.object()).try_read_owned().unwrap();
        assert!(matches!(
            poll_once(revoke(&owner, &gates, &token, NOW)),
            Poll::Ready(Err(InvokeError::Revoked { .. }))
        ));
    }

    #[tokio::test]
    async fn a_revocation_waits_only_for_its_own_object() {
        let gates = Gates::default();
        let (a, b) = (ObjID::new(1), ObjID::new(2));
        // An invocation on A in progress.
        let invoking = gates.of(a).read_owned().await;
        // A revocation on B goes through at once.
        tokio::time::timeout(Duration::from_secs(5), gates.of(b).write_owned())
            .await
            .expect("a revocation on B waited for an invocation on A");
        // A revocation on A waits for it: polled once, it is pending (no sleep: the poll
        // itself would take the gate if nothing held it).
        let mut waiting = Box::pin(gates.of(a).write_owned());
        let pending = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(waiting.as_mut().poll(cx).is_pending())
        })
        .await;
        assert!(pending, "a revocation on A passed an invocation on A");
        drop(invoking);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the revocation on A never went through");
    }

    #[test]
    fn holders_of_one_object_share_its_gate_and_unheld_gates_are_swept() {
        let gates = Gates::default();
        let held = gates.of(ObjID::new(7));
        assert!(Arc::ptr_eq(&held, &gates.of(ObjID::new(7))));
        // An invocation after the last one ended finds the same gate: none is made for it.
        let first = std::sync::Arc::downgrade(&gates.of(ObjID::new(8)));
        let again = gates.of(ObjID::new(8));
        assert!(first.upgrade().is_some_and(|g| Arc::ptr_eq(&g, &again)));
        drop(again);
        for i in 0..(2 * SWEEP_AT as u128) {
            drop(gates.of(ObjID::new(1000 + i)));
        }
        let map = gates.map.read().expect("map");
        assert!(
            map.len() <= SWEEP_AT + 1,
            "unheld gates kept: {}",
            map.len()
        );
        assert!(
            map.get(&ObjID::new(7))
                .is_some_and(|g| Arc::ptr_eq(g, &held)),
            "a held gate is never swept"
        );
    }
}
