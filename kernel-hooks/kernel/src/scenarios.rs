//! The scenarios: each is one or more real ring-3 tasks whose accesses fault into objects and
//! are decided by the engine. Every row compares what happened with what the rule says must
//! happen; the expected column is fixed here, the got column is observed.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use kernel_hooks::{DenyCause, SecCtxMgr, Violation};
use twizzler_security::{KeyLookupError, ObjID, Protections, Verdict, VerifyError};

use crate::clock;
use crate::objects::{ENGINE, table};
use crate::task::{self, Denial, Outcome, Report, Start, addr_of, mapped_prots};
use crate::user::Probe;
use crate::world::{CODE_GATE, fill_byte, ids::*};

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
    task::run(t, PROGRAM, Start { probe, addr, value }, checkpoint)
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

/// Runs every scenario.
pub fn run_all() -> Results {
    let mut rows = Vec::new();
    let mut row = |name, expected, c: Check| {
        rows.push(Row {
            name,
            expected,
            got: c.got,
            ok: c.ok,
            reason: c.reason,
        })
    };
    let main = || thread(CTX_MAIN, &[]);

    // Plain reads and writes.
    let r = go(&main(), Probe::Read, DATA, 0x1000, 0);
    row(
        "read, r-- cap (Ed25519)",
        "allowed",
        allowed(&r, expected_byte(DATA, 0x1000)),
    );
    let r = go(&main(), Probe::Read, DATA_P256, 0x1000, 0);
    row(
        "read, r-- cap (P-256)",
        "allowed",
        allowed(&r, expected_byte(DATA_P256, 0x1000)),
    );
    let r = go(&thread(CTX_EMPTY, &[]), Probe::Read, PUBLIC, 0x1000, 0);
    row(
        "read, no cap, default prots r--",
        "allowed",
        allowed(&r, expected_byte(PUBLIC, 0x1000)),
    );
    let r = go(&main(), Probe::ReadWrite, DATA, 0x1000, 0);
    row(
        "read then write, r-- cap",
        "denied (no w)",
        denied(
            &r,
            |v| matches!(v, Violation::Denied { needed, .. } if needed.contains(Protections::WRITE)),
        ),
    );
    let r = go(&main(), Probe::Write, WRITABLE, 0x1000, 0x77);
    let mut c = allowed(&r, 0x77);
    c.ok &= written_byte(WRITABLE, 0x1000) == Some(0x77);
    row("write, rw- cap", "allowed, byte stored", c);
    let r = go(&main(), Probe::Read, DATA, 0x10, 0);
    row(
        "read of the null page",
        "denied (null page)",
        denied(&r, |v| matches!(v, Violation::NullPage { .. })),
    );

    // Data gate 0x2800..0x5000.
    let r = go(&main(), Probe::Read, GATED, 0x3000, 0);
    row(
        "data gate: page inside",
        "allowed",
        allowed(&r, expected_byte(GATED, 0x3000)),
    );
    let r = go(&main(), Probe::Read, GATED, 0x6000, 0);
    let outside = |v: &Violation| record_verdict(v, |r| *r == Verdict::OutsideGate);
    row(
        "data gate: page outside",
        "denied (outside gate)",
        denied(&r, outside),
    );
    let r = go(&main(), Probe::Read, GATED, 0x2800, 0);
    row(
        "data gate: page partly inside",
        "denied (outside gate)",
        denied(&r, outside),
    );

    // Masks.
    let masked = |v: &Violation| {
        matches!(
            v,
            Violation::Denied {
                cause: DenyCause::Masked { .. },
                ..
            }
        )
    };
    let r = go(
        &thread(CTX_OBJ_MASK, &[]),
        Probe::Write,
        WRITABLE,
        0x2000,
        1,
    );
    row(
        "write, rw- cap, object mask r--",
        "denied (masked)",
        denied(&r, masked),
    );
    let r = go(
        &thread(CTX_GLOBAL_MASK, &[]),
        Probe::Write,
        WRITABLE,
        0x2000,
        1,
    );
    row(
        "write, rw- cap, global mask r-x",
        "denied (masked)",
        denied(&r, masked),
    );

    // Expiry: allowed before, denied once the clock passes it.
    let r = go(&main(), Probe::Read, EXPIRING, 0x1000, 0);
    row(
        "read, cap not yet expired",
        "allowed",
        allowed(&r, expected_byte(EXPIRING, 0x1000)),
    );
    clock::advance(2 * 3_600 * 1_000_000_000);
    let swept = ENGINE.expire();
    let r = go(&main(), Probe::Read, EXPIRING, 0x1000, 0);
    let mut c = denied(&r, |v| {
        record_verdict(v, |r| {
            matches!(r, Verdict::Invalid(VerifyError::Expired { .. }))
        })
    });
    c.ok &= swept.total() >= 1;
    c.got = format!("{}; expire() dropped {}", c.got, swept.total());
    row("read, clock moved past expiry", "denied (expired)", c);

    // Forged and misplaced records.
    let r = go(
        &thread(CTX_TAMPERED, &[]),
        Probe::Write,
        TAMPERED,
        0x1000,
        1,
    );
    let bad_sig = |v: &Violation| {
        record_verdict(v, |r| {
            matches!(r, Verdict::Invalid(VerifyError::BadSignature))
        })
    };
    row(
        "write, cap edited r-- -> rw-",
        "denied (bad signature)",
        denied(&r, bad_sig),
    );
    let r = go(&thread(CTX_WRONG, &[]), Probe::Read, DATA, 0x1000, 0);
    row(
        "read, cap for another context",
        "denied (wrong accessor)",
        denied(&r, |v| {
            record_verdict(v, |r| matches!(r, Verdict::WrongHolder(_)))
        }),
    );

    // Delegation.
    let r = go(
        &thread(CTX_RECEIVER, &[]),
        Probe::Read,
        DELEGATED,
        0x1000,
        0,
    );
    row(
        "read, delegated r-- from rw- cap",
        "allowed",
        allowed(&r, expected_byte(DELEGATED, 0x1000)),
    );
    let r = go(
        &thread(CTX_RECEIVER, &[]),
        Probe::Write,
        DELEGATED,
        0x1000,
        1,
    );
    row(
        "write, delegated r-- only",
        "denied (no w)",
        denied(&r, |v| matches!(v, Violation::Denied { .. })),
    );

    // Context switching.
    let t = thread(CTX_EMPTY, &[CTX_MAIN]);
    let r = go(&t, Probe::Read, DATA, 0x1000, 0);
    row(
        "read, only an inactive ctx grants",
        "allowed, switched",
        switched(&r, &t, CTX_MAIN, expected_byte(DATA, 0x1000)),
    );
    let r = go(
        &thread(CTX_LOCKED, &[CTX_MAIN]),
        Probe::Read,
        DATA,
        0x1000,
        0,
    );
    row(
        "same, active ctx UNDETACHABLE",
        "denied (undetachable)",
        denied(&r, |v| matches!(v, Violation::Undetachable { .. })),
    );

    // Code entry through a gate (entry points every 16 bytes from 0x2000).
    let t = thread(CTX_EMPTY, &[CTX_GATE]);
    let aligned = CODE_GATE.0 + CODE_GATE.2;
    let r = go(&t, Probe::Exec, CODE, aligned, 0x5a);
    row(
        "fetch entering gate, aligned",
        "allowed, switched",
        switched(&r, &t, CTX_GATE, 0x5a),
    );
    let r = go(
        &thread(CTX_EMPTY, &[CTX_GATE]),
        Probe::Exec,
        CODE,
        aligned - 8,
        0x5a,
    );
    row(
        "fetch entering gate, misaligned",
        "denied",
        denied(&r, |v| matches!(v, Violation::Denied { .. })),
    );
    let r = go(&thread(CTX_GATE, &[]), Probe::Exec, CODE, aligned - 8, 0x5a);
    row(
        "fetch, already in ctx, misaligned",
        "allowed",
        allowed(&r, 0x5a),
    );

    // Malformed and missing contexts, objects without usable keys.
    let r = go(&thread(CTX_TRUNCATED, &[]), Probe::Read, DATA, 0x1000, 0);
    let malformed = |v: &Violation| matches!(v, Violation::MalformedContext { .. });
    row(
        "active ctx truncated",
        "denied (malformed)",
        denied(&r, malformed),
    );
    let r = go(&thread(CTX_JUNK, &[]), Probe::Read, DATA, 0x1000, 0);
    row(
        "active ctx random bytes",
        "denied (malformed)",
        denied(&r, malformed),
    );
    let r = go(&thread(CTX_MISSING, &[]), Probe::Read, DATA, 0x1000, 0);
    row(
        "active ctx does not exist",
        "denied (no ctx)",
        denied(&r, |v| matches!(v, Violation::ContextMissing(_))),
    );
    let r = go(&main(), Probe::Read, NO_KUID, 0x1000, 0);
    row(
        "read, object has no kuid",
        "denied (no kuid)",
        denied(&r, |v| {
            key_error(v, |k| matches!(k, KeyLookupError::NoKuid(_)))
        }),
    );
    let r = go(&main(), Probe::Read, UNKNOWN_KEY, 0x1000, 0);
    row(
        "read, kuid names no key",
        "denied (unknown key)",
        denied(&r, |v| {
            key_error(v, |k| matches!(k, KeyLookupError::UnknownKey(_)))
        }),
    );

    // Revocation of a key tears down a live mapping.
    row(
        "revoke key while page is mapped",
        "read, unmapped, denied",
        revocation(),
    );

    // The cache.
    row("repeated fault", "allowed, cache hit", cache_hit());
    let (c, ed25519) = measure(BENCH_ED25519);
    row("cycles: Ed25519 cap", "misses, then hits", c);
    let (c, p256) = measure(BENCH_P256);
    row("cycles: P-256 cap", "misses, then hits", c);

    Results {
        rows,
        ed25519,
        p256,
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
            unmapped = ENGINE
                .revoke_key(KEY_REVOCABLE)
                .map_or(0, |inv| inv.total());
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
    let hit = r.faults_on(DATA).next().is_some_and(|f| f.was_hit());
    c.ok &= hit;
    c.got = format!("{}, {}", c.got, if hit { "hit" } else { "not a hit" });
    c
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
    let mut miss = u64::MAX;
    let mut hit = u64::MAX;
    let mut last = CTX_MAIN;
    for ctx in CTX_BENCH {
        let r = go(&thread(ctx, &[]), Probe::Read, obj, 0x1000, 0);
        let f = r.faults_on(obj).next();
        ok &= allowed(&r, value).ok && f.is_some_and(|f| f.was_miss());
        miss = miss.min(f.map_or(u64::MAX, |f| f.cycles));
        last = ctx;
    }
    for _ in 0..HIT_RUNS {
        let r = go(&thread(last, &[]), Probe::Read, obj, 0x1000, 0);
        let f = r.faults_on(obj).next();
        ok &= allowed(&r, value).ok && f.is_some_and(|f| f.was_hit());
        hit = hit.min(f.map_or(u64::MAX, |f| f.cycles));
    }
    let cycles = Cycles { miss, hit };
    let check = Check {
        got: format!("{} misses, {HIT_RUNS} hits", CTX_BENCH.len()),
        ok,
        reason: None,
    };
    (check, cycles)
}
