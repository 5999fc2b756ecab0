//! Scenarios on several CPUs: ring-3 tasks on the application processors use one object in a
//! loop while the boot CPU (or the timer) takes their grant away; the kernel checks that no
//! access completed after the revocation returned.
//!
//! Each task runs [`Probe::SeqLoop`]: it reads page 2 of the object, then `lock xadd`s a
//! counter on page 1 and keeps the value it got (the access's sequence number) in `rbx`. The
//! counter lives in the object itself, so an access and its number are one atomic operation
//! on the page the revocation unmaps. When the revocation returns, the boot CPU reads the
//! counter (`R`): every access that completed before has a number below `R`, and one that
//! completed after would have `R` or more. It then writes a marker over the byte the tasks
//! read: a task that reads it (`r13 > 0`) read page 2 after the revocation returned. Every
//! task must end denied by the engine at its next fault, with `rbx < R` and `r13 = 0`, and
//! no page of the object may be mapped any more.
//!
//! These probe tasks run at the same time in the kernel's one address space (program tasks
//! have spaces of their own, see [`crate::program`]), so they run under one
//! context (the kernel tags each page with the context that granted it, but a task of another
//! context would use a page another task faulted in).
//!
//! Two more races do not revoke in a loop: [`cache_pressure`] has tasks on every CPU fault on
//! 64 objects at once with the verification cache full (every miss evicts, and every eviction
//! unmaps on every CPU), and [`switch_vs_detach`] has a task switch to an inactive context
//! while the boot CPU detaches and re-attaches that context on the task's `SecCtxMgr`.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel_hooks::cache::{SETS, WAYS};
use kernel_hooks::{Decision, DenyCause, DetachError, Fault, SecCtxMgr, Violation};
use twizzler_capsec::{AccessKind, ObjID, Protections};

use crate::objects::{ENGINE, table};
use crate::paging::PAGE;
use crate::scenarios::Row;
use crate::task::{self, Denial, Outcome, Report, Start, mapped_prots};
use crate::user::Probe;
use crate::world::{
    CACHE_OBJECTS, FIRST_CTX_SLOT, FIRST_SMP_SLOT, SMP_EXPIRY_NS, SMP_RECORD_ID, cache_obj,
    cache_word, fill_byte, ids::*,
};
use crate::{clock, cpu, smp};

/// Accesses (counter increments) per task before the revocation.
const PROGRESS_PER_TASK: u64 = 300;
/// How long to wait for that progress.
const PROGRESS_TIMEOUT_NS: u64 = 5_000_000_000;
/// How long to wait for a task to end (its own limit is `task::TASK_TIME_LIMIT_NS`).
const TASK_TIMEOUT_NS: u64 = 10_000_000_000;
/// The byte written over what the tasks read once the revocation returned (never a fill
/// byte: those end in the page number, 2).
const MARKER: u8 = 0xee;

/// What the several-CPU scenarios produced.
pub struct SmpResults {
    /// The table.
    pub rows: Vec<Row>,
    /// `revoke_key` cycles (including the shootdown) with `n` CPUs busy with the object.
    pub revoke_cycles: Vec<(usize, u64)>,
    /// Decide cycles: (hit alone, hit with every CPU deciding, miss alone, miss contended).
    pub decide: Option<[u64; 4]>,
}

/// What one race saw.
struct Race {
    got: String,
    ok: bool,
    reason: Option<String>,
    cycles: u64,
}

fn failed(got: String) -> Race {
    Race {
        got,
        ok: false,
        reason: None,
        cycles: 0,
    }
}

