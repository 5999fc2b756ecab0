//! The maintenance tick's application of the store's revocation list to the guard table.
//!
//! The list is read without any lock held; then [`Owner::note_store_revocations`] records it
//! in the owner, under the lock export creates guards under, and names the objects of the
//! live guards it reaches; then each of those objects' gates is taken and its guards revoked.
//! An export that read the list before the revocation either created its guard before the
//! note (the note finds it, the tick revokes it) or reaches the owner after it (and is
//! refused): whatever the interleaving, no guard from a revoked record or key outlives the
//! tick that saw the revocation (issue 25).

use secctx::ObjectStore;
use secctx::revocations::RevocationList;
use tracing::{info, warn};

use crate::owner::Owner;

use super::gates::Gates;

/// Revokes the guards exported from capabilities revoked in the store (by record id), and
/// the guards whose capability a revoked `kuid` key verified. Each revocation holds its
/// object's gate, as a `Revoke` does: an invocation it lets through has completed when it is
/// done. Runs on a blocking thread; no lock is held across the store read or a gate.
pub(super) fn apply<S: ObjectStore>(owner: &Owner, store: &S, gates: &Gates) {
    let list = match RevocationList::load(store) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "cannot read the store's revocation list");
            return;
        }
    };
    let objects = match owner.note_store_revocations(&list.records, &list.keys) {
        Ok(o) => o,
        Err(e) => {
            warn!(error = %e, "cannot record the store's revocations");
            return;
        }
    };
    for object in objects {
        let gate = gates.of(object);
        let _held = gate.blocking_write();
        match owner.revoke_store_revoked(object) {
            Ok(r) if r.guards_revoked > 0 => {
                info!(object = %object, guards = r.guards_revoked, "capability or key revoked in the store; guards revoked");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot revoke the guards of a revoked capability or key"),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand_core::SeedableRng;
    use secctx::keypair::{self, KdfParams};
    use secctx::{MemStore, ObjMeta, Object};
    use twizzler_capsec::{Cap, CapGrant, KeyLookupError, ObjID, Protections, SigningScheme};

    use super::*;
    use crate::controller::ControllerId;
    use crate::crypto::NodeSecret;
    use crate::keys::{KeySourceError, StoreKeys};
    use crate::owner::{ExportError, ExportRequest};
    use crate::rights::{ByteRange, Op, Rights};
    use crate::table::GuardTableConfig;

    const NOW: u64 = 1_000_000_000;

    struct World {
        store: MemStore,
        owner: Owner,
        gates: Gates,
        kuid: ObjID,
        cap: Cap,
        request: ExportRequest,
    }

    impl World {
        fn new() -> Self {
            let store = MemStore::new();
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(25);
            let (ids, key) = keypair::create_keypair(
                &store,
                SigningScheme::Ed25519,
                None,
                KdfParams::DEFAULT,
                &mut rng,
            )
            .unwrap();
            let object = ObjID::new(0x0b1);
            store
                .create(&Object {
                    id: object,
                    meta: ObjMeta::signed_by(ids.verifying),
                    data: vec![0; 64],
                })
                .unwrap();
            let ctx = ObjID::new(0xc7);
            let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
            let owner = Owner::new(
                ControllerId::new(1, 1),
                NodeSecret::generate().unwrap(),
                GuardTableConfig::default(),
            )
            .unwrap();
            Self {
                store,
                owner,
                gates: Gates::default(),
                kuid: ids.verifying,
                cap,
                request: ExportRequest::new(ctx, Rights::READ, ByteRange::WHOLE),
            }
        }

        fn tick(&self) {
            apply(&self.owner, &self.store, &self.gates);
        }

        fn live(&self) -> u32 {
            self.owner.stats().unwrap().live
        }
    }

    /// The interleaving of issue 25: the `Export` RPC reads the store's revocation list
    /// (`StoreKeys::new`), the record is revoked in the store, a maintenance tick runs, and
    /// only then does the export reach the owner. No guard may come out of it.
    #[test]
    fn a_record_revoked_while_an_export_is_in_flight_leaves_no_guard() {
        let w = World::new();
        let keys = StoreKeys::new(&w.store).unwrap();
        RevocationList::add(&w.store, |l| l.records.insert(w.cap.id())).unwrap();
        w.tick();
        let exported = w.owner.export(&w.cap, &keys, &w.request, NOW);
        assert!(
            matches!(exported, Err(ExportError::CapRevoked(id)) if id == w.cap.id()),
            "export after the tick saw the revocation: {exported:?}"
        );
        w.tick();
        assert_eq!(w.live(), 0, "a guard of a revoked record is live");
    }

    /// The same interleaving with the capability's `kuid` key revoked instead.
    #[test]
    fn a_key_revoked_while_an_export_is_in_flight_leaves_no_guard() {
        let w = World::new();
        let keys = StoreKeys::new(&w.store).unwrap();
        RevocationList::add(&w.store, |l| l.keys.insert(w.kuid)).unwrap();
        w.tick();
        let exported = w.owner.export(&w.cap, &keys, &w.request, NOW);
        assert!(
            matches!(
                exported,
                Err(ExportError::Key(KeySourceError::Lookup(
                    KeyLookupError::KeyRevoked(_)
                )))
            ),
            "export after the tick saw the key's revocation: {exported:?}"
        );
        w.tick();
        assert_eq!(w.live(), 0, "a guard signed by a revoked key is live");
    }

    /// The other orders: a guard made before the tick is revoked by it, and one made after
    /// the tick from a fresh read of the list is refused at once.
    #[test]
    fn guards_made_before_the_tick_are_revoked_by_it() {
        for revoke_key in [false, true] {
            let w = World::new();
            let keys = StoreKeys::new(&w.store).unwrap();
            let t = w.owner.export(&w.cap, &keys, &w.request, NOW).unwrap();
            assert!(w.owner.check(&t, Op::Read, 0, 1, NOW).is_ok());
            RevocationList::add(&w.store, |l| {
                if revoke_key {
                    l.keys.insert(w.kuid)
                } else {
                    l.records.insert(w.cap.id())
                }
            })
            .unwrap();
            // Seen by the RPC before the tick: refused without the tick's help.
            let fresh = StoreKeys::new(&w.store).unwrap();
            assert!(w.owner.export(&w.cap, &fresh, &w.request, NOW).is_err());
            w.tick();
            assert!(w.owner.check(&t, Op::Read, 0, 1, NOW).is_err());
            assert_eq!(w.live(), 0);
        }
    }
}
