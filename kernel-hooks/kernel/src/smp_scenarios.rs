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
//! Tasks that run at the same time share the one address space, so they run under one
//! context (the kernel tags each page with the context that granted it, but a task of another
//! context would use a page another task faulted in).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel_hooks::{Fault, SecCtxMgr};
use twizzler_capsec::{AccessKind, ObjID};

use crate::objects::{ENGINE, table};
use crate::paging::PAGE;
use crate::scenarios::Row;
use crate::task::{self, Denial, Outcome, Report, Start, mapped_prots};
use crate::user::Probe;
use crate::world::{SMP_EXPIRY_NS, SMP_RECORD_ID, fill_byte, ids::*};
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
        match &r.outcome {
            Outcome::Denied {
                why: Denial::Engine(v),
                ..
            } => {
                if reason.is_none() {
                    reason = Some(format!("{v}"));
                }
            }
            other => {
                ok = false;
                lasts.push(format!("CPU {}: {other}", i + 1));
            }
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

/// Runs the several-CPU scenarios; `None` with one CPU online.
pub fn run_all() -> Option<SmpResults> {
    let online = smp::online();
    if online < 2 {
        return None;
    }
    let aps = (online - 1).min(3);
    let mut rows = Vec::new();
    let mut push = |name: &'static str, expected: &'static str, r: &Race| {
        rows.push(Row {
            name,
            expected,
            got: r.got.clone(),
            ok: r.ok,
            reason: r.reason.clone(),
        });
    };
    let revoke = |i: usize| {
        move || {
            ENGINE
                .revoke_key(KEY_SMP[i])
                .map(|_| ())
                .map_err(|e| format!("revoke_key: {e:?}"))
        }
    };

    // revoke_key with 1, 2 and 4 CPUs busy (the last is the race that matters).
    let mut revoke_cycles = Vec::new();
    let r = race(SMP_KEYED[0], CTX_SMP, 0, false, revoke(0));
    push("revoke_key, 1 CPU (latency base)", "unmapped", &r);
    revoke_cycles.push((1, r.cycles));
    let r = race(SMP_KEYED[1], CTX_SMP, 1, false, revoke(1));
    push("revoke_key vs 1 AP task", "no access after return", &r);
    revoke_cycles.push((2, r.cycles));
    if aps >= 3 {
        let r = race(SMP_KEYED[2], CTX_SMP, 3, false, revoke(2));
        push("revoke_key vs 3 AP tasks", "no access after return", &r);
        revoke_cycles.push((4, r.cycles));
    }

    let r = race(SMP_RECORD, CTX_SMP, aps, false, || {
        let id = SMP_RECORD_ID.get().ok_or("no record id")?;
        ENGINE
            .revoke_record(*id)
            .map(|_| ())
            .map_err(|e| format!("revoke_record: {e:?}"))
    });
    push("revoke_record vs AP tasks", "no access after return", &r);

    let r = race(SMP_EDIT, CTX_SMP_EDIT, aps, false, edit_and_invalidate);
    push(
        "ctx edit + invalidate_ctx vs AP tasks",
        "no access after return",
        &r,
    );

    // Malformed contexts faulted on the application processors, one task at a time.
    for (i, (ctx, name)) in [
        (CTX_TRUNCATED, "truncated ctx, task on an AP"),
        (CTX_JUNK, "random-bytes ctx, task on an AP"),
        (CTX_MISSING, "missing ctx, task on an AP"),
    ]
    .into_iter()
    .enumerate()
    {
        let cpu = 1 + i % aps;
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
        let r = match report.map(|r| r.outcome) {
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
        };
        push(name, "denied (malformed)", &r);
    }

    let decide = Some(contention(aps));

    // Last: it moves the engine's clock forward by hours.
    let r = race(SMP_EXPIRING, CTX_SMP, aps, true, || {
        let now = clock::monotonic_ns();
        ENGINE.set_wall_clock_offset(SMP_EXPIRY_NS - now - 100_000_000);
        Ok(())
    });
    push(
        "expiry from the timer vs AP tasks",
        "no access after expire()",
        &r,
    );

    Some(SmpResults {
        rows,
        revoke_cycles,
        decide,
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
