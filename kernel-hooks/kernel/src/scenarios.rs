//! The scenarios: each is one or more real ring-3 tasks whose accesses fault into objects and
//! are decided by the engine. Every row compares what happened with what the rule says must
//! happen; the expected column is fixed here, the got column is observed.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use kernel_hooks::{DenyCause, SecCtxMgr, Unmap, Violation};
use twizzler_capsec::{
    AccessKind, Expiry, KeyLookupError, ObjID, Protections, Verdict, VerifyError,
};

use crate::clock;
use crate::objects::{ENGINE, HostCalls, table};
use crate::paging::PAGE;
use crate::task::{self, Denial, FaultRecord, Outcome, Report, Start, addr_of, mapped_prots};
use crate::user::Probe;
use crate::world::{CODE_GATE, LIVE_EXPIRY_NS, fill_byte, ids::*};

/// One row of the table.
pub struct Row {
    /// What the scenario does.
    pub name: &'static str,
    /// What the rule says must happen.
    pub expected: &'static str,
    /// What happened.
    pub got: String,
    /// Whether `got` is `expected`.
    pub ok: bool,
    /// The reason the engine gave, for denials.
    pub reason: Option<String>,
}

/// `rdtsc` cycles of `Engine::decide` for a cache miss and a hit (minimum of several).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cycles {
    /// A miss (the signature is verified).
    pub miss: u64,
    /// A hit (no signature work).
    pub hit: u64,
    /// The host calls of the miss and of the hit measured last.
    pub miss_calls: HostCalls,
    /// See `miss_calls`.
    pub hit_calls: HostCalls,
}

/// What the scenarios produced.
pub struct Results {
    /// The table.
    pub rows: Vec<Row>,
    /// Ed25519 cycles.
    pub ed25519: Cycles,
    /// P-256 cycles.
    pub p256: Cycles,
}

/// A thread whose active context is `active`, with `inactive` attached.
fn thread(active: ObjID, inactive: &[ObjID]) -> SecCtxMgr {
    let t = SecCtxMgr::new(active);
    for c in inactive {
        // Only fails for duplicates or more than MAX_INACTIVE: not the case here. A failure
        // would show up as a mismatching row, never as a panic.
        let _ = t.attach(*c);
    }
    t
}

/// Runs one task touching byte `offset` of `obj`.
fn go(t: &SecCtxMgr, probe: Probe, obj: ObjID, offset: u64, value: u8) -> Report {
    go_with(t, probe, obj, offset, value, |_| {})
}

fn go_with(
    t: &SecCtxMgr,
    probe: Probe,
    obj: ObjID,
    offset: u64,
    value: u8,
    checkpoint: impl FnMut(u64),
) -> Report {
    let addr = addr_of(obj, offset).unwrap_or(0);
    let start = Start {
        probe,
        addr,
        value,
        addr2: 0,
        arg: 0,
    };
    task::run(t, PROGRAM, start, checkpoint)
}

/// The byte a read of `obj` at `offset` must return.
fn expected_byte(obj: ObjID, offset: u64) -> u64 {
    let slot = table()
        .and_then(|t| t.get(obj))
        .and_then(|o| o.slot)
        .unwrap_or(0);
    u64::from(fill_byte(slot, offset / crate::paging::PAGE))
}

/// How a row turned out.
struct Check {
    got: String,
    ok: bool,
    reason: Option<String>,
}

fn describe(o: &Outcome) -> (String, Option<String>) {
    match o {
        Outcome::Exited(v) => (format!("allowed ({v:#04x})"), None),
        Outcome::Denied {
            addr,
            kind,
            present,
            why,
        } => {
            let at = if *present {
                "protection fault"
            } else {
                "fault"
            };
            (
                format!("denied ({kind:?} {at}, {addr:#x})"),
                Some(format!("{why}")),
            )
        }
        other => (format!("{other}"), None),
    }
}

/// The task must exit with `value`.
fn allowed(report: &Report, value: u64) -> Check {
    let (got, reason) = describe(&report.outcome);
    let ok = matches!(report.outcome, Outcome::Exited(v) if v == value);
    Check { got, ok, reason }
}

