//! Running a user task, and the page-fault path.
//!
//! A task is one ring-3 thread with its own security contexts ([`SecCtxMgr`]), started at a
//! probe in the program object. The kernel runs it until it traps and handles the trap here,
//! in ordinary kernel code:
//!
//! - `#PF`: CR2 and the error code become a [`Fault`] (target object from the slot, offset in
//!   it, read / write / fetch from the W and I/D bits), [`Engine::decide`] is called, and either
//!   the page is mapped with exactly the decided protections and the task resumes, or the
//!   violation ends the task. A fault on a present page (a write to a read-only mapping, a
//!   fetch from a no-execute one) is decided in the same way.
//! - `int 0x80`: exit or checkpoint.
//! - anything else (`#GP`, `#UD`, ...): the task crashed.
//!
//! [`Engine::decide`]: kernel_hooks::Engine::decide

use alloc::vec::Vec;
use core::fmt;

use kernel_hooks::{Decision, Fault, SecCtxMgr, Stats, Violation};
use twizzler_security::{AccessKind, ObjID, Protections};

use crate::cpu;
use crate::objects::{ENGINE, PAGING, table};
use crate::paging::{PAGE, PageTables, PagingError, SLOT_SIZE};
use crate::trap::{self, UserFrame};
use crate::user::{self, Probe};

/// Traps one task may take before the kernel gives up on it (a fault that the engine
/// "allows" but that keeps recurring would otherwise loop forever).
const MAX_TRAPS: usize = 32;

/// Page-fault error code bits.
const PF_PRESENT: u64 = 1 << 0;
const PF_WRITE: u64 = 1 << 1;
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
    /// It trapped more than [`MAX_TRAPS`] times.
    Runaway,
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
            Self::Runaway => write!(f, "more than {MAX_TRAPS} traps"),
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
    /// The protections mapped, if any.
    pub mapped: Option<Protections>,
    /// The context the thread switched to, if it did.
    pub switched_to: Option<ObjID>,
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

/// Everything about one task's run.
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// Every page fault the engine decided, in order.
    pub faults: Vec<FaultRecord>,
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
    mut checkpoint: impl FnMut(u64),
) -> Report {
    let mut faults = Vec::new();
    if let Some(pt) = PAGING.lock().as_mut() {
        pt.unmap_all_user();
    }
    let Some(entry) = addr_of(program, PAGE + start.probe.offset()) else {
        return Report {
            outcome: Outcome::Denied {
                addr: 0,
                kind: AccessKind::Exec,
                present: false,
                why: Denial::NoObject(0),
            },
            faults,
        };
    };
    let mut frame = UserFrame {
        rip: entry,
        rdi: start.addr,
        rsi: u64::from(start.value),
        ..UserFrame::default()
    };
    for _ in 0..MAX_TRAPS {
        trap::enter_user(&mut frame);
        let outcome = match u8::try_from(frame.vector) {
            Ok(trap::PAGE_FAULT) => {
                // Read CR2 before anything else can fault (nothing in the kernel does).
                let addr = cpu::read_cr2();
                match page_fault(thread, addr, frame.error, &mut faults) {
                    Ok(()) => continue,
                    Err(denied) => denied,
                }
            }
            Ok(trap::SYSCALL_VECTOR) => match frame.rax {
                user::SYS_EXIT => Outcome::Exited(frame.rsi),
                user::SYS_CHECKPOINT => {
                    checkpoint(frame.rsi);
                    continue;
                }
                n => Outcome::BadSyscall(n),
            },
            _ => Outcome::Crashed {
                vector: frame.vector,
                error: frame.error,
                rip: frame.rip,
            },
        };
        return Report { outcome, faults };
    }
    Report {
        outcome: Outcome::Runaway,
        faults,
    }
}

/// Handles one page fault: `Ok` when the page is now mapped, or the outcome that ends the
/// task.
fn page_fault(
    thread: &SecCtxMgr,
    addr: u64,
    error: u64,
    faults: &mut Vec<FaultRecord>,
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
    let fault = Fault {
        target: object.id,
        offset,
        kind,
    };

    let before = ENGINE.stats();
    let t0 = cpu::rdtsc();
    let decision = ENGINE.decide(thread, &fault);
    let t1 = cpu::rdtsc();
    let after = ENGINE.stats();
    let mut record = FaultRecord {
        fault,
        present,
        cycles: t1.wrapping_sub(t0),
        before,
        after,
        mapped: None,
        switched_to: None,
    };

    let result = match decision {
        Decision::Map {
            prots, switch_to, ..
        } => {
            record.switched_to = switch_to;
            if !prots.contains(kind.required()) {
                Err(deny(Denial::TooLittle { prots }))
            } else if let Some(frame) = object.frame_at(offset) {
                let page_addr = addr & !(PAGE - 1);
                let mapped = match PAGING.lock().as_mut() {
                    Some(pt) => pt.map_user(page_addr, frame, prots),
                    None => Err(PagingError::NotInSlot(page_addr)),
                };
                match mapped {
                    Ok(()) => {
                        record.mapped = Some(prots);
                        Ok(())
                    }
                    Err(e) => Err(deny(Denial::Paging(e))),
                }
            } else {
                Err(deny(Denial::NoBacking {
                    target: object.id,
                    offset,
                }))
            }
        }
        Decision::Violation(v) => Err(deny(Denial::Engine(v))),
    };
    faults.push(record);
    result
}

/// The present leaf entry's protections for user address `addr`, if mapped.
pub fn mapped_prots(addr: u64) -> Option<Protections> {
    let mut paging = PAGING.lock();
    let pte = paging.as_mut()?.user_entry(addr);
    let prots = crate::paging::pte_prots(pte);
    (!prots.is_empty()).then_some(prots)
}
