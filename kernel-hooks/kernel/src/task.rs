//! Running a user task, and the page-fault path.
//!
//! A task is one ring-3 thread with its own security contexts ([`SecCtxMgr`]), started at a
//! probe in the program object. The kernel runs it until it traps and handles the trap here,
//! in ordinary kernel code:
//!
//! - `#PF`: CR2 and the error code become a [`Fault`] (target object from the slot, with its
//!   `kuid` and default protections; offset in it; read / write / fetch from the W and I/D
//!   bits), [`Engine::decide`] is called, and either the page is mapped with exactly the
//!   decided protections and the task resumes, or the violation ends the task. A fault on a
//!   present page (a write to a read-only mapping, a fetch from a no-execute one) is decided
//!   in the same way. When the decision names a context to switch to, the kernel switches the
//!   thread ([`SecCtxMgr::switch_context`]) before it maps; a page is mapped tagged with the
//!   context that granted it. Context objects follow the write-protection protocol (see
//!   [`crate::objects`]): mapped read-only, made writable by a write fault that invalidates
//!   the context first.
//! - the timer interrupt: [`crate::timer::on_interrupt`] (expiry), then the task resumes.
//! - `int 0x80`: exit or checkpoint.
//! - anything else (`#GP`, `#UD`, ...): the task crashed.
//!
//! [`Engine::decide`]: kernel_hooks::Engine::decide

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::{
    Decision, DetachError, Fault, Invalidation, MapTicket, SecCtxMgr, Stats, SwitchResult, Unmap,
    Violation,
};
use twizzler_capsec::{AccessKind, Expiry, ObjID, Protections};

use crate::objects::{self, CtxObject, ENGINE, HostCalls, Object, PAGING, table};
use crate::paging::{CtxTag, Frame, PAGE, PageTables, PagingError, SLOT_SIZE};
use crate::trap::{self, UserFrame};
use crate::user::{self, Probe};
use crate::{clock, cpu, timer};

/// Traps one task may take before the kernel gives up on it (a fault that the engine
/// "allows" but that keeps recurring would otherwise loop forever). Interrupts do not count.
const MAX_TRAPS: usize = 32;

/// How long a task may run (monotonic time, kernel work included) before the kernel stops
/// it at a timer interrupt.
pub const TASK_TIME_LIMIT_NS: u64 = 5_000_000_000;

/// Page-fault error code bits.
const PF_PRESENT: u64 = 1 << 0;
const PF_WRITE: u64 = 1 << 1;
const PF_USER: u64 = 1 << 2;
const PF_FETCH: u64 = 1 << 4;

/// Why the kernel ended a task at a page fault.
#[derive(Clone, Debug)]
pub enum Denial {
    /// The engine's decision: a security violation.
    Engine(Violation),
    /// The address is in no object's slot.
    NoObject(u64),
    /// The engine allowed the access, but the object has no page there.
    NoBacking {
        /// The object.
        target: ObjID,
        /// The offset.
        offset: u64,
    },
    /// The engine granted fewer rights than the access needs (it would fault forever).
    TooLittle {
        /// What it granted.
        prots: Protections,
    },
    /// Mapping the page failed.
    Paging(PagingError),
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Engine(v) => write!(f, "{v}"),
            Self::NoObject(a) => write!(f, "no object at {a:#x}"),
            Self::NoBacking { target, offset } => {
                write!(f, "object {target} has no page at {offset:#x}")
            }
            Self::TooLittle { prots } => write!(f, "engine granted only {prots}"),
            Self::Paging(e) => write!(f, "{e}"),
        }
    }
}