/// Runs `aps` tasks (on CPUs `1 ..= aps`) in `ctx` looping over `obj`, then `action` on this
/// CPU once they made progress, and checks the outcome. With `aps == 0` a task on this CPU
/// maps the page first, so the revocation has something to unmap. `from_timer`: the grant is
/// taken away by `expire()` from a timer interrupt, not by `action` itself.
fn race(
    obj: ObjID,
    ctx: ObjID,
    aps: usize,
    from_timer: bool,
    action: impl FnOnce() -> Result<(), String>,
) -> Race {
    let Some(o) = table().and_then(|t| t.get(obj)) else {
        return failed(format!("no object {obj}"));
    };
    let (Some(base), Some(slot), Some(counter_frame), Some(read_frame)) =
        (o.base(), o.slot, o.frame_at(PAGE), o.frame_at(2 * PAGE))
    else {
        return failed(format!("object {obj} has no slot or pages"));
    };
    let counter: &'static AtomicU64 = counter_frame.atomic_u64(0);
    task::clear_user_space();
    counter.store(0, Ordering::SeqCst);
    read_frame.store_byte(0, fill_byte(slot, 2));
    if from_timer {
        crate::timer::watch(Some(counter));
    }
    let start = Start {
        probe: Probe::SeqLoop,
        addr: base + PAGE,
        value: MARKER,
        addr2: base + 2 * PAGE,
        arg: 0,
    };
    let mut pending = Vec::new();
    for cpu in 1..=aps {
        counter_frame
            .atomic_u64(8 * cpu as u64)
            .store(0, Ordering::SeqCst);
        let start = Start {
            arg: 8 * cpu as u64,
            ..start
        };
        let job = smp::run_on(cpu, move || {
            task::run_shared(&SecCtxMgr::new(ctx), PROGRAM, start, |_| {})
        });
        match job {
            Some(p) => pending.push(p),
            None => return failed(format!("CPU {cpu} is not idle")),
        }
    }
    if aps == 0 {
        let one = Start {
            probe: Probe::ReadWrite,
            addr: base + PAGE,
            value: 0,
            addr2: 0,
            arg: 0,
        };
        task::run_shared(&SecCtxMgr::new(ctx), PROGRAM, one, |_| {});
    }
    // Every task must have made progress of its own (its counter at 8 * cpu).
    let deadline = clock::monotonic_ns() + PROGRESS_TIMEOUT_NS;
    let progressed = || {
        (1..=aps).all(|cpu| {
            counter_frame
                .atomic_u64(8 * cpu as u64)
                .load(Ordering::SeqCst)
                >= PROGRESS_PER_TASK
        })
    };
    while !progressed() {
        if clock::monotonic_ns() > deadline {
            break;
        }
        core::hint::spin_loop();
    }
    let before = counter.load(Ordering::SeqCst);
    let t0 = cpu::rdtsc();
    let acted = action();
    let t1 = cpu::rdtsc();
    let returned_at = if from_timer {
        let deadline = clock::monotonic_ns() + PROGRESS_TIMEOUT_NS;
        loop {
            if let Some(v) = crate::timer::watched_at_expire() {
                break Some(v);
            }
            if clock::monotonic_ns() > deadline {
                break None;
            }
            core::hint::spin_loop();
        }
    } else {
        Some(counter.load(Ordering::SeqCst))
    };
    read_frame.store_byte(0, MARKER);
    let reports: Vec<Option<Report>> = pending
        .into_iter()
        .map(|p| p.wait(TASK_TIMEOUT_NS))
        .collect();
    crate::timer::watch(None);
    if let Err(e) = acted {
        return failed(e);
    }
    let Some(r_seq) = returned_at else {
        return failed("no expire() from the timer unmapped the object".into());
    };

    let mut ok = true;
    let mut reason = None;
    let mut lasts = Vec::new();
    let mut marker_reads = 0;
    let mut iterations = 0;
    for (i, r) in reports.iter().enumerate() {
        let Some(r) = r else {
            ok = false;
            lasts.push(format!("CPU {} did not finish", i + 1));
            continue;
        };
        if let Err(other) = note_engine_denial(&r.outcome, &mut reason) {
            ok = false;
            lasts.push(format!("CPU {}: {other}", i + 1));
        }
        let last = r.regs.rbx;
        if last != u64::MAX && last >= r_seq {
            ok = false;
        }
        marker_reads += r.regs.r13;
        iterations += r.regs.r12;
        if last == u64::MAX {
            ok = false;
            lasts.push("none".into());
        } else {
            lasts.push(format!("{last}"));
        }
    }
    let mapped = [base + PAGE, base + 2 * PAGE]
        .iter()
        .filter(|&&a| mapped_prots(a).is_some())
        .count();
    ok &= marker_reads == 0 && mapped == 0 && (aps == 0 || before > 0);
    let got = if aps == 0 {
        format!("1 CPU: revoked, {mapped} pages left mapped")
    } else {
        format!(
            "{aps} tasks, {iterations} accesses; last seq {} < R={r_seq}; marker reads \
             {marker_reads}; {mapped} pages mapped",
            lasts.join("/")
        )
    };
    Race {
        got,
        ok,
        reason,
        cycles: t1.wrapping_sub(t0),
    }
}

/// What the several-CPU scenarios share while they run, and what they leave for
/// [`SmpResults`].
struct SmpRun {
    /// Application processors the races use (1 to 3).
    aps: usize,
    /// `revoke_key`'s cycles per number of busy CPUs.
    revoke_cycles: Vec<(usize, u64)>,
    /// The decision-cost measurement under contention.
    decide: Option<[u64; 4]>,
}

