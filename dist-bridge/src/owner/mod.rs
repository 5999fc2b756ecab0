//! The owner side: one controller's guard table, and every operation a node service runs on
//! it.
//!
//! | operation | who calls it | messages |
//! |---|---|---|
//! | [`Owner::export`] | a local process holding a signed capability | none (local) |
//! | [`GuardedToken::attenuate`] | any holder, offline | none |
//! | [`Owner::check`] | the owner's service, on every remote invocation | the invocation itself |
//! | [`Owner::export_from`] | a holder with `DERIVE` (revocable sub-delegation) | one round trip |
//! | [`Owner::revoke`] | a holder with `REVOKE` | one round trip |
//! | [`Owner::renew`] | a holder whose guard was upgraded | one round trip |
//! | [`Owner::drain_upgrades`] | the service, to publish [`UpgradeNotice`]s | optional push |
//!
//! `Owner` is `Send + Sync`: its state sits behind one `RwLock`. Checks take the read lock,
//! so they run in parallel; revocation, export and maintenance take the write lock. A check
//! that starts after [`Owner::revoke`] returned therefore sees the revocation (the lock orders
//! them), and is rejected. Should a thread ever panic while holding the lock, every later call
//! fails closed with [`InvokeError::Unavailable`] instead of working on possibly half-updated
//! state.
//!
//! # What a check verifies, in order
//!
//! 1. the tag chain, recomputed from the range key of the token's guard version
//!    ([`InvokeError::BadTag`]; [`InvokeError::WrongOwner`] or
//!    [`InvokeError::StaleController`] when the token names another node or an earlier life
//!    of this one: tokens from before a restart are dead). It comes first, so that nothing
//!    the table knows (which guards are live, revoked, reused or upgraded) is told apart for
//!    a token the owner did not issue;
//! 2. the guard entry exists and is live at exactly the token's guard version
//!    ([`InvokeError::NoSuchGuard`], [`InvokeError::Revoked`], [`InvokeError::StaleGuard`],
//!    [`InvokeError::Upgraded`]);
//! 3. the body is what the guard was issued with ([`InvokeError::GuardMismatch`]);
//! 4. the effective scope (after every caveat): not expired, the operation's right, the
//!    accessed bytes inside the range ([`InvokeError::Expired`],
//!    [`InvokeError::RightsExceeded`], [`InvokeError::OutOfRange`]).

use std::collections::HashSet;
use std::fmt;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use twizzler_capsec::{Cap, Expiry, KeyLookupError, ObjID, RecordId};
use zeroize::Zeroizing;

use crate::controller::ControllerId;
use crate::crypto::{self, KEY_LEN, NodeSecret};
use crate::difc::{DifcPolicy, FlowRefusal, LabelSource, SourceOwnership};
use crate::keys::{KeyLookup, KeySourceError, KuidKey};
use crate::rights::{ByteRange, Op, Rights};
use crate::table::{
    ConfigError, GuardInfo, GuardTable, GuardTableConfig, InsertError, LookupError, TableStats,
};
use crate::token::{GuardRef, GuardedToken, Scope, TokenBody, TokenLabels};
use twizzler_capsec::{FlowDenial, PrincipalLabels};

mod errors;
mod notice;

pub use errors::{ExportError, InvokeError};
pub use notice::{NoticeDecodeError, UPGRADE_MAGIC, UpgradeNotice};

/// What a local caller asks [`Owner::export`] for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportRequest {
    /// The security context the caller runs in: the capability must be for it (its
    /// accessor), as the permission rule requires of every record.
    pub context: ObjID,
    /// The guard's scope. Data rights and range must lie within the capability's protections
    /// and gate; the expiry is clamped to the capability's. `DERIVE` and `REVOKE` are rights
    /// over the new guard and are granted as asked.
    pub scope: Scope,
}

impl ExportRequest {
    /// A request for `rights` over `range`, never expiring (clamped to the capability's
    /// expiry).
    pub fn new(context: ObjID, rights: Rights, range: ByteRange) -> Self {
        Self {
            context,
            scope: Scope::new(rights, range, Expiry::NEVER),
        }
    }
}

/// An accepted invocation: what the service may now do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The object.
    pub object: ObjID,
    /// The guard that allowed it.
    pub guard: GuardRef,
    /// The operation.
    pub op: Op,
    /// First byte.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