/// The task must be denied by the engine with a violation `pred` accepts.
fn denied(report: &Report, pred: impl Fn(&Violation) -> bool) -> Check {
    let (got, reason) = describe(&report.outcome);
    let ok = matches!(&report.outcome, Outcome::Denied { why: Denial::Engine(v), .. } if pred(v));
    Check { got, ok, reason }
}

fn record_verdict(v: &Violation, pred: impl Fn(&Verdict) -> bool) -> bool {
    matches!(v, Violation::Denied { cause: DenyCause::Record(verdict), .. } if pred(verdict))
}

fn key_error(v: &Violation, pred: impl Fn(&KeyLookupError) -> bool) -> bool {
    record_verdict(
        v,
        |r| matches!(r, Verdict::Invalid(VerifyError::Key(k)) if pred(k)),
    )
}

/// One row of the table and how to get its `got` column: adding a scenario is adding one of
/// these to [`SCENARIOS`].
struct Scenario {
    /// What the scenario does.
    name: &'static str,
    /// What the rule says must happen.
    expected: &'static str,
    /// Runs it; the cycle scenarios also fill in their [`Measured`] field.
    run: fn(&mut Measured) -> Check,
}

/// The cycle counts the measuring scenarios leave for [`Results`].
#[derive(Default)]
struct Measured {
    ed25519: Cycles,
    p256: Cycles,
}

/// A row of [`SCENARIOS`].
const fn scenario(
    name: &'static str,
    expected: &'static str,
    run: fn(&mut Measured) -> Check,
) -> Scenario {
    Scenario {
        name,
        expected,
        run,
    }
}

/// A thread in [`CTX_MAIN`] alone.
fn main_thread() -> SecCtxMgr {
    thread(CTX_MAIN, &[])
}

fn outside(v: &Violation) -> bool {
    record_verdict(v, |r| *r == Verdict::OutsideGate)
}

fn masked(v: &Violation) -> bool {
    matches!(
        v,
        Violation::Denied {
            cause: DenyCause::Masked { .. },
            ..
        }
    )
}

fn malformed(v: &Violation) -> bool {
    matches!(v, Violation::MalformedContext { .. })
}

/// The code gate's first entry point (entry points every 16 bytes from 0x2000).
const ALIGNED: u64 = CODE_GATE.0 + CODE_GATE.2;