/// One row of the several-CPU table and how to get its `got` column: adding a scenario is
/// adding one of these to [`SMP_SCENARIOS`]. `run` returns `None` when the machine has too
/// few CPUs for the scenario; its row is then left out.
struct SmpScenario {
    /// What the scenario does.
    name: &'static str,
    /// What must happen.
    expected: &'static str,
    /// Runs it.
    run: fn(&mut SmpRun) -> Option<Race>,
}

/// A row of [`SMP_SCENARIOS`].
const fn scenario(
    name: &'static str,
    expected: &'static str,
    run: fn(&mut SmpRun) -> Option<Race>,
) -> SmpScenario {
    SmpScenario {
        name,
        expected,
        run,
    }
}

/// The kernel's action in the `revoke_key` races: revoke [`KEY_SMP`]`[i]`.
fn revoke(i: usize) -> impl FnOnce() -> Result<(), String> {
    move || -> Result<(), String> {
        crate::objects::revoke_key(KEY_SMP[i]);
        Ok(())
    }
}

/// A task under malformed context `ctx` faulted on an application processor (the `i`th of
/// these scenarios runs on CPU `1 + i % aps`): the engine must deny it.
fn malformed_on_ap(s: &SmpRun, i: usize, ctx: ObjID) -> Race {
    let cpu = 1 + i % s.aps;
    let report = smp::run_on(cpu, move || {
        let start = Start {
            probe: Probe::Read,
            addr: 0,
            value: 0,
            addr2: 0,
            arg: 0,
        };
        task::run(&SecCtxMgr::new(ctx), PROGRAM, start, |_| {})
    })
    .and_then(|p| p.wait(TASK_TIMEOUT_NS));
    match report.map(|r| r.outcome) {
        Some(Outcome::Denied {
            why: Denial::Engine(v),
            ..
        }) => Race {
            got: format!("denied on CPU {cpu}"),
            ok: true,
            reason: Some(format!("{v}")),
            cycles: 0,
        },
        Some(other) => failed(format!("CPU {cpu}: {other}")),
        None => failed(format!("CPU {cpu}: no report")),
    }
}

/// Every several-CPU scenario, in the order they run and are printed.
static SMP_SCENARIOS: &[SmpScenario] = &[
    // revoke_key with 1, 2 and 4 CPUs busy (the last is the race that matters).
    scenario("revoke_key, 1 CPU (latency base)", "unmapped", |s| {
        let r = race(SMP_KEYED[0], CTX_SMP, 0, false, revoke(0));
        s.revoke_cycles.push((1, r.cycles));
        Some(r)
    }),
    scenario("revoke_key vs 1 AP task", "no access after return", |s| {
        let r = race(SMP_KEYED[1], CTX_SMP, 1, false, revoke(1));
        s.revoke_cycles.push((2, r.cycles));
        Some(r)
    }),
    scenario("revoke_key vs 3 AP tasks", "no access after return", |s| {
        if s.aps < 3 {
            return None;
        }
        let r = race(SMP_KEYED[2], CTX_SMP, 3, false, revoke(2));
        s.revoke_cycles.push((4, r.cycles));
        Some(r)
    }),
    scenario("revoke_record vs AP tasks", "no access after return", |s| {
        Some(race(SMP_RECORD, CTX_SMP, s.aps, false, || {
            let id = SMP_RECORD_ID.get().ok_or("no record id")?;
            crate::objects::revoke_record(*id);
            Ok(())
        }))
    }),
    scenario(
        "ctx edit + invalidate_ctx vs AP tasks",
        "no access after return",
        |s| {
            Some(race(
                SMP_EDIT,
                CTX_SMP_EDIT,
                s.aps,
                false,
                edit_and_invalidate,
            ))
        },
    ),
    // Malformed contexts faulted on the application processors, one task at a time.
    scenario("truncated ctx, task on an AP", "denied (malformed)", |s| {
        Some(malformed_on_ap(s, 0, CTX_TRUNCATED))
    }),
    scenario(
        "random-bytes ctx, task on an AP",
        "denied (malformed)",
        |s| Some(malformed_on_ap(s, 1, CTX_JUNK)),
    ),
    scenario("missing ctx, task on an AP", "denied (malformed)", |s| {
        Some(malformed_on_ap(s, 2, CTX_MISSING))
    }),
    scenario(
        "64 objects x 4 CPUs, cache full",
        "reads right; evicted; all unmapped",
        |s| Some(cache_pressure(s.aps)),
    ),
    scenario(
        "switch_context vs detach on an AP",
        "no access while detached",
        |_| Some(switch_vs_detach()),
    ),
    scenario(
        "ctx write vs a miss under it on CPU 1",
        "no grant from before the write",
        |_| Some(write_window_vs_miss()),
    ),
    // Last: it moves the engine's clock forward by hours.
    scenario(
        "expiry from the timer vs AP tasks",
        "no access after expire()",
        |s| {
            // The decision-cost measurement (no row of its own) runs here, before the clock
            // moves, as it always has.
            s.decide = Some(contention(s.aps));
            Some(race(SMP_EXPIRING, CTX_SMP, s.aps, true, || {
                let now = clock::monotonic_ns();
                ENGINE.set_wall_clock_offset(SMP_EXPIRY_NS - now - 100_000_000);
                Ok(())
            }))
        },
    ),
];

