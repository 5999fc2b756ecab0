//! [`Engine`]: the page-fault decision, its caches and revocation.
//!
//! - this module: deciding a fault ([`Engine::decide`]) and the lookups upstream's
//!   `SecCtxMgr` offers, from the cache or by reading and verifying the context;
//! - [`read`]: reading a context inside the host's scope, and noticing it change;
//! - [`invalidate`]: revocation, invalidation and expiry, and the unmaps they cause.
//!
//! # Locks
//!
//! The engine's locks are the cache sets' writer locks (a hit takes none: it reads the set's
//! seqlocked mirror), the validated-context table's spinlock and the memo sets' spinlocks
//! (the revocation sets are the host's). None is held
//! while another is taken, none is held across a call into the host, and nothing is
//! allocated under any of them. A thread's [`SecCtxMgr`] lock is taken only to copy one id
//! out of it.

mod invalidate;
mod read;

use core::cell::{Cell, RefCell};
use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;
use twizzler_capsec::{
    Access, AccessKind, CtxFlags, Expiry, Grant, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, PermsInfo,
    Protections, SecCtx, Verdict,
};

pub use invalidate::{INVALIDATION_LIST, Invalidation};

use crate::authority::EngineAuthority;
use crate::cache::{
    CachedPerms, Deps, Evaluated, Explained, ObjectPerms, Served, Stamp, VerifyCache,
};
use crate::ctx_bytes::CtxBytes;
use crate::fault::{Decision, DenyCause, Fault, KuidAt, Violation};
use crate::host::{Host, ObjectInfo};
use crate::memo::RecordMemo;
use crate::mgr::{KERNEL_SCTX, SecCtxMgr};
use crate::stats::{Counters, Stats};
use crate::ticket::{MapTicket, Ticket};
use read::ValidatedCtxs;

/// The most signatures one fault verifies (in all the contexts it consults). A fault verifies
/// only the records that would add a right it needs, until it is granted, so a granted fault
/// usually verifies one; a denied one judges every record of the object, to cache a complete
/// denial. Records past the budget are not verified and do not count for that decision, which
/// is cached like any other: a hostile context costs at most this many verifications per
/// fault, and a repeated fault on it costs a cache hit. Signature checks the engine remembers
/// (successes and failures) cost a hash and are not counted.
///
/// 128 Ed25519 verifications are about 6 ms on the project's machine, 128 P-256 ones about
/// 45 ms, once; every later fault is a hit.
pub const MAX_VERIFICATIONS_PER_FAULT: usize = 128;

/// How often a lookup is redone when a revocation or invalidation races with it.
const RACE_RETRIES: usize = 4;

/// The faulting object as a lookup knows it: its metadata, and where its `kuid` is.
#[derive(Clone, Copy)]
struct Subject {
    info: ObjectInfo,
    kuid_at: KuidAt,
}

impl Subject {
    fn of(fault: &Fault) -> Self {
        Self {
            info: fault.object,
            kuid_at: fault.kuid_at,
        }
    }
}

/// One context's answer for one access.
struct Looked {
    eval: Evaluated,
    flags: CtxFlags,
    ticket: MapTicket,
    /// Why the entry does not grant the access, when it does not (worked out in the same
    /// lookup, so a denial reads the cache once).
    cause: Option<DenyCause>,
}

/// The page-fault decision engine.
///
/// Generic over the [`Host`] kernel; `const`-constructible, heap-free and all zero bytes when
/// new, so a kernel keeps it in a `static` in `.bss`. Safe to share between CPUs: the caches
/// are split into sets read without a lock and written under a lock each, revocations move
/// an epoch, counters are atomics.
pub struct Engine<H: Host> {
    host: H,
    cache: VerifyCache,
    memo: RecordMemo,
    /// Signature checks that failed (a check's outcome never changes: remembered for ever).
    failed: RecordMemo,
    /// Bumped by every revocation and invalidation; cache entries stamped with an older epoch
    /// miss.
    epoch: AtomicU64,
    validated: Mutex<ValidatedCtxs>,
    counters: Counters,
    /// Added to [`Host::monotonic_ns`] to give Unix time.
    wall_offset: AtomicU64,
    /// The earliest expiry among cached decisions, encoded so that `0` means none and a
    /// larger value is sooner (see [`expiry_key`]).
    next_expiry: AtomicU64,
}