/// Every scenario, in the order they run and are printed. Order matters: the expiry
/// scenario moves the engine's clock forward for every scenario after it.
static SCENARIOS: &[Scenario] = &[
    // Plain reads and writes.
    scenario("read, r-- cap (Ed25519)", "allowed", |_| {
        let r = go(&main_thread(), Probe::Read, DATA, 0x1000, 0);
        allowed(&r, expected_byte(DATA, 0x1000))
    }),
    scenario("read, r-- cap (P-256)", "allowed", |_| {
        let r = go(&main_thread(), Probe::Read, DATA_P256, 0x1000, 0);
        allowed(&r, expected_byte(DATA_P256, 0x1000))
    }),
    scenario("read, no cap, default prots r--", "allowed", |_| {
        let r = go(&thread(CTX_EMPTY, &[]), Probe::Read, PUBLIC, 0x1000, 0);
        allowed(&r, expected_byte(PUBLIC, 0x1000))
    }),
    scenario("read then write, r-- cap", "denied (no w)", |_| {
        let r = go(&main_thread(), Probe::ReadWrite, DATA, 0x1000, 0);
        denied(
            &r,
            |v| matches!(v, Violation::Denied { needed, .. } if needed.contains(Protections::WRITE)),
        )
    }),
    scenario("write, rw- cap", "allowed, byte stored", |_| {
        let r = go(&main_thread(), Probe::Write, WRITABLE, 0x1000, 0x77);
        let mut c = allowed(&r, 0x77);
        c.ok &= written_byte(WRITABLE, 0x1000) == Some(0x77);
        c
    }),
    scenario("read of the null page", "denied (null page)", |_| {
        let r = go(&main_thread(), Probe::Read, DATA, 0x10, 0);
        denied(&r, |v| matches!(v, Violation::NullPage { .. }))
    }),
    // Data gate 0x2800..0x5000.
    scenario("data gate: page inside", "allowed", |_| {
        let r = go(&main_thread(), Probe::Read, GATED, 0x3000, 0);
        allowed(&r, expected_byte(GATED, 0x3000))
    }),
    scenario("data gate: page outside", "denied (outside gate)", |_| {
        let r = go(&main_thread(), Probe::Read, GATED, 0x6000, 0);
        denied(&r, outside)
    }),
    scenario(
        "data gate: page partly inside",
        "denied (outside gate)",
        |_| {
            let r = go(&main_thread(), Probe::Read, GATED, 0x2800, 0);
            denied(&r, outside)
        },
    ),
    // Masks.
    scenario("write, rw- cap, object mask r--", "denied (masked)", |_| {
        let r = go(
            &thread(CTX_OBJ_MASK, &[]),
            Probe::Write,
            WRITABLE,
            0x2000,
            1,
        );
        denied(&r, masked)
    }),
    scenario("write, rw- cap, global mask r-x", "denied (masked)", |_| {
        let r = go(
            &thread(CTX_GLOBAL_MASK, &[]),
            Probe::Write,
            WRITABLE,
            0x2000,
            1,
        );
        denied(&r, masked)
    }),
    // Expiry: allowed before, denied once the clock passes it.
    scenario("read, cap not yet expired", "allowed", |_| {
        let r = go(&main_thread(), Probe::Read, EXPIRING, 0x1000, 0);
        allowed(&r, expected_byte(EXPIRING, 0x1000))
    }),
    scenario("read, clock moved past expiry", "denied (expired)", |_| {
        // Two hours later: the engine's offset moves forward, and `expire()` must follow.
        ENGINE.set_wall_clock_offset(
            ENGINE
                .wall_clock_offset()
                .saturating_add(2 * 3_600 * 1_000_000_000),
        );
        let swept = ENGINE.expire();
        let r = go(&main_thread(), Probe::Read, EXPIRING, 0x1000, 0);
        let mut c = denied(&r, |v| {
            record_verdict(v, |r| {
                matches!(r, Verdict::Invalid(VerifyError::Expired { .. }))
            })
        });
        c.ok &= swept.total() >= 1;
        c.got = format!("{}; expire() dropped {}", c.got, swept.total());
        c
    }),
    // Forged and misplaced records.
    scenario(
        "write, cap edited r-- -> rw-",
        "denied (bad signature)",
        |_| {
            let r = go(
                &thread(CTX_TAMPERED, &[]),
                Probe::Write,
                TAMPERED,
                0x1000,
                1,
            );
            denied(&r, |v| {
                record_verdict(v, |r| {
                    matches!(r, Verdict::Invalid(VerifyError::BadSignature))
                })
            })
        },
    ),
    scenario(
        "read, cap for another context",
        "denied (wrong accessor)",
        |_| {
            let r = go(&thread(CTX_WRONG, &[]), Probe::Read, DATA, 0x1000, 0);
            denied(&r, |v| {
                record_verdict(v, |r| matches!(r, Verdict::WrongHolder(_)))
            })
        },
    ),
    // Delegation.
    scenario("read, delegated r-- from rw- cap", "allowed", |_| {
        let r = go(
            &thread(CTX_RECEIVER, &[]),
            Probe::Read,
            DELEGATED,
            0x1000,
            0,
        );
        allowed(&r, expected_byte(DELEGATED, 0x1000))
    }),
    scenario("write, delegated r-- only", "denied (no w)", |_| {
        let r = go(
            &thread(CTX_RECEIVER, &[]),
            Probe::Write,
            DELEGATED,
            0x1000,
            1,
        );
        denied(&r, |v| matches!(v, Violation::Denied { .. }))
    }),
    // Context switching.
    scenario(
        "read, only an inactive ctx grants",
        "allowed, switched",
        |_| {
            let t = thread(CTX_EMPTY, &[CTX_MAIN]);
            let r = go(&t, Probe::Read, DATA, 0x1000, 0);
            switched(&r, &t, CTX_MAIN, expected_byte(DATA, 0x1000))
        },
    ),
    scenario(
        "same, active ctx UNDETACHABLE",
        "denied (undetachable)",
        |_| {
            let r = go(
                &thread(CTX_LOCKED, &[CTX_MAIN]),
                Probe::Read,
                DATA,
                0x1000,
                0,
            );
            denied(&r, |v| matches!(v, Violation::Undetachable { .. }))
        },
    ),
    // Code entry through a gate.
    scenario("fetch entering gate, aligned", "allowed, switched", |_| {
        let t = thread(CTX_EMPTY, &[CTX_GATE]);
        let r = go(&t, Probe::Exec, CODE, ALIGNED, 0x5a);
        switched(&r, &t, CTX_GATE, 0x5a)
    }),
    scenario("fetch entering gate, misaligned", "denied", |_| {
        let r = go(
            &thread(CTX_EMPTY, &[CTX_GATE]),
            Probe::Exec,
            CODE,
            ALIGNED - 8,
            0x5a,
        );
        denied(&r, |v| matches!(v, Violation::Denied { .. }))
    }),
    scenario("fetch, already in ctx, misaligned", "allowed", |_| {
        let r = go(&thread(CTX_GATE, &[]), Probe::Exec, CODE, ALIGNED - 8, 0x5a);
        allowed(&r, 0x5a)
    }),
    // Malformed and missing contexts, objects without usable keys.
    scenario("active ctx truncated", "denied (malformed)", |_| {
        let r = go(&thread(CTX_TRUNCATED, &[]), Probe::Read, DATA, 0x1000, 0);
        denied(&r, malformed)
    }),
    scenario("active ctx random bytes", "denied (malformed)", |_| {
        let r = go(&thread(CTX_JUNK, &[]), Probe::Read, DATA, 0x1000, 0);
        denied(&r, malformed)
    }),
    scenario("active ctx does not exist", "denied (no ctx)", |_| {
        let r = go(&thread(CTX_MISSING, &[]), Probe::Read, DATA, 0x1000, 0);
        denied(&r, |v| matches!(v, Violation::ContextMissing(_)))
    }),
    scenario("read, object has no kuid", "denied (no kuid)", |_| {
        let r = go(&main_thread(), Probe::Read, NO_KUID, 0x1000, 0);
        denied(&r, |v| {
            key_error(v, |k| matches!(k, KeyLookupError::NoKuid(_)))
        })
    }),
    scenario("read, kuid names no key", "denied (unknown key)", |_| {
        let r = go(&main_thread(), Probe::Read, UNKNOWN_KEY, 0x1000, 0);
        denied(&r, |v| {
            key_error(v, |k| matches!(k, KeyLookupError::UnknownKey(_)))
        })
    }),
    // Revocation of a key tears down a live mapping.
    scenario(
        "revoke key while page is mapped",
        "read, unmapped, denied",
        |_| revocation(),
    ),
    // Grants taken away while a task runs: by the expiry timer, by a context write.
    scenario("expiry while running (timer)", "reads, then denied", |_| {
        expiry_while_running()
    }),
    scenario(
        "task edits its own context",
        "w fault, unmap, denied",
        |_| self_edit(),
    ),
    // The cache.
    scenario("repeated fault", "allowed, cache hit", |_| cache_hit()),
    scenario("cycles: Ed25519 cap", "misses, then hits", |m| {
        let (c, cycles) = measure(BENCH_ED25519);
        m.ed25519 = cycles;
        c
    }),
    scenario("cycles: P-256 cap", "misses, then hits", |m| {
        let (c, cycles) = measure(BENCH_P256);
        m.p256 = cycles;
        c
    }),
];