/// Runs the several-CPU scenarios of [`SMP_SCENARIOS`], in order; `None` with one CPU
/// online.
pub fn run_all() -> Option<SmpResults> {
    let online = smp::online();
    if online < 2 {
        return None;
    }
    let mut run = SmpRun {
        aps: (online - 1).min(3),
        revoke_cycles: Vec::new(),
        decide: None,
    };
    let mut rows = Vec::new();
    for s in SMP_SCENARIOS {
        if let Some(r) = (s.run)(&mut run) {
            rows.push(Row {
                name: s.name,
                expected: s.expected,
                got: r.got,
                ok: r.ok,
                reason: r.reason,
            });
        }
    }
    Some(SmpResults {
        rows,
        revoke_cycles: run.revoke_cycles,
        decide: run.decide,
    })
}

/// The kernel's edit of [`CTX_SMP_EDIT`]: zero the entry count (header byte 20) and bump
/// the generation (byte 8), as the self-editing scenario's task does, then
/// `invalidate_ctx`.
fn edit_and_invalidate() -> Result<(), String> {
    let ctx = table()
        .and_then(|t| t.get(CTX_SMP_EDIT))
        .and_then(|o| o.as_context())
        .ok_or("no context object")?;
    let lo = ctx.read_u32(8).ok_or("short context")?;
    let hi = ctx.read_u32(12).ok_or("short context")?;
    let generation = (u64::from(hi) << 32 | u64::from(lo)).wrapping_add(1);
    if !ctx.kernel_write(20, &[0; 4]) || !ctx.kernel_write(8, &generation.to_le_bytes()) {
        return Err("the edit does not fit the context".into());
    }
    ENGINE.invalidate_ctx(CTX_SMP_EDIT);
    Ok(())
}

/// A thread writes its context ([`CTX_WRITTEN`], which grants it `rw-` on itself) while a
/// thread under the same context on CPU 1 reads [`WRITTEN_DATA`] for the first time, inside
/// the write's window: after the write fault's `invalidate_ctx`, before the context page is
/// writable. The write then empties the context's entry table (the entry count, header byte
/// 20, as the self-editing task does), stored as the thread stores it: through the page
/// tables. No decision made from the bytes before the write may outlive it: a read of the
/// data afterwards must be denied for want of a record. A host that lets the other CPU read
/// the context inside the window caches a grant from the old bytes, which nothing sweeps once
/// the page is writable (integration guide, section 5).
fn write_window_vs_miss() -> Race {
    /// The reader's fault on CPU 1, started inside the window.
    type ReaderJob = smp::Pending<Result<(), Outcome>>;
    let (Some(ctx_base), Some(data), Some(code)) = (
        task::addr_of(CTX_WRITTEN, PAGE),
        task::addr_of(WRITTEN_DATA, 0x1000),
        task::addr_of(PROGRAM, PAGE),
    ) else {
        return failed(String::from("the scenario's objects are not in the table"));
    };
    let waits_before = crate::objects::window_waits();
    let reader: Arc<spin::Mutex<Option<ReaderJob>>> = Arc::new(spin::Mutex::new(None));
    let slot = Arc::clone(&reader);
    crate::objects::in_next_write_window(Box::new(move || {
        let pending = smp::run_on(1, move || {
            task::fault_as(&SecCtxMgr::new(CTX_WRITTEN), data, AccessKind::Read)
        });
        if let Some(p) = &pending {
            // Until the reader has decided, or is held back by the window.
            while !p.is_done() && crate::objects::window_waits() == waits_before {
                core::hint::spin_loop();
            }
        }
        *slot.lock() = pending;
    }));
    let writer = SecCtxMgr::new(CTX_WRITTEN);
    let count_at = ctx_base + 20;
    let fault = task::fault_from(&writer, count_at, AccessKind::Write, code);
    let pending = reader.lock().take();
    let Some(read) = pending.and_then(|p| p.wait(TASK_TIMEOUT_NS)) else {
        return failed(String::from(
            "the reader on CPU 1 did not run, or did not finish",
        ));
    };
    let held = crate::objects::window_waits() > waits_before;
    let store = task::kernel_access(&writer, count_at, AccessKind::Write, 0);
    let after = ENGINE.decide(
        &SecCtxMgr::new(CTX_WRITTEN),
        &Fault::lazy(WRITTEN_DATA, Protections::empty(), 0x2000, AccessKind::Read),
    );
    let no_record = matches!(
        &after,
        Decision::Violation(Violation::Denied {
            cause: DenyCause::NoRecord,
            ..
        })
    );
    let show = |r: &Result<(), Outcome>| match r {
        Ok(()) => String::from("ok"),
        Err(o) => format!("{o}"),
    };
    let after_text = match &after {
        Decision::Map { prots, .. } => format!("granted {prots}"),
        Decision::Violation(v) => format!("denied ({v})"),
    };
    Race {
        got: format!(
            "write fault {}, reader {} ({}), store {}; then a read: {after_text}",
            show(&fault),
            show(&read),
            if held {
                "held until the write"
            } else {
                "inside the window"
            },
            match &store {
                Ok(_) => String::from("ok"),
                Err(o) => format!("{o}"),
            },
        ),
        ok: fault.is_ok() && read.is_ok() && store.is_ok() && no_record,
        reason: None,
        cycles: 0,
    }
}

