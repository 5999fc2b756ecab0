//! The state every request and the maintenance task share ([`Shared`]), and that task.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secctx::revocations::RevocationList;
use secctx::{DbStore, ObjectStore};
use tokio::sync::watch;
use tracing::{debug, info, warn};
use twizzler_capsec::{ObjID, RecordId};

use crate::broadcast::BroadcastNode;
use crate::client::NodeClient;
use crate::export_proof::ReplayWindow;
pub(super) use crate::now_ns;
use crate::owner::Owner;

use super::cert_check::CertRevocations;
use super::counters::{Counters, LogLimit, Notices, Refusals, Rpc};
use super::gates::Gates;
use super::metrics::Metrics;
use super::reads::Reads;

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) owner: Owner,
    pub(super) store: DbStore,
    /// Per-object gates: invocations hold their object's shared from check to effect;
    /// revocations theirs exclusively.
    pub(super) gates: Gates,
    pub(super) broadcast: BroadcastNode,
    pub(super) peers: HashMap<u64, NodeClient>,
    pub(super) counters: Counters,
    pub(super) notices: Mutex<Notices>,
    /// Revocations of the store already applied to the guard table.
    pub(super) revoked_sources: Mutex<Applied>,
    /// Export proofs' time window and the nonces seen within it.
    pub(super) proofs: ReplayWindow,
    /// Refusals by kind, and the last few in detail (for operators).
    pub(super) refusals: Mutex<Refusals>,
    /// How many refusal lines the log gets.
    pub(super) log_limit: LogLimit,
    pub(super) metrics: Metrics,
    /// The queue of small reads (see `reads`).
    pub(super) reads: Reads,
    pub(super) max_io_bytes: u64,
    pub(super) max_object_bytes: u64,
    /// Revoked client certificates, if the node has a revocation file.
    pub(super) cert_revocations: Option<Arc<CertRevocations>>,
}

/// Store revocations already applied to the guard table.
#[derive(Debug, Default)]
pub(super) struct Applied {
    pub(super) records: HashSet<RecordId>,
    pub(super) keys: HashSet<ObjID>,
}

impl Shared {
    /// Counts a received request (for `Status` and the metrics).
    pub(super) fn received(&self, rpc: Rpc) {
        self.metrics.received(rpc);
    }

    pub(super) fn publish_upgrades(&self) {
        match self.owner.drain_upgrades() {
            Ok(Some(notice)) => {
                info!(
                    guards = notice.changes.len(),
                    "guards upgraded; notice published"
                );
                if let Ok(mut n) = self.notices.lock() {
                    n.push(&notice);
                }
            }
            Ok(None) => {}
            Err(e) => warn!(error = %e, "cannot drain upgrades"),
        }
    }

    /// Revokes the guards exported from capabilities revoked in the store since the last
    /// call (by record id), and every guard of the objects whose `kuid` key has been revoked
    /// since (their capabilities were all signed by it). Each revocation holds its object's
    /// gate, as a `Revoke` does: an invocation it lets through has completed when it is done.
    /// Runs on a blocking thread; the `revoked_sources` lock is never held across a store
    /// call or a gate.
    pub(super) fn apply_store_revocations(&self) {
        let list = match RevocationList::load(&self.store) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot read the store's revocation list");
                return;
            }
        };
        let (new_records, new_keys): (Vec<RecordId>, HashSet<ObjID>) = {
            let Ok(applied) = self.revoked_sources.lock() else {
                return;
            };
            (
                list.records
                    .iter()
                    .filter(|r| !applied.records.contains(r))
                    .copied()
                    .collect(),
                list.keys
                    .iter()
                    .filter(|k| !applied.keys.contains(k))
                    .copied()
                    .collect(),
            )
        };
        for id in &new_records {
            // A capability is for one object: its guards are all of it.
            for object in self.owner.objects_of_source(id).unwrap_or_default() {
                let gate = self.gates.of(object);
                let _held = gate.blocking_write();
                match self.owner.revoke_source(id) {
                    Ok(r) if r.guards_revoked > 0 => {
                        info!(record = %id, guards = r.guards_revoked, "capability revoked in the store; guards revoked");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot revoke the guards of a revoked capability"),
                }
            }
        }
        let mut keys_done = true;
        if !new_keys.is_empty() {
            match self.store.list() {
                Ok(ids) => {
                    for id in ids {
                        // Metadata only: objects can be large.
                        let Ok(info) = self.store.info(id) else {
                            continue;
                        };
                        if info.meta.kuid.is_some_and(|k| new_keys.contains(&k)) {
                            let gate = self.gates.of(id);
                            let _held = gate.blocking_write();
                            match self.owner.revoke_object(id) {
                                Ok(r) if r.guards_revoked > 0 => {
                                    info!(object = %id, guards = r.guards_revoked, "key revoked in the store; guards revoked");
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    warn!(error = %e, "cannot revoke the guards of an object")
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot list the store");
                    keys_done = false;
                }
            }
        }
        if let Ok(mut applied) = self.revoked_sources.lock() {
            applied.records.extend(new_records);
            if keys_done {
                applied.keys.extend(new_keys);
            }
        }
    }
}

pub(super) async fn maintain(
    shared: Arc<Shared>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                shared.publish_upgrades();
                match shared.owner.sweep_expired(now_ns()) {
                    Ok(r) if r.guards_revoked > 0 => debug!(guards = r.guards_revoked, "expired guards freed"),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot sweep expired guards"),
                }
                let s = shared.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    s.apply_store_revocations();
                    if let Some(c) = &s.cert_revocations {
                        c.reload_if_changed();
                    }
                })
                .await;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
}