/// Runs every scenario of [`SCENARIOS`], in order.
pub fn run_all() -> Results {
    let mut measured = Measured::default();
    let rows = SCENARIOS
        .iter()
        .map(|s| {
            let c = (s.run)(&mut measured);
            Row {
                name: s.name,
                expected: s.expected,
                got: c.got,
                ok: c.ok,
                reason: c.reason,
            }
        })
        .collect();
    Results {
        rows,
        ed25519: measured.ed25519,
        p256: measured.p256,
    }
}

/// The byte at `offset` of `obj`'s backing frame.
fn written_byte(obj: ObjID, offset: u64) -> Option<u8> {
    Some(table()?.get(obj)?.frame_at(offset)?.read_byte(offset))
}

/// Allowed with `value`, and the thread's active context is now `to`.
fn switched(report: &Report, t: &SecCtxMgr, to: ObjID, value: u64) -> Check {
    let mut c = allowed(report, value);
    let did = report.faults.iter().any(|f| f.switched_to == Some(to));
    c.ok &= did && t.active_id() == to;
    c.got = format!("{}, active {:#x}", c.got, t.active_id().raw());
    c
}

fn revocation() -> Check {
    let addr = addr_of(REVOCABLE, 0x1000).unwrap_or(0);
    let mut first = None;
    let mut before = None;
    let mut after = None;
    let mut unmapped = 0;
    let r = go_with(
        &thread(CTX_MAIN, &[]),
        Probe::ReadCheckpointRead,
        REVOCABLE,
        0x1000,
        0,
        |v| {
            first = Some(v);
            before = mapped_prots(addr);
            unmapped = crate::objects::revoke_key(KEY_REVOCABLE).total();
            after = mapped_prots(addr);
        },
    );
    let (got, reason) = describe(&r.outcome);
    let refault_not_present = r.faults_on(REVOCABLE).last().is_some_and(|f| !f.present);
    let refault_denied = refault_not_present
        && matches!(
            &r.outcome,
            Outcome::Denied { present: false, why: Denial::Engine(v), .. }
                if key_error(v, |k| matches!(k, KeyLookupError::KeyRevoked(_)))
        );
    let ok = first == Some(expected_byte(REVOCABLE, 0x1000))
        && before == Some(Protections::READ)
        && unmapped >= 1
        && after.is_none()
        && refault_denied;
    let show = |p: Option<Protections>| p.map_or(String::from("none"), |p| format!("{p}"));
    Check {
        got: format!(
            "read {:#04x}, pte {} -> {}, refault {got}",
            first.unwrap_or(0),
            show(before),
            show(after)
        ),
        ok,
        reason,
    }
}