/// Set while the application processors decide in a loop.
static CONTEND: AtomicBool = AtomicBool::new(false);

/// Mean cycles of `n` decisions of `fault` by `thread`, each after `prepare()`.
fn mean_decide(thread: &SecCtxMgr, fault: &Fault, n: u64, prepare: impl Fn()) -> u64 {
    let mut total = 0;
    for _ in 0..n {
        prepare();
        let t0 = cpu::rdtsc();
        let _ = ENGINE.decide(thread, fault);
        total += cpu::rdtsc().wrapping_sub(t0);
    }
    total / n
}

/// Decide cycles on this CPU alone, then with `aps` other CPUs deciding cache hits in a
/// loop: (hit alone, hit contended, miss alone, miss contended). A miss here is a decision
/// after `invalidate_ctx` of the deciding context (re-validation and re-evaluation; the
/// signature memo spares the signature check).
fn contention(aps: usize) -> [u64; 4] {
    task::clear_user_space();
    let info = |id| table().and_then(|t| t.get(id)).map(|o| o.info());
    let (Some(data), Some(bench)) = (info(DATA), info(BENCH_ED25519)) else {
        return [0; 4];
    };
    let thread = SecCtxMgr::new(CTX_MAIN);
    let fault = Fault::new(DATA, data, PAGE, AccessKind::Read);
    let hit = |f: &Fault| mean_decide(&thread, f, 200, || {});
    let miss = |f: &Fault| {
        mean_decide(&thread, f, 20, || {
            ENGINE.invalidate_ctx(CTX_MAIN);
        })
    };
    let _ = ENGINE.decide(&thread, &fault);
    let hit_alone = hit(&fault);
    let miss_alone = miss(&fault);

    CONTEND.store(true, Ordering::SeqCst);
    let mut pending = Vec::new();
    for cpu in 1..=aps {
        if let Some(p) = smp::run_on(cpu, move || {
            let t = SecCtxMgr::new(CTX_BENCH[cpu % CTX_BENCH.len()]);
            let f = Fault::new(BENCH_ED25519, bench, PAGE, AccessKind::Read);
            let mut n = 0u64;
            while CONTEND.load(Ordering::Relaxed) {
                let _ = ENGINE.decide(&t, &f);
                n += 1;
            }
            n
        }) {
            pending.push(p);
        }
    }
    clock::delay_ns(20_000_000);
    let hit_contended = hit(&fault);
    let miss_contended = miss(&fault);
    CONTEND.store(false, Ordering::SeqCst);
    for p in pending {
        let _ = p.wait(TASK_TIMEOUT_NS);
    }
    [hit_alone, hit_contended, miss_alone, miss_contended]
}

/// Passes each cache-pressure task makes over the 64 objects (pass `p` reads page
/// `1 + p % 4` of each).
const CACHE_PASSES: u64 = 4;
/// Pages past the null page the cache-pressure tasks read.
const CACHE_PAGES: u64 = 4;
/// Traps a cache-pressure task may take: a checkpoint per read, a fault per object and
/// page, and again for each page an eviction took away meanwhile.
const CACHE_TRAPS: usize = 8192;
/// Filler lookups the boot CPU makes at each of its task's checkpoints (after every read),
/// so the cache keeps evicting while the tasks run.
const CHURN_PER_CHECKPOINT: usize = 4;