/// How a task ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// It exited with this result.
    Exited(u64),
    /// The kernel delivered a violation at this fault.
    Denied {
        /// The faulting address.
        addr: u64,
        /// The access.
        kind: AccessKind,
        /// Whether the page was present (a protection fault).
        present: bool,
        /// Why.
        why: Denial,
    },
    /// It took an unexpected exception.
    Crashed {
        /// The vector.
        vector: u64,
        /// The error code.
        error: u64,
        /// Where.
        rip: u64,
    },
    /// It made an unknown system call.
    BadSyscall(u64),
    /// It trapped more times than it may (its limit).
    Runaway(usize),
    /// It ran longer than its time limit (ns; [`TASK_TIME_LIMIT_NS`] for the probes).
    TimedOut(u64),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(v) => write!(f, "exited {v:#x}"),
            Self::Denied { why, .. } => write!(f, "denied: {why}"),
            Self::Crashed { vector, error, rip } => write!(
                f,
                "crashed: {} (vector {vector}) error {error:#x} at {rip:#x}",
                trap::vector_name(*vector)
            ),
            Self::BadSyscall(n) => write!(f, "unknown system call {n}"),
            Self::Runaway(limit) => write!(f, "more than {limit} traps"),
            Self::TimedOut(limit) => write!(f, "still running after {} ms", limit / 1_000_000),
        }
    }
}

/// One page fault the engine decided.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    /// The fault as given to the engine.
    pub fault: Fault,
    /// Whether the page was present (protection fault).
    pub present: bool,
    /// rdtsc cycles spent in `Engine::decide`.
    pub cycles: u64,
    /// Engine counters just before and just after the decision.
    pub before: Stats,
    /// See `before`.
    pub after: Stats,
    /// The host calls the engine made during the decision.
    pub host: HostCalls,
    /// The protections mapped, if any.
    pub mapped: Option<Protections>,
    /// The context the thread switched to, if it did.
    pub switched_to: Option<ObjID>,
    /// Until when the grant holds, for decisions that mapped.
    pub valid_until: Option<Expiry>,
    /// For a write the engine allowed into a context object: how many unmaps the
    /// `invalidate_ctx` it caused performed.
    pub invalidated: Option<usize>,
}

impl FaultRecord {
    /// Whether the decision was served from the verification cache alone.
    pub fn was_hit(&self) -> bool {
        self.after.hits > self.before.hits
            && self.after.misses == self.before.misses
            && self.after.verifies == self.before.verifies
    }

    /// Whether the decision missed the cache and verified signatures.
    pub fn was_miss(&self) -> bool {
        self.after.misses > self.before.misses && self.after.verifies > self.before.verifies
    }
}

/// The timer interrupts a task took.
#[derive(Clone, Debug, Default)]
pub struct TimerLog {
    /// How many.
    pub interrupts: u32,
    /// What each `expire()` they made unmapped, in order.
    pub expiries: Vec<Invalidation>,
}

/// Everything about one task's run.
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// Every page fault the engine decided, in order.
    pub faults: Vec<FaultRecord>,
    /// Its registers when it ended.
    pub regs: UserFrame,
    /// The timer interrupts it took.
    pub timer: TimerLog,
}

impl Report {
    /// The decided faults on `target`.
    pub fn faults_on(&self, target: ObjID) -> impl Iterator<Item = &FaultRecord> {
        self.faults.iter().filter(move |f| f.fault.target == target)
    }
}

/// Where a task starts and what it touches.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    /// The probe to run.
    pub probe: Probe,
    /// The address it touches (in `rdi`).
    pub addr: u64,
    /// The value it writes, for write probes (in `rsi`).
    pub value: u8,
    /// A second address, for probes that use one (in `rdx`).
    pub addr2: u64,
    /// A further argument, for probes that use one (in `r8`).
    pub arg: u64,
}

/// The address of byte `offset` of `obj`'s slot.
pub fn addr_of(obj: ObjID, offset: u64) -> Option<u64> {
    let base = table()?.get(obj)?.base()?;
    base.checked_add(offset)
}

/// Runs a task with contexts `thread` from `start` in `program` until it ends. Before it
/// starts, every user mapping is removed, so each task begins with an empty address space.
/// `checkpoint` runs at every `SYS_CHECKPOINT`, with the task's value.
pub fn run(
    thread: &SecCtxMgr,
    program: ObjID,
    start: Start,
    checkpoint: impl FnMut(u64),
) -> Report {
    clear_user_space();
    run_shared(thread, program, start, checkpoint)
}