fn cache_hit() -> Check {
    let value = expected_byte(DATA, 0x2000);
    let _ = go(&thread(CTX_MAIN, &[]), Probe::Read, DATA, 0x2000, 0);
    let r = go(&thread(CTX_MAIN, &[]), Probe::Read, DATA, 0x2000, 0);
    let mut c = allowed(&r, value);
    let f = r.faults_on(DATA).next();
    let hit = f.is_some_and(|f| f.was_hit());
    let no_call = f.is_some_and(no_host_call);
    c.ok &= hit && no_call;
    c.got = format!(
        "{}, {}, host calls: {}",
        c.got,
        if hit { "hit" } else { "not a hit" },
        f.map_or(String::from("-"), |f| show_calls(&f.host))
    );
    c
}

/// Whether a decision called nothing in the host, the clock neither (a hit on a grant that
/// never expires: the engine reads the clock only when an answer depends on it).
fn no_host_call(f: &FaultRecord) -> bool {
    f.host.besides_clock() == 0 && f.host.clock == 0
}

/// Host calls, briefly.
pub fn show_calls(c: &HostCalls) -> String {
    format!(
        "clock {}, with_ctx {}, with_key {}, object {}, unmap {}",
        c.clock, c.with_ctx, c.with_key, c.object, c.unmap
    )
}

/// Hits measured per scheme (the minimum is reported).
const HIT_RUNS: usize = 5;

