//! User programs written in Rust (`kernel-hooks/user`): loading them into objects and running
//! them in ring 3.
//!
//! `cargo xtask` builds the userspace crate before the kernel and points the kernel's build
//! script at its ELF images (`KERNEL_HOOKS_USER_BIN_DIR`), which are embedded here. At run
//! time the loader copies each `PT_LOAD` segment into an object of its own, in the slot the
//! program was linked for, gives the task a stack object and a heap object, and runs it in a
//! security context of its own. Every page the program touches, its own code included, is a
//! page fault the engine decides, and every pointer it passes to a system call is checked
//! ([`crate::syscall`]).
//!
//! **A program's memory is private by capability, not by its ids' obscurity.** Every object
//! the loader makes for a program (code, data, stack, heap) has **no default protections**
//! and is keyed by an Ed25519 key the loader generates for that program alone (from `rdrand`;
//! its key object is owned by the task). The task's start context holds capabilities signed
//! by that key for exactly what it needs: code `r-x`, data as its segment's flags say (`rw-`,
//! or `r--` for read-only data), stack `rw-`, heap `rw-` ([`HEAP_PAGES`] pages, made by the
//! loader so that the capability is in the start context from the first instruction), and
//! `rw-` on [`self_info::CONTEXTS_N`] private context objects (no default protections,
//! keyed by the same key) that the program builds its own contexts in: a context holding
//! capabilities for a program's memory must be attachable by that program only, and a
//! context object readable by default may be attached by any task that learns its id. Another
//! program that learns those ids (ids are passed around) maps them and is denied: it holds no
//! capability, and there are no default rights. The program gets its key's seed and its
//! objects' ids from `SYS_SELF`, so it can sign the same capabilities into every context it
//! builds before it switches to it: under any context it makes active, it still reaches its
//! own memory, through capabilities like any other access (`kernel_hooks_user::own`).
//!
//! A task may only touch objects it has mapped (its code, data and stack, and what it maps
//! with `SYS_MAP`): a fault in another slot is `NoObject`, whatever the engine would say.
//!
//! Each task runs in an address space of its own ([`crate::paging::SpaceId`]): the pages the
//! engine decided for it are mapped there only, so a task running at the same time on
//! another CPU cannot use them, however it learnt their addresses; its own accesses fault,
//! and are decided under its own contexts.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::{SecCtxMgr, Stats};
use twizzler_capsec::{
    AccessKind, Cap, CapGrant, LabelId, ObjID, Protections, SecCtxEditor, SigningKey, SigningScheme,
};

use crate::elf::{self, PF_W, PF_X};
use crate::objects::{Body, CtxObject, ENGINE, InsertError, Object, PAGING, table};
use crate::paging::{Frame, MAX_SLOTS, PAGE, PageTables, SLOT_SIZE};
use crate::task::{Denial, Outcome};
use crate::trap::{self, UserFrame};
use crate::user_abi::{Error, FAULT_DENIED, id_from_words, id_words, self_info};
use crate::{clock, cpu, rng, syscall, timer};

/// A program image embedded in the kernel.
pub struct Program {
    /// Its binary's name.
    pub name: &'static str,
    /// Its ELF image.
    pub elf: &'static [u8],
}

/// The programs `cargo xtask` built, or none when the kernel was built without them.
pub fn programs() -> &'static [Program] {
    #[cfg(user_programs)]
    {
        &[
            Program {
                name: "policy",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_POLICY")),
            },
            Program {
                name: "hostile",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_HOSTILE")),
            },
            Program {
                name: "scenarios",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_SCENARIOS")),
            },
            Program {
                name: "bench",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_BENCH")),
            },
            Program {
                name: "owner",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_OWNER")),
            },
            Program {
                name: "reader",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_READER")),
            },
            Program {
                name: "labels",
                elf: include_bytes!(env!("KERNEL_HOOKS_USER_LABELS")),
            },
        ]
    }
    #[cfg(not(user_programs))]
    {
        &[]
    }
}

/// The program named `name`, if embedded.
pub fn program(name: &str) -> Option<&'static Program> {
    programs().iter().find(|p| p.name == name)
}