/// Removes every user mapping of the kernel's own address space (the probes' space), on
/// every CPU. Program tasks run in spaces of their own, cleared when they end
/// ([`crate::paging::PageTables::leave_space`]).
pub fn clear_user_space() {
    let mut paging = PAGING.lock();
    if let Some(pt) = paging.as_mut()
        && pt.unmap_all_user() > 0
    {
        crate::smp::shootdown();
    }
}

/// [`run`] without clearing the address space first: for tasks that run at the same time on
/// several CPUs (probe tasks share the kernel's one address space, so they must run under one
/// context; program tasks have spaces of their own, [`crate::program`]).
pub fn run_shared(
    thread: &SecCtxMgr,
    program: ObjID,
    start: Start,
    checkpoint: impl FnMut(u64),
) -> Report {
    run_shared_with_traps(thread, program, start, MAX_TRAPS, checkpoint)
}

/// [`run_shared`] for a task that may take up to `max_traps` traps (one that faults on many
/// objects by design) instead of [`MAX_TRAPS`].
pub fn run_shared_with_traps(
    thread: &SecCtxMgr,
    program: ObjID,
    start: Start,
    max_traps: usize,
    mut checkpoint: impl FnMut(u64),
) -> Report {
    let mut faults = Vec::new();
    let mut timer_log = TimerLog::default();
    let mut frame = UserFrame {
        rdi: start.addr,
        rsi: u64::from(start.value),
        rdx: start.addr2,
        r8: start.arg,
        ..UserFrame::default()
    };
    let Some(entry) = addr_of(program, PAGE + start.probe.offset()) else {
        return Report {
            outcome: Outcome::Denied {
                addr: 0,
                kind: AccessKind::Exec,
                present: false,
                why: Denial::NoObject(0),
            },
            faults,
            regs: frame,
            timer: timer_log,
        };
    };
    frame.rip = entry;
    let (try_at, landing_at) = user::window_recovery();
    let window_try = addr_of(program, PAGE + try_at);
    let window_landing = addr_of(program, PAGE + landing_at);
    let started = clock::monotonic_ns();
    timer::rearm();
    let mut traps = 0;
    let outcome = loop {
        // What a ring-0 timer interrupt deferred runs here, on the way back to user mode.
        if let Some(swept) = timer::run_deferred() {
            timer_log.expiries.push(swept);
        }
        trap::enter_user(&mut frame);
        let vector = match trap::Return::of(frame.vector) {
            trap::Return::Shootdown => {
                // `enter_user` already caught up with the flush on the way in.
                crate::apic::eoi();
                continue;
            }
            interrupt @ (trap::Return::Timer | trap::Return::Spurious) => {
                if interrupt == trap::Return::Timer {
                    timer_log.interrupts = timer_log.interrupts.saturating_add(1);
                    if let Some(swept) = timer::on_interrupt() {
                        timer_log.expiries.push(swept);
                    }
                }
                if clock::monotonic_ns().saturating_sub(started) > TASK_TIME_LIMIT_NS {
                    break Outcome::TimedOut(TASK_TIME_LIMIT_NS);
                }
                continue;
            }
            trap::Return::Trap(vector) => vector,
        };
        traps += 1;
        if traps > max_traps {
            break Outcome::Runaway(max_traps);
        }
        match vector {
            trap::PAGE_FAULT => {
                // Read CR2 before anything else can fault (nothing in the kernel does).
                let addr = cpu::read_cr2();
                match page_fault(thread, addr, frame.error, frame.rip, &mut faults, false) {
                    Ok(()) => continue,
                    // The window probe's one recoverable read: resume past it with 0.
                    Err(_) if start.probe == Probe::Window && Some(frame.rip) == window_try => {
                        frame.rip = window_landing.unwrap_or(frame.rip);
                        frame.rax = 0;
                        continue;
                    }
                    Err(denied) => break denied,
                }
            }
            trap::SYSCALL_VECTOR => match frame.rax {
                user::SYS_EXIT => break Outcome::Exited(frame.rsi),
                user::SYS_CHECKPOINT => {
                    checkpoint(frame.rsi);
                    continue;
                }
                n => break Outcome::BadSyscall(n),
            },
            _ => {
                break Outcome::Crashed {
                    vector: frame.vector,
                    error: frame.error,
                    rip: frame.rip,
                };
            }
        }
    };
    Report {
        outcome,
        faults,
        regs: frame,
        timer: timer_log,
    }
}

