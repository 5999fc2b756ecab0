//! A node's labels from its kept read snapshot ([`LabelCache`]): the label table decoded once
//! per snapshot instead of read and decoded at every invocation.
//!
//! # Why a decision from the cache is never stale
//!
//! The promise is today's: an invocation (or export) sees every label, principal generation,
//! ownership record and revocation committed, by this process or another, before it began.
//!
//! 1. [`LabelCache::labels`] first takes a [`SnapshotView`] from the node's [`SnapshotReader`],
//!    which shows every commit that completed before the call began (the reader's own promise:
//!    it compares the database header, which every commit rewrites, before reusing a
//!    snapshot; see `secctx/src/db_store/snapshot.rs`).
//! 2. Everything the decision reads comes from that one view: the label table (decoded, or
//!    the one decoded earlier from the same snapshot), the context's bytes, the keys its
//!    records name and the revocation list ([`secctx::labels::owns_in`]).
//! 3. A decoded table is reused only for a view with the serial it was decoded from. A
//!    reader's snapshots have distinct serials and never change, so the reused table is
//!    exactly what decoding the view's own table object would give. The same holds for the
//!    principals of contexts without a row, which are kept with the table: each is derived
//!    from that snapshot's table and the context's bytes in that snapshot.
//!
//! So the decision equals one made from a fresh read transaction begun at the call, and is,
//! unlike the reads it replaces (the table, the context and the revocation list each in a
//! transaction of its own), made from one commit throughout.
//!
//! The cache's lock is held only to compare and clone or replace the kept table: the view is
//! taken and the table read and decoded with no lock held.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use secctx::labels::{LABELS_ID, LabelTable, Principal, principal_of};
use secctx::{SnapshotReader, SnapshotView, StoreError};
use twizzler_capsec::{Label, ObjID, Right, Verdict};

use super::{LabelSource, LabelSourceError};

/// The label table of a [`SnapshotReader`]'s latest snapshot, decoded once per snapshot.
/// Clones share the kept table.
#[derive(Clone, Debug)]
pub struct LabelCache {
    reader: SnapshotReader,
    kept: Arc<Mutex<Option<Decoded>>>,
}

/// How many principals of contexts without a row one snapshot's cache keeps (each is a label
/// and a counter; past this, further ones are read from the snapshot every time).
const MAX_DERIVED_PRINCIPALS: usize = 4096;

/// A table and the serial of the snapshot it was decoded from.
#[derive(Debug)]
struct Decoded {
    serial: u64,
    table: Arc<Tables>,
}

/// What one snapshot's labels decode to.
#[derive(Debug)]
struct Tables {
    table: LabelTable,
    /// The principals of contexts without a row, parsed from their bytes in the same snapshot
    /// (an unlabelled context's: the empty label at generation 0).
    derived: Mutex<HashMap<ObjID, Principal>>,
}

impl LabelCache {
    /// A cache over `reader` (the node's: its snapshot is re-taken after any commit).
    pub fn new(reader: SnapshotReader) -> Self {
        Self {
            reader,
            kept: Arc::new(Mutex::new(None)),
        }
    }

    /// The labels and ownership of the latest commit (see the module documentation), to
    /// decide one request with. Fails if the snapshot cannot be read or the table is corrupt.
    pub fn labels(&self) -> Result<SnapshotLabels, StoreError> {
        let view = self.reader.view()?;
        let serial = view.serial();
        let kept = match self.kept.lock() {
            Ok(k) => k
                .as_ref()
                .filter(|d| d.serial == serial)
                .map(|d| d.table.clone()),
            Err(_) => None,
        };
        let table = match kept {
            Some(t) => t,
            None => {
                let t = Arc::new(Tables {
                    table: load(&view)?,
                    derived: Mutex::new(HashMap::new()),
                });
                if let Ok(mut k) = self.kept.lock() {
                    // A slower reader of an older snapshot does not replace a newer table.
                    if k.as_ref().is_none_or(|d| d.serial < serial) {
                        *k = Some(Decoded {
                            serial,
                            table: t.clone(),
                        });
                    }
                }
                t
            }
        };
        Ok(SnapshotLabels { view, table })
    }
}

/// The table object of `view` (empty if the store has none).
fn load(view: &SnapshotView) -> Result<LabelTable, StoreError> {
    match view.get(LABELS_ID) {
        Ok(obj) => Ok(LabelTable::decode(&obj.data)?),
        Err(StoreError::NotFound(_)) => Ok(LabelTable::default()),
        Err(e) => Err(e),
    }
}

/// Labels and ownership as one snapshot holds them ([`LabelCache::labels`]): hold it for one
/// request (it keeps the snapshot's pages).
#[derive(Debug)]
pub struct SnapshotLabels {
    view: SnapshotView,
    table: Arc<Tables>,
}

impl SnapshotLabels {
    /// `ctx`'s principal: its row, or derived from its bytes (once per snapshot).
    fn principal_of(&self, ctx: ObjID) -> Result<Principal, LabelSourceError> {
        let tables = &*self.table;
        if let Some(p) = tables.table.principal(ctx) {
            return Ok(p.clone());
        }
        let kept = tables
            .derived
            .lock()
            .ok()
            .and_then(|d| d.get(&ctx).cloned());
        if let Some(p) = kept {
            return Ok(p);
        }
        // Read and parsed with no lock held; refusals are not kept.
        let bytes = self
            .view
            .get(ctx)
            .map_err(|e| LabelSourceError(e.to_string()))?
            .data;
        let p = principal_of(&tables.table, ctx, &bytes)
            .map_err(|e| LabelSourceError(e.to_string()))?;
        if let Ok(mut d) = tables.derived.lock()
            && d.len() < MAX_DERIVED_PRINCIPALS
        {
            d.insert(ctx, p.clone());
        }
        Ok(p)
    }
}

impl LabelSource for SnapshotLabels {
    fn active(&self) -> bool {
        !self.table.table.rows.is_empty()
    }

    fn object_label(&self, object: ObjID) -> Result<Label, LabelSourceError> {
        Ok(self.table.table.data_label(object))
    }

    fn principal(&self, ctx: ObjID) -> Result<(Label, u64), LabelSourceError> {
        let p = self.principal_of(ctx)?;
        Ok((p.label, p.generation))
    }

    fn owns(&self, ctx: ObjID, tag: ObjID, right: Right, now: u64) -> Result<bool, Verdict> {
        match secctx::labels::owns_in(&mut &self.view, ctx, tag, right, now) {
            Ok(r) => r,
            // The context could not be read: nothing it holds counts.
            Err(_) => Ok(false),
        }
    }
}