/// Slots a program's segments may be linked into (`kernel-hooks/user/build.rs`).
pub const PROGRAM_SLOTS: core::ops::Range<u64> = 129..150;
/// The first slot of the objects made at run time (stacks, programs' contexts, and what
/// programs create); they go up to [`MAX_SLOTS`].
pub const FIRST_DYNAMIC_SLOT: u64 = 150;
/// Pages of a task's stack object (after its null page).
pub const STACK_PAGES: u64 = 32;
/// Pages of a task's heap object (after its null page): one size for every program, the most
/// any of them needs (64: the editor's copies and the signatures are small). A constant, not
/// read from the program (an ELF note, a linker symbol): the loader makes the heap before
/// the program runs so that its capability is in the start context, and one size keeps the
/// loader free of a second thing to parse and check.
pub const HEAP_PAGES: u64 = 64;
/// Pages of a task's start context (its capabilities for its own objects and contexts).
pub const START_CTX_PAGES: u64 = 3;
/// How long a program may run (monotonic time, kernel work included): programs sign and
/// verify in emulated time, and under host load a run took 3.6 s where it takes 0.3 s idle;
/// the probes' 5 s is too tight for them.
pub const PROGRAM_TIME_LIMIT_NS: u64 = 30_000_000_000;

/// Page faults a program task may take (system calls and interrupts do not count: a program
/// that waits for the clock in a loop of system calls is bounded by its time limit).
pub const MAX_PROGRAM_FAULTS: usize = 20_000;

/// The next slot for an object made at run time.
static NEXT_SLOT: AtomicU64 = AtomicU64::new(FIRST_DYNAMIC_SLOT);
/// The next id for an object made at run time.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Object ids made at run time: `0x7573_6572` ("user") in the high word, a counter below.
const RUNTIME_ID_BASE: u128 = 0x7573_6572 << 64;

/// A fresh object id.
pub fn fresh_id() -> ObjID {
    ObjID::new(RUNTIME_ID_BASE | u128::from(NEXT_ID.fetch_add(1, Ordering::Relaxed)))
}

/// A free slot for an object made at run time.
fn fresh_slot() -> Result<u64, Error> {
    let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
    if slot > MAX_SLOTS {
        return Err(Error::NoSpace);
    }
    Ok(slot)
}

/// `n` zeroed frames from the pool.
fn frames(n: u64) -> Result<Vec<Frame>, Error> {
    let mut paging = PAGING.lock();
    let pt = paging.as_mut().ok_or(Error::NoSpace)?;
    (0..n)
        .map(|_| pt.alloc_frame().map_err(|_| Error::NoSpace))
        .collect()
}

fn insert(object: Object) -> Result<&'static Object, Error> {
    let t = table().ok_or(Error::NoSpace)?;
    t.insert(object).map_err(|e| match e {
        InsertError::Full | InsertError::Taken => Error::NoSpace,
    })
}

/// Adds a data object of `pages` zeroed pages (after its null page) in a fresh slot, with
/// data label `label` (fixed for its life).
pub fn new_data_object(
    pages: u64,
    default_prots: Protections,
    kuid: Option<ObjID>,
    label: LabelId,
) -> Result<&'static Object, Error> {
    let slot = fresh_slot()?;
    let frames = frames(pages + 1)?;
    insert(Object {
        id: fresh_id(),
        kuid,
        default_prots,
        slot: Some(slot),
        label,
        body: Body::Frames(frames),
    })
}

/// Adds a context object of `pages` pages (after its null page) in a fresh slot, holding an
/// empty encoded context followed by zeros: its size is all its pages, so a program can grow
/// it in place.
pub fn new_context_object(
    pages: u64,
    default_prots: Protections,
    kuid: Option<ObjID>,
    label: LabelId,
) -> Result<&'static Object, Error> {
    new_context_object_with(pages, default_prots, kuid, label, |_| {
        SecCtxEditor::new().encode().map_err(|_| Error::NoSpace)
    })
}