/// Asks the engine about `fault`, measuring the call.
fn decide(thread: &SecCtxMgr, fault: Fault, present: bool) -> (Decision, FaultRecord) {
    let calls = objects::host_calls();
    let before = ENGINE.stats();
    let t0 = cpu::rdtsc();
    // With interrupts enabled: a ring-0 timer interrupt may land in the engine.
    let decision = timer::in_engine(|| ENGINE.decide(thread, &fault));
    let t1 = cpu::rdtsc();
    let after = ENGINE.stats();
    let host = objects::host_calls().since(&calls);
    let record = FaultRecord {
        fault,
        present,
        cycles: t1.wrapping_sub(t0),
        before,
        after,
        host,
        mapped: None,
        switched_to: None,
        valid_until: None,
        invalidated: None,
    };
    (decision, record)
}

/// The fault path for a fault the kernel raises itself (the conformance suite): `thread`
/// touches user address `addr` with `kind`, as a page fault from user mode would report it.
/// `Ok` when the page is mapped or the access is to be retried.
pub fn fault_as(thread: &SecCtxMgr, addr: u64, kind: AccessKind) -> Result<(), Outcome> {
    fault_from(thread, addr, kind, addr)
}

/// [`fault_as`] with the faulting instruction at user address `rip` (a write into a context
/// object re-faults the instruction's page first, as it must be executable).
pub fn fault_from(
    thread: &SecCtxMgr,
    addr: u64,
    kind: AccessKind,
    rip: u64,
) -> Result<(), Outcome> {
    let error = PF_USER
        | match kind {
            AccessKind::Read => 0,
            AccessKind::Write => PF_WRITE,
            AccessKind::Exec => PF_FETCH,
        };
    page_fault(thread, addr, error, rip, &mut Vec::new(), false)
}

/// The kernel reads (`Read`) or writes (`Write`, storing `value`) the byte at user address
/// `addr` on `thread`'s behalf: a `copy_from_user` / `copy_to_user` of one byte. A
/// kernel-mode fault on a user address is decided as the thread's own access, through the
/// same fault path (the error code without `PF_USER`): the kernel never maps, for the thread,
/// a page with more than the thread's contexts grant, and refuses the copy when they grant
/// less. The byte itself is copied through the frame in the kernel's identity map. Returns
/// the byte read (or written), or the outcome that refused it.
pub fn kernel_access(
    thread: &SecCtxMgr,
    addr: u64,
    kind: AccessKind,
    value: u8,
) -> Result<u8, Outcome> {
    let refused = |why| Outcome::Denied {
        addr,
        kind,
        present: false,
        why,
    };
    let object = PageTables::slot_of(addr)
        .and_then(|slot| table()?.in_slot(slot))
        .ok_or(refused(Denial::NoObject(addr)))?;
    let offset = addr % SLOT_SIZE;
    let needed = kind.required();
    let error = match kind {
        AccessKind::Write => PF_WRITE,
        _ => 0,
    };
    let tag = table().map_or(CtxTag::UNKNOWN, |t| t.tag_of(thread.active_id()));
    let usable = || {
        let mut paging = PAGING.lock();
        let pte = paging.as_mut().map_or(0, |pt| pt.user_entry(addr));
        crate::paging::pte_prots(pte).contains(needed) && crate::paging::pte_tag(pte) == tag
    };
    if !usable() {
        // The kernel-mode fault: decided as the thread's access, mapped only as granted.
        page_fault(thread, addr, error, addr, &mut Vec::new(), false)?;
        if !usable() {
            return Err(refused(Denial::TooLittle {
                prots: mapped_prots(addr).unwrap_or(Protections::empty()),
            }));
        }
    }
    let frame = object.frame_at(offset).ok_or(refused(Denial::NoBacking {
        target: object.id,
        offset,
    }))?;
    if kind == AccessKind::Write {
        frame.store_byte(offset, value);
        return Ok(value);
    }
    Ok(frame.read_byte(offset))
}

