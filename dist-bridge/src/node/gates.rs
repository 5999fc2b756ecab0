//! Per-object revocation gates. An invocation holds its object's gate shared from before its
//! check until its effect is done; a revocation holds the gate of the object whose guards it
//! revokes exclusively. So a revocation waits only for invocations on its object, and an
//! invocation it lets through has completed when it returns.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use twizzler_capsec::ObjID;

/// One gate per object, alive while someone holds it.
#[derive(Debug, Default)]
pub(super) struct Gates {
    map: RwLock<HashMap<ObjID, Weak<Gate>>>,
}

/// An object's gate.
pub(super) type Gate = tokio::sync::RwLock<()>;

/// Entries kept before the dead ones are swept.
const SWEEP_AT: usize = 1024;

impl Gates {
    /// The gate of `object`: the one others hold now, if any, else a new one. (Two holders of
    /// one object always get the same gate: an entry dies only when nobody holds it, and a
    /// new one is only made under the write lock, after looking again.)
    pub(super) fn of(&self, object: ObjID) -> Arc<Gate> {
        // A panic elsewhere cannot leave the map half-updated: every change is one call.
        // The common case, a gate someone holds or held recently, takes the shared lock only.
        if let Some(gate) = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&object)
            .and_then(Weak::upgrade)
        {
            return gate;
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if let Some(gate) = map.get(&object).and_then(Weak::upgrade) {
            return gate;
        }
        if map.len() >= SWEEP_AT {
            map.retain(|_, g| g.strong_count() > 0);
        }
        let gate = Arc::new(Gate::default());
        map.insert(object, Arc::downgrade(&gate));
        gate
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
        // A revocation on A waits for it.
        let gate_a = gates.of(a);
        let waiting = tokio::spawn(async move {
            let _g = gate_a.write_owned().await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "a revocation on A passed an invocation on A"
        );
        drop(invoking);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the revocation on A never went through")
            .expect("task");
    }

    #[test]
    fn holders_of_one_object_share_its_gate_and_dead_gates_are_swept() {
        let gates = Gates::default();
        let held = gates.of(ObjID::new(7));
        assert!(Arc::ptr_eq(&held, &gates.of(ObjID::new(7))));
        for i in 0..(2 * SWEEP_AT as u128) {
            drop(gates.of(ObjID::new(1000 + i)));
        }
        let map = gates.map.read().expect("map");
        assert!(map.len() <= SWEEP_AT + 1, "dead gates kept: {}", map.len());
        assert!(map.get(&ObjID::new(7)).and_then(Weak::upgrade).is_some());
    }
}
