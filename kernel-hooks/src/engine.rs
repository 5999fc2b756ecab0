//! [`Engine`]: the page-fault decision, its caches and revocation.

use core::cell::RefCell;
use core::sync::atomic::{AtomicU64, Ordering};

use heapless::Vec;
use spin::{Mutex, RwLock};
use twizzler_security::{
    Access, CtxError, CtxFlags, Grant, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, PermsInfo, Protections,
    RecordId, SecCtx, Validated, Verdict, allowed_by_masks, evaluate, evaluate_explained,
};

use crate::authority::EngineAuthority;
use crate::cache::{CachedPerms, Deps, Evaluated, Stamp, VerifyCache};
use crate::fault::{Decision, DenyCause, Fault, Violation};
use crate::host::{Host, ObjectInfo, Unmap};
use crate::memo::RecordMemo;
use crate::mgr::{SecCtxMgr, SwitchResult};
use crate::revocation::{Revocations, RevokeError};
use crate::stats::{Counters, Stats};

/// Contexts whose full validation the engine remembers.
const VALIDATED_SLOTS: usize = 16;
/// How often a lookup is redone when a revocation races with it.
const RACE_RETRIES: usize = 4;
/// Unmaps an [`Invalidation`] lists; more are performed but only counted.
pub const INVALIDATION_LIST: usize = 16;

/// What a revocation, an invalidation or an expiry sweep unmapped (through [`Host::unmap`],
/// before the call returned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invalidation {
    unmapped: Vec<Unmap, INVALIDATION_LIST>,
    total: usize,
}

impl Invalidation {
    fn push(&mut self, u: Unmap) {
        self.total += 1;
        // Past the list's capacity the unmap is still performed, only not listed.
        let _ = self.unmapped.push(u);
    }

    /// The first [`INVALIDATION_LIST`] unmaps performed.
    pub fn unmapped(&self) -> &[Unmap] {
        &self.unmapped
    }

    /// How many unmaps were performed.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether nothing was unmapped.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// Contexts validated in full, by generation and length, so misses can reopen them in
/// constant time.
struct ValidatedCtxs {
    slots: [Option<(ObjID, Validated)>; VALIDATED_SLOTS],
    victim: u8,
}

impl ValidatedCtxs {
    fn get(&self, ctx: ObjID) -> Option<Validated> {
        self.slots
            .iter()
            .flatten()
            .find(|(c, _)| *c == ctx)
            .map(|(_, v)| *v)
    }

    fn put(&mut self, ctx: ObjID, v: Validated) {
        let slot = match self
            .slots
            .iter()
            .position(|s| s.is_some_and(|(c, _)| c == ctx))
        {
            Some(i) => i,
            None => match self.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    let i = usize::from(self.victim) % VALIDATED_SLOTS;
                    self.victim = self.victim.wrapping_add(1);
                    i
                }
            },
        };
        self.slots[slot] = Some((ctx, v));
    }

    fn forget(&mut self, ctx: ObjID) {
        for s in &mut self.slots {
            if s.is_some_and(|(c, _)| c == ctx) {
                *s = None;
            }
        }
    }
}

/// Which of the thread's contexts granted.
enum Found {
    /// The active one.
    Active,
    /// This inactive one: the thread switches to it.
    Inactive(ObjID),
}

/// One context's answer for one access.
struct Looked {
    eval: Evaluated,
    flags: CtxFlags,
}

/// The page-fault decision engine.
///
/// Generic over the [`Host`] kernel; `const`-constructible and heap-free, so a kernel can keep
/// it in a `static`. Safe to share between CPUs: the caches are split into spinlocked sets,
/// revocations take a write lock, counters are atomics.
pub struct Engine<H: Host> {
    host: H,
    cache: VerifyCache,
    memo: RecordMemo,
    revoked: RwLock<Revocations>,
    /// Bumped by every revocation; cache entries stamped with an older epoch miss.
    epoch: AtomicU64,
    validated: Mutex<ValidatedCtxs>,
    counters: Counters,
}

