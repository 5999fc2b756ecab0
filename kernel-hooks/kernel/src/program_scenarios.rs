//! The user programs' scenarios: each program reports its steps (`SYS_REPORT`), and the kernel
//! checks every report against the outcome it expects and against what it saw itself (a step
//! reported as denied counts only if the kernel delivered a denial for it).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use twizzler_capsec::ObjID;

use crate::program::{self, ProgramRun, StepReport};
use crate::scenarios::Row;
use crate::task::Outcome;
use crate::user_abi::{BENCH_STEP, Error, id_words, report};
use crate::world::ids;

/// What a step should come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Success.
    Ok,
    /// A granted read of this byte.
    Byte(u8),
    /// A call that returned this value.
    Returned(u64),
    /// An access the engine denied.
    Denied,
    /// A system call failing with this error.
    Err(Error),
}

/// One step of a program's scenario.
pub struct Step {
    /// The step number the program reports.
    pub step: u64,
    /// What it does.
    pub name: &'static str,
    /// The expected outcome, for the table.
    pub expected: &'static str,
    /// The expected outcome.
    pub expect: Expect,
}

const fn step(step: u64, name: &'static str, expected: &'static str, expect: Expect) -> Step {
    Step {
        step,
        name,
        expected,
        expect,
    }
}

