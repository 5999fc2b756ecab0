//! The state every request and the maintenance task share ([`Shared`]), and that task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secctx::{DbStore, SnapshotReader};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::broadcast::BroadcastNode;
use crate::client::NodeClient;
use crate::export_proof::ReplayWindow;
pub(super) use crate::now_ns;
use crate::owner::Owner;

use super::cert_check::CertRevocations;
use super::counters::{Counters, LogLimit, Notices, Refusals, Rpc};
use super::gates::Gates;
use super::metrics::Metrics;
use super::store_revocations;

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
    /// Export proofs' time window and the nonces seen within it.
    pub(super) proofs: ReplayWindow,
    /// Refusals by kind, and the last few in detail (for operators).
    pub(super) refusals: Mutex<Refusals>,
    /// How many refusal lines the log gets.
    pub(super) log_limit: LogLimit,
    pub(super) metrics: Metrics,
    /// Small reads come from a kept read snapshot of `store`, taken again after any commit
    /// (see [`SnapshotReader`]): no transaction, header lock or hand-off per read.
    pub(super) reader: SnapshotReader,
    /// The label table of `reader`'s snapshot, decoded once per snapshot: what the flow rule
    /// reads at export and invocation (`docs/DIFC.md` §5.9).
    pub(super) labels: crate::difc::LabelCache,
    pub(super) max_io_bytes: u64,
    /// The nodes trusted with each tag.
    pub(super) difc: crate::difc::DifcPolicy,
    /// The store has had labels (it never loses them): from then on every invocation, of a
    /// format-1 token too, is decided under the flow rule. Set at start, by an export that
    /// reads the table, and by the maintenance pass (so within a tick of a label appearing).
    pub(super) labels_seen: std::sync::atomic::AtomicBool,
    pub(super) max_object_bytes: u64,
    /// Revoked client certificates, if the node has a revocation file.
    pub(super) cert_revocations: Option<Arc<CertRevocations>>,
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

    /// Notes that the store has labels, if it has.
    pub(super) fn note_labels(&self) {
        use std::sync::atomic::Ordering;
        if !self.labels_seen.load(Ordering::Acquire) && store_has_labels(&self.store) {
            info!("the store has labels: every invocation is decided under the flow rule");
            self.labels_seen.store(true, Ordering::Release);
        }
    }

    /// Applies the store's revocation list to the guard table (see `store_revocations`).
    pub(super) fn apply_store_revocations(&self) {
        store_revocations::apply(&self.owner, &self.store, &self.gates);
    }
}

/// Whether `store` holds a label table with any row (a failed read counts as yes: the flow
/// rule is then applied, and refuses what it cannot establish).
pub(super) fn store_has_labels(store: &DbStore) -> bool {
    secctx::labels::LabelTable::load(store).map_or(true, |t| !t.rows.is_empty())
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
                // An idle node pins no pages of the store for longer than a tick.
                shared.reader.release_stale();
                shared.publish_upgrades();
                match shared.owner.sweep_expired(now_ns()) {
                    Ok(r) if r.guards_revoked > 0 => debug!(guards = r.guards_revoked, "expired guards freed"),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot sweep expired guards"),
                }
                let s = shared.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    s.apply_store_revocations();
                    s.note_labels();
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