/// What a revocation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RevokeReport {
    /// Guards revoked: the guard and its descendants (several roots for
    /// [`Owner::revoke_source`] and [`Owner::sweep_expired`]).
    pub guards_revoked: u32,
}

/// The key of one version range in one generation.
struct RangeKey {
    generation: u64,
    key: Zeroizing<[u8; KEY_LEN]>,
}

struct State {
    table: GuardTable,
    keys: Vec<RangeKey>,
    /// Revocations a store's revocation list holds, as far as this owner has been told
    /// ([`Owner::note_store_revocations`]).
    store_revoked: StoreRevoked,
}

#[derive(Default)]
struct StoreRevoked {
    records: HashSet<RecordId>,
    keys: HashSet<ObjID>,
}

impl StoreRevoked {
    /// Whether the root guard `g` comes from a revoked record or key.
    fn reaches(&self, g: &GuardInfo) -> bool {
        g.source.is_some_and(|r| self.records.contains(&r))
            || g.key.is_some_and(|k| self.keys.contains(&k))
    }
}

/// One controller's guards: exports, checks, revokes and renews tokens (see the
/// [module docs](self)).
pub struct Owner {
    id: ControllerId,
    secret: NodeSecret,
    state: RwLock<State>,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Owner {
    /// An owner for controller `id` (from [`VersionFile`](crate::VersionFile) in a real node)
    /// with a fresh `secret` ([`NodeSecret::generate`]) and an empty guard table.
    pub fn new(
        id: ControllerId,
        secret: NodeSecret,
        config: GuardTableConfig,
    ) -> Result<Owner, ConfigError> {
        let table = GuardTable::new(config)?;
        let mut state = State {
            table,
            keys: Vec::new(),
            store_revoked: StoreRevoked::default(),
        };
        let owner_keys = (0..state.table.range_count())
            .map(|r| {
                let generation = state.table.generation(r);
                RangeKey {
                    generation,
                    key: secret.range_key(id, r, generation),
                }
            })
            .collect();
        state.keys = owner_keys;
        Ok(Owner {
            id,
            secret,
            state: RwLock::new(state),
        })
    }

    /// This controller.
    pub fn id(&self) -> ControllerId {
        self.id
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, State>, InvokeError> {
        self.state.read().map_err(|_| InvokeError::Unavailable)
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, State>, InvokeError> {
        self.state.write().map_err(|_| InvokeError::Unavailable)
    }

    /// Exports a signed capability: checks it (signature under the target's `kuid` key, not
    /// expired, not revoked, for the caller's context) and that the request lies within it,
    /// creates a root guard, and returns its token.
    pub fn export(
        &self,
        cap: &Cap,
        keys: &impl KeyLookup,
        request: &ExportRequest,
        now: u64,
    ) -> Result<GuardedToken, ExportError> {
        self.export_with(cap, keys, request, now, |scope| Ok((scope, None)))
    }

    /// [`Owner::export`] under the flow rule (`docs/DIFC.md` §5.9): once the capability
    /// checks pass, the rule is evaluated for the exporting context with `labels`, and the
    /// token keeps only the data rights it allows (`READ` if the object is readable at the
    /// context's label, `WRITE` if the write clauses hold, with the context's ownership);
    /// with none left the export is refused ([`ExportError::Flow`]). The token is format
    /// version 2, carrying the object's label and the context's label generation. A source
    /// with no labels at all ([`LabelSource::active`] false) exports as [`Owner::export`].
    pub fn export_labelled(
        &self,
        cap: &Cap,
        keys: &impl KeyLookup,
        labels: &impl LabelSource,
        request: &ExportRequest,
        now: u64,
    ) -> Result<GuardedToken, ExportError> {
        if !labels.active() {
            return self.export(cap, keys, request, now);
        }
        let context = request.context;
        self.export_with(cap, keys, request, now, |scope| {
            let refused = |r| ExportError::Flow(r);
            let object = labels
                .object_label(cap.target())
                .map_err(|_| refused(FlowRefusal::Labels))?;
            let (principal, generation) = labels
                .principal(context)
                .map_err(|_| refused(FlowRefusal::Labels))?;
            let steady = PrincipalLabels::steady(principal);
            let mut own = SourceOwnership {
                source: labels,
                ctx: context,
                now,
            };
            let mut rights = scope.rights;
            let mut first = None;
            if rights.contains(Rights::READ) {
                let r = twizzler_capsec::flow(&steady.as_ref(), &object.as_ref(), false, &mut own);
                if !r.mask.contains(twizzler_capsec::Protections::READ) {
                    rights.remove(Rights::READ);
                    first = first.or(r.denial);
                }
            }
            if rights.contains(Rights::WRITE)
                && let Err(d) = twizzler_capsec::check_write_clauses(
                    &steady.as_ref(),
                    &object.as_ref(),
                    &mut own,
                )
            {
                rights.remove(Rights::WRITE);
                first = first.or(Some(d));
            }
            if scope.rights.intersects(Rights::DATA) && !rights.intersects(Rights::DATA) {
                return Err(refused(FlowRefusal::Rule(
                    first.unwrap_or(FlowDenial::LabelUnknown),
                )));
            }
            Ok((
                scope.with_rights(rights),
                Some(TokenLabels {
                    context,
                    generation,
                    label: object,
                }),
            ))
        })
    }

    /// [`Owner::check`] under the flow rule (`docs/DIFC.md` §5.9), for a caller whose
    /// certificate names `caller_node` (`None`: no node). After the token's own checks, the
    /// rule is decided again with the exporting context's *current* principal label and
    /// ownership: a read needs the object readable at it, a write the two write clauses (a
    /// remote write shows the writer nothing, like a kernel copy). A read of an object with
    /// secrecy tags is answered only to a node trusted for every one of them in `policy`, a
    /// write into one with integrity tags likewise. A version-1 token (exported before the
    /// store had labels) is decided for the context its guard was exported for.
    #[allow(clippy::too_many_arguments)]
    pub fn check_labelled(
        &self,
        token: &GuardedToken,
        op: Op,
        offset: u64,
        len: u64,
        now: u64,
        labels: &impl LabelSource,
        policy: &DifcPolicy,
        caller_node: Option<u64>,
    ) -> Result<Grant, InvokeError> {
        let grant = self.check(token, op, offset, len, now)?;
        let refused = InvokeError::Flow;
        let object = labels
            .object_label(token.object())
            .map_err(|_| refused(FlowRefusal::Labels))?;
        let context = match token.labels() {
            Some(tl) if tl.label == object => tl.context,
            Some(_) => return Err(refused(FlowRefusal::Labels)),
            // A version-1 token, exported before the store had labels (its object is
            // unlabelled, for ever): decided for the context its guard was exported for.
            None => {
                let ctx = self
                    .read()?
                    .table
                    .lookup(token.guard())
                    .ok()
                    .and_then(|g| g.context);
                match ctx {
                    Some(c) if object.is_empty() => c,
                    _ => return Err(refused(FlowRefusal::Labels)),
                }
            }
        };
        let (principal, _) = labels
            .principal(context)
            .map_err(|_| refused(FlowRefusal::Labels))?;
        let steady = PrincipalLabels::steady(principal);
        let mut own = SourceOwnership {
            source: labels,
            ctx: context,
            now,
        };
        let tags = match op {
            Op::Read => {
                let r = twizzler_capsec::flow(&steady.as_ref(), &object.as_ref(), false, &mut own);
                if !r.mask.contains(twizzler_capsec::Protections::READ) {
                    return Err(refused(FlowRefusal::Rule(
                        r.denial.unwrap_or(FlowDenial::LabelUnknown),
                    )));
                }
                object.secrecy.as_slice()
            }
            Op::Write => {
                twizzler_capsec::check_write_clauses(&steady.as_ref(), &object.as_ref(), &mut own)
                    .map_err(|d| refused(FlowRefusal::Rule(d)))?;
                object.integrity.as_slice()
            }
        };
        if let Some(tag) = policy.untrusted_tag(tags, caller_node) {
            return Err(refused(FlowRefusal::UntrustedNode {
                tag,
                node: caller_node,
            }));
        }
        Ok(grant)
    }

    /// The capability checks of an export, then `flow` (which may narrow the scope and give
    /// the token's labels), then the guard.
    fn export_with(
        &self,
        cap: &Cap,
        keys: &impl KeyLookup,
        request: &ExportRequest,
        now: u64,
        flow: impl FnOnce(Scope) -> Result<(Scope, Option<TokenLabels>), ExportError>,
    ) -> Result<GuardedToken, ExportError> {
        let KuidKey { key, kuid } = keys
            .kuid_key_named(cap.target())
            .map_err(ExportError::Key)?;
        cap.verify(&key, now).map_err(ExportError::Cap)?;
        let id = cap.id();
        if keys.is_record_revoked(&id) {
            return Err(ExportError::CapRevoked(id));
        }
        if cap.accessor() != request.context {
            return Err(ExportError::WrongContext {
                cap: cap.accessor(),
                caller: request.context,
            });
        }
        let scope = request.scope;
        if !cap.prots().contains(scope.rights.required_prots()) {
            return Err(ExportError::RightsExceeded {
                requested: scope.rights,
                allowed: cap.prots(),
            });
        }
        let gate = cap.gate();
        if scope.range.offset() < gate.offset() || scope.range.end() > gate.end() {
            return Err(ExportError::OutOfRange {
                requested: scope.range,
                gate,
            });
        }
        let expires = scope.expires.min(cap.expires());
        if expires.is_expired(now) {
            return Err(ExportError::Expired {
                expires: expires.raw(),
                now,
            });
        }
        let (scope, labels) = flow(scope.with_expiry(expires))?;
        let info = GuardInfo {
            object: cap.target(),
            scope,
            parent: None,
            source: Some(id),
            key: kuid,
            context: Some(request.context),
        };
        let mut st = self.write().map_err(|_| ExportError::Unavailable)?;
        // `keys` may have been read before a revocation the node has seen since: decided
        // again here, under the lock the guard is created under and the lock
        // `note_store_revocations` records under, so that once that returns no guard from
        // a revoked record or key can be created (issue 25).
        if st.store_revoked.records.contains(&id) {
            return Err(ExportError::CapRevoked(id));
        }
        if kuid.is_some_and(|k| st.store_revoked.keys.contains(&k)) {
            return Err(ExportError::Key(KeySourceError::Lookup(
                KeyLookupError::KeyRevoked(cap.target()),
            )));
        }
        match self.create(&mut st, info, labels) {
            Ok(t) => Ok(t),
            Err(InvokeError::TableFull { capacity }) => Err(ExportError::TableFull { capacity }),
            Err(_) => Err(ExportError::Unavailable),
        }
    }

    /// Creates a child guard of the token's guard (revocable sub-delegation): the token needs
    /// `DERIVE`, and `scope` must lie within the token's effective scope, except that the
    /// child may carry `REVOKE` even if the token does not (revoking the child affects only
    /// the child's subtree, which this call creates). Revoking the token's guard revokes the
    /// child.
    pub fn export_from(
        &self,
        token: &GuardedToken,
        scope: Scope,
        now: u64,
    ) -> Result<GuardedToken, InvokeError> {
        let mut st = self.write()?;
        let (_, held) = self.validate(&st, token, now)?;
        if !held.rights.contains(Rights::DERIVE) {
            return Err(InvokeError::RightsExceeded {
                needed: Rights::DERIVE,
                held: held.rights,
            });
        }
        let allowed = held.with_rights(held.rights | Rights::REVOKE);
        scope.within(&allowed).map_err(InvokeError::Widens)?;
        let quota = st.table.config().max_derived;
        if st.table.derived_in_tree(token.guard().index, quota) >= quota {
            return Err(InvokeError::DeriveQuota { quota });
        }
        let context = st.table.lookup(token.guard())?.context;
        let info = GuardInfo {
            object: token.object(),
            scope,
            parent: Some(token.guard().index),
            source: None,
            key: None,
            context,
        };
        // A child guard carries its parent's labels: it is decided for the same context.
        self.create(&mut st, info, token.labels().copied())
    }

    fn create(
        &self,
        st: &mut State,
        info: GuardInfo,
        labels: Option<TokenLabels>,
    ) -> Result<GuardedToken, InvokeError> {
        let guard = st.table.insert(info).map_err(|e| match e {
            InsertError::Full(f) => InvokeError::TableFull {
                capacity: f.capacity,
            },
            // The caller validated the parent under the same lock.
            InsertError::ParentNotLive(index) => InvokeError::Revoked {
                guard: GuardRef { index, version: 0 },
            },
        })?;
        self.sync_keys(st);
        let body = TokenBody {
            owner: self.id,
            guard,
            object: info.object,
            scope: info.scope,
            labels,
        };
        let root = Self::root_tag(st, &body).ok_or(InvokeError::Unavailable)?;
        Ok(GuardedToken::issue(body, Vec::new(), root))
    }

    /// Checks an invocation: `op` on bytes `offset .. offset + len` of the token's object at
    /// time `now` (ns since the epoch). See the [module docs](self) for what is checked.
    pub fn check(
        &self,
        token: &GuardedToken,
        op: Op,
        offset: u64,
        len: u64,
        now: u64,
    ) -> Result<Grant, InvokeError> {
        let st = self.read()?;
        let (guard, scope) = self.validate(&st, token, now)?;
        drop(st);
        let needed = op.required();
        if !scope.rights.contains(needed) {
            return Err(InvokeError::RightsExceeded {
                needed,
                held: scope.rights,
            });
        }
        if !scope.range.covers(offset, len) {
            return Err(InvokeError::OutOfRange {
                offset,
                len,
                range: scope.range,
            });
        }
        Ok(Grant {
            object: token.object(),
            guard,
            op,
            offset,
            len,
        })
    }

    /// [`Owner::check`] on an encoded token, as it arrives from the wire.
    pub fn check_bytes(
        &self,
        token: &[u8],
        op: Op,
        offset: u64,
        len: u64,
        now: u64,
    ) -> Result<Grant, InvokeError> {
        self.check(&GuardedToken::decode(token)?, op, offset, len, now)
    }

    /// Revokes the token's guard and every guard derived from it (the token must pass the
    /// checks of [`Owner::check`] up to the expiry, and carry `REVOKE`).
    /// Once this returns, every token naming any of those guards, however attenuated, is
    /// refused.
    pub fn revoke(&self, token: &GuardedToken, now: u64) -> Result<RevokeReport, InvokeError> {
        let mut st = self.write()?;
        let guard = self.revocable(&st, token, now)?;
        let guards_revoked = st.table.revoke(guard.index);
        self.sync_keys(&mut st);
        Ok(RevokeReport { guards_revoked })
    }

    /// Whether [`Owner::revoke`] would revoke something with this token now: everything it
    /// checks (the tag first, then the guard, expiry and `REVOKE`), under the read lock. A
    /// service calls it before it waits for anything on the token's behalf (the `Revoke`
    /// RPC, before its object's gate), so that a token the owner did not issue, or one that
    /// can revoke nothing, waits for nobody. [`Owner::revoke`] checks it all again.
    pub fn check_revoke(&self, token: &GuardedToken, now: u64) -> Result<(), InvokeError> {
        let st = self.read()?;
        self.revocable(&st, token, now).map(|_| ())
    }

    fn revocable(
        &self,
        st: &State,
        token: &GuardedToken,
        now: u64,
    ) -> Result<GuardRef, InvokeError> {
        let (guard, scope) = self.validate(st, token, now)?;
        if !scope.rights.contains(Rights::REVOKE) {
            return Err(InvokeError::RightsExceeded {
                needed: Rights::REVOKE,
                held: scope.rights,
            });
        }
        Ok(guard)
    }

    /// Exchanges a token whose guard was upgraded ([`InvokeError::Upgraded`]) for one at the
    /// guard's new version, with the same body and caveats. A token that is already current
    /// is returned unchanged. Refused for revoked guards, and once the upgrade record has
    /// expired (the old range was recycled).
    pub fn renew(&self, token: &GuardedToken, now: u64) -> Result<GuardedToken, InvokeError> {
        let st = self.read()?;
        // The old range has not been reopened while the guard's upgrade record lives, so its
        // key still verifies tokens minted at the old version; checked before the lookup.
        self.check_tag(&st, token)?;
        let old = token.guard();
        let new_version = match st.table.lookup(old) {
            Ok(_) => {
                self.validate(&st, token, now)?;
                return Ok(token.clone());
            }
            Err(LookupError::Upgraded { new, .. }) => new,
            Err(LookupError::Stale { .. }) => return Err(InvokeError::NotRenewable { guard: old }),
            Err(e) => return Err(e.into()),
        };
        let fresh = GuardRef {
            index: old.index,
            version: new_version,
        };
        Self::current_scope(&st, fresh, token, now)?;
        let body = TokenBody {
            guard: fresh,
            ..*token.body()
        };
        let root = Self::root_tag(&st, &body).ok_or(InvokeError::Unavailable)?;
        Ok(GuardedToken::issue(body, token.caveats().to_vec(), root))
    }

    /// Takes the version changes made by range upgrades since the last call, for the service
    /// to publish. `None` when there are none.
    pub fn drain_upgrades(&self) -> Result<Option<UpgradeNotice>, InvokeError> {
        let changes = self.write()?.table.drain_changes();
        Ok((!changes.is_empty()).then_some(UpgradeNotice {
            owner: self.id,
            changes,
        }))
    }

    /// Revokes every root guard exported from the capability with this record id (and their
    /// descendants): call it when the capability, or its key, is revoked locally.
    pub fn revoke_source(&self, source: &RecordId) -> Result<RevokeReport, InvokeError> {
        let mut st = self.write()?;
        let roots = st
            .table
            .live_matching(|g| g.source.as_ref() == Some(source));
        Ok(self.revoke_all(&mut st, &roots))
    }

    /// The objects of the live guards exported from the capability with this record id
    /// (one at most: a capability is for one object), to take their gates before
    /// [`Owner::revoke_source`].
    pub fn objects_of_source(&self, source: &RecordId) -> Result<Vec<ObjID>, InvokeError> {
        let st = self.read()?;
        let mut objects = Vec::new();
        st.table.live_matching(|g| {
            if g.source.as_ref() == Some(source) {
                objects.push(g.object);
            }
            false
        });
        objects.sort_unstable();
        objects.dedup();
        Ok(objects)
    }

    /// Records revocations of a store's revocation list: capabilities by record id, and keys
    /// by the id of their key object (`kuid`). From the moment this returns,
    /// [`Owner::export`] refuses those capabilities and every capability verified by those
    /// keys, whatever key lookup it was handed (which may have read the list before). Returns
    /// the objects of the live guards exported from them, for the caller to take their gates
    /// and call [`Owner::revoke_store_revoked`] on each; no other guard from them can appear
    /// meanwhile. Only takes the write lock when something is new.
    pub fn note_store_revocations<'a>(
        &self,
        records: impl IntoIterator<Item = &'a RecordId> + Clone,
        keys: impl IntoIterator<Item = &'a ObjID> + Clone,
    ) -> Result<Vec<ObjID>, InvokeError> {
        let new = {
            let st = self.read()?;
            records
                .clone()
                .into_iter()
                .any(|r| !st.store_revoked.records.contains(r))
                || keys
                    .clone()
                    .into_iter()
                    .any(|k| !st.store_revoked.keys.contains(k))
        };
        let mut objects = Vec::new();
        let collect = |st: &State, objects: &mut Vec<ObjID>| {
            st.table.live_matching(|g| {
                if st.store_revoked.reaches(g) {
                    objects.push(g.object);
                }
                false
            });
        };
        if new {
            let mut st = self.write()?;
            st.store_revoked.records.extend(records);
            st.store_revoked.keys.extend(keys);
            collect(&st, &mut objects);
        } else {
            collect(&*self.read()?, &mut objects);
        }
        objects.sort_unstable();
        objects.dedup();
        Ok(objects)
    }

    /// Revokes the root guards of `object` exported from a capability or verified by a key
    /// that [`Owner::note_store_revocations`] recorded (and their descendants). Hold the
    /// object's gate around it, as around [`Owner::revoke`].
    pub fn revoke_store_revoked(&self, object: ObjID) -> Result<RevokeReport, InvokeError> {
        let mut st = self.write()?;
        let roots = st
            .table
            .live_matching(|g| g.object == object && st.store_revoked.reaches(g));
        Ok(self.revoke_all(&mut st, &roots))
    }

    /// Revokes every guard of `object` (and their descendants): call it when the object is
    /// deleted or its `kuid` changes.
    pub fn revoke_object(&self, object: ObjID) -> Result<RevokeReport, InvokeError> {
        let mut st = self.write()?;
        let all = st.table.live_matching(|g| g.object == object);
        Ok(self.revoke_all(&mut st, &all))
    }

    /// Frees the entries of guards that expired by `now` (and their descendants, which expire
    /// no later). Expired guards refuse every token anyway; this returns their entries for
    /// reuse. A service calls it now and then.
    pub fn sweep_expired(&self, now: u64) -> Result<RevokeReport, InvokeError> {
        let mut st = self.write()?;
        let expired = st.table.live_matching(|g| g.scope.expires.is_expired(now));
        Ok(self.revoke_all(&mut st, &expired))
    }

    fn revoke_all(&self, st: &mut State, indices: &[u32]) -> RevokeReport {
        // Descendants of an earlier index are already gone: `revoke` returns 0 for them.
        let guards_revoked = indices.iter().map(|&i| st.table.revoke(i)).sum();
        self.sync_keys(st);
        RevokeReport { guards_revoked }
    }

    /// Table counters.
    pub fn stats(&self) -> Result<TableStats, InvokeError> {
        Ok(self.read()?.table.stats())
    }

    fn check_controller(&self, token: &GuardedToken) -> Result<(), InvokeError> {
        let owner = token.owner();
        if owner.node != self.id.node {
            return Err(InvokeError::WrongOwner {
                token_node: owner.node,
                this_node: self.id.node,
            });
        }
        if owner.version != self.id.version {
            return Err(InvokeError::StaleController {
                token: owner.version,
                current: self.id.version,
            });
        }
        Ok(())
    }

    /// Steps 1 to 3 of a check and the expiry: the token is genuine, current and unexpired.
    /// Returns its guard and effective scope.
    fn validate(
        &self,
        st: &State,
        token: &GuardedToken,
        now: u64,
    ) -> Result<(GuardRef, Scope), InvokeError> {
        // The tag first: nothing about the guard's state (live, revoked, reused, upgraded)
        // may depend on a token the owner did not issue.
        self.check_tag(st, token)?;
        let guard = token.guard();
        let scope = Self::current_scope(st, guard, token, now)?;
        Ok((guard, scope))
    }

    /// Steps 2 and 3 of a check and the expiry, for `guard` (the token's, or the version a
    /// renewal moves it to): the guard is live there, was issued with the token's body, and
    /// the token's effective scope has not expired. Returns that scope.
    fn current_scope(
        st: &State,
        guard: GuardRef,
        token: &GuardedToken,
        now: u64,
    ) -> Result<Scope, InvokeError> {
        let info = st.table.lookup(guard)?;
        if info.object != token.object() || info.scope != token.body().scope {
            return Err(InvokeError::GuardMismatch);
        }
        let scope = token.scope();
        if scope.expires.is_expired(now) {
            return Err(InvokeError::Expired {
                expires: scope.expires.raw(),
                now,
            });
        }
        Ok(scope)
    }

    /// Step 1 of a check: the token's tag chain verifies under the key of its guard version's
    /// range, which needs nothing but the token and the keys. A token that fails is reported
    /// as from another node or controller when it names one (for the log), else as
    /// [`InvokeError::BadTag`].
    fn check_tag(&self, st: &State, token: &GuardedToken) -> Result<(), InvokeError> {
        let genuine = Self::root_tag(st, token.body()).is_some_and(|root| token.tag_matches(root));
        if genuine {
            // Keys are derived from this controller's id: a genuine token names it.
            return self.check_controller(token);
        }
        self.check_controller(token)?;
        Err(InvokeError::BadTag)
    }

    /// The root tag of `body` under the key of its guard version's range (`None` for a version
    /// outside the table's version space).
    fn root_tag(st: &State, body: &TokenBody) -> Option<[u8; KEY_LEN]> {
        let range = st.table.range_of(body.guard.version)?;
        let key = st.keys.get(range as usize)?;
        Some(crypto::root_tag(&key.key, &body.encode()))
    }

    /// Re-derives the keys of ranges opened since the last call.
    fn sync_keys(&self, st: &mut State) {
        let State { table, keys, .. } = st;
        for (r, k) in (0u32..).zip(keys.iter_mut()) {
            let generation = table.generation(r);
            if k.generation != generation {
                *k = RangeKey {
                    generation,
                    key: self.secret.range_key(self.id, r, generation),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::VersionChange;

    #[test]
    fn owner_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Owner>();
        assert_send_sync::<GuardedToken>();
    }

    #[test]
    fn upgrade_notice_round_trips() {
        let n = UpgradeNotice {
            owner: ControllerId::new(1, 2),
            changes: vec![
                VersionChange {
                    index: 3,
                    old: 4,
                    new: 5,
                },
                VersionChange {
                    index: 6,
                    old: 7,
                    new: 8,
                },
            ],
        };
        let b = n.encode();
        assert_eq!(UpgradeNotice::decode(&b), Ok(n));
        for len in 0..b.len() {
            assert!(UpgradeNotice::decode(&b[..len]).is_err());
        }
        let mut long = b.clone();
        long.push(0);
        assert!(UpgradeNotice::decode(&long).is_err());
    }
}