/// Adds a context object of `pages` pages (after its null page) in a fresh slot, holding the
/// encoded context `build` makes for the object's id, followed by zeros. Its data label is
/// `label`, and so is its principal row (`crate::labels`): a context starts at the label of its
/// own bytes, which therefore flow to its threads (`docs/DIFC.md` §1.4).
pub fn new_context_object_with(
    pages: u64,
    default_prots: Protections,
    kuid: Option<ObjID>,
    label: LabelId,
    build: impl FnOnce(ObjID) -> Result<Vec<u8>, Error>,
) -> Result<&'static Object, Error> {
    let id = fresh_id();
    let mut bytes = build(id)?;
    let slot = fresh_slot()?;
    let len = usize::try_from(pages * PAGE).map_err(|_| Error::BadArg)?;
    if bytes.len() > len {
        return Err(Error::BadArg);
    }
    bytes.resize(len, 0);
    let frames = {
        let mut paging = PAGING.lock();
        let pt = paging.as_mut().ok_or(Error::NoSpace)?;
        let n = usize::try_from(pages + 1).map_err(|_| Error::BadArg)?;
        pt.alloc_contiguous(n).map_err(|_| Error::NoSpace)?
    };
    let ctx = CtxObject::new(frames, &bytes).ok_or(Error::NoSpace)?;
    if !label.is_empty() {
        crate::labels::set_principal(id, twizzler_capsec::PrincipalLabels::steady(label));
    }
    insert(Object {
        id,
        kuid,
        default_prots,
        slot: Some(slot),
        label,
        body: Body::Context(ctx),
    })
}

/// Adds a key object for `key`.
pub fn new_key_object(key: twizzler_capsec::VerifyingKey) -> Result<&'static Object, Error> {
    insert(Object {
        id: fresh_id(),
        kuid: None,
        default_prots: Protections::empty(),
        slot: None,
        label: twizzler_capsec::LabelId::EMPTY,
        body: Body::Key(key),
    })
}

/// A program loaded into objects, ready to run.
pub struct Loaded {
    /// Where it starts.
    pub entry: u64,
    /// Its objects (one per segment, then its stack, then its heap), each with the rights its
    /// start context grants on it.
    pub objects: Vec<(ObjID, Protections)>,
    /// Its stack's top.
    pub stack_top: u64,
    /// The security context it starts in (its own; capabilities for `objects` only).
    pub ctx: ObjID,
    /// What `SYS_SELF` tells it ([`self_info`]'s words): its key's seed, its key object, its
    /// stack and heap, its objects.
    pub own: [u64; self_info::WORDS],
}

/// Where `id` goes in `SYS_SELF`'s words.
fn put_id(words: &mut [u64], at: usize, id: ObjID) {
    if let Some(w) = words.get_mut(at..at + 2) {
        w.copy_from_slice(&<[u64; 2]>::from(id_words(id)));
    }
}