/// The other contexts (valid ones, not [`CTX_CACHE`]): their entries for the cache-pressure
/// objects grant nothing, and fill the cache.
fn filler_contexts() -> Vec<ObjID> {
    let Some(t) = table() else { return Vec::new() };
    (FIRST_CTX_SLOT..FIRST_SMP_SLOT)
        .filter_map(|slot| t.in_slot(slot))
        .filter(|o| o.as_context().is_some())
        .map(|o| o.id)
        .filter(|&c| c != CTX_CACHE && c != CTX_TRUNCATED && c != CTX_JUNK)
        .collect()
}

/// Looks filler pair `n` up (context `n / 64` of `fillers`, object `n % 64`): a miss
/// inserts an entry, which evicts another once the cache is full.
fn filler_lookup(fillers: &[ObjID], n: usize) {
    let Some(&ctx) = fillers.get(n / CACHE_OBJECTS as usize % fillers.len().max(1)) else {
        return;
    };
    if let Some(o) = table().and_then(|t| t.get(cache_obj(n as u64 % CACHE_OBJECTS))) {
        let _ = ENGINE.lookup(ctx, o.id, &o.info());
    }
}

/// Fills the verification cache with filler entries until every way of every set is taken;
/// returns how many entries it holds and the next filler pair.
fn fill_cache(fillers: &[ObjID]) -> (usize, usize) {
    let total = fillers.len() * CACHE_OBJECTS as usize;
    let mut n = 0;
    while n < total && ENGINE.cached() < SETS * WAYS {
        for _ in 0..CACHE_OBJECTS {
            filler_lookup(fillers, n);
            n += 1;
        }
    }
    (ENGINE.cached(), n)
}

/// Pages `1 ..= CACHE_PAGES` of the 64 cache-pressure objects that are mapped.
fn cache_pages_mapped() -> usize {
    (0..CACHE_OBJECTS)
        .filter_map(|i| table()?.get(cache_obj(i))?.base())
        .flat_map(|base| (1..=CACHE_PAGES).map(move |p| base + p * PAGE))
        .filter(|&a| mapped_prots(a).is_some())
        .count()
}

/// Tasks on every CPU (the `aps` application processors and this one) read 64 objects, each
/// under its own capability in [`CTX_CACHE`], at once, with the verification cache full:
/// every miss evicts another entry and unmaps its pages on every CPU. At each of its task's
/// checkpoints (after every read) this CPU looks up more filler pairs, so entries of
/// [`CTX_CACHE`] keep being evicted (and their pages unmapped) while the tasks fault them
/// back in. Every read must return the object's own word; evictions must have happened;
/// after the tasks end, one `revoke_key` of the key all 64 share must leave no page of any
/// of them mapped.
fn cache_pressure(aps: usize) -> Race {
    let Some(first) = table()
        .and_then(|t| t.get(cache_obj(0)))
        .and_then(|o| o.base())
    else {
        return failed("no cache-pressure objects".into());
    };
    task::clear_user_space();
    let fillers = filler_contexts();
    let (cached, mut next_filler) = fill_cache(&fillers);
    let evictions_before = ENGINE.stats().evictions;
    let (stale_before, _) = task::ticket_counts();
    let start = Start {
        probe: Probe::MultiRead,
        addr: first,
        value: CACHE_PASSES as u8,
        addr2: cache_word(0),
        arg: CACHE_OBJECTS,
    };
    let run = move |checkpoint: &mut dyn FnMut(u64)| {
        task::run_shared_with_traps(
            &SecCtxMgr::new(CTX_CACHE),
            PROGRAM,
            start,
            CACHE_TRAPS,
            checkpoint,
        )
    };
    let mut pending = Vec::new();
    for cpu in 1..=aps {
        match smp::run_on(cpu, move || run(&mut |_| {})) {
            Some(p) => pending.push(p),
            None => return failed(format!("CPU {cpu} is not idle")),
        }
    }
    let mine = run(&mut |_| {
        for _ in 0..CHURN_PER_CHECKPOINT {
            filler_lookup(&fillers, next_filler);
            next_filler += 1;
        }
    });
    let mut reports = alloc::vec![Some(mine)];
    reports.extend(pending.into_iter().map(|p| p.wait(TASK_TIMEOUT_NS)));
    let evictions = ENGINE.stats().evictions.wrapping_sub(evictions_before);
    let (stale_after, _) = task::ticket_counts();

    let mut ok = true;
    let mut problems = Vec::new();
    let mut reads = 0;
    let mut wrong = 0;
    let mut faults = 0;
    for (cpu, r) in reports.iter().enumerate() {
        let Some(r) = r else {
            ok = false;
            problems.push(format!("CPU {cpu} did not finish"));
            continue;
        };
        reads += r.regs.r12;
        wrong += r.regs.r13;
        faults += r.faults.len();
        if !matches!(r.outcome, Outcome::Exited(0)) || r.regs.r12 != CACHE_OBJECTS * CACHE_PASSES {
            ok = false;
            problems.push(format!(
                "CPU {cpu}: {} after {} reads",
                r.outcome, r.regs.r12
            ));
        }
    }
    let mapped_before = cache_pages_mapped();
    crate::objects::revoke_key(KEY_CACHE);
    let mapped_after = cache_pages_mapped();
    ok &= wrong == 0
        && cached == SETS * WAYS
        && evictions > CACHE_OBJECTS
        && mapped_before > 0
        && mapped_after == 0;
    let mut got = format!(
        "{} tasks, {reads} reads ({wrong} wrong), {faults} faults; cache {cached}/{} full \
         before; {evictions} evictions, {} stale tickets; {mapped_before} pages mapped \
         before revoke_key, {mapped_after} after",
        reports.len(),
        SETS * WAYS,
        stale_after.wrapping_sub(stale_before),
    );
    if !problems.is_empty() {
        got = format!("{got}; {}", problems.join("; "));
    }
    Race {
        got,
        ok,
        reason: None,
        cycles: 0,
    }
}