impl<H: Host> Engine<H> {
    /// An engine with empty caches and nothing revoked.
    pub const fn new(host: H) -> Self {
        Self {
            host,
            cache: VerifyCache::new(),
            memo: RecordMemo::new(),
            revoked: RwLock::new(Revocations::new()),
            epoch: AtomicU64::new(0),
            validated: Mutex::new(ValidatedCtxs {
                slots: [None; VALIDATED_SLOTS],
                victim: 0,
            }),
            counters: Counters::new(),
        }
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Number of decisions cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Decides what to do about `fault` by a thread with contexts `thread`: try the active
    /// context; if it does not grant and is not `UNDETACHABLE`, try the inactive ones (an
    /// instruction fetch must land on an entry point of the gate to switch) and switch the
    /// thread to the first that grants.
    pub fn decide(&self, thread: &SecCtxMgr, fault: &Fault) -> Decision {
        for _ in 0..RACE_RETRIES {
            let (looked, found) = match self.search(thread, fault) {
                Ok(found) => found,
                Err(v) => return Decision::Violation(v),
            };
            let switch_to = match found {
                Found::Active => None,
                Found::Inactive(ctx) => match thread.switch_context(ctx) {
                    SwitchResult::Switched => Some(ctx),
                    SwitchResult::NoSwitch => None,
                    // Detached, or switched away, since the search: search again.
                    SwitchResult::NotAttached => continue,
                },
            };
            return Decision::Map {
                prots: looked.eval.perms.provide,
                pages: looked.eval.pages,
                switch_to,
                valid_until: looked.eval.perms.valid_until,
            };
        }
        Decision::Violation(Violation::ContextMissing(thread.active_id()))
    }

    /// The rights the thread's active context provides for `fault`.
    pub fn check_active_access(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
    ) -> Result<PermsInfo, Violation> {
        let info = self.check_fault(fault)?;
        let access = data_or_exec(fault);
        let now = self.host.now();
        Ok(self
            .lookup(thread.active_id(), fault.target, &info, access, now)?
            .eval
            .perms)
    }

    /// The rights of the first of the thread's contexts that grants `fault` (`perms.ctx`
    /// names it), or the violation. Does not switch.
    pub fn search_access(&self, thread: &SecCtxMgr, fault: &Fault) -> Result<PermsInfo, Violation> {
        self.search(thread, fault).map(|(l, _)| l.eval.perms)
    }

    fn search(&self, thread: &SecCtxMgr, fault: &Fault) -> Result<(Looked, Found), Violation> {
        let info = self.check_fault(fault)?;
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let now = self.host.now();
        let active = thread.active_id();
        let looked = self.lookup(active, fault.target, &info, access, now)?;
        if looked.eval.perms.grants(needed) {
            return Ok((looked, Found::Active));
        }
        let provided = looked.eval.perms.provide;
        if looked.flags.contains(CtxFlags::UNDETACHABLE) {
            return Err(Violation::Undetachable {
                ctx: active,
                needed,
                provided,
            });
        }
        for ctx in thread.inactive() {
            // An inactive context that is missing or malformed grants nothing; only the
            // active context's problems are the thread's violation.
            if let Ok(l) = self.lookup(ctx, fault.target, &info, access.as_entering(), now)
                && l.eval.perms.grants(needed)
            {
                return Ok((l, Found::Inactive(ctx)));
            }
        }
        Err(self.diagnose(active, fault, &info, provided, now))
    }

    /// The checks that need no context: the null page, the object's bounds, its existence.
    fn check_fault(&self, fault: &Fault) -> Result<ObjectInfo, Violation> {
        if fault.offset < PAGE_SIZE {
            return Err(Violation::NullPage {
                target: fault.target,
            });
        }
        if fault.offset >= MAX_OBJECT_SIZE {
            return Err(Violation::OutOfBounds {
                target: fault.target,
                offset: fault.offset,
            });
        }
        self.host
            .object(fault.target)
            .ok_or(Violation::UnknownObject(fault.target))
    }

    fn authority(&self) -> EngineAuthority<'_, H> {
        EngineAuthority {
            host: &self.host,
            revoked: &self.revoked,
            memo: &self.memo,
            counters: &self.counters,
            deps: RefCell::new(Deps::EMPTY),
        }
    }

