//! Twizzler's security module over `kernel-hooks` (twizzler-port).
//!
//! This file replaces upstream's `src/kernel/src/security.rs`. It keeps the names the rest of
//! the kernel uses (`SecCtxMgr`, `SecurityContext`, `SecurityContextRef`, `get_sctx`,
//! `KERNEL_SCTX`, `AccessInfo`, `PermsInfo`, `SwitchResult`) and answers them from
//! `kernel_hooks::Engine`, whose host, [`TwzHost`], is written against the kernel's object
//! table, kernel-object mappings and clock. The fault path calls [`check_fault`] (the patch
//! `twizzler-port/patches/port/0001-fault-path.patch`).
//!
//! Types cross one boundary here: upstream's `twizzler_abi` ids and protections on the
//! kernel's side, `twizzler_capsec`'s on the engine's ([`to_hooks_id`], [`to_abi_prots`] and
//! their inverses). Upstream's `PermsInfo` stays the type `fault.rs` and `region.rs` use.
//!
//! What is not done yet is listed in `twizzler-port/README.md` ("Status").

use alloc::{
    collections::BTreeMap,
    collections::BTreeSet,
    sync::{Arc, Weak},
    vec::Vec,
};
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use kernel_hooks::{
    CtxBytes, Decision, Engine, Fault, Host, MapTicket, ObjectInfo, Unmap, UnmapGranularity,
};
use twizzler_abi::{
    device::CacheType,
    object::{MAX_SIZE, NULLPAGE_SIZE, ObjID, Protections},
    syscall::MapFlags,
    upcall::{MemoryAccessKind, SecurityViolationInfo, UpcallInfo},
};
use twizzler_capsec::{AccessKind, RecordId, VerifyingKey};
use twizzler_rt_abi::error::{NamingError, ObjectError};
pub use twizzler_security::PermsInfo;
use twizzler_security::{SecCtxBase, SecCtxFlags};

use crate::{
    arch::VirtAddr,
    instant::Instant,
    memory::context::{
        Context, ContextRef, KernelMemoryContext, KernelObject, ObjectContextInfo, UserContext,
        kernel_context,
    },
    mutex::Mutex,
    obj::{InvalidateMode, LookupFlags, LookupResult, ObjectRef, PageNumber, lookup_object},
    once::Once,
    spinlock::Spinlock,
    thread::current_memory_context,
};

mod ctx_write;
#[cfg(test)]
mod port_tests;
/// Upstream's own `security.rs` at the pinned commit, which `cargo xtask twizzler` copies here
/// from the checkout's git and patches (`twizzler-port/patches/upstream-copy/`), for the
/// kernel's tests only: the timing test times upstream's cached check beside the engine's
/// hit, in the same boot. Nothing else uses it; the kernel decides through this adapter.
#[cfg(test)]
mod upstream_security;

pub use ctx_write::{FaultScope, fault_scope};

/// The id naming the kernel's own context (never an object): kernel threads run in it.
pub const KERNEL_SCTX: ObjID = ObjID::new(0);

/// The engine: one per kernel, a `static` (no allocation, all zero bytes when new).
pub static ENGINE: Engine<TwzHost> = Engine::new(TwzHost);

/// Object id, upstream's type to the engine's.
pub fn to_hooks_id(id: ObjID) -> twizzler_capsec::ObjID {
    twizzler_capsec::ObjID::new(id.raw())
}

/// Object id, the engine's type to upstream's.
pub fn to_abi_id(id: twizzler_capsec::ObjID) -> ObjID {
    ObjID::new(id.raw())
}

/// Protections, upstream's type to the engine's (both are `READ = 1, WRITE = 2, EXEC = 4`).
pub fn to_hooks_prots(p: Protections) -> twizzler_capsec::Protections {
    twizzler_capsec::Protections::from_bits_truncate(p.bits())
}

/// Protections, the engine's type to upstream's.
pub fn to_abi_prots(p: twizzler_capsec::Protections) -> Protections {
    Protections::from_bits_truncate(p.bits())
}

fn to_abi_perms(p: &twizzler_capsec::PermsInfo) -> PermsInfo {
    PermsInfo {
        ctx: to_abi_id(p.ctx),
        provide: to_abi_prots(p.provide),
        restrict: to_abi_prots(p.restrict),
    }
}

/// What the engine needs of an object, from its metadata. The `kuid` counts only if the id
/// verifies against the metadata (`check_id`); else anyone could name their own key as the
/// signer for someone else's object.
fn object_info(obj: &ObjectRef) -> ObjectInfo {
    let (id_ok, default_prot) = obj.check_id();
    let kuid = if id_ok {
        obj.read_meta(true).map(|m| to_hooks_id(m.kuid))
    } else {
        None
    };
    ObjectInfo::new(kuid, to_hooks_prots(default_prot))
}