/// Tasks run one after another by the switch-vs-detach race.
const SWITCH_ROUNDS: usize = 16;
/// Detaches (each followed by a re-attach, but the last) per task, at most.
const SWITCH_CYCLES: usize = 32;
/// How long the boot CPU keeps B detached, watching the task's counter.
const DETACHED_HOLD_NS: u64 = 100_000;
/// Traps a switch-vs-detach task may take: its faults again after every detach it survives.
const SWITCH_TRAPS: usize = 8 * SWITCH_CYCLES + 16;

/// Takes context B away from `mgr` as a thread's detach would: switches the thread back to A
/// if it switched to B (a detach needs B inactive), then detaches B through the kernel
/// ([`task::detach`], which unmaps the pages mapped under B). The task on the other CPU may
/// switch to B again in between: then it tries again.
fn take_b_away(mgr: &SecCtxMgr) -> Result<usize, String> {
    for _ in 0..10_000 {
        if mgr.active_id() == CTX_SWITCH_B {
            let _ = mgr.switch_context(CTX_SWITCH_A);
        }
        match task::detach(mgr, CTX_SWITCH_B) {
            Ok(unmapped) => return Ok(unmapped),
            Err(DetachError::Active(_)) => continue,
            Err(e) => return Err(format!("detach: {e:?}")),
        }
    }
    Err("B stayed active".into())
}