    /// What context `ctx_id` provides for `access` to `target`: from the cache when a fresh
    /// entry exists, else by validating the context and verifying its records for `target`.
    fn lookup(
        &self,
        ctx_id: ObjID,
        target: ObjID,
        info: &ObjectInfo,
        access: Access,
        now: u64,
    ) -> Result<Looked, Violation> {
        let malformed = |error| Violation::MalformedContext { ctx: ctx_id, error };
        let bytes = self
            .host
            .ctx_bytes(ctx_id)
            .ok_or(Violation::ContextMissing(ctx_id))?;
        let generation = SecCtx::peek_generation(bytes).map_err(malformed)?;
        let needed = access.kind.required();

        for _ in 0..RACE_RETRIES {
            let stamp = Stamp {
                generation,
                epoch: self.epoch.load(Ordering::Acquire),
                default_prots: info.default_prots,
            };
            let hit = self.cache.with_fresh(ctx_id, target, &stamp, now, |e| {
                (e.evaluate(&access), e.flags, e.complete)
            });
            if let Some((eval, flags, complete)) = hit {
                Counters::bump(&self.counters.hits);
                if complete || eval.perms.grants(needed) {
                    return Ok(Looked { eval, flags });
                }
                let ctx = self.open_ctx(ctx_id, bytes).map_err(malformed)?;
                return Ok(self.evaluate_uncached(ctx_id, &ctx, target, info, access, now));
            }

            Counters::bump(&self.counters.misses);
            let ctx = self.open_ctx(ctx_id, bytes).map_err(malformed)?;
            let stamp = Stamp {
                generation: ctx.generation(),
                ..stamp
            };
            let entry = self.build_entry(ctx_id, &ctx, target, stamp, now);
            if let Some((c, t)) = self.cache.insert(entry) {
                Counters::bump(&self.counters.evictions);
                self.host.unmap(Unmap::Object { ctx: c, target: t });
            }
            if self.epoch.load(Ordering::Acquire) != stamp.epoch {
                // A revocation ran while the records were verified: what was verified may
                // already be revoked. The entry inserted carries the old epoch, so it will
                // not be served; verify again.
                continue;
            }
            let eval = entry.evaluate(&access);
            if entry.complete || eval.perms.grants(needed) {
                return Ok(Looked {
                    eval,
                    flags: entry.flags,
                });
            }
            return Ok(self.evaluate_uncached(ctx_id, &ctx, target, info, access, now));
        }
        // Revocations kept racing with this lookup: decide without the cache.
        let ctx = self.open_ctx(ctx_id, bytes).map_err(malformed)?;
        Ok(self.evaluate_uncached(ctx_id, &ctx, target, info, access, now))
    }