/// Loads `elf` into new objects.
pub fn load(elf_image: &[u8]) -> Result<Loaded, String> {
    let image = elf::parse(elf_image).map_err(|e| e.to_string())?;
    if image.segments.len() + 2 > self_info::MAX_OBJECTS {
        return Err("too many segments".into());
    }
    // The program's own key: it signs for every object made here, and only for those.
    let mut seed = [0u8; 32];
    let mut rdrand = rng::RdRand::new().ok_or("no rdrand for the program's key")?;
    let Ok(()) = rand_core::TryRng::try_fill_bytes(&mut rdrand, &mut seed);
    let sk = SigningKey::from_entropy(SigningScheme::Ed25519, &seed)
        .map_err(|e| alloc::format!("program key: {e}"))?;
    let key = new_key_object(sk.verifying_key())
        .map_err(|e| alloc::format!("key object: {}", e.name()))?
        .id;
    let mut objects = Vec::new();
    for seg in &image.segments {
        let slot = seg.vaddr / SLOT_SIZE;
        let offset = seg.vaddr % SLOT_SIZE;
        if !PROGRAM_SLOTS.contains(&slot) || offset < PAGE {
            return Err(alloc::format!(
                "segment at {:#x}: not in a program slot past the null page",
                seg.vaddr
            ));
        }
        let end = offset
            .checked_add(seg.mem_len)
            .filter(|&e| e <= SLOT_SIZE)
            .ok_or("segment larger than its slot")?;
        let mut fr = frames(end.div_ceil(PAGE)).map_err(|e| e.name().to_string())?;
        for (i, chunk) in seg.bytes.chunks(PAGE as usize).enumerate() {
            // Segment bytes from `offset`; a chunk may straddle two frames.
            let at = offset + i as u64 * PAGE;
            let (page, in_page) = ((at / PAGE) as usize, (at % PAGE) as usize);
            let first = chunk.len().min(PAGE as usize - in_page);
            let (a, b) = chunk.split_at(first);
            let ok = fr.get_mut(page).is_some_and(|f| f.write_at(in_page, a))
                && (b.is_empty() || fr.get_mut(page + 1).is_some_and(|f| f.write_at(0, b)));
            if !ok {
                return Err("segment bytes do not fit its frames".into());
            }
        }
        let prots = if seg.flags & PF_X != 0 {
            Protections::READ | Protections::EXEC
        } else if seg.flags & PF_W != 0 {
            Protections::READ | Protections::WRITE
        } else {
            Protections::READ
        };
        let object = insert(Object {
            id: fresh_id(),
            kuid: Some(key),
            default_prots: Protections::empty(),
            slot: Some(slot),
            label: twizzler_capsec::LabelId::EMPTY,
            body: Body::Frames(fr),
        })
        .map_err(|e| alloc::format!("segment object: {}", e.name()))?;
        objects.push((object.id, prots));
    }
    let rw = Protections::READ | Protections::WRITE;
    let stack = new_data_object(STACK_PAGES, Protections::empty(), Some(key), LabelId::EMPTY)
        .map_err(|e| alloc::format!("stack: {}", e.name()))?;
    let stack_top = stack.base().ok_or("stack without a slot")? + (STACK_PAGES + 1) * PAGE;
    objects.push((stack.id, rw));
    let heap = new_data_object(HEAP_PAGES, Protections::empty(), Some(key), LabelId::EMPTY)
        .map_err(|e| alloc::format!("heap: {}", e.name()))?;
    objects.push((heap.id, rw));
    // Its private contexts: only the start context grants them (rw-: attach and edit).
    let mut contexts = Vec::new();
    for _ in 0..self_info::CONTEXTS_N {
        let c = new_context_object(
            self_info::CONTEXT_PAGES,
            Protections::empty(),
            Some(key),
            LabelId::EMPTY,
        )
        .map_err(|e| alloc::format!("private context: {}", e.name()))?;
        contexts.push(c.id);
    }
    let ctx = new_context_object_with(
        START_CTX_PAGES,
        Protections::empty(),
        None,
        LabelId::EMPTY,
        |ctx| {
            let mut ed = SecCtxEditor::new();
            let private = contexts.iter().map(|&c| (c, rw));
            for (id, prots) in objects.iter().copied().chain(private) {
                let cap =
                    Cap::mint(CapGrant::new(id, ctx, prots), &sk).map_err(|_| Error::BadArg)?;
                ed.add_cap(&cap);
            }
            ed.encode().map_err(|_| Error::NoSpace)
        },
    )
    .map_err(|e| alloc::format!("context: {}", e.name()))?;
    let mut own = [0u64; self_info::WORDS];
    for (w, chunk) in own.iter_mut().zip(seed.chunks(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    seed.fill(0);
    put_id(&mut own, self_info::KUID, key);
    put_id(&mut own, self_info::HEAP, heap.id);
    own[self_info::HEAP_BASE] = heap.base().ok_or("heap without a slot")?;
    own[self_info::HEAP_PAGES] = HEAP_PAGES;
    put_id(&mut own, self_info::STACK, stack.id);
    for (i, &c) in contexts.iter().enumerate() {
        put_id(&mut own, self_info::CONTEXTS + 2 * i, c);
    }
    own[self_info::COUNT] = objects.len() as u64;
    for (i, &(id, prots)) in objects.iter().enumerate() {
        let at = self_info::OBJECTS + 3 * i;
        put_id(&mut own, at, id);
        own[at + 2] = u64::from(prots.bits());
    }
    Ok(Loaded {
        entry: image.entry,
        objects,
        stack_top,
        ctx: ctx.id,
        own,
    })
}

/// A denied access the kernel delivered to the task's recovery address.
#[derive(Clone, Debug)]
pub struct Delivered {
    /// The faulting address.
    pub addr: u64,
    /// The access.
    pub kind: AccessKind,
    /// Why it was denied.
    pub why: String,
}

/// One step a program reported (`SYS_REPORT`).
#[derive(Clone, Debug)]
pub struct StepReport {
    /// The step.
    pub step: u64,
    /// Its `report` code.
    pub code: u64,
    /// Its detail.
    pub detail: u64,
    /// The denials the kernel delivered since the previous report.
    pub denials: Vec<Delivered>,
    /// The task's page faults since the previous report.
    pub faults: u64,
    /// The engine's decisions since the previous report: (misses, signatures verified).
    pub misses_verifies: (u64, u64),
}

/// A running program's state, beside its registers.
pub struct Task {
    /// Its security contexts.
    pub thread: SecCtxMgr,
    /// The objects it has mapped.
    pub mapped: Vec<ObjID>,
    /// The key objects it created.
    pub owned_keys: Vec<ObjID>,
    /// Its fault-recovery range and landing address.
    pub recovery: Option<(u64, u64, u64)>,
    /// Denials delivered since its last report.
    pub pending: Vec<Delivered>,
    /// What it reported.
    pub reports: Vec<StepReport>,
    /// Page faults it took so far.
    pub faults: u64,
    /// Its page faults and the engine's counters at its last report.
    pub at_last_report: (u64, Stats),
    /// Whether it may move the engine's clock (`SYS_ADVANCE_CLOCK`, test-only).
    pub may_set_clock: bool,
    /// What `SYS_SELF` copies out: its own key's seed and objects ([`Loaded::own`]).
    pub own: [u64; self_info::WORDS],
}

impl Task {
    /// Whether the task has mapped the object in `addr`'s slot; that object.
    pub fn object_at(&self, addr: u64) -> Option<&'static Object> {
        let slot = PageTables::slot_of(addr)?;
        let object = table()?.in_slot(slot)?;
        self.mapped.contains(&object.id).then_some(object)
    }
}

/// How a program run ended, and what it reported.
pub struct ProgramRun {
    /// How it ended.
    pub outcome: Outcome,
    /// Its reports.
    pub reports: Vec<StepReport>,
    /// Page faults and system calls it took.
    pub traps: usize,
    /// Page faults among them.
    pub faults: usize,
    /// rdtsc cycles it ran for (kernel work included).
    pub cycles: u64,
    /// Its heap object, stack object and first private context (ids another program may
    /// learn, and must still be denied).
    pub private: [ObjID; 3],
}

/// Adds a one-page data object readable by everyone (`r--` by default, no key) holding
/// `words` past its null page: a notice board, the ordinary way ids travel between programs.
pub fn new_board(words: &[u64]) -> Result<&'static Object, Error> {
    let mut fr = frames(2)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if !fr.get_mut(1).is_some_and(|f| f.write_at(0, &bytes)) {
        return Err(Error::BadArg);
    }
    insert(Object {
        id: fresh_id(),
        kuid: None,
        default_prots: Protections::READ,
        slot: Some(fresh_slot()?),
        label: twizzler_capsec::LabelId::EMPTY,
        body: Body::Frames(fr),
    })
}