/// Encodes an expiry so that "never" is 0 and sooner is larger (for `fetch_max`).
fn expiry_key(e: Expiry) -> u64 {
    !e.raw().wrapping_sub(1)
}

/// The inverse of [`expiry_key`].
fn expiry_of_key(k: u64) -> Expiry {
    Expiry::from_raw((!k).wrapping_add(1))
}

impl<H: Host> Engine<H> {
    /// An engine with empty caches and nothing revoked.
    pub const fn new(host: H) -> Self {
        Self {
            host,
            cache: VerifyCache::new(),
            memo: RecordMemo::new(),
            failed: RecordMemo::new(),
            epoch: AtomicU64::new(0),
            validated: Mutex::new(ValidatedCtxs::EMPTY),
            counters: Counters::new(),
            wall_offset: AtomicU64::new(0),
            next_expiry: AtomicU64::new(0),
        }
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The host, to change it while no one else uses the engine (a kernel that builds its
    /// tables before the first fault; benchmarks and tests).
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        Stats {
            hits: self.cache.hits(),
            ..self.counters.snapshot()
        }
    }

    /// Number of decisions cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Sets the offset from the host's monotonic clock to Unix time (ns): the engine's time
    /// is `monotonic_ns() + offset`, and expiry times are Unix times.
    ///
    /// Moving it forward makes records expire sooner: call [`Engine::expire`] afterwards so
    /// pages mapped under records that are now expired are unmapped. Moving it backward makes
    /// records that had expired count again for *new* faults (the rule at the new time);
    /// nothing already unmapped is mapped back without a fault.
    pub fn set_wall_clock_offset(&self, offset_ns: u64) {
        let old = self.wall_offset.swap(offset_ns, Ordering::AcqRel);
        if offset_ns < old {
            // Decisions cached while a record was expired hold no record of it: make every
            // entry miss, so the next faults are decided at the new time.
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The offset set by [`Engine::set_wall_clock_offset`].
    pub fn wall_clock_offset(&self) -> u64 {
        self.wall_offset.load(Ordering::Acquire)
    }

    /// The engine's current time: ns since the Unix epoch.
    pub fn now(&self) -> u64 {
        self.host
            .monotonic_ns()
            .saturating_add(self.wall_offset.load(Ordering::Acquire))
    }

    /// When, on the host's monotonic clock, the earliest cached grant expires: arm a timer
    /// for then and call [`Engine::expire`]. `None` when no cached grant expires. Re-read it
    /// after every `Map` with a `valid_until` and after every `expire`.
    pub fn next_deadline(&self) -> Option<u64> {
        let k = self.next_expiry.load(Ordering::Acquire);
        expiry_of_key(k)
            .at()
            .map(|t| t.saturating_sub(self.wall_offset.load(Ordering::Acquire)))
    }

    /// How long from `now`, a reading of [`Host::monotonic_ns`], until the earliest cached
    /// grant expires: the one relative wait a host arms its timer with (`Some(0)` when it has
    /// passed, `None` when no cached grant expires). The deadline is on the host's monotonic
    /// clock, so a timer counting anything else (ticks of its own) must not be used for it.
    pub fn next_deadline_in(&self, now: u64) -> Option<u64> {
        self.next_deadline().map(|d| d.saturating_sub(now))
    }

    fn note_expiry(&self, e: Expiry) {
        self.next_expiry.fetch_max(expiry_key(e), Ordering::AcqRel);
    }

    /// Decides what to do about `fault` by a thread with contexts `thread`: try the active
    /// context; if it does not grant and is not `UNDETACHABLE`, try the inactive ones (an
    /// instruction fetch must land on an entry point of the gate to switch). The thread is not
    /// switched: `Map::switch_to` names the context the kernel switches to.
    ///
    /// # Example
    ///
    /// A read fault is granted (the signature is verified once), the same fault again is a
    /// cache hit, and a write the capability does not grant is a violation:
    ///
    /// ```
    /// # use std::cell::{Cell, RefCell};
    /// # use std::collections::HashMap;
    /// # use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
    /// # use twizzler_capsec::*;
    /// # /// A toy kernel: objects, context bytes and keys in maps; one key can be revoked.
    /// # #[derive(Default)]
    /// # struct Kernel {
    /// #     objects: HashMap<ObjID, ObjectInfo>,
    /// #     contexts: HashMap<ObjID, Vec<u8>>,
    /// #     keys: HashMap<ObjID, VerifyingKey>,
    /// #     revoked: Cell<Option<ObjID>>,
    /// #     unmapped: RefCell<Vec<Unmap>>,
    /// # }
    /// # impl Host for Kernel {
    /// #     fn object(&self, id: ObjID) -> Option<ObjectInfo> { self.objects.get(&id).copied() }
    /// #     fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
    /// #         self.contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
    /// #     }
    /// #     fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
    /// #         self.keys.get(&kuid).map(f)
    /// #     }
    /// #     fn key_revoked(&self, kuid: ObjID) -> bool { self.revoked.get() == Some(kuid) }
    /// #     fn record_revoked(&self, _id: &RecordId) -> bool { false }
    /// #     fn monotonic_ns(&self) -> u64 { 1 }
    /// #     fn unmap(&self, what: Unmap) { self.unmapped.borrow_mut().push(what) }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Context `ctx` holds a read-only capability for `file`, signed by the key in `key_obj`.
    /// let (file, key_obj, ctx) = (ObjID::new(0x10), ObjID::new(0x11), ObjID::new(0x20));
    /// let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[9; 32])?;
    /// let mut editor = SecCtxEditor::new();
    /// editor.add_cap(&Cap::mint(CapGrant::new(file, ctx, Protections::READ), &key)?);
    /// let info = ObjectInfo { kuid: Some(key_obj), default_prots: Protections::empty() };
    /// let engine = Engine::new(Kernel {
    ///     objects: [(file, info)].into(),
    ///     contexts: [(ctx, editor.encode()?)].into(),
    ///     keys: [(key_obj, key.verifying_key())].into(),
    ///     ..Kernel::default() // `Kernel` is a toy `Host` (hidden above)
    /// });
    /// let thread = SecCtxMgr::new(ctx);
    /// let read = Fault::new(file, info, 0x1000, AccessKind::Read);
    ///
    /// let first = engine.decide(&thread, &read);
    /// assert!(matches!(first, Decision::Map { prots, .. } if prots == Protections::READ));
    /// let again = engine.decide(&thread, &read);
    /// assert_eq!(again, first);
    /// assert_eq!((engine.stats().hits, engine.stats().verifies), (1, 1));
    ///
    /// let write = Fault { kind: AccessKind::Write, ..read };
    /// assert!(matches!(engine.decide(&thread, &write), Decision::Violation(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn decide(&self, thread: &SecCtxMgr, fault: &Fault) -> Decision {
        // The common case first, kept small: the active context's fresh cache entry decides.
        // No lock is taken (the thread's active id and the cache set are read under sequence
        // counters), nothing is written but the set's hit counter, and the host is asked only
        // the time. Anything else (a miss, an incomplete entry that denies, a switch, the
        // kernel's context, a set being written) leaves the block, and `decide_slow` decides
        // in full. (A labelled block rather than a function returning `Option<Decision>`: the
        // decision is built in place, not copied out of an option.)
        // The time, once read: the slow path reuses it (a miss asks the host's clock once).
        let mut clock = None;
        'hit: {
            if fault.offset < PAGE_SIZE || fault.offset >= MAX_OBJECT_SIZE {
                break 'hit;
            }
            let (active, inactive) = thread.active_and_inactive_count();
            if active == KERNEL_SCTX {
                break 'hit;
            }
            let now = self.now();
            clock = Some(now);
            let epoch = self.epoch.load(Ordering::Acquire);
            let stamp = Stamp {
                epoch,
                kuid: fault.object.kuid,
                default_prots: fault.object.default_prots,
            };
            let access = data_or_exec(fault);
            let needed = fault.kind.required();
            let Some((served, ticket)) =
                self.cache
                    .serve(active, fault.target, &stamp, now, &access, needed)
            else {
                break 'hit;
            };
            let granted = match served {
                Served::Grant(g) => g,
                Served::Deny {
                    provided,
                    flags,
                    explained,
                } => {
                    let why = (provided, flags, explained);
                    match self.deny_hit(active, inactive, fault, &stamp, now, why) {
                        Some(v) => {
                            self.cache.count_hit(&ticket);
                            return Decision::Violation(v);
                        }
                        None => break 'hit,
                    }
                }
            };
            // As in `with_entry`: a hit counts only under an unchanged epoch (see `MapTicket`).
            if self.epoch.load(Ordering::Acquire) != epoch {
                break 'hit;
            }
            self.cache.count_hit(&ticket);
            return Decision::Map {
                prots: granted.provide,
                pages: granted.pages,
                ctx: active,
                switch_to: None,
                valid_until: granted.valid_until,
                ticket,
            };
        }
        self.decide_slow(thread, fault, clock)
    }

    /// A repeated denial, from the active context's complete entry, when there is nowhere
    /// else to look (the context is `UNDETACHABLE`, or the thread has no inactive context):
    /// the violation the full search would give, without the search's bookkeeping. `why` is
    /// what the lock-free lookup served: what the entry provides, the context's flags, and the
    /// cause if the mirror holds it; else the entry explains it under its set's lock. `None`
    /// when the thread has inactive contexts to try, or the entry changed meanwhile.
    fn deny_hit(
        &self,
        active: ObjID,
        inactive: usize,
        fault: &Fault,
        stamp: &Stamp,
        now: u64,
        why: (Protections, CtxFlags, Explained),
    ) -> Option<Violation> {
        let (provided, flags, explained) = why;
        let needed = fault.kind.required();
        let violation = if flags.contains(CtxFlags::UNDETACHABLE) {
            Violation::Undetachable {
                ctx: active,
                needed,
                provided,
            }
        } else if inactive == 0 {
            let cause = match explained.cause(data_or_exec(fault).page(), needed) {
                Some(c) => c,
                None => {
                    let access = data_or_exec(fault);
                    self.cache
                        .with_fresh(active, fault.target, stamp, now, |e| {
                            e.deny_cause(&access, needed)
                        })?
                        .0
                }
            };
            Violation::Denied {
                ctx: active,
                needed,
                provided,
                cause,
            }
        } else {
            return None;
        };
        (self.epoch.load(Ordering::Acquire) == stamp.epoch).then_some(violation)
    }

    /// Everything the common case at the top of [`Engine::decide`] does not serve.
    #[inline(never)]
    fn decide_slow(&self, thread: &SecCtxMgr, fault: &Fault, now: Option<u64>) -> Decision {
        match self.search(thread, fault, now) {
            Ok((looked, switch_to)) => Decision::Map {
                prots: looked.eval.perms.provide,
                pages: looked.eval.pages,
                ctx: looked.eval.perms.ctx,
                switch_to,
                valid_until: looked.eval.perms.valid_until,
                ticket: looked.ticket,
            },
            Err(v) => Decision::Violation(v),
        }
    }

    /// What the engine granted context `ctx` at byte `offset` of `target`: the most any fault
    /// there by a thread in `ctx` was mapped with (a load or store, a fetch, or a fetch
    /// entering through a code gate), from the cached decision. `None` when no current
    /// decision is cached: then nothing granted under `ctx` for `target` may still be mapped
    /// (it was unmapped when the decision left the cache).
    ///
    /// A host that takes write access away from a mapping and restores it later (Twizzler's
    /// `InvalidateMode::WriteProtect`) restores at most this minus write, never the region's
    /// protections: a read-only grant in a read-write-execute region stays read-only.
    pub fn granted(&self, ctx: ObjID, target: ObjID, offset: u64) -> Option<Protections> {
        if ctx == KERNEL_SCTX {
            return (offset >= PAGE_SIZE).then_some(Protections::all());
        }
        let now = self.now();
        let epoch = self.epoch.load(Ordering::Acquire);
        self.cache.with_current(ctx, target, epoch, now, |e| {
            [AccessKind::Read, AccessKind::Exec]
                .into_iter()
                .flat_map(|kind| {
                    let a = Access {
                        kind,
                        offset,
                        entering: false,
                    };
                    [a, a.as_entering()]
                })
                .fold(Protections::empty(), |p, a| {
                    p | e.snap.evaluate(&a).perms.provide
                })
        })
    }

    /// Whether a `Map` decision's ticket is still current: call it holding the lock that
    /// [`Host::unmap`] takes, and install the mapping only if it returns `true` (else decide
    /// again). See [`MapTicket`].
    pub fn is_current(&self, ticket: &MapTicket) -> bool {
        match ticket.0 {
            Ticket::Kernel => true,
            Ticket::Epoch(e) => self.epoch.load(Ordering::Acquire) == e,
            Ticket::Entry { .. } => self.cache.is_current(ticket).unwrap_or(false),
        }
    }

    /// The rights the thread's active context provides for `fault`.
    pub fn check_active_access(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
    ) -> Result<PermsInfo, Violation> {
        check_bounds(fault)?;
        let now = self.now();
        let budget = fault_budget();
        Ok(self
            .lookup_access(thread.active_id(), fault, data_or_exec(fault), now, &budget)?
            .eval
            .perms)
    }

    /// The rights of the first of the thread's contexts that grants `fault` (`perms.ctx`
    /// names it), or the violation. Does not switch.
    pub fn search_access(&self, thread: &SecCtxMgr, fault: &Fault) -> Result<PermsInfo, Violation> {
        self.search(thread, fault, None).map(|(l, _)| l.eval.perms)
    }

    /// Context `ctx`'s rights on object `target` as a whole (upstream's
    /// `SecurityContext::lookup`): what holds on every page, and what on some.
    pub fn lookup(
        &self,
        ctx: ObjID,
        target: ObjID,
        object: &ObjectInfo,
    ) -> Result<ObjectPerms, Violation> {
        let object = Subject {
            info: *object,
            kuid_at: KuidAt::Fault,
        };
        self.lookup_subject(ctx, target, &object)
    }

    /// [`Engine::lookup`] for a host whose faults are [`Fault::lazy`]: the object's `kuid` is
    /// asked of [`Host::object`] if a record needs it, and the decision is cached as a lazy
    /// fault's is, so a lookup and the faults share one entry (with [`Engine::lookup`] and an
    /// `ObjectInfo` carrying the `kuid`, the two would displace each other, unmapping each
    /// time).
    pub fn lookup_lazy(
        &self,
        ctx: ObjID,
        target: ObjID,
        default_prots: Protections,
    ) -> Result<ObjectPerms, Violation> {
        let object = Subject {
            info: ObjectInfo {
                kuid: None,
                default_prots,
            },
            kuid_at: KuidAt::Miss,
        };
        self.lookup_subject(ctx, target, &object)
    }

    fn lookup_subject(
        &self,
        ctx: ObjID,
        target: ObjID,
        object: &Subject,
    ) -> Result<ObjectPerms, Violation> {
        if ctx == KERNEL_SCTX {
            return Ok(ObjectPerms {
                ctx,
                everywhere: Protections::all(),
                somewhere: Protections::all(),
                restrict: Protections::empty(),
                valid_until: Expiry::NEVER,
            });
        }
        let now = self.now();
        let budget = fault_budget();
        self.with_entry(ctx, target, object, now, &budget, Want::All, |e| {
            e.snap.object_perms()
        })
        .map(|(p, _)| p)
    }

    /// The full decision: the active context, then (unless it is `UNDETACHABLE`) the
    /// inactive ones. `now` is the engine's time if the caller read it already.
    fn search(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
        now: Option<u64>,
    ) -> Result<(Looked, Option<ObjID>), Violation> {
        check_bounds(fault)?;
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let active = thread.active_id();
        if active == KERNEL_SCTX {
            return Ok((kernel_grant(), None));
        }
        let now = now.unwrap_or_else(|| self.now());
        let budget = fault_budget();
        let looked = self.lookup_access(active, fault, access, now, &budget)?;
        if looked.eval.perms.grants(needed) {
            return Ok((looked, None));
        }
        let provided = looked.eval.perms.provide;
        if looked.flags.contains(CtxFlags::UNDETACHABLE) {
            return Err(Violation::Undetachable {
                ctx: active,
                needed,
                provided,
            });
        }
        let mut i = 0;
        while let Some(ctx) = thread.inactive_at(i) {
            i += 1;
            // An inactive context that is missing or malformed grants nothing; only the
            // active context's problems are the thread's violation.
            if ctx != active
                && let Ok(l) = self.lookup_access(ctx, fault, access.as_entering(), now, &budget)
                && l.eval.perms.grants(needed)
            {
                return Ok((l, Some(ctx)));
            }
        }
        Err(Violation::Denied {
            ctx: active,
            needed,
            provided,
            // The active context's entry did not grant, so its lookup explained why, from what
            // the entry remembers: nothing is read or verified again.
            cause: looked.cause.unwrap_or(DenyCause::NoRecord),
        })
    }

    fn stamp(&self, object: &ObjectInfo) -> Stamp {
        Stamp {
            epoch: self.epoch.load(Ordering::Acquire),
            kuid: object.kuid,
            default_prots: object.default_prots,
        }
    }

    fn authority<'a>(
        &'a self,
        target: ObjID,
        object: &Subject,
        budget: &'a Cell<u32>,
    ) -> EngineAuthority<'a, H> {
        EngineAuthority {
            host: &self.host,
            memo: &self.memo,
            failed: &self.failed,
            budget,
            counters: &self.counters,
            target,
            target_object: (object.kuid_at == KuidAt::Fault).then_some(object.info),
            deps: RefCell::new(Deps::EMPTY),
        }
    }

    /// Runs `f` on a fresh cache entry for (`ctx_id`, `target`) that serves `want`: the cached
    /// one on a hit, else one built by reading the context, which is cached (merged into the
    /// cached entry, see [`VerifyCache::insert`]). An entry that does not serve `want` (it was
    /// built lazily for other accesses) is the base of the new one: its grants are kept and
    /// only the records `want` needs are verified. Returns `f`'s result and the ticket of a
    /// decision made from it. Whatever `f` sees is in the cache when this returns, so every
    /// page mapped from it is found by every later expiry, revocation and invalidation.
    #[allow(clippy::too_many_arguments)]
    fn with_entry<R>(
        &self,
        ctx_id: ObjID,
        target: ObjID,
        object: &Subject,
        now: u64,
        budget: &Cell<u32>,
        want: Want,
        f: impl Fn(&CachedPerms) -> R,
    ) -> Result<(R, MapTicket), Violation> {
        let build = |stamp, base| {
            self.read_ctx(ctx_id, |ctx| {
                self.build_entry(ctx_id, ctx, target, object, stamp, now, budget, base, want)
            })
        };
        for _ in 0..RACE_RETRIES {
            let stamp = self.stamp(&object.info);
            let base = match self.cache.with_fresh(ctx_id, target, &stamp, now, |e| *e) {
                Some((e, ticket)) if want.served_by(&e) => {
                    // The entry matched a stamp read before the lookup. If the epoch moved
                    // since, the entry may be one built from what a revocation took away,
                    // inserted (with the old stamp) after that revocation's sweep passed its
                    // set: its ticket would look current. Only a hit under an unchanged epoch
                    // counts.
                    if self.epoch.load(Ordering::Acquire) == stamp.epoch {
                        self.cache.count_hit(&ticket);
                        return Ok((f(&e), ticket));
                    }
                    continue;
                }
                other => other.map(|(e, _)| e),
            };
            Counters::bump(&self.counters.misses);
            let entry = build(stamp, base)?;
            let ticket = self.insert(entry, now);
            if self.epoch.load(Ordering::Acquire) == stamp.epoch {
                return Ok((f(&entry), ticket));
            }
            // A revocation or invalidation ran while the records were verified: what was
            // verified may be gone already. The entry inserted carries the old epoch, so it
            // will never be served; verify again.
        }
        // Invalidations kept racing with this lookup: decide from a fresh build. It is still
        // cached (an expiry or a revocation must find what it grants), and the decision
        // carries the epoch, which every revocation and invalidation moves.
        let stamp = self.stamp(&object.info);
        let entry = build(stamp, None)?;
        let _ = self.insert(entry, now);
        Ok((f(&entry), MapTicket(Ticket::Epoch(stamp.epoch))))
    }

    /// What context `ctx_id` provides for `access` to the fault's object.
    fn lookup_access(
        &self,
        ctx_id: ObjID,
        fault: &Fault,
        access: Access,
        now: u64,
        budget: &Cell<u32>,
    ) -> Result<Looked, Violation> {
        let needed = access.kind.required();
        let want = Want::Access(access, needed);
        let ((eval, flags, cause), ticket) = self.with_entry(
            ctx_id,
            fault.target,
            &Subject::of(fault),
            now,
            budget,
            want,
            |e| {
                let eval = e.snap.evaluate(&access);
                let cause = (!eval.perms.grants(needed)).then(|| e.deny_cause(&access, needed));
                (eval, e.snap.flags, cause)
            },
        )?;
        Ok(Looked {
            eval,
            flags,
            ticket,
            cause,
        })
    }

    /// Caches `entry` (built at `now`), notes its expiry for the timer, unmaps what it evicted
    /// or displaced, and returns the ticket of decisions made from it.
    fn insert(&self, entry: CachedPerms, now: u64) -> MapTicket {
        let (gone, ticket) = self.cache.insert(entry, now);
        // After the insert: an `expire` that cleared the deadline before this either saw the
        // entry in its sweep or runs its sweep before the entry is there, and then this note
        // comes after its clearing.
        self.note_expiry(entry.snap.valid_until);
        if let Some(r) = gone {
            Counters::bump(&self.counters.evictions);
            self.unmap_removed(r, &mut Invalidation::default());
        }
        ticket
    }

    /// Builds the entry for (`ctx_id`, `target`) from `ctx`'s records, starting from `base`
    /// (a fresh cached entry that does not serve `want`) or from nothing.
    ///
    /// For an access, lazily: the records are read in order and only those that would add a
    /// right the access needs are verified, until the access is granted; one fault verifies
    /// what it needs, not every record. If the records cannot grant it, every record is
    /// judged (within the fault's budget of verifications), so that the entry is complete and
    /// a repeated denial is served from the cache. For [`Want::All`], every record is judged.
    #[allow(clippy::too_many_arguments)]
    fn build_entry(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_, CtxBytes<'_>>,
        target: ObjID,
        object: &Subject,
        stamp: Stamp,
        now: u64,
        budget: &Cell<u32>,
        base: Option<CachedPerms>,
        want: Want,
    ) -> CachedPerms {
        let mut entry = base.unwrap_or_else(|| {
            CachedPerms::new(
                ctx_id,
                target,
                stamp,
                twizzler_capsec::allowed_by_masks(ctx, target),
                ctx.flags(),
            )
        });
        let auth = self.authority(target, object, budget);
        *auth.deps.borrow_mut() = entry.deps;
        let granted = match want {
            Want::Access(access, needed) => {
                self.scan(ctx_id, ctx, &auth, now, &mut entry, Some((&access, needed)))
            }
            Want::All => false,
        };
        if !granted {
            self.scan(ctx_id, ctx, &auth, now, &mut entry, None);
        }
        entry.deps = auth.deps.into_inner();
        entry
    }

    /// One pass over the records of `ctx` filed under the entry's object. With `need` (an
    /// access and the rights it needs), verifies only records that would add a needed right
    /// not yet provided, and stops once the access is granted; returns whether it is. Without,
    /// verifies every record the entry's grants do not already subsume. Records that do not
    /// decode or are bound elsewhere, and verifications that fail, are noted as failures;
    /// grants that count are added. The entry is complete if every record was judged and no
    /// grant had to leave the entry's slots.
    fn scan(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_, CtxBytes<'_>>,
        auth: &EngineAuthority<'_, H>,
        now: u64,
        entry: &mut CachedPerms,
        need: Option<(&Access, Protections)>,
    ) -> bool {
        let target = entry.snap.target;
        // What the entry provides for the access, and whether that grants it.
        let provides = |e: &CachedPerms| {
            need.map(|(a, n)| {
                let p = e.snap.evaluate(a).perms;
                (p.provide, p.grants(n))
            })
        };
        let mut provided = provides(entry);
        let mut judged_all = true;
        let mut dropped = false;
        // Whether a grant would add a right the access needs (always, without an access).
        let useful = |grant: &Grant, entry: &CachedPerms, provided: Option<(Protections, bool)>| {
            let (Some((access, needed)), Some((provided, _))) = (need, provided) else {
                return true;
            };
            grant.contribution(access).is_ok_and(|c| {
                !(c & entry.snap.allowed & needed)
                    .difference(provided)
                    .is_empty()
            })
        };
        let mut entries = ctx.entries_for(target);
        loop {
            // Looking for a grant: pass over the capabilities that cannot add a right the
            // access needs (the checks below, read in place), without making an entry of
            // each; the first one that might, or that is not a capability, comes next.
            if need.is_some() && !provided.is_some_and(|(_, granted)| granted) {
                let skipped = entries.skip_caps(|t, holder, grant| {
                    t == target
                        && holder == ctx_id
                        && !entry.subsumes(grant)
                        && !useful(grant, entry, provided)
                });
                if skipped > 0 {
                    entry.seen = true;
                    judged_all = false;
                }
            }
            let Some(e) = entries.next() else {
                break;
            };
            entry.seen = true;
            if provided.is_some_and(|(_, granted)| granted) {
                // More records than the access needed: the entry is not complete.
                judged_all = false;
                break;
            }
            // A capability's body says whether it could matter, without decoding or hashing
            // anything else: most records of an object do not matter to one access.
            if let Some((t, holder, grant)) = e.peek_cap()
                && t == target
                && holder == ctx_id
            {
                if entry.subsumes(&grant) {
                    continue;
                }
                if !useful(&grant, entry, provided) {
                    judged_all = false;
                    continue;
                }
            }
            let record = match e.record() {
                Ok(r) => r,
                Err(err) => {
                    entry.add_failure(Verdict::Malformed(err));
                    continue;
                }
            };
            if record.target() != target {
                entry.add_failure(Verdict::WrongTarget(record.target()));
                continue;
            }
            if record.holder() != ctx_id {
                entry.add_failure(Verdict::WrongHolder(record.holder()));
                continue;
            }
            let grant = Grant::of(&record);
            if entry.subsumes(&grant) {
                // Adds nothing to any access: judged without a signature check.
                continue;
            }
            if !useful(&grant, entry, provided) {
                // Not needed now: verified when an access needs it.
                judged_all = false;
                continue;
            }
            match record.verify(auth, now) {
                Ok(()) => {
                    dropped |= entry.add_grant(grant, record.expires());
                    provided = provides(entry);
                }
                Err(err) => entry.add_failure(Verdict::Invalid(err)),
            }
        }
        entry.snap.complete = judged_all && !dropped;
        provided.is_some_and(|(_, granted)| granted)
    }
}