/// The revocation sets the engine consults on a miss. The revocation entry points record
/// here first, then tell the engine ([`revoke_key`], [`revoke_record`]).
struct Revoked {
    keys: BTreeSet<u128>,
    records: BTreeSet<RecordId>,
}

static REVOKED: Spinlock<Revoked> = Spinlock::new(Revoked {
    keys: BTreeSet::new(),
    records: BTreeSet::new(),
});

/// Revokes key object `kuid`: every grant that needed it is forgotten and unmapped before
/// this returns.
pub fn revoke_key(kuid: ObjID) {
    REVOKED.lock().keys.insert(kuid.raw());
    ENGINE.revoke_key(to_hooks_id(kuid));
}

/// Revokes the record (capability or delegation) with id `id`, and what derives from it.
pub fn revoke_record(id: RecordId) {
    REVOKED.lock().records.insert(id);
    ENGINE.revoke_record(id);
}

/// The bytes of a security context as the engine reads them: the object's data from its base
/// (past the null page) up to its metadata page. Not yet the object's real size (see the
/// README's "Status").
const CTX_BYTES_LEN: usize = MAX_SIZE - 2 * NULLPAGE_SIZE;

/// The bytes of a key object the host reads: one encoded verifying key.
const KEY_BYTES_MAX: usize = twizzler_capsec::KEY_ENCODED_LEN;

/// Twizzler's kernel as the engine's host.
pub struct TwzHost;

impl Host for TwzHost {
    // Twizzler keeps page tables per security context, so an unmap takes the object's pages
    // (or every page) from that context's tables only; other contexts keep what they were
    // granted (`0004-per-context-unmap.patch` adds the invalidate that does it).
    const UNMAP_GRANULARITY: UnmapGranularity = UnmapGranularity::PerContext;

    fn object(&self, id: twizzler_capsec::ObjID) -> Option<ObjectInfo> {
        count(HostCall::Metadata);
        match lookup_object(to_abi_id(id), LookupFlags::empty()) {
            LookupResult::Found(obj) => Some(object_info(&obj)),
            _ => None,
        }
    }

