//! `cargo xtask test`: every step in order, or one step, or the steps from one on; each step's
//! time, the total, and the summary line `xtask: N passed, M failed` that CI reads.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::run::{Workspace, heading};
use crate::steps::{Action, Step, test_steps};
use crate::usage_error;

/// Which steps a `test` run covers.
#[derive(Debug, PartialEq, Eq)]
enum Selection {
    /// Every step (no arguments).
    All,
    /// One step (`--step N` or `--step NAME`), and only it.
    Only(usize),
    /// The steps from this one to the end (`--from N` or `--from NAME`), to resume a run.
    From(usize),
}

/// Runs the selected steps in order, stopping at the first failure.
pub(crate) fn cmd_test(ws: &Workspace, args: &[String]) -> ExitCode {
    let steps = test_steps();
    let selection = match parse_selection(&steps, args) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    let total = steps.len();
    let (first, last) = match selection {
        Selection::All => (0, total),
        Selection::Only(i) => (i, i + 1),
        Selection::From(i) => (i, total),
    };
    let started = Instant::now();
    let mut passed = 0usize;
    let mut failed = 0usize;
    let mut times: Vec<(usize, Duration)> = Vec::new();
    for (i, step) in steps.iter().enumerate().take(last).skip(first) {
        heading(&format!("[{}/{total}] {}", i + 1, step.name));
        let step_started = Instant::now();
        let result = match &step.action {
            Action::Cargo(args) => crate::run::run_cargo(ws, args),
            Action::Custom(f) => f(ws),
        };
        let took = step_started.elapsed();
        times.push((i, took));
        match result {
            Ok(()) => {
                println!(
                    "xtask: step {}/{total} `{}` passed in {}",
                    i + 1,
                    step.name,
                    clock(took)
                );
                passed += 1;
            }
            Err(why) => {
                eprintln!();
                eprintln!(
                    "xtask: step {}/{total} `{}` FAILED after {}: {why}",
                    i + 1,
                    step.name,
                    clock(took)
                );
                let skipped = last - i - 1;
                if skipped > 0 {
                    eprintln!(
                        "xtask: stopped here; {skipped} later step(s) not run (resume with \
                         `cargo xtask test --from {}`)",
                        i + 1
                    );
                }
                failed += 1;
                break;
            }
        }
    }
    print_times(&steps, &times, started.elapsed());
    println!();
    println!("xtask: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The table of step times, longest steps easy to spot, and the total.
fn print_times(steps: &[Step], times: &[(usize, Duration)], total: Duration) {
    println!();
    println!("xtask: step times");
    for &(i, took) in times {
        let name = steps.get(i).map_or("?", |s| s.name);
        println!("  {:>2}. {:<44} {:>8}", i + 1, name, clock(took));
    }
    println!("      {:<44} {:>8}", "total", clock(total));
}

/// `m:ss` (or `s.s s` under a minute).
fn clock(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

/// `[]`, `--step X` or `--from X`, where X is a step's number (from 1, as `--help` lists them)
/// or its name.
fn parse_selection(steps: &[Step], args: &[String]) -> Result<Selection, String> {
    match args {
        [] => Ok(Selection::All),
        [flag, which] if flag == "--step" => find_step(steps, which).map(Selection::Only),
        [flag, which] if flag == "--from" => find_step(steps, which).map(Selection::From),
        [flag] if flag == "--step" || flag == "--from" => Err(format!(
            "`test {flag}` needs a step's number or name (see `cargo xtask --help`)"
        )),
        _ => Err(format!(
            "`test` takes nothing, `--step <N|NAME>` or `--from <N|NAME>` (got `{}`)",
            args.join(" ")
        )),
    }
}

/// The index of the step numbered `which` (from 1) or named `which` (exactly, or the one step
/// whose name starts with it).
fn find_step(steps: &[Step], which: &str) -> Result<usize, String> {
    if let Ok(n) = which.parse::<usize>() {
        return match n.checked_sub(1) {
            Some(i) if i < steps.len() => Ok(i),
            _ => Err(format!(
                "no step {which}: steps are numbered 1 to {}",
                steps.len()
            )),
        };
    }
    if let Some(i) = steps.iter().position(|s| s.name == which) {
        return Ok(i);
    }
    let prefixed: Vec<usize> = (0..steps.len())
        .filter(|&i| steps.get(i).is_some_and(|s| s.name.starts_with(which)))
        .collect();
    match prefixed.as_slice() {
        [i] => Ok(*i),
        [] => Err(format!(
            "no step named `{which}` (see `cargo xtask --help` for the names)"
        )),
        many => Err(format!(
            "`{which}` names {} steps ({}); give more of the name or the number",
            many.len(),
            many.iter()
                .filter_map(|&i| steps.get(i).map(|s| format!("{}. {}", i + 1, s.name)))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn selections_parse_by_number_and_name() {
        let steps = test_steps();
        assert_eq!(parse_selection(&steps, &[]), Ok(Selection::All));
        assert_eq!(
            parse_selection(&steps, &args(&["--step", "clippy"])),
            Ok(Selection::Only(2))
        );
        assert_eq!(
            parse_selection(&steps, &args(&["--from", "3"])),
            Ok(Selection::From(2))
        );
        assert_eq!(
            parse_selection(&steps, &args(&["--step", "loom"])),
            Ok(Selection::Only(4))
        );
    }

    #[test]
    fn bad_selections_say_what_is_wrong() {
        let steps = test_steps();
        let n = steps.len();
        for (bad, says) in [
            (args(&["--step", "0"]), "numbered 1 to"),
            (args(&["--step", &(n + 1).to_string()]), "numbered 1 to"),
            (args(&["--from", "nonesuch"]), "no step named"),
            (args(&["--step", "aarch64"]), "names"),
            (args(&["--step"]), "needs a step"),
            (args(&["--bogus"]), "takes nothing"),
            (args(&["--step", "1", "2"]), "takes nothing"),
        ] {
            match parse_selection(&steps, &bad) {
                Err(e) => assert!(e.contains(says), "{bad:?}: {e}"),
                Ok(s) => panic!("{bad:?} parsed as {s:?}"),
            }
        }
    }

    #[test]
    fn clock_reads_seconds_then_minutes() {
        assert_eq!(clock(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(clock(Duration::from_secs(61)), "1:01");
        assert_eq!(clock(Duration::from_secs(754)), "12:34");
    }
}