/// Decisions whose ticket went stale before their page was installed (decided again).
static STALE_TICKETS: AtomicU64 = AtomicU64::new(0);
/// Decisions not installed because their context was no longer the thread's active one.
static NOT_ACTIVE_AT_MAP: AtomicU64 = AtomicU64::new(0);
/// Faults given back to user mode after [`MAX_DECIDE_RETRIES`] stale tickets in a row.
static STALE_GIVE_UPS: AtomicU64 = AtomicU64::new(0);

/// How many times one fault is decided again because its ticket went stale before the
/// kernel could install the page; then the access is left to fault again from user mode.
const MAX_DECIDE_RETRIES: usize = 4;

/// Decisions not installed because another CPU switched the thread away from the context
/// that granted them (and may have detached it) since boot.
pub fn not_active_at_map() -> u64 {
    NOT_ACTIVE_AT_MAP.load(Ordering::Relaxed)
}

/// (stale tickets, faults given back to user mode) since boot.
pub fn ticket_counts() -> (u64, u64) {
    (
        STALE_TICKETS.load(Ordering::Relaxed),
        STALE_GIVE_UPS.load(Ordering::Relaxed),
    )
}

/// Maps user page `page_addr` to `frame` with `prots`, granted under context `ctx`, if the
/// decision's `ticket` is still current and `ctx` is still `thread`'s active context:
/// `Ok(false)` (nothing installed) if not.
///
/// The check and the install happen under the page-table lock, which `Host::unmap` takes
/// too: a revocation that took the grant away either removed the decision's cache entry
/// before we looked (the ticket is stale) or will unmap after we release the lock, and
/// then finds the entry installed here (integration guide, section 7; `MapTicket`).
///
/// The same holds for a detach ([`detach`]): it detaches the context first, then unmaps its
/// pages under this lock. A detached context is never active, so an install that sees `ctx`
/// active here comes before that unmap, which removes it; one that comes after sees another
/// context active and installs nothing. (Without the check, a decision switched to `ctx`
/// just before another CPU switched the thread away and detached `ctx` would install a page
/// under the detached context after its unmap.)
fn map(
    thread: &SecCtxMgr,
    page_addr: u64,
    frame: &Frame,
    prots: Protections,
    ctx: ObjID,
    ticket: &MapTicket,
) -> Result<bool, Denial> {
    let tag = table().map_or(CtxTag::UNKNOWN, |t| t.tag_of(ctx));
    let mut paging = PAGING.lock();
    let Some(pt) = paging.as_mut() else {
        return Err(Denial::Paging(PagingError::NotInSlot(page_addr)));
    };
    if !ENGINE.is_current(ticket) {
        STALE_TICKETS.fetch_add(1, Ordering::Relaxed);
        return Ok(false);
    }
    if thread.active_id() != ctx {
        NOT_ACTIVE_AT_MAP.fetch_add(1, Ordering::Relaxed);
        return Ok(false);
    }
    // Replacing a present entry may narrow it (another CPU's task mapped the page under a
    // different decision): shoot the old translation down everywhere.
    let replaced = crate::paging::pte_prots(pt.user_entry(page_addr)) != Protections::empty();
    pt.map_user(page_addr, frame, prots, tag)
        .map_err(Denial::Paging)?;
    if replaced {
        crate::smp::shootdown();
    }
    Ok(true)
}