/// What a lookup needs an entry to answer.
#[derive(Clone, Copy)]
enum Want {
    /// One access, needing these rights: an entry serves it if it grants it, or if it is
    /// complete (then its denial is the rule's).
    Access(Access, Protections),
    /// The object as a whole: only a complete entry serves it.
    All,
}

impl Want {
    fn served_by(&self, e: &CachedPerms) -> bool {
        match self {
            Want::Access(access, needed) => {
                e.snap.complete || e.snap.evaluate(access).perms.grants(*needed)
            }
            Want::All => e.snap.complete,
        }
    }
}

/// A fresh budget of signature verifications for one fault.
fn fault_budget() -> Cell<u32> {
    // The bound is small: it fits.
    Cell::new(MAX_VERIFICATIONS_PER_FAULT as u32)
}

/// The checks that need no context: the null page and the object's bounds.
fn check_bounds(fault: &Fault) -> Result<(), Violation> {
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
    Ok(())
}

/// What a kernel thread gets: everything, on every page but the null page (as upstream).
fn kernel_grant() -> Looked {
    Looked {
        eval: Evaluated {
            perms: PermsInfo {
                ctx: KERNEL_SCTX,
                provide: Protections::all(),
                restrict: Protections::empty(),
                valid_until: Expiry::NEVER,
            },
            pages: 1..MAX_OBJECT_SIZE / PAGE_SIZE,
        },
        // The kernel's context is never left through the fault path.
        flags: CtxFlags::UNDETACHABLE,
        ticket: MapTicket(Ticket::Kernel),
        cause: None,
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