/// A task on CPU 1 whose active context A has no grant on [`SWITCH_DATA`] and whose inactive
/// context B has one runs [`Probe::SeqLoop`] on it: its first fault on the object is decided
/// with `switch_to: Some(B)` and the kernel switches the thread to B. Meanwhile this CPU
/// keeps detaching B (switching the thread back to A first when it is on B) and attaching it
/// again, at varying moments. After each detach returned, the object's access counter must
/// not move while B stays detached, and no page of the object may be mapped; the thread must
/// only ever be on A or B, and on A once B is detached for good (which ends each task: its
/// next fault is denied).
fn switch_vs_detach() -> Race {
    let Some(o) = table().and_then(|t| t.get(SWITCH_DATA)) else {
        return failed(format!("no object {SWITCH_DATA}"));
    };
    let (Some(base), Some(counter_frame)) = (o.base(), o.frame_at(PAGE)) else {
        return failed(format!("object {SWITCH_DATA} has no slot or pages"));
    };
    let counter: &'static AtomicU64 = counter_frame.atomic_u64(0);
    let pages = [base + PAGE, base + 2 * PAGE];
    let mapped = || pages.iter().filter(|&&a| mapped_prots(a).is_some()).count();
    let start = Start {
        probe: Probe::SeqLoop,
        addr: base + PAGE,
        value: MARKER,
        addr2: base + 2 * PAGE,
        arg: 8,
    };
    let refused_before = task::not_active_at_map();
    let mut ok = true;
    let mut problems: Vec<String> = Vec::new();
    let (mut detaches, mut accesses, mut while_detached, mut leaked) = (0u64, 0u64, 0u64, 0usize);
    let (mut switched, mut direct, mut not_attached, mut foreign) =
        (0usize, 0usize, 0usize, 0usize);
    let mut reason = None;
    for round in 0..SWITCH_ROUNDS {
        task::clear_user_space();
        counter.store(0, Ordering::SeqCst);
        counter_frame.atomic_u64(8).store(0, Ordering::SeqCst);
        let mgr = Arc::new(SecCtxMgr::new(CTX_SWITCH_A));
        if let Err(e) = mgr.attach(CTX_SWITCH_B) {
            return failed(format!("attach: {e:?}"));
        }
        let m = Arc::clone(&mgr);
        let Some(pending) = smp::run_on(1, move || {
            task::run_shared_with_traps(&m, PROGRAM, start, SWITCH_TRAPS, |_| {})
        }) else {
            return failed("CPU 1 is not idle".into());
        };
        for cycle in 0..SWITCH_CYCLES {
            // B attached for 0 to 1.9 ms, varying, so the detaches land at every point of
            // the task's decide / switch / install.
            let n = round * SWITCH_CYCLES + cycle;
            clock::delay_ns((n * 7_919 % 97) as u64 * 20_000);
            let active = mgr.active_id();
            if active != CTX_SWITCH_A && active != CTX_SWITCH_B {
                foreign += 1;
            }
            if let Err(e) = take_b_away(&mgr) {
                ok = false;
                problems.push(e);
                break;
            }
            detaches += 1;
            let c1 = counter.load(Ordering::SeqCst);
            leaked += mapped();
            clock::delay_ns(DETACHED_HOLD_NS);
            let c2 = counter.load(Ordering::SeqCst);
            leaked += mapped();
            while_detached += c2.wrapping_sub(c1);
            if pending.is_done() || cycle + 1 == SWITCH_CYCLES {
                // B stays detached: the task's next fault is denied, which ends it.
                break;
            }
            if let Err(e) = mgr.attach(CTX_SWITCH_B) {
                ok = false;
                problems.push(format!("attach: {e:?}"));
                break;
            }
        }
        let Some(report) = pending.wait(TASK_TIMEOUT_NS) else {
            ok = false;
            problems.push(format!("round {round}: the task did not finish"));
            continue;
        };
        accesses += report.regs.r12;
        if let Err(other) = note_engine_denial(&report.outcome, &mut reason) {
            ok = false;
            problems.push(format!("round {round}: {other}"));
        }
        let on_data: Vec<_> = report.faults_on(SWITCH_DATA).collect();
        let last = on_data.len().saturating_sub(1);
        for (i, f) in on_data.iter().enumerate() {
            match (f.switched_to, f.mapped) {
                (Some(c), Some(_)) if c == CTX_SWITCH_B => switched += 1,
                (Some(_), _) => {}
                (None, Some(_)) => direct += 1,
                // A decision that mapped nothing without switching: `NotAttached` (B was
                // detached between the decision and the switch), or the final denial.
                (None, None) if i != last => not_attached += 1,
                (None, None) => {}
            }
        }
        let (active, inactive) = (mgr.active_id(), mgr.inactive_count());
        if active != CTX_SWITCH_A || inactive != 0 {
            ok = false;
            problems.push(format!(
                "round {round}: active {active}, {inactive} inactive at the end"
            ));
        }
    }
    let refused = task::not_active_at_map().wrapping_sub(refused_before);
    ok &= while_detached == 0 && leaked == 0 && foreign == 0 && switched > 0;
    let mut got = format!(
        "{SWITCH_ROUNDS} tasks, {detaches} detaches, {switched} switches to B (+{direct} \
         faults on B), {not_attached} NotAttached, {refused} installs refused; {accesses} \
         accesses, {while_detached} while detached; {leaked} pages left mapped after a \
         detach; {foreign} foreign active contexts"
    );
    if !problems.is_empty() {
        got = format!("{got}; {}", problems.join("; "));
    }
    Race {
        got,
        ok,
        reason,
        cycles: 0,
    }
}

/// For a task that must end denied by the engine: keeps the engine's reason for the first
/// such denial in `reason`; any other outcome is returned, to be reported.
fn note_engine_denial<'a>(
    outcome: &'a Outcome,
    reason: &mut Option<String>,
) -> Result<(), &'a Outcome> {
    match outcome {
        Outcome::Denied {
            why: Denial::Engine(v),
            ..
        } => {
            if reason.is_none() {
                *reason = Some(format!("{v}"));
            }
            Ok(())
        }
        other => Err(other),
    }
}