/// Handles one page fault: `Ok` when the page is now mapped (or the access is to be retried),
/// or the outcome that ends the task. `rip` is the faulting instruction. `ctx_invalidated`:
/// this is the second decision of a context write, made after `invalidate_ctx`.
pub(crate) fn page_fault(
    thread: &SecCtxMgr,
    addr: u64,
    error: u64,
    rip: u64,
    faults: &mut Vec<FaultRecord>,
    ctx_invalidated: bool,
) -> Result<(), Outcome> {
    let kind = if error & PF_FETCH != 0 {
        AccessKind::Exec
    } else if error & PF_WRITE != 0 {
        AccessKind::Write
    } else {
        AccessKind::Read
    };
    let present = error & PF_PRESENT != 0;
    let deny = |why| Outcome::Denied {
        addr,
        kind,
        present,
        why,
    };
    let object = PageTables::slot_of(addr)
        .and_then(|slot| table()?.in_slot(slot))
        .ok_or(deny(Denial::NoObject(addr)))?;
    let offset = addr % SLOT_SIZE;
    // The default protections are at hand; the `kuid` is the engine's to ask for, on a miss.
    let fault = Fault::lazy(object.id, object.default_prots, offset, kind).labelled(object.label);

    for _ in 0..MAX_DECIDE_RETRIES {
        match decide_and_map(
            thread,
            object,
            fault,
            addr,
            error,
            rip,
            faults,
            ctx_invalidated,
        )? {
            Installed::Yes => return Ok(()),
            Installed::Stale => continue,
        }
    }
    // The grant kept being taken away between decision and install: let the access fault
    // again from user mode (it is decided afresh there, and `MAX_TRAPS` bounds the loop).
    STALE_GIVE_UPS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Whether [`decide_and_map`] installed the page (or finished the fault otherwise), or found
/// its ticket stale.
enum Installed {
    Yes,
    Stale,
}

/// One decision of `fault` and, when it maps, the install under its ticket.
#[allow(clippy::too_many_arguments)]
fn decide_and_map(
    thread: &SecCtxMgr,
    object: &Object,
    fault: Fault,
    addr: u64,
    error: u64,
    rip: u64,
    faults: &mut Vec<FaultRecord>,
    ctx_invalidated: bool,
) -> Result<Installed, Outcome> {
    let kind = fault.kind;
    let offset = fault.offset;
    let present = error & PF_PRESENT != 0;
    let deny = |why| Outcome::Denied {
        addr,
        kind,
        present,
        why,
    };
    let (decision, mut record) = decide(thread, fault, present);
    let (prots, decided_under, switch_to, valid_until, ticket) = match decision {
        Decision::Map {
            prots,
            ctx,
            switch_to,
            valid_until,
            ticket,
            ..
        } => (prots, ctx, switch_to, valid_until, ticket),
        Decision::Violation(v) => {
            faults.push(record);
            return Err(deny(Denial::Engine(v)));
        }
    };
    record.valid_until = Some(valid_until);
    if !prots.contains(kind.required()) {
        faults.push(record);
        return Err(deny(Denial::TooLittle { prots }));
    }
    // The engine does not switch the thread: the kernel does, and maps under that context.
    // A grant by the active context is mapped under the context that was active when it was
    // decided, not under whatever is active now: another CPU may have switched the thread (and
    // detached the context) meanwhile, and map() then refuses it.
    let granted_under = match switch_to {
        None => decided_under,
        Some(ctx) => match thread.switch_context(ctx) {
            SwitchResult::Switched | SwitchResult::NoSwitch => {
                record.switched_to = Some(ctx);
                ctx
            }
            // Detached since the decision: map nothing, let the access fault again.
            SwitchResult::NotAttached => {
                faults.push(record);
                return Ok(Installed::Yes);
            }
        },
    };
    let Some(frame) = object.frame_at(offset) else {
        faults.push(record);
        return Err(deny(Denial::NoBacking {
            target: object.id,
            offset,
        }));
    };
    let page_addr = addr & !(PAGE - 1);
    let mapped = match object.as_context() {
        None => map(thread, page_addr, frame, prots, granted_under, &ticket)
            .map(|ok| ok.then_some(prots)),
        // Step 1 of the protocol: a context page is mapped read-only at first.
        Some(_) if kind != AccessKind::Write => {
            let ro = prots - Protections::WRITE;
            map(thread, page_addr, frame, ro, granted_under, &ticket).map(|ok| ok.then_some(ro))
        }
        Some(ctx) if !ctx_invalidated => {
            // The write's window, open until the page is writable (or the write is refused):
            // no other CPU reads the context in between (`CtxObject::open_write_window`).
            let _window = ctx.open_write_window();
            record.invalidated = Some(ENGINE.invalidate_ctx(object.id).total());
            crate::objects::run_write_window_hook();
            faults.push(record);
            return write_ctx(thread, addr, error, rip, faults).map(|()| Installed::Yes);
        }
        Some(ctx) => ctx
            .map_writable(|| map(thread, page_addr, frame, prots, granted_under, &ticket))
            .map(|ok| ok.then_some(prots)),
    };
    let result = match mapped {
        Ok(Some(p)) => {
            record.mapped = Some(p);
            Ok(Installed::Yes)
        }
        Ok(None) => Ok(Installed::Stale),
        Err(why) => Err(deny(why)),
    };
    faults.push(record);
    // After every `Map`: the grant may expire sooner than the timer is armed for.
    timer::rearm();
    result
}

/// Step 2 of the context-write protocol, after the engine allowed the write at `addr` into a
/// context object and `invalidate_ctx` unmapped everything granted under it.
///
/// - The faulting instruction's own page may have been granted under that context (it is
///   when a task edits its own context): it is faulted in again first, while the context is
///   still read-only, else the refetch would re-protect the context and the write would
///   fault and invalidate again, forever.
/// - The write is decided again: the decision that allowed it was cached under the old
///   epoch and swept with the rest, so without a fresh one no later revocation would know
///   of the writable mapping. That decision maps the page writable and marks the context
///   dirty.
fn write_ctx(
    thread: &SecCtxMgr,
    addr: u64,
    error: u64,
    rip: u64,
    faults: &mut Vec<FaultRecord>,
) -> Result<(), Outcome> {
    // Only a user-mode write has a user instruction to keep mapped: a kernel-mode one (a
    // copy to user memory) runs kernel code.
    if error & PF_USER != 0 && !mapped_prots(rip).is_some_and(|p| p.contains(Protections::EXEC)) {
        page_fault(thread, rip, PF_USER | PF_FETCH, rip, faults, false)?;
    }
    page_fault(thread, addr, error, rip, faults, true)
}

/// Detaches inactive context `ctx` from `thread` and drops the pages mapped under it
/// ([`Unmap::Context`] through the host's unmap, which shoots down every CPU's TLB before it
/// returns): on Twizzler, the context's page tables in the thread's memory context. Every
/// user page here is tagged with the context that granted it, and the unmap reaches every
/// address space, so the pages tagged `ctx` are gone wherever they were mapped (a program's
/// contexts are its own; probe tasks that run at one time share the kernel's space under one
/// context). Returns how many pages were unmapped.
///
/// The order matters: the context is detached first, so no fault path can install a page
/// under it after the unmap (see [`map`]).
pub fn detach(thread: &SecCtxMgr, ctx: ObjID) -> Result<usize, DetachError> {
    thread.detach(ctx)?;
    Ok(objects::unmap_pages(Unmap::Context(ctx)))
}

/// The present leaf entry's protections for user address `addr`, if mapped.
pub fn mapped_prots(addr: u64) -> Option<Protections> {
    let mut paging = PAGING.lock();
    let pte = paging.as_mut()?.user_entry(addr);
    let prots = crate::paging::pte_prots(pte);
    (!prots.is_empty()).then_some(prots)
}

/// Whether context `ctx` may have a writable user mapping (the protocol's dirty bit).
pub fn ctx_dirty(ctx: ObjID) -> Option<bool> {
    table()?.get(ctx)?.as_context().map(CtxObject::is_dirty)
}