/// The policy program (`kernel-hooks/user/src/bin/policy.rs`).
pub const POLICY: [Step; 8] = [
    step(1, "policy: Ed25519 keys, key object", "ok", Expect::Ok),
    step(
        2,
        "policy: data object, no default rights",
        "ok",
        Expect::Ok,
    ),
    step(3, "policy: context; cap r-- via editor", "ok", Expect::Ok),
    step(4, "policy: attach + switch to it", "ok", Expect::Ok),
    step(
        5,
        "policy: read data (cap r--)",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(6, "policy: write data (no W)", "denied", Expect::Denied),
    step(7, "policy: revoke the cap (own key)", "ok", Expect::Ok),
    step(
        8,
        "policy: read data after revocation",
        "denied",
        Expect::Denied,
    ),
];

/// The labels program (`kernel-hooks/user/src/bin/labels.rs`): the DIFC system calls from
/// ring 3 (`docs/DIFC.md` §4.1).
pub const LABELS: [Step; 18] = [
    step(1, "labels: key, tag object", "ok", Expect::Ok),
    step(
        2,
        "labels: sctx_label, bytes no label",
        "EMALFORMED",
        Expect::Err(Error::Malformed),
    ),
    step(
        3,
        "labels: sctx_label, length past MAX_COPY",
        "EINVAL_LEN",
        Expect::Err(Error::BadLength),
    ),
    step(
        4,
        "labels: raise, start ctx owns no T+",
        "ENOTOWNED",
        Expect::Err(Error::NotOwned),
    ),
    step(5, "labels: create {T} object at {}", "ok", Expect::Ok),
    step(
        6,
        "labels: create labelled, 8-byte buffer",
        "EINVAL_LEN",
        Expect::Err(Error::BadLength),
    ),
    step(
        7,
        "labels: create labelled, bytes no label",
        "EMALFORMED",
        Expect::Err(Error::Malformed),
    ),
    step(
        8,
        "labels: create I={T} without T+",
        "EFLOW",
        Expect::Err(Error::Flow),
    ),
    step(
        9,
        "labels: read its {T} object at {}",
        "denied",
        Expect::Denied,
    ),
    step(
        10,
        "labels: attach ctx proposing {T}, no T+",
        "ENOTOWNED",
        Expect::Err(Error::NotOwned),
    ),
    step(
        11,
        "labels: attach ctx proposing {T}, own T+",
        "ok",
        Expect::Ok,
    ),
    step(
        12,
        "labels: read {T} in it (registered)",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(13, "labels: switch back (its T-)", "ok", Expect::Ok),
    step(14, "labels: ctx owning T+-, switch", "ok", Expect::Ok),
    step(15, "labels: raise {} -> {T}", "ok", Expect::Ok),
    step(16, "labels: read {T} object", "read 0x00", Expect::Byte(0)),
    step(
        17,
        "labels: write public (T- declassifies)",
        "read 0x5d",
        Expect::Byte(0x5d),
    ),
    step(18, "labels: drop {T} -> {} (T-)", "ok", Expect::Ok),
];

/// The hostile program (`kernel-hooks/user/src/bin/hostile.rs`): every row an error code
/// or a denial, and the kernel still standing.
pub const HOSTILE: [Step; 45] = [
    step(
        1,
        "hostile: entropy -> kernel address",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        2,
        "hostile: entropy -> unmapped slot",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        3,
        "hostile: entropy past its heap's pages",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        4,
        "hostile: entropy across its heap's end",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        5,
        "hostile: entropy, length u64::MAX",
        "EINVAL_LEN",
        Expect::Err(Error::BadLength),
    ),
    step(
        6,
        "hostile: entropy, range wraps at 2^64",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        7,
        "hostile: entropy -> its own code (r-x)",
        "EACCES",
        Expect::Err(Error::Denied),
    ),
    step(
        8,
        "hostile: create key from kernel memory",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        9,
        "hostile: entropy -> its heap (control)",
        "ok",
        Expect::Ok,
    ),
    step(
        10,
        "hostile: create key from random bytes",
        "EMALFORMED",
        Expect::Err(Error::Malformed),
    ),
    step(
        11,
        "hostile: map an unknown id",
        "ENOENT",
        Expect::Err(Error::NoObject),
    ),
    step(12, "hostile: map a boot object (no cap)", "ok", Expect::Ok),
    step(13, "hostile: read that object", "denied", Expect::Denied),
    step(
        14,
        "hostile: read public object (control)",
        "read 0xe1",
        Expect::Byte(0xe1),
    ),
    step(
        15,
        "hostile: map a key object",
        "EWRONGKIND",
        Expect::Err(Error::WrongKind),
    ),
    step(
        16,
        "hostile: attach a boot context",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
    step(
        17,
        "hostile: attach a data object",
        "EWRONGKIND",
        Expect::Err(Error::WrongKind),
    ),
    step(
        18,
        "hostile: attach own ctx without r--",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
    step(
        19,
        "hostile: switch to an unattached ctx",
        "ENOTATTACHED",
        Expect::Err(Error::NotAttached),
    ),
    step(
        20,
        "hostile: detach its active ctx",
        "EALREADY",
        Expect::Err(Error::Already),
    ),
    step(
        21,
        "hostile: revoke a boot key",
        "EPERM",
        Expect::Err(Error::NotOwner),
    ),
    step(
        22,
        "hostile: revoke a data object as a key",
        "EWRONGKIND",
        Expect::Err(Error::WrongKind),
    ),
    step(
        23,
        "hostile: revoke own cap on boot object",
        "EPERM",
        Expect::Err(Error::NotOwner),
    ),
    step(
        24,
        "hostile: revoke a garbage record",
        "EMALFORMED",
        Expect::Err(Error::Malformed),
    ),
    step(
        25,
        "hostile: revoke a record of kind 7",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(
        26,
        "hostile: create an object of 0 pages",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(
        27,
        "hostile: create an object of 257 pages",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(
        28,
        "hostile: create, protections 0xffff",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(
        29,
        "hostile: create, kuid not a key",
        "EWRONGKIND",
        Expect::Err(Error::WrongKind),
    ),
    step(
        30,
        "hostile: create an object of kind 9",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(
        31,
        "hostile: system call 999",
        "ENOSYS",
        Expect::Err(Error::NoSys),
    ),
    step(
        32,
        "hostile: recovery range in the kernel",
        "EINVAL",
        Expect::Err(Error::BadArg),
    ),
    step(33, "hostile: read kernel memory", "denied", Expect::Denied),
    step(
        34,
        "hostile: read an unmapped slot",
        "denied",
        Expect::Denied,
    ),
    step(
        35,
        "hostile: move the engine's clock",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
    step(
        36,
        "hostile: entropy -> a boot context",
        "EACCES",
        Expect::Err(Error::Denied),
    ),
    step(37, "hostile: read a boot context", "denied", Expect::Denied),
    step(
        38,
        "hostile: entropy -> its own context (rw-)",
        "ok",
        Expect::Ok,
    ),
    step(
        39,
        "hostile: attach a context twice",
        "EALREADY",
        Expect::Err(Error::Already),
    ),
    step(
        40,
        "hostile: unmap an object twice",
        "ENOTATTACHED",
        Expect::Err(Error::NotAttached),
    ),
    step(
        41,
        "hostile: self info -> kernel address",
        "EFAULT",
        Expect::Err(Error::BadPointer),
    ),
    step(
        42,
        "hostile: self info into 8 bytes",
        "EINVAL_LEN",
        Expect::Err(Error::BadLength),
    ),
    step(
        43,
        "hostile: policy's heap, mapped by its id",
        "denied",
        Expect::Denied,
    ),
    step(
        44,
        "hostile: policy's stack, mapped by its id",
        "denied",
        Expect::Denied,
    ),
    step(
        45,
        "hostile: attach policy's context",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
];

/// The scenarios program (`kernel-hooks/user/src/bin/scenarios.rs`): policies it builds
/// itself and lives under.
pub const SCENARIOS: [Step; 21] = [
    step(1, "log: overwrite an old entry", "denied", Expect::Denied),
    step(2, "log: append in the gate's window", "ok", Expect::Ok),
    step(3, "log: read an old entry", "read 0x00", Expect::Byte(0)),
    step(
        4,
        "child: read via delegation (r--)",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(
        5,
        "child: write (delegated r-- only)",
        "denied",
        Expect::Denied,
    ),
    step(6, "parent revokes the root cap", "ok", Expect::Ok),
    step(
        7,
        "child: read after the revocation",
        "denied",
        Expect::Denied,
    ),
    step(
        8,
        "expiring cap: read before expiry",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(
        9,
        "expiring cap: read after expiry",
        "denied",
        Expect::Denied,
    ),
    step(
        10,
        "home: read the secret (control)",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(11, "jail: read its input", "read 0x00", Expect::Byte(0)),
    step(12, "jail: read the secret", "denied", Expect::Denied),
    step(13, "jail: write its own context", "denied", Expect::Denied),
    step(
        14,
        "jail: switch back home",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
    step(
        15,
        "jail: detach home",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
    step(
        16,
        "self-edit: read under its cap",
        "read 0x00",
        Expect::Byte(0),
    ),
    step(17, "self-edit: mask it in the active ctx", "ok", Expect::Ok),
    step(
        18,
        "self-edit: read after its own edit",
        "denied",
        Expect::Denied,
    ),
    step(
        19,
        "gate: call the library's entry point",
        "returned 0x2a",
        Expect::Returned(0x2a),
    ),
    step(20, "gate: the call switched to its ctx", "ok", Expect::Ok),
    step(
        21,
        "gate: call between entry points",
        "denied",
        Expect::Denied,
    ),
];

/// The table row of `s` from the program's `reports`.
fn row(s: &Step, reports: &[StepReport]) -> Row {
    let Some(r) = reports.iter().find(|r| r.step == s.step) else {
        return Row {
            name: s.name,
            expected: s.expected,
            got: "not reported".into(),
            ok: false,
            reason: None,
        };
    };
    let (got, ok, reason): (String, bool, Option<String>) = match r.code {
        report::OK => match s.expect {
            Expect::Byte(b) => (
                format!("read {:#04x}", r.detail),
                r.detail == u64::from(b),
                None,
            ),
            Expect::Returned(v) => (format!("returned {:#x}", r.detail), r.detail == v, None),
            e => ("ok".into(), e == Expect::Ok, None),
        },
        report::DENIED => {
            // The program's word alone is not enough: the kernel must have delivered it.
            let seen = r.denials.last();
            let reason = seen.map(|d| format!("{:?} at {:#x}: {}", d.kind, d.addr, d.why));
            let got = if seen.is_some() {
                "denied"
            } else {
                "denied (no denial delivered!)"
            };
            (
                got.into(),
                s.expect == Expect::Denied && seen.is_some(),
                reason,
            )
        }
        report::ERROR => {
            let e = Error::from_code(r.detail);
            let got = e.map_or_else(|| format!("error {}", r.detail), |e| e.name().into());
            (got, e.is_some_and(|e| s.expect == Expect::Err(e)), None)
        }
        other => (format!("report code {other}"), false, None),
    };
    Row {
        name: s.name,
        expected: s.expected,
        got,
        ok,
        reason,
    }
}

/// The rows of one program's run: one per step, then how it ended (it must exit with 0),
/// and one for every report the table does not know (a panic's, say).
fn rows_of(
    name: &'static str,
    steps: &[Step],
    run: &ProgramRun,
    exit_row: &'static str,
) -> Vec<Row> {
    let mut rows: Vec<Row> = steps.iter().map(|s| row(s, &run.reports)).collect();
    for r in &run.reports {
        if r.step < BENCH_STEP && !steps.iter().any(|s| s.step == r.step) {
            rows.push(Row {
                name,
                expected: "no such report",
                got: format!("step {:#x} code {} detail {:#x}", r.step, r.code, r.detail),
                ok: false,
                reason: None,
            });
        }
    }
    let exited = matches!(run.outcome, Outcome::Exited(0));
    rows.push(Row {
        name: exit_row,
        expected: "exited 0x0",
        got: format!("{}", run.outcome),
        ok: exited,
        reason: None,
    });
    rows
}

/// What the programs' scenarios found.
pub struct ProgramResults {
    /// The table.
    pub rows: Vec<Row>,
    /// Per program: (name, page faults, system calls, rdtsc cycles).
    pub runs: Vec<(&'static str, usize, usize, u64)>,
    /// The measurements the programs reported (steps from `BENCH_STEP` on).
    pub bench: Vec<StepReport>,
    /// Whether the two microservices ran (they need a second CPU).
    pub pair_ran: bool,
}

/// The owner of the two microservices (`owner.rs`), run on the boot CPU.
pub const OWNER: [Step; 3] = [
    step(1, "owner: publishes a cap for the reader", "ok", Expect::Ok),
    step(2, "owner: revokes while the reader reads", "ok", Expect::Ok),
    step(3, "owner: counts the reads at revocation", "ok", Expect::Ok),
];

/// The reader of the two microservices (`reader.rs`), run on CPU 1 at the same time.
pub const READER: [Step; 7] = [
    step(
        1,
        "reader: denied once the owner revoked",
        "denied",
        Expect::Denied,
    ),
    step(2, "reader: granted reads before that", "ok", Expect::Ok),
    step(
        3,
        "reader: owner's private object (no cap)",
        "denied",
        Expect::Denied,
    ),
    step(
        4,
        "reader: owner's heap by address",
        "denied",
        Expect::Denied,
    ),
    step(
        5,
        "reader: owner's heap mapped by its id",
        "denied",
        Expect::Denied,
    ),
    step(
        6,
        "reader: owner's stack mapped by its id",
        "denied",
        Expect::Denied,
    ),
    step(
        7,
        "reader: attach the owner's own context",
        "ENOTALLOWED",
        Expect::Err(Error::NotAllowed),
    ),
];

/// How long the boot CPU waits for the reader on CPU 1 after the owner has exited.
const READER_TIMEOUT_NS: u64 = 30_000_000_000;

/// Two microservices at once: the reader on CPU 1 reads a shared object in a loop while the
/// owner on the boot CPU revokes its capability. `None` with one CPU.
fn run_pair(rows: &mut Vec<Row>, runs: &mut Vec<(&'static str, usize, usize, u64)>) -> Option<()> {
    if crate::smp::online() < 2 {
        return None;
    }
    let (Some(owner), Some(reader)) = (program::program("owner"), program::program("reader"))
    else {
        rows.push(Row {
            name: "microservices: embedded",
            expected: "yes",
            got: "no".into(),
            ok: false,
            reason: None,
        });
        return Some(());
    };
    let rw = twizzler_capsec::Protections::READ | twizzler_capsec::Protections::WRITE;
    let Ok(mailbox) = program::new_data_object(1, rw, None, twizzler_capsec::LabelId::EMPTY) else {
        rows.push(Row {
            name: "microservices: a mailbox object",
            expected: "made",
            got: "out of objects".into(),
            ok: false,
            reason: None,
        });
        return Some(());
    };
    let (lo, hi) = id_words(mailbox.id);
    let args = [lo, hi, 0, 0];
    let pending = crate::smp::run_on(1, move || program::run(reader, args, false));
    let owner_run = program::run(owner, args, false);
    let reader_run = pending.and_then(|p| p.wait(READER_TIMEOUT_NS));
    let mut counts = (None, None);
    for (name, steps, exit_row, run) in [
        ("owner", &OWNER[..], "owner: exits", Some(owner_run)),
        ("reader", &READER[..], "reader (CPU 1): exits", reader_run),
    ] {
        match run {
            Some(Ok(run)) => {
                rows.extend(rows_of(exit_row, steps, &run, exit_row));
                let detail = |step| {
                    run.reports
                        .iter()
                        .find(|r| r.step == step)
                        .map(|r| r.detail)
                };
                if name == "owner" {
                    counts.0 = detail(3);
                } else {
                    counts.1 = detail(2);
                }
                runs.push((name, run.faults, run.traps - run.faults, run.cycles));
            }
            Some(Err(e)) => rows.push(Row {
                name: exit_row,
                expected: "exited 0x0",
                got: format!("did not load: {e}"),
                ok: false,
                reason: None,
            }),
            None => rows.push(Row {
                name: exit_row,
                expected: "exited 0x0",
                got: "did not finish on CPU 1".into(),
                ok: false,
                reason: None,
            }),
        }
    }
    // Once the revocation has returned (its shootdown done), the reader can finish at most
    // the one read it had begun: every later one faults and is denied.
    let (got, ok) = match counts {
        (Some(at), Some(last)) if last >= at => (
            format!("{} (of {last}; {at} at revocation)", last - at),
            last - at <= 1 && at > 0,
        ),
        (at, last) => (
            format!("counts missing or backwards: {at:?}, {last:?}"),
            false,
        ),
    };
    rows.push(Row {
        name: "reader: reads after revoke returned",
        expected: "at most 1",
        got,
        ok,
        reason: None,
    });
    Some(())
}

/// A program to run, and how to judge it.
struct Spec {
    name: &'static str,
    steps: &'static [Step],
    exit_row: &'static str,
    args: [u64; 4],
    may_set_clock: bool,
}

/// Runs every program; `None` when the kernel was built without them.
pub fn run_all() -> Option<ProgramResults> {
    if program::programs().is_empty() {
        return None;
    }
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut bench = Vec::new();
    // The hostile program is given a boot object it holds no capability for and a boot
    // context, the boot key that signs for the object and a public object (boot ids are
    // below 2^32: two to an argument), and a board (below) with the policy program's heap,
    // stack and context ids, which it must be denied however it learnt them.
    let pair = |a: ObjID, b: ObjID| (a.raw() as u64 & 0xffff_ffff) | ((b.raw() as u64) << 32);
    let mut hostile_args = [
        pair(ids::DATA, ids::CTX_MAIN),
        pair(ids::KEY_ED25519, ids::PUBLIC),
        0,
        0,
    ];
    let spec = |name, steps, exit_row, args, may_set_clock| Spec {
        name,
        steps,
        exit_row,
        args,
        may_set_clock,
    };
    let table = [
        spec("policy", &POLICY[..], "policy: exits", [0; 4], false),
        spec(
            "hostile",
            &HOSTILE[..],
            "hostile: exits (kernel unharmed)",
            hostile_args,
            false,
        ),
        // The scenarios program may move the engine's clock (its expiring capability).
        spec(
            "scenarios",
            &SCENARIOS[..],
            "scenarios: exits",
            [0; 4],
            true,
        ),
        spec("bench", &[], "bench: exits", [0; 4], false),
        spec("labels", &LABELS[..], "labels: exits", [0; 4], false),
    ];
    for Spec {
        name,
        steps,
        exit_row,
        args,
        may_set_clock,
    } in table
    {
        let Some(p) = program::program(name) else {
            rows.push(Row {
                name: exit_row,
                expected: "exited 0x0",
                got: "not embedded".into(),
                ok: false,
                reason: None,
            });
            continue;
        };
        let args = if name == "hostile" {
            hostile_args
        } else {
            args
        };
        match program::run(p, args, may_set_clock) {
            Ok(run) => {
                if name == "policy" {
                    let words: Vec<u64> = run
                        .private
                        .iter()
                        .flat_map(|id| <[u64; 2]>::from(id_words(*id)))
                        .collect();
                    if let Ok(board) = program::new_board(&words) {
                        (hostile_args[2], hostile_args[3]) = id_words(board.id);
                    }
                }
                rows.extend(rows_of(exit_row, steps, &run, exit_row));
                bench.extend(run.reports.iter().filter(|r| r.step >= BENCH_STEP).cloned());
                runs.push((name, run.faults, run.traps - run.faults, run.cycles));
            }
            Err(e) => rows.push(Row {
                name: exit_row,
                expected: "exited 0x0",
                got: format!("did not load: {e}"),
                ok: false,
                reason: None,
            }),
        }
    }
    let pair_ran = run_pair(&mut rows, &mut runs).is_some();
    // Every task ran in an address space of its own and gave it back when it ended (left the
    // CPU on the kernel's tables, its user half cleared).
    let (made, in_use) = crate::objects::PAGING
        .lock()
        .as_ref()
        .map_or((0, usize::MAX), crate::paging::PageTables::space_counts);
    rows.push(Row {
        name: "address spaces in use after programs",
        expected: "0 (of at least 1 made)",
        got: format!("{in_use} (of {made} made)"),
        ok: in_use == 0 && made >= 1,
        reason: None,
    });
    Some(ProgramResults {
        rows,
        runs,
        bench,
        pair_ran,
    })
}