/// Reads of `obj` (never touched before) from each bench context: each context's first
/// decision must miss and verify the signature; then repeated reads from the last context
/// must hit. Reports the minimum cycles of each, the least disturbed by the emulator's JIT
/// and the host.
fn measure(obj: ObjID) -> (Check, Cycles) {
    let value = expected_byte(obj, 0x1000);
    let mut ok = true;
    let mut cycles = Cycles {
        miss: u64::MAX,
        hit: u64::MAX,
        ..Cycles::default()
    };
    let mut last = CTX_MAIN;
    for ctx in CTX_BENCH {
        let r = go(&thread(ctx, &[]), Probe::Read, obj, 0x1000, 0);
        let f = r.faults_on(obj).next();
        ok &= allowed(&r, value).ok && f.is_some_and(|f| f.was_miss());
        if let Some(f) = f {
            cycles.miss = cycles.miss.min(f.cycles);
            cycles.miss_calls = f.host;
        }
        last = ctx;
    }
    // Every hit must call nothing in the host (their capabilities never expire: no clock).
    for _ in 0..HIT_RUNS {
        let r = go(&thread(last, &[]), Probe::Read, obj, 0x1000, 0);
        let f = r.faults_on(obj).next();
        ok &= allowed(&r, value).ok && f.is_some_and(|f| f.was_hit() && no_host_call(f));
        if let Some(f) = f {
            cycles.hit = cycles.hit.min(f.cycles);
            cycles.hit_calls = f.host;
        }
    }
    let check = Check {
        got: format!(
            "{} misses, {HIT_RUNS} hits (host: no call)",
            CTX_BENCH.len()
        ),
        ok,
        reason: None,
    };
    (check, cycles)
}

/// How long before its capability expires the looping task starts (monotonic time): long
/// enough for its first fault (a miss that verifies an Ed25519 signature under TCG).
const LIVE_LEAD_NS: u64 = 200_000_000;

/// A task reads a page in a loop; its capability expires [`LIVE_LEAD_NS`] after it starts.
/// Nothing but the timer interrupt may take the page away: the scenario sets the engine's
/// clock and starts the task, and does not call `expire()` again.
fn expiry_while_running() -> Check {
    let addr = addr_of(EXPIRING_LIVE, 0x1000).unwrap_or(0);
    // Engine time := the expiry minus the lead. The offset moves forward, so `expire()`
    // follows, as the API requires; the page is not mapped yet, so it cannot unmap it.
    let offset = LIVE_EXPIRY_NS
        .saturating_sub(LIVE_LEAD_NS)
        .saturating_sub(clock::monotonic_ns());
    ENGINE.set_wall_clock_offset(offset);
    let before = ENGINE.expire();
    let started = clock::monotonic_ns();
    let expires_at = LIVE_EXPIRY_NS.saturating_sub(offset);
    let r = go(
        &thread(CTX_MAIN, &[]),
        Probe::ReadLoop,
        EXPIRING_LIVE,
        0x1000,
        0,
    );
    let ended = clock::monotonic_ns();
    let ms = |t: u64| t.saturating_sub(started) / 1_000_000;

    let unmaps_page =
        |u: &Unmap| matches!(u, Unmap::Object { target, .. } if *target == EXPIRING_LIVE);
    let by_timer = r
        .timer
        .expiries
        .iter()
        .filter(|inv| inv.unmapped().iter().any(unmaps_page))
        .count();
    let on_page: Vec<&FaultRecord> = r.faults_on(EXPIRING_LIVE).collect();
    let mapped_until = on_page
        .first()
        .and_then(|f| (f.mapped == Some(Protections::READ) && !f.present).then_some(f.valid_until));
    let reads = r.regs.rbx;
    let last_byte = r.regs.rsi;
    let expired = |v: &Violation| {
        record_verdict(v, |r| {
            matches!(r, Verdict::Invalid(VerifyError::Expired { .. }))
        })
    };
    let denied_at_page = matches!(
        &r.outcome,
        Outcome::Denied { addr: a, present: false, why: Denial::Engine(v), .. }
            if *a == addr && expired(v)
    );
    let (got, reason) = describe(&r.outcome);
    let ok = mapped_until == Some(Some(Expiry::from_raw(LIVE_EXPIRY_NS)))
        && on_page.len() == 2
        && reads > 0
        && last_byte == expected_byte(EXPIRING_LIVE, 0x1000)
        && !before.unmapped().iter().any(unmaps_page)
        && by_timer == 1
        && denied_at_page;
    Check {
        got: format!(
            "{reads} reads of {last_byte:#04x}, cap expired at {} ms, timer irq unmapped it \
             ({}/{} irqs); refault {got} at {} ms",
            ms(expires_at),
            by_timer,
            r.timer.interrupts,
            ms(ended),
        ),
        ok,
        reason,
    }
}