    fn with_ctx<R>(
        &self,
        ctx: twizzler_capsec::ObjID,
        f: impl FnOnce(CtxBytes<'_>) -> R,
    ) -> Option<R> {
        count(HostCall::Other);
        // Only contexts a thread attached (get_sctx) are mapped; the table's lock is not held
        // while the engine reads (it may call with_key and object).
        let sctx = mapped_contexts().lock().get(&to_abi_id(ctx)).cloned()?;
        let kobj = sctx.kobj.as_ref()?;
        let base = kobj.start_addr().offset(NULLPAGE_SIZE).ok()?;
        // Step 3 of the context-write protocol (`ctx_write`): after another thread's write
        // window, with W taken off a dirty context's mappings, and under its lock.
        sctx.writes.read(to_abi_id(ctx), || {
            // SAFETY: the kernel object handle maps the whole slot of the context object for as
            // long as `sctx` (and so `kobj`) lives, which outlives `f`; untouched pages fault in
            // from the object. Userspace can write the object concurrently, which is why the
            // bytes go through `CtxBytes::shared` (atomic byte loads), never a reference.
            let bytes = unsafe { CtxBytes::shared(base.as_ptr::<u8>(), CTX_BYTES_LEN) };
            Some(f(bytes))
        })
    }

    fn with_key<R>(
        &self,
        kuid: twizzler_capsec::ObjID,
        f: impl FnOnce(&VerifyingKey) -> R,
    ) -> Option<R> {
        count(HostCall::Other);
        let LookupResult::Found(obj) = lookup_object(to_abi_id(kuid), LookupFlags::empty()) else {
            return None;
        };
        let handle = kernel_context().insert_kernel_object::<u8>(ObjectContextInfo::new(
            obj,
            Protections::READ,
            CacheType::WriteBack,
            MapFlags::STABLE,
        ));
        let base = handle.start_addr().offset(NULLPAGE_SIZE).ok()?;
        let mut buf = [0u8; KEY_BYTES_MAX];
        // SAFETY: the handle maps the key object's slot while it lives (to the end of this
        // function); the bytes are copied out one by one with volatile reads, so a concurrent
        // writer can make the copy wrong (it then fails to decode or to verify) but never
        // undefined.
        for (i, b) in buf.iter_mut().enumerate() {
            *b = unsafe { core::ptr::read_volatile(base.as_ptr::<u8>().add(i)) };
        }
        // The stored encoding has a fixed length: scheme tag, length, padded key bytes.
        let key = VerifyingKey::decode(&buf).ok()?;
        Some(f(&key))
    }

    fn key_revoked(&self, kuid: twizzler_capsec::ObjID) -> bool {
        count(HostCall::Other);
        REVOKED.lock().keys.contains(&kuid.raw())
    }

    fn record_revoked(&self, id: &RecordId) -> bool {
        count(HostCall::Other);
        REVOKED.lock().records.contains(id)
    }

    fn monotonic_ns(&self) -> u64 {
        count(HostCall::Clock);
        clock_ns()
    }

    fn unmap(&self, what: Unmap) {
        count(HostCall::Other);
        let whole = PageNumber::from(0usize)..PageNumber::meta_page().next();
        // Write protection is served as the full unmap the contract allows (a later read
        // faults and is decided again).
        match what.as_full_unmap() {
            Unmap::Object { ctx, target } => {
                if let LookupResult::Found(obj) =
                    lookup_object(to_abi_id(target), LookupFlags::empty())
                {
                    obj.invalidate_in(to_abi_id(ctx), whole);
                }
            }
            Unmap::Context(ctx) => {
                let ctx = to_abi_id(ctx);
                for mc in memory_contexts_of(ctx) {
                    mc.unmap_sctx(ctx);
                }
            }
            // Sent to PerObject hosts only; kept exact should the granularity change.
            Unmap::ObjectEverywhere(target) => {
                if let LookupResult::Found(obj) =
                    lookup_object(to_abi_id(target), LookupFlags::empty())
                {
                    obj.invalidate(whole, InvalidateMode::Full);
                }
            }
            // `as_full_unmap` never returns these.
            Unmap::WriteProtectContext(_) | Unmap::WriteProtectObjectEverywhere(_) => {}
        }
    }
}

/// The kernel's monotonic clock in ns since boot: what [`TwzHost::monotonic_ns`] reads.
fn clock_ns() -> u64 {
    let since_boot = Instant::now() - Instant::zero();
    u64::try_from(since_boot.as_nanos()).unwrap_or(u64::MAX)
}

/// A kind of host call, as the conformance suite counts them (`kernel_hooks::conformance::Calls`).
#[derive(Clone, Copy)]
enum HostCall {
    Clock = 0,
    Metadata = 1,
    Other = 2,
}

/// The thread whose host calls are counted (`u64::MAX`: none), and the counts, by
/// [`HostCall`]: the conformance suite's `calls()` (tests only). One thread's, so the
/// timeout thread's clock reads (the expiry chain) never land in a count.
#[cfg(test)]
static COUNTED_THREAD: AtomicU64 = AtomicU64::new(u64::MAX);
#[cfg(test)]
static HOST_CALLS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Counts one host call of `kind` if the current thread is the counted one (tests only; a
/// no-op in the kernel proper).
#[inline(always)]
fn count(kind: HostCall) {
    #[cfg(test)]
    if let Some(t) = crate::thread::current_thread_ref()
        && t.id() == COUNTED_THREAD.load(Ordering::Relaxed)
        && let Some(c) = HOST_CALLS.get(kind as usize)
    {
        c.fetch_add(1, Ordering::Relaxed);
    }
    #[cfg(not(test))]
    let _ = kind;
}

/// For each security context, the memory contexts it was attached in (held weakly): where
/// `Unmap::Context` must reach. A memory context has page tables for a security context only
/// after registering it (`register_sctx`, which upstream calls only in the attach system
/// call, just before `SecCtxMgr::attach`, in the caller's memory context), and a thread can
/// switch only to an attached context, so noting it at attach finds every memory context in
/// which pages can have been mapped under it. Nothing is noted on the fault path.
static SCTX_MEMORY: Once<Mutex<BTreeMap<ObjID, Vec<Weak<Context>>>>> = Once::new();

fn sctx_memory() -> &'static Mutex<BTreeMap<ObjID, Vec<Weak<Context>>>> {
    SCTX_MEMORY.call_once(|| Mutex::new(BTreeMap::new()))
}

/// Notes that pages may be mapped under security context `sctx` in memory context `mc`.
pub fn note_sctx_in(mc: &ContextRef, sctx: ObjID) {
    if sctx == KERNEL_SCTX {
        return;
    }
    let mut map = sctx_memory().lock();
    let list = map.entry(sctx).or_default();
    list.retain(|w| w.strong_count() > 0);
    if !list
        .iter()
        .any(|w| core::ptr::eq(w.as_ptr(), Arc::as_ptr(mc)))
    {
        list.push(Arc::downgrade(mc));
    }
}

/// The live memory contexts noted for `sctx`, collected under the lock and used after it.
fn memory_contexts_of(sctx: ObjID) -> Vec<ContextRef> {
    let map = sctx_memory().lock();
    map.get(&sctx)
        .map(|list| list.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default()
}

/// The deadline the timer chain is armed for (`monotonic_ns`; `u64::MAX`: none).
static ARMED_DEADLINE: AtomicU64 = AtomicU64::new(u64::MAX);

/// When the timer last ran `expire` (`monotonic_ns`) and for which deadline: what the
/// port's expiry test reads to measure lateness.
static LAST_EXPIRY: Spinlock<Option<(u64, u64)>> = Spinlock::new(None);

/// One tick of upstream's timeout queue: the shortest wait it can be asked for.
const TICK_NS: u64 = 1_000_000;

/// Arms the kernel's timeout queue for the engine's next deadline, unless a chain for one at
/// least as early is armed.
///
/// One clock: deadlines, and the time left to them, are the host's `monotonic_ns`
/// (`Engine::next_deadline_in` of one reading; integration guide, section 4). Upstream's queue counts its own ticks, which under TCG run 3-4x
/// slower than time (a 300 ms wait fired 0.66-1.0 s late), so the wait is armed in steps:
/// each step re-reads the engine's clock, learns how long the last step's ticks really took,
/// and asks for half of what is left at that rate; the last steps are one tick. The chain
/// ends at the first step on or after the deadline, whatever the ticks' rate. The callbacks
/// run in the timeout thread (never in an interrupt), where the engine's locks are safe.
///
/// A chain still armed [`CHAIN_LOST_AFTER_NS`] after its deadline has lost its step (a
/// callback upstream's queue never ran): it is replaced, or it would keep every later
/// deadline from arming and no grant would expire again. A chain that is only late is
/// replaced too, harmlessly: its next step sees another deadline armed and stops.
fn arm_expiry() {
    let now = clock_ns();
    let Some(wait) = ENGINE.next_deadline_in(now) else {
        return;
    };
    let deadline = now.saturating_add(wait);
    let armed = ARMED_DEADLINE.load(Ordering::Acquire);
    let lost = armed != u64::MAX && now.saturating_sub(armed) > CHAIN_LOST_AFTER_NS;
    if (deadline >= armed && !lost)
        || ARMED_DEADLINE
            .compare_exchange(armed, deadline, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    if lost {
        log::warn!(
            "security: the expiry chain for {armed} ns was {} ms overdue; armed again",
            (now - armed) / 1_000_000
        );
    }
    // No rate known yet: assume ticks up to 8x slower than time.
    arm_step(deadline, (wait / 8).max(TICK_NS));
}

/// How long past its deadline an armed chain may go without running `expire` before
/// [`arm_expiry`] takes its step as lost. Far above the lateness seen under TCG (up to about
/// 1 s, twizzler-port/README.md, Results), so a chain that is only late is seldom replaced.
const CHAIN_LOST_AFTER_NS: u64 = 10_000_000_000;

/// How many windows (ticks) past a full one a step tries before it gives up.
const FULL_WINDOW_RETRIES: u64 = 64;

/// [`SecCtxMgr`]'s `arming`: the thread is not arming a step.
const ARM_IDLE: u8 = 0;
/// The thread is inside `register_timeout_callback` for a step.
const ARM_INSIDE: u8 = 1;
/// The step's callback ran inside that call: its window was full.
const ARM_RAN_INSIDE: u8 = 2;

/// Arms one step of the chain for `deadline`: a wait of `wait` ns as upstream's queue counts.
///
/// Upstream's `TimeoutQueue::insert` runs the new timeout's callback at once, under the
/// queue's lock, when the window it falls in is full (32 timeouts). The step's callback must
/// then do nothing (the chain's work, and arming again, would run under that lock; arming
/// takes it a second time and hangs): the thread marks that it is arming, the callback sees
/// the mark and records that it ran inside, and the step is armed again a tick later, in the
/// next window. Past [`FULL_WINDOW_RETRIES`] full windows the chain is dropped and the next
/// grant that expires arms it again (`arm_expiry`).
fn arm_step(deadline: u64, wait: u64) {
    let ct = crate::thread::current_thread_ref();
    let arming = ct.as_ref().map(|t| &t.secctx.arming);
    for extra in 0..FULL_WINDOW_RETRIES {
        let wait = wait.saturating_add(extra * TICK_NS);
        let armed_at = clock_ns();
        if let Some(a) = arming {
            a.store(ARM_INSIDE, Ordering::Relaxed);
        }
        crate::clock::register_timeout_callback(
            wait,
            move |_| on_step(deadline, armed_at, wait),
            (),
        );
        let ran_inside =
            arming.is_some_and(|a| a.swap(ARM_IDLE, Ordering::Relaxed) == ARM_RAN_INSIDE);
        if !ran_inside {
            return;
        }
    }
    log::warn!(
        "security: {FULL_WINDOW_RETRIES} timeout windows in a row were full; expiry chain dropped"
    );
    let _ =
        ARMED_DEADLINE.compare_exchange(deadline, u64::MAX, Ordering::AcqRel, Ordering::Acquire);
}

/// A step of the chain for `deadline`, armed at `armed_at` for `asked` ns, has fired.
fn on_step(deadline: u64, armed_at: u64, asked: u64) {
    // Run by `insert` itself, under the queue's lock, because the window was full: the
    // arming call sees this and arms the step in the next window (see `arm_step`).
    if let Some(ct) = crate::thread::current_thread_ref()
        && ct
            .secctx
            .arming
            .compare_exchange(
                ARM_INSIDE,
                ARM_RAN_INSIDE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    {
        return;
    }
    if ARMED_DEADLINE.load(Ordering::Acquire) != deadline {
        // Another deadline took the chain over (an earlier one, or a lost chain's
        // replacement); when it ends it arms the next one.
        return;
    }
    let now = clock_ns();
    if now < deadline {
        let left = deadline - now;
        let took = now.saturating_sub(armed_at).max(1);
        // Half of what is left, at the rate the last step's ticks ran.
        let wait = (u128::from(left) * u128::from(asked) / (2 * u128::from(took))) as u64;
        arm_step(deadline, wait.clamp(TICK_NS, left.max(TICK_NS)));
        return;
    }
    // The chain ends only if it still owns the armed deadline: between the load above and
    // here another may have taken it over (an earlier deadline, a lost chain's replacement),
    // and a plain store would disarm that one, whose next step would then stop.
    if ARMED_DEADLINE
        .compare_exchange(deadline, u64::MAX, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // Recorded before `expire` runs: whoever sees its effect sees this too.
    *LAST_EXPIRY.lock() = Some((now, deadline));
    ENGINE.expire();
    arm_expiry();
}

/// When the timer last ran `expire` (`monotonic_ns`) and the deadline it ran for.
pub fn last_expiry() -> Option<(u64, u64)> {
    *LAST_EXPIRY.lock()
}

/// Decides a page fault on object `obj` at byte `offset` of the object (the fault address's
/// byte, not its page: an instruction fetch is checked against a gate's entry point) for the
/// current thread, through the engine. Called by `page_fault_to_region` in place of
/// upstream's `check_security`; the decision's ticket is kept on the thread for
/// [`decision_is_current`], which the fault path's mapper asks under the page-table lock.
///
/// Threads in the kernel's context (and faults with no current thread) are granted
/// everything, as upstream does. A kernel-mode fault (`ip` in the kernel) on a user thread's
/// behalf (a copy from or to user memory) is decided as that thread's own access (README,
/// gap 7; integration guide, section 3): the kernel never maps, for the thread, what the
/// thread could not map itself; a violation fails the copy.
pub fn check_fault(
    obj: &ObjectRef,
    offset: usize,
    sctx_id: ObjID,
    addr: VirtAddr,
    cause: MemoryAccessKind,
    ip: VirtAddr,
) -> Result<PermsInfo, UpcallInfo> {
    let all = PermsInfo {
        ctx: sctx_id,
        provide: Protections::all(),
        restrict: Protections::empty(),
    };
    let Some(thread) = crate::thread::current_thread_ref() else {
        return Ok(PermsInfo {
            ctx: KERNEL_SCTX,
            ..all
        });
    };
    if sctx_id == KERNEL_SCTX {
        // Nothing to check at install time: no ticket.
        *thread.secctx.ticket.lock() = None;
        return Ok(all);
    }
    // A denial installs nothing, so only a grant's ticket needs keeping: one lock per fault.
    let (mut perms, ticket) = decide_ticketed(thread.secctx.hooks(), obj, offset, addr, cause)?;
    *thread.secctx.ticket.lock() = Some(ticket);
    // Only a grant with W can map a context page writable or be a context write: a read-only
    // grant (most faults) never asks whether its object is a context.
    if perms.provide.contains(Protections::WRITE)
        && let Some(sctx) = context_of(obj.id())
    {
        if cause == MemoryAccessKind::Write {
            return context_write(thread, &sctx, obj, offset, addr, ip);
        }
        // Step 1 of the context-write protocol: a context page is mapped read-only at first,
        // whatever the engine grants, so a write to it faults.
        perms.provide.remove(Protections::WRITE);
    }
    #[cfg(test)]
    if let Some(hook) = AFTER_DECISION.lock().take() {
        hook();
    }
    Ok(perms)
}

/// Step 2 of the context-write protocol (`ctx_write`): the engine allowed `thread`'s write at
/// byte `offset` of context object `obj`, mapped in the kernel as `sctx`.
fn context_write(
    thread: &crate::thread::ThreadRef,
    sctx: &SecurityContextRef,
    obj: &ObjectRef,
    offset: usize,
    addr: VirtAddr,
    ip: VirtAddr,
) -> Result<PermsInfo, UpcallInfo> {
    ctx_write::open_window(sctx);
    let _ = ENGINE.invalidate_ctx(to_hooks_id(obj.id()));
    // A thread editing its own context runs code granted under it, which the invalidation
    // just unmapped: fault the instruction's page in again first, while the context is still
    // read-only, or its refetch would re-protect the context and the write would fault and
    // invalidate again, for ever.
    if !ip.is_kernel() && thread.secctx.active_id() == obj.id() {
        crate::memory::context::virtmem::fault::do_page_fault(
            ip,
            MemoryAccessKind::InstructionFetch,
            crate::memory::context::virtmem::PageFaultFlags::USER,
            ip,
        )?;
    }
    // Decided again: the decision that allowed the write was swept with the rest, and a
    // mapping no cached decision covers is one a later revocation could not find.
    let (perms, ticket) = decide_ticketed(
        thread.secctx.hooks(),
        obj,
        offset,
        addr,
        MemoryAccessKind::Write,
    )?;
    *thread.secctx.ticket.lock() = Some(ticket);
    sctx.writes.mark_dirty();
    Ok(perms)
}

/// The security context object `id`, if the kernel has mapped it (a thread attached it): the
/// contexts the engine reads, whose writes it must see.
fn context_of(id: ObjID) -> Option<SecurityContextRef> {
    mapped_contexts().lock().get(&id).cloned()
}

/// Whether the current thread's last fault decision still holds: the fault path's mapper
/// asks this holding the lock the engine's unmaps take (the memory context's table of
/// security contexts, `with_arch`), and installs nothing if it does not (the access faults
/// again and is decided anew). A decision without a ticket (kernel rules) always holds.
pub fn decision_is_current() -> bool {
    let Some(thread) = crate::thread::current_thread_ref() else {
        return true;
    };
    let ticket = *thread.secctx.ticket.lock();
    ticket.is_none_or(|t| ENGINE.is_current(&t))
}

/// Runs `hook` once, right after the next fault decision by `check_fault` and before the
/// fault path installs it: how the port's tests put a revocation in that window.
#[cfg(test)]
pub fn after_next_decision(hook: alloc::boxed::Box<dyn FnOnce() + Send>) {
    *AFTER_DECISION.lock() = Some(hook);
}

#[cfg(test)]
static AFTER_DECISION: Spinlock<Option<alloc::boxed::Box<dyn FnOnce() + Send>>> =
    Spinlock::new(None);

/// The engine's decision for a fault by a thread whose contexts are `mgr`, as upstream's
/// `PermsInfo` (the granting context in `ctx`, for the caller's switch) or the upcall.
pub fn decide_for(
    mgr: &kernel_hooks::SecCtxMgr,
    obj: &ObjectRef,
    offset: usize,
    addr: VirtAddr,
    cause: MemoryAccessKind,
) -> Result<PermsInfo, UpcallInfo> {
    decide_ticketed(mgr, obj, offset, addr, cause).map(|(perms, _)| perms)
}

/// [`decide_for`], with the ticket of a grant.
fn decide_ticketed(
    mgr: &kernel_hooks::SecCtxMgr,
    obj: &ObjectRef,
    offset: usize,
    addr: VirtAddr,
    cause: MemoryAccessKind,
) -> Result<(PermsInfo, MapTicket), UpcallInfo> {
    let kind = match cause {
        MemoryAccessKind::Read => AccessKind::Read,
        MemoryAccessKind::Write => AccessKind::Write,
        MemoryAccessKind::InstructionFetch => AccessKind::Exec,
    };
    // Lazy: the default protections come from `check_id` (cached by upstream), the `kuid` is
    // asked of `TwzHost::object` on a miss only, so a hit reads no metadata (gap 5).
    let (_, default_prot) = obj.check_id();
    let fault = Fault::lazy(
        to_hooks_id(obj.id()),
        to_hooks_prots(default_prot),
        offset as u64,
        kind,
    );
    match ENGINE.decide(mgr, &fault) {
        Decision::Map {
            prots,
            ctx,
            ticket,
            valid_until,
            ..
        } => {
            // Only a grant that expires can need the timer: a hit on a grant that never
            // expires reads no clock here.
            if valid_until.at().is_some() {
                arm_expiry();
            }
            let perms = PermsInfo {
                ctx: to_abi_id(ctx),
                provide: to_abi_prots(prots),
                restrict: Protections::empty(),
            };
            Ok((perms, ticket))
        }
        Decision::Violation(v) => {
            log::debug!("security violation at {:?}: {:?}", addr, v);
            Err(UpcallInfo::SecurityViolation(SecurityViolationInfo {
                address: addr.raw(),
                access_kind: cause,
            }))
        }
    }
}

/// Information about how we want to access an object for perms checking (upstream's type,
/// kept for its callers; the engine needs only the target, the access and the offset).
#[derive(Clone, Copy)]
pub struct AccessInfo {
    /// The object the access is to.
    pub target_id: ObjID,
    /// Read, write or execute, as protections.
    pub access_kind: Protections,
    /// The object holding the faulting instruction, when known.
    pub exec_id: Option<ObjID>,
    /// The instruction's byte offset in that object.
    pub exec_off: usize,
}

/// A single security context: its kernel mapping (`None` for the kernel's).
pub struct SecurityContext {
    kobj: Option<KernelObject<SecCtxBase>>,
    /// Its write-protection state (`ctx_write`).
    writes: ctx_write::CtxWrites,
}

impl core::fmt::Debug for SecurityContext {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SecurityContext")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// A shared reference to a security context.
pub type SecurityContextRef = Arc<SecurityContext>;

impl SecurityContext {
    /// A context over its kernel mapping (`None`: the kernel's context).
    pub fn new(kobj: Option<KernelObject<SecCtxBase>>) -> Self {
        Self {
            kobj,
            writes: ctx_write::CtxWrites::new(),
        }
    }

    /// The context object's id (`KERNEL_SCTX` for the kernel's).
    pub fn id(&self) -> ObjID {
        self.kobj.as_ref().map(|k| k.id()).unwrap_or(KERNEL_SCTX)
    }

    /// The context's flags. Read by the engine from the context's own bytes; upstream's
    /// `SecCtxFlags` are not our format's, so this says nothing (README, gap 10).
    pub fn flags(&self) -> Option<SecCtxFlags> {
        None
    }

    /// This context's rights on object `id` as a whole (what holds on every page).
    pub fn lookup(&self, id: ObjID, default_prots: Protections) -> PermsInfo {
        lookup_in(self.id(), id, default_prots)
    }
}

fn lookup_in(ctx: ObjID, id: ObjID, default_prots: Protections) -> PermsInfo {
    // Lazy, as the fault path (`decide_for`): the lookup and the faults share one cache entry
    // (an eager lookup would displace the faults' entry and unmap their pages), and the
    // `kuid` is asked of `TwzHost::object` only if a record needs it.
    match ENGINE.lookup_lazy(
        to_hooks_id(ctx),
        to_hooks_id(id),
        to_hooks_prots(default_prots),
    ) {
        Ok(p) => to_abi_perms(&p.as_perms_info()),
        Err(_) => PermsInfo {
            ctx,
            provide: Protections::empty(),
            restrict: Protections::empty(),
        },
    }
}

/// Management of per-thread security context info: the engine's list of ids, and the
/// references that keep each attached context's mapping alive.
pub struct SecCtxMgr {
    hooks: kernel_hooks::SecCtxMgr,
    /// A spin lock, never a mutex: a thread's manager is dropped with its thread, which can
    /// happen in the scheduler while the current thread sleeps in a mutex's queue, where
    /// upstream's `Mutex::lock` panics (`mutex_link.is_linked()`) or hangs.
    held: Spinlock<BTreeMap<ObjID, SecurityContextRef>>,
    /// The ticket of this thread's last fault decision ([`decision_is_current`]).
    ticket: Spinlock<Option<MapTicket>>,
    /// Whether this thread is arming an expiry step (`arm_step`): `ARM_IDLE`, `ARM_INSIDE`
    /// or `ARM_RAN_INSIDE`.
    arming: AtomicU8,
    /// Its faults in progress and the context-write window it holds (`ctx_write`).
    writes: ctx_write::ThreadWrites,
}

impl SecCtxMgr {
    /// A manager whose active context is `ctx`.
    pub fn new(ctx: SecurityContextRef) -> Self {
        let id = ctx.id();
        let hooks = if id == KERNEL_SCTX {
            kernel_hooks::SecCtxMgr::new_kernel()
        } else {
            kernel_hooks::SecCtxMgr::new(to_hooks_id(id))
        };
        let mut held = BTreeMap::new();
        held.insert(id, ctx);
        Self {
            hooks,
            held: Spinlock::new(held),
            ticket: Spinlock::new(None),
            arming: AtomicU8::new(ARM_IDLE),
            writes: ctx_write::ThreadWrites::new(),
        }
    }

    /// The manager of kernel threads (context `KERNEL_SCTX`: every right but the null page).
    pub fn new_kernel() -> Self {
        Self::new(Arc::new(SecurityContext::new(None)))
    }

    /// The engine's view of this thread's contexts.
    pub fn hooks(&self) -> &kernel_hooks::SecCtxMgr {
        &self.hooks
    }

    /// The active context's id (no lock taken).
    pub fn active_id(&self) -> ObjID {
        to_abi_id(self.hooks.active_id())
    }

    /// The active context.
    pub fn active(&self) -> SecurityContextRef {
        let id = self.active_id();
        self.held
            .lock()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| Arc::new(SecurityContext::new(None)))
    }

    /// The active context's rights on object `id` as a whole.
    pub fn lookup(&self, id: ObjID, default_prots: Protections) -> PermsInfo {
        lookup_in(self.active_id(), id, default_prots)
    }

    /// The active context's rights on the object in `access_info` (as a whole: the access
    /// names no offset).
    pub fn check_active_access(
        &self,
        access_info: &AccessInfo,
        default_prots: Protections,
    ) -> PermsInfo {
        self.lookup(access_info.target_id, default_prots)
    }

    /// The first attached context whose rights on the object satisfy the access, the active
    /// one first; else the active one's rights.
    pub fn search_access(&self, access_info: &AccessInfo, default_prots: Protections) -> PermsInfo {
        let active = self.lookup(access_info.target_id, default_prots);
        let satisfies = |p: &PermsInfo| {
            access_info.access_kind & !p.restrict & p.provide == access_info.access_kind
        };
        if satisfies(&active) {
            return active;
        }
        for i in 0.. {
            let Some(ctx) = self.hooks.inactive_at(i) else {
                break;
            };
            let p = lookup_in(to_abi_id(ctx), access_info.target_id, default_prots);
            if satisfies(&p) {
                return p;
            }
        }
        active
    }

    /// Switches to context `id` (which must be attached) and the memory context's page tables
    /// with it.
    pub fn switch_context(&self, id: ObjID) -> SwitchResult {
        let res = match self.hooks.switch_context(to_hooks_id(id)) {
            kernel_hooks::SwitchResult::NoSwitch => SwitchResult::NoSwitch,
            kernel_hooks::SwitchResult::Switched => SwitchResult::Switched,
            kernel_hooks::SwitchResult::NotAttached => return SwitchResult::NotAttached,
        };
        if let Some(mc) = current_memory_context() {
            mc.switch_to(id);
        }
        res
    }

    /// Attaches a security context (inactive until switched to).
    pub fn attach(&self, sctx: SecurityContextRef) -> twizzler_rt_abi::Result<()> {
        let id = sctx.id();
        let mut held = self.held.lock();
        self.hooks
            .attach(to_hooks_id(id))
            .map_err(|_| NamingError::AlreadyBound)?;
        held.insert(id, sctx);
        drop(held);
        // The attach system call registered the context in the caller's memory context.
        if let Some(mc) = current_memory_context() {
            note_sctx_in(&mc, id);
        }
        Ok(())
    }
}

/// What [`SecCtxMgr::switch_context`] did.
#[derive(Clone, Copy, Eq, PartialEq, Ord, PartialOrd, Debug)]
pub enum SwitchResult {
    /// The context was already the active one.
    NoSwitch,
    /// The context is now the active one.
    Switched,
    /// The thread holds no context of that id: nothing changed.
    NotAttached,
}

impl Clone for SecCtxMgr {
    fn clone(&self) -> Self {
        Self {
            hooks: self.hooks.clone(),
            held: Spinlock::new(self.held.lock().clone()),
            ticket: Spinlock::new(None),
            arming: AtomicU8::new(ARM_IDLE),
            writes: ctx_write::ThreadWrites::new(),
        }
    }
}

impl Drop for SecCtxMgr {
    fn drop(&mut self) {
        // A context only the global table and this manager hold is dropped from the table
        // (its kernel mapping goes with it). Spin locks only, and the contexts themselves
        // dropped after they are released: this runs wherever the thread's last reference
        // goes, the scheduler included (see `held`).
        let mut unmapped = Vec::new();
        {
            let mut global = mapped_contexts().lock();
            let held = self.held.lock();
            for (id, ctx) in held.iter() {
                if *id != KERNEL_SCTX && Arc::strong_count(ctx) == 2 {
                    unmapped.extend(global.remove(id));
                }
            }
        }
        drop(unmapped);
    }
}

/// Every context object mapped in the kernel, by id: one mapping each, shared by every thread
/// that holds it.
/// A spin lock, held only to look up, insert or remove: never while mapping or unmapping.
static MAPPED_CONTEXTS: Spinlock<BTreeMap<ObjID, SecurityContextRef>> =
    Spinlock::new(BTreeMap::new());

fn mapped_contexts() -> &'static Spinlock<BTreeMap<ObjID, SecurityContextRef>> {
    &MAPPED_CONTEXTS
}

/// The security context object `id`, mapped in the kernel once and shared.
pub fn get_sctx(id: ObjID) -> twizzler_rt_abi::Result<SecurityContextRef> {
    let LookupResult::Found(obj) = lookup_object(id, LookupFlags::empty()) else {
        return Err(ObjectError::NoSuchObject.into());
    };
    if let Some(ctx) = mapped_contexts().lock().get(&id) {
        return Ok(ctx.clone());
    }
    // Read-only in the kernel: the engine reads a context's bytes, it never writes them.
    // Mapped with no lock held; if another thread mapped it meanwhile, its mapping is kept
    // and this one dropped (after the lock is released).
    let info = ObjectContextInfo::new(
        obj,
        Protections::READ,
        CacheType::WriteBack,
        MapFlags::empty(),
    );
    let ours = Arc::new(SecurityContext::new(Some(
        kernel_context().insert_kernel_object(info),
    )));
    let (ctx, spare) = {
        let mut mapped = mapped_contexts().lock();
        match mapped.get(&id) {
            Some(theirs) => (theirs.clone(), Some(ours)),
            None => {
                mapped.insert(id, ours.clone());
                (ours, None)
            }
        }
    };
    drop(spare);
    Ok(ctx)
}
