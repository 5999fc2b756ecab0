//! Information flow control across nodes (`docs/DIFC.md` §5.9): the owner applies the local
//! flow rule for a remote caller, with its own store's label table.
//!
//! - At export ([`crate::Owner::export_labelled`]) the owner evaluates the flow for the
//!   exporting context and keeps in the token only the rights the rule allows; the token (format
//!   version 2) carries the object's label and the context's principal-label generation.
//! - At every invocation ([`crate::Owner::check_labelled`]) it decides again with the context's
//!   *current* principal label and ownership (a label raised or an ownership record revoked
//!   after export stops the next call), and refuses with the one fixed `denied` where the local
//!   rule would.
//! - Secrecy across nodes: a read of an object with secrecy tags is answered only to a caller
//!   whose certificate names a node trusted for every one of them ([`DifcPolicy`], the
//!   `[difc] trusted_nodes` configuration; default: none). Integrity: a write into an object
//!   with integrity tags likewise.

mod cache;

pub use cache::{LabelCache, SnapshotLabels};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use secctx::ObjectStore;
use secctx::labels::{DifcError, LabelTable, principal_of};
use twizzler_capsec::{FlowDenial, Label, ObjID, Ownership, Right, Verdict};

/// Where the owner's labels and ownership come from: its store's label table, in a real node
/// (read from the node's kept read snapshot, [`LabelCache`]; or read anew, [`StoreLabels`]).
pub trait LabelSource {
    /// Whether any label exists: without, the owner exports version-1 tokens, as before
    /// DIFC.
    fn active(&self) -> bool {
        true
    }
    /// The object's data label (empty for an object without a row).
    fn object_label(&self, object: ObjID) -> Result<Label, LabelSourceError>;
    /// The context's current principal label and its generation.
    fn principal(&self, ctx: ObjID) -> Result<(Label, u64), LabelSourceError>;
    /// Whether `ctx` owns `right` of `tag` at `now` (as `twizzler_capsec::Ownership::owns`).
    fn owns(&self, ctx: ObjID, tag: ObjID, right: Right, now: u64) -> Result<bool, Verdict>;
}

/// Why labels could not be read: the decision is refused, never made as unlabelled.
#[derive(Debug)]
pub struct LabelSourceError(pub String);

impl fmt::Display for LabelSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "labels unavailable: {}", self.0)
    }
}

impl std::error::Error for LabelSourceError {}

/// Labels and ownership read from a `secctx` store (the table is read once, at creation).
pub struct StoreLabels<'a, S: ObjectStore> {
    store: &'a S,
    table: LabelTable,
}

impl<'a, S: ObjectStore> StoreLabels<'a, S> {
    /// Reads `store`'s label table.
    pub fn new(store: &'a S) -> Result<Self, secctx::StoreError> {
        Ok(Self {
            store,
            table: LabelTable::load(store)?,
        })
    }
}

impl<S: ObjectStore> LabelSource for StoreLabels<'_, S> {
    fn active(&self) -> bool {
        !self.table.rows.is_empty()
    }

    fn object_label(&self, object: ObjID) -> Result<Label, LabelSourceError> {
        Ok(self.table.data_label(object))
    }

    fn principal(&self, ctx: ObjID) -> Result<(Label, u64), LabelSourceError> {
        let bytes = self
            .store
            .get(ctx)
            .map_err(|e| LabelSourceError(e.to_string()))?
            .data;
        principal_of(&self.table, ctx, &bytes)
            .map(|p| (p.label, p.generation))
            .map_err(|e: DifcError| LabelSourceError(e.to_string()))
    }

    fn owns(&self, ctx: ObjID, tag: ObjID, right: Right, now: u64) -> Result<bool, Verdict> {
        match secctx::labels::owns(self.store, ctx, tag, right, now) {
            Ok(r) => r,
            // The context could not be read: nothing it holds counts.
            Err(_) => Ok(false),
        }
    }
}

/// One context's ownership through a [`LabelSource`], for the rule.
pub(crate) struct SourceOwnership<'a, L: LabelSource + ?Sized> {
    pub(crate) source: &'a L,
    pub(crate) ctx: ObjID,
    pub(crate) now: u64,
}

impl<L: LabelSource + ?Sized> Ownership for SourceOwnership<'_, L> {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        self.source.owns(self.ctx, tag, right, self.now)
    }
}

/// Which nodes are trusted to keep data labelled, per tag (`[difc] trusted_nodes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DifcPolicy {
    /// Tag → the nodes trusted with it. A tag absent here trusts no node.
    pub trusted_nodes: BTreeMap<ObjID, BTreeSet<u64>>,
}

impl DifcPolicy {
    /// The first tag of `tags` for which `node` is not trusted (`node` `None`: a caller that
    /// is no node of the cluster, trusted with nothing).
    pub fn untrusted_tag(&self, tags: &[ObjID], node: Option<u64>) -> Option<ObjID> {
        tags.iter().copied().find(|t| {
            !node.is_some_and(|n| self.trusted_nodes.get(t).is_some_and(|s| s.contains(&n)))
        })
    }
}

/// Why the flow rule refused a remote export or invocation (every one is the fixed `denied`
/// for a caller who is not an operator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowRefusal {
    /// The local rule refuses the access.
    Rule(FlowDenial),
    /// The caller's node is not trusted with this tag of the object's label.
    UntrustedNode {
        /// The tag.
        tag: ObjID,
        /// The caller's node, if it is one.
        node: Option<u64>,
    },
    /// The labels could not be read, or the token's do not match the object's, or an old
    /// token names a labelled object.
    Labels,
}

impl fmt::Display for FlowRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rule(d) => write!(f, "information flow: {d}"),
            Self::UntrustedNode { tag, node: Some(n) } => write!(
                f,
                "information flow: node {n} is not trusted with tag {tag}"
            ),
            Self::UntrustedNode { tag, node: None } => write!(
                f,
                "information flow: the caller is no node, and only trusted nodes get data of tag {tag}"
            ),
            Self::Labels => f.write_str("information flow: the labels could not be established"),
        }
    }
}