/// A task reads `EDITED` (granted by a capability in its context), reads its context's header
/// (mapped read-only), then writes the header to empty the entry table: a protection fault,
/// which the engine allows (the context grants rw- on itself), so the kernel invalidates the
/// context (unmapping `EDITED`) and maps the page writable. Its next read of `EDITED` faults,
/// the engine reads the edited context (re-protected first) and finds no record.
fn self_edit() -> Check {
    let data = addr_of(EDITED, 0x1000).unwrap_or(0);
    let ctx_base = addr_of(CTX_SELF, PAGE).unwrap_or(0);
    let (mut first, mut data_pte, mut ctx_pte) = (None, None, None);
    let start = Start {
        probe: Probe::ReadEditCtxRead,
        addr: data,
        value: 0,
        addr2: ctx_base,
        arg: 0,
    };
    let r = task::run(&thread(CTX_SELF, &[]), PROGRAM, start, |v| {
        first = Some(v);
        data_pte = mapped_prots(data);
        ctx_pte = mapped_prots(ctx_base);
    });
    let ctx_pte_after = mapped_prots(ctx_base);
    let dirty_after = task::ctx_dirty(CTX_SELF);
    let entries_after = table()
        .and_then(|t| t.get(CTX_SELF))
        .and_then(|o| o.as_context())
        .and_then(|c| c.read_u32(20));

    // Exactly one write fault invalidated the context: the write went through at once (the
    // kernel re-faulted the instruction's page before making the context writable).
    let invalidations = r
        .faults_on(CTX_SELF)
        .filter(|f| f.invalidated.is_some())
        .count();
    let write_fault = r
        .faults_on(CTX_SELF)
        .find(|f| f.fault.kind == AccessKind::Write && f.invalidated.is_some());
    let unmapped = write_fault.and_then(|f| f.invalidated).unwrap_or(0);
    let rw = Protections::READ | Protections::WRITE;
    let made_writable = r.faults_on(CTX_SELF).any(|f| f.mapped == Some(rw));
    let no_record = |v: &Violation| {
        matches!(
            v,
            Violation::Denied {
                cause: DenyCause::NoRecord,
                ..
            }
        )
    };
    let denied_at_data = matches!(
        &r.outcome,
        Outcome::Denied { addr: a, present: false, why: Denial::Engine(v), .. }
            if *a == data && no_record(v)
    );
    let (got, reason) = describe(&r.outcome);
    let ok = first == Some(expected_byte(EDITED, 0x1000))
        && data_pte == Some(Protections::READ)
        && ctx_pte == Some(Protections::READ)
        && invalidations == 1
        && write_fault.is_some_and(|f| f.present)
        && unmapped >= 1
        && made_writable
        && entries_after == Some(0)
        && denied_at_data
        && ctx_pte_after == Some(Protections::READ)
        && dirty_after == Some(false);
    let show = |p: Option<Protections>| p.map_or(String::from("none"), |p| format!("{p}"));
    Check {
        got: format!(
            "read {:#04x}, ctx pte {} -> w fault, {unmapped} unmaps, entries {}; refault {got}; \
             ctx pte {}",
            first.unwrap_or(0),
            show(ctx_pte),
            entries_after.map_or(String::from("?"), |n| format!("{n}")),
            show(ctx_pte_after),
        ),
        ok,
        reason,
    }
}
