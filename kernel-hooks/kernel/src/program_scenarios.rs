//! The user programs' scenarios: each program reports its steps (`SYS_REPORT`), and the kernel
//! checks every report against the outcome it expects and against what it saw itself (a step
//! reported as denied counts only if the kernel delivered a denial for it).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::program::{self, ProgramRun, StepReport};
use crate::scenarios::Row;
use crate::task::Outcome;
use crate::user_abi::{Error, report};

/// What a step should come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Success.
    Ok,
    /// A granted read of this byte.
    Byte(u8),
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
        if !steps.iter().any(|s| s.step == r.step) {
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
    /// Per program: (name, traps, rdtsc cycles).
    pub runs: Vec<(&'static str, usize, u64)>,
}

/// Runs every program; `None` when the kernel was built without them.
pub fn run_all() -> Option<ProgramResults> {
    if program::programs().is_empty() {
        return None;
    }
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let table: [(&'static str, &[Step], &'static str); 1] = [("policy", &POLICY, "policy: exits")];
    for (name, steps, exit_row) in table {
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
        match program::run(p, [0; 4]) {
            Ok(run) => {
                rows.extend(rows_of(exit_row, steps, &run, exit_row));
                runs.push((name, run.traps, run.cycles));
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
    Some(ProgramResults { rows, runs })
}