/// Loads `program` and runs it with arguments `args` (`rdi`, `rsi`, `rdx`, `r8`);
/// `may_set_clock`: it may move the engine's clock (a test-only right).
pub fn run(program: &Program, args: [u64; 4], may_set_clock: bool) -> Result<ProgramRun, String> {
    let loaded = load(program.elf)?;
    // Its own address space, loaded on this CPU until it ends.
    let space = {
        let mut paging = PAGING.lock();
        let pt = paging.as_mut().ok_or("no page tables")?;
        let space = pt
            .new_space()
            .map_err(|e| alloc::format!("address space: {e}"))?;
        pt.enter_space(space)
            .map_err(|e| alloc::format!("address space: {e:?}"))?;
        space
    };
    let mut task = Task {
        thread: SecCtxMgr::new(loaded.ctx),
        mapped: loaded.objects.iter().map(|&(id, _)| id).collect(),
        // The program's own key: it may revoke it and the records it signs.
        owned_keys: alloc::vec![key_of(&loaded.own)],
        recovery: None,
        pending: Vec::new(),
        reports: Vec::new(),
        faults: 0,
        at_last_report: (0, ENGINE.stats()),
        may_set_clock,
        own: loaded.own,
    };
    let mut frame = UserFrame {
        rip: loaded.entry,
        rsp: loaded.stack_top,
        rdi: args[0],
        rsi: args[1],
        rdx: args[2],
        r8: args[3],
        ..UserFrame::default()
    };
    let t0 = cpu::rdtsc();
    let started = clock::monotonic_ns();
    timer::rearm();
    let mut traps = 0;
    let mut faults = 0;
    let outcome = loop {
        let _ = timer::run_deferred();
        // Expiries due run on every return to user mode, whatever the timer's latency: once
        // a system call has shown the task a time past a grant's expiry, the grant's pages
        // are gone before the task runs again.
        if ENGINE.next_deadline_in(clock::monotonic_ns()) == Some(0) {
            let _ = ENGINE.expire();
            timer::rearm();
        }
        trap::enter_user(&mut frame);
        let vector = match trap::Return::of(frame.vector) {
            trap::Return::Shootdown => {
                crate::apic::eoi();
                continue;
            }
            interrupt @ (trap::Return::Timer | trap::Return::Spurious) => {
                if interrupt == trap::Return::Timer {
                    let _ = timer::on_interrupt();
                }
                if clock::monotonic_ns().saturating_sub(started) > PROGRAM_TIME_LIMIT_NS {
                    break Outcome::TimedOut(PROGRAM_TIME_LIMIT_NS);
                }
                continue;
            }
            trap::Return::Trap(vector) => vector,
        };
        traps += 1;
        match vector {
            trap::PAGE_FAULT => {
                faults += 1;
                task.faults += 1;
                if faults > MAX_PROGRAM_FAULTS {
                    break Outcome::Runaway(MAX_PROGRAM_FAULTS);
                }
                let addr = cpu::read_cr2();
                match fault(&task, addr, &frame) {
                    Ok(()) => {}
                    Err(denied) => match (&denied, task.recovery) {
                        (Outcome::Denied { kind, why, .. }, Some((start, end, landing)))
                            if (start..end).contains(&frame.rip) =>
                        {
                            task.pending.push(Delivered {
                                addr,
                                kind: *kind,
                                why: why.to_string(),
                            });
                            frame.rip = landing;
                            frame.rax = FAULT_DENIED;
                        }
                        _ => break denied,
                    },
                }
            }
            trap::SYSCALL_VECTOR => {
                if let Some(exit) = syscall::handle(&mut task, &mut frame) {
                    break Outcome::Exited(exit);
                }
            }
            _ => {
                break Outcome::Crashed {
                    vector: frame.vector,
                    error: frame.error,
                    rip: frame.rip,
                };
            }
        }
    };
    let cycles = cpu::rdtsc().wrapping_sub(t0);
    // Back on the kernel's tables, then the space is cleared for the next task: this CPU was
    // the only one to load it, so no CPU runs on it any more.
    // (It cannot fail: this CPU entered it above. Were it to, the space would stay held and
    // uncleared, never recycled under a CPU, and the table's spaces row would show it.)
    if let Some(pt) = PAGING.lock().as_mut() {
        let _ = pt.leave_space(space);
    }
    let word_id = |at: usize| id_from_words(loaded.own[at], loaded.own[at + 1]);
    Ok(ProgramRun {
        outcome,
        reports: task.reports,
        traps,
        faults,
        cycles,
        private: [
            word_id(self_info::HEAP),
            word_id(self_info::STACK),
            word_id(self_info::CONTEXTS),
        ],
    })
}

/// The program's key object, from its `SYS_SELF` words.
fn key_of(own: &[u64; self_info::WORDS]) -> ObjID {
    id_from_words(own[self_info::KUID], own[self_info::KUID + 1])
}

/// A page fault of the task's: only in objects it has mapped, then decided as any fault.
fn fault(task: &Task, addr: u64, frame: &UserFrame) -> Result<(), Outcome> {
    if task.object_at(addr).is_none() {
        let kind = if frame.error & (1 << 4) != 0 {
            AccessKind::Exec
        } else if frame.error & (1 << 1) != 0 {
            AccessKind::Write
        } else {
            AccessKind::Read
        };
        return Err(Outcome::Denied {
            addr,
            kind,
            present: frame.error & 1 != 0,
            why: Denial::NoObject(addr),
        });
    }
    crate::task::page_fault(
        &task.thread,
        addr,
        frame.error,
        frame.rip,
        &mut Vec::new(),
        false,
    )
}