    /// The context's bytes as a validated view: reopened in constant time if this generation
    /// was validated before, else validated in full.
    fn open_ctx<'b>(&self, ctx_id: ObjID, bytes: &'b [u8]) -> Result<SecCtx<'b>, CtxError> {
        if let Some(v) = self.validated.lock().get(ctx_id)
            && let Ok(ctx) = SecCtx::reopen(bytes, v)
        {
            return Ok(ctx);
        }
        let ctx = SecCtx::parse(bytes)?;
        self.validated.lock().put(ctx_id, ctx.validated());
        Ok(ctx)
    }

    /// Verifies every record of `ctx` bound to `target` and to the context, and keeps the
    /// grants of those that count.
    fn build_entry(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_>,
        target: ObjID,
        stamp: Stamp,
        now: u64,
    ) -> CachedPerms {
        let mut entry = CachedPerms::new(
            ctx_id,
            target,
            stamp,
            allowed_by_masks(ctx, target),
            ctx.flags(),
        );
        let auth = self.authority();
        for e in ctx.entries_for(target) {
            let Ok(record) = e.record() else { continue };
            if record.target() != target || record.holder() != ctx_id {
                continue;
            }
            if record.verify(&auth, now).is_ok() {
                entry.add_grant(Grant::of(&record), record.expires());
            }
        }
        entry.deps = auth.deps.into_inner();
        entry
    }

    /// The rule without the cache, for objects with more valid records than an entry holds.
    fn evaluate_uncached(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_>,
        target: ObjID,
        info: &ObjectInfo,
        access: Access,
        now: u64,
    ) -> Looked {
        let auth = self.authority();
        let perms = evaluate(ctx_id, ctx, target, info.default_prots, &auth, access, now);
        let page = access.page();
        Looked {
            eval: Evaluated {
                perms,
                pages: page..page + 1,
            },
            flags: ctx.flags(),
        }
    }

    /// Why the active context denies `fault`: evaluates it once more, explained.
    fn diagnose(
        &self,
        ctx_id: ObjID,
        fault: &Fault,
        info: &ObjectInfo,
        provided: Protections,
        now: u64,
    ) -> Violation {
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let cause = match self.host.ctx_bytes(ctx_id).map(SecCtx::parse) {
            Some(Ok(ctx)) => {
                let auth = self.authority();
                let mut unmasked = info.default_prots;
                let mut seen = false;
                let mut best: Option<Verdict> = None;
                let perms = evaluate_explained(
                    ctx_id,
                    &ctx,
                    fault.target,
                    info.default_prots,
                    &auth,
                    access,
                    now,
                    |report| {
                        seen = true;
                        match &report.verdict {
                            Verdict::Counted(c) => unmasked |= *c,
                            Verdict::Redundant => {
                                if let Some(Ok(c)) =
                                    report.record.map(|r| Grant::of(r).contribution(&access))
                                {
                                    unmasked |= c;
                                }
                            }
                            v => {
                                if best.as_ref().is_none_or(|b| rank(v) > rank(b)) {
                                    best = Some(v.clone());
                                }
                            }
                        }
                    },
                );
                if unmasked.contains(needed) && !perms.grants(needed) {
                    DenyCause::Masked {
                        removed: needed & perms.restrict,
                    }
                } else if let Some(v) = best {
                    DenyCause::Record(v)
                } else if seen {
                    DenyCause::Record(Verdict::NoUsefulRights)
                } else {
                    DenyCause::NoRecord
                }
            }
            // The lookup just validated it; it changed since. Report what is known.
            _ => DenyCause::NoRecord,
        };
        Violation::Denied {
            ctx: ctx_id,
            needed,
            provided,
            cause,
        }
    }

    /// Revokes key object `kuid`: every record signed by it, or by a delegation provider
    /// using it, stops granting. Unmaps what was granted under it.
    pub fn revoke_key(&self, kuid: ObjID) -> Result<Invalidation, RevokeError> {
        let mut revoked = self.revoked.write();
        if !revoked.revoke_key(kuid)? {
            return Ok(Invalidation::default());
        }
        Ok(self.sweep_revoked(|e| e.deps.uses_kuid(kuid)))
    }

    /// Revokes the record with id `id` (and so every delegation derived from it). Unmaps what
    /// was granted under it.
    pub fn revoke_record(&self, id: RecordId) -> Result<Invalidation, RevokeError> {
        let mut revoked = self.revoked.write();
        if !revoked.revoke_record(id)? {
            return Ok(Invalidation::default());
        }
        Ok(self.sweep_revoked(|e| e.deps.uses_record(&id)))
    }

    /// After a revocation was recorded (the caller holds the revocation lock): bumps the
    /// epoch, removes and unmaps the entries that may depend on what was revoked, and
    /// re-stamps the others so they keep hitting. An entry built concurrently and inserted
    /// after its set was swept keeps the old epoch and so never hits.
    fn sweep_revoked(&self, affected: impl Fn(&CachedPerms) -> bool) -> Invalidation {
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        let new = old.wrapping_add(1);
        self.remove_where(|e| {
            if affected(e) {
                return true;
            }
            if e.stamp.epoch == old {
                e.stamp.epoch = new;
            }
            false
        })
    }

    /// Forgets every decision made under context `ctx` and unmaps everything mapped under
    /// it: for a context object that was written (its generation also makes entries miss,
    /// but only this takes away pages already mapped) or destroyed.
    pub fn invalidate_ctx(&self, ctx: ObjID) -> Invalidation {
        self.validated.lock().forget(ctx);
        let mut inv = self.remove_where(|e| e.ctx == ctx);
        self.host.unmap(Unmap::Context(ctx));
        inv.push(Unmap::Context(ctx));
        inv
    }

    /// Forgets every cached decision (unmapping what they granted) and every verified record:
    /// for memory pressure, or to measure cold faults.
    pub fn flush(&self) -> Invalidation {
        self.memo.clear();
        self.remove_where(|_| true)
    }

    /// Removes and unmaps every decision whose records have expired by the host's current
    /// time. The kernel calls it from its timer, by the earliest `valid_until` it was given.
    pub fn expire(&self) -> Invalidation {
        let now = self.host.now();
        self.remove_where(|e| e.valid_until.is_expired(now))
    }

    fn remove_where(&self, mut remove: impl FnMut(&mut CachedPerms) -> bool) -> Invalidation {
        let mut inv = Invalidation::default();
        self.cache.retain(
            |e| !remove(e),
            |e| {
                let u = Unmap::Object {
                    ctx: e.ctx,
                    target: e.target,
                };
                self.host.unmap(u);
                Counters::bump(&self.counters.invalidated);
                inv.push(u);
            },
        );
        inv
    }
}

/// The access a fault makes, before any switch: fetches by a thread already in the
/// context are not entries.
fn data_or_exec(fault: &Fault) -> Access {
    Access {
        kind: fault.kind,
        offset: fault.offset,
        entering: false,
    }
}

/// How much a verdict explains a denial: a record that is invalid says more than one that is
/// for another context.
fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Invalid(_) => 7,
        Verdict::NotAnEntry => 6,
        Verdict::OutsideGate => 5,
        Verdict::NoUsefulRights => 4,
        Verdict::WrongHolder(_) => 3,
        Verdict::WrongTarget(_) => 2,
        Verdict::Malformed(_) => 1,
        Verdict::Counted(_) | Verdict::Redundant => 0,
    }
}
