//! Step 5: what the serial log says, as the table's rows.

use std::time::{Duration, Instant};

/// What the port's conformance test prints before each check's line and its summary
/// (`kernel_hooks::conformance::Report`'s `Display`).
pub(super) const CONFORMANCE_PREFIX: &str = "conformance: ";
/// What our timing test prints before each figure (`port_tests/timing.rs`, the expiry test).
pub(super) const TIMING_PREFIX: &str = "port timing: ";
/// The test names of ours start with this (the runner prints bare function names).
pub(super) const OUR_TEST_PREFIX: &str = "port_";

/// What the serial log said.
#[derive(Default)]
pub(super) struct Report {
    pub(super) announced: Option<usize>,
    pub(super) passed: Vec<String>,
    pub(super) running: Option<String>,
    pub(super) finished: bool,
    pub(super) panic: Option<String>,
    /// The line after the panic's location: its message.
    pub(super) panic_message: Option<String>,
    /// Why the run was stopped before the tests' result line, if it was: no output for
    /// [`SILENCE_TIMEOUT`], or [`BOOT_TIMEOUT`] reached.
    pub(super) timed_out: Option<String>,
    pub(super) boot_to_tests: Option<Duration>,
    pub(super) tests_time: Option<Duration>,
    /// `port timing:` lines: what was timed, and the figure.
    pub(super) timings: Vec<(String, String)>,
    /// `conformance:` lines: each check's (`<check>: pass`, `... FAIL: <why>`,
    /// `... skipped: <why>`), then the summary.
    pub(super) conformance: Vec<String>,
}

impl Report {
    pub(super) fn feed(
        &mut self,
        line: &str,
        since_boot: Duration,
        tests_started: &mut Option<Instant>,
    ) {
        if let Some(rest) = line.split(CONFORMANCE_PREFIX).nth(1) {
            // A failing suite's panic message repeats its lines: keep each once.
            let rest = rest.trim().to_owned();
            if !self.conformance.contains(&rest) {
                self.conformance.push(rest);
            }
        } else if let Some(rest) = line.split(TIMING_PREFIX).nth(1) {
            let (what, figure) = rest.rsplit_once(": ").unwrap_or((rest, ""));
            self.timings
                .push((format!("  {}", what.trim()), figure.trim().to_owned()));
        } else if let Some(rest) = line.split("[kernel::test] running ").nth(1) {
            self.announced = rest.split(' ').next().and_then(|n| n.parse().ok());
            self.boot_to_tests = Some(since_boot);
            *tests_started = Some(Instant::now());
        } else if let Some(name) = line.split("starting test ").nth(1) {
            self.running = Some(name.trim().to_owned());
        } else if let Some(rest) = line.split("test ").nth(1)
            && let Some(name) = rest.strip_suffix(": ok")
        {
            self.passed.push(name.trim().to_owned());
            self.running = None;
        } else if line.contains("[kernel::test] test result: ok.") {
            self.finished = true;
            self.tests_time = tests_started.map(|t| t.elapsed());
        } else if line.contains("panicked at") || line.contains("PANIC") {
            self.panic.get_or_insert_with(|| line.trim().to_owned());
        }
    }

    /// The conformance suite's summary (`N checks, P pass, F fail, S skipped`), then every
    /// check that did not pass, with its reason. Nothing if the suite printed nothing (an
    /// `--upstream-only` run).
    pub(super) fn conformance_rows(&self, rows: &mut Vec<(String, String, bool)>) {
        if self.conformance.is_empty() {
            return;
        }
        let summary = self.conformance.iter().find(|l| l.contains(" checks, "));
        let failed = |l: &String| l.contains(": FAIL: ");
        rows.push((
            "conformance suite (kernel_hooks::conformance)".into(),
            summary.cloned().unwrap_or_else(|| "no summary".into()),
            summary.is_some() && !self.conformance.iter().any(failed),
        ));
        for line in self.conformance.iter().filter(|l| !l.ends_with(": pass")) {
            if Some(line) != summary {
                rows.push((format!("  {line}"), String::new(), !failed(line)));
            }
        }
    }

    /// A line after the panic's: the first that is not empty is the panic's message.
    pub(super) fn note_after_panic(&mut self, line: &str) {
        if self.panic_message.is_none() && !line.trim().is_empty() {
            self.panic_message = Some(line.trim().to_owned());
        }
    }

    pub(super) fn rows(&self, rows: &mut Vec<(String, String, bool)>, ours_expected: usize) {
        let ours = self
            .passed
            .iter()
            .filter(|n| n.starts_with(OUR_TEST_PREFIX))
            .count();
        let upstream = self.passed.len() - ours;
        let timing = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "-".into())
        };
        rows.push((
            "boot to the test runner".into(),
            timing(self.boot_to_tests),
            self.boot_to_tests.is_some(),
        ));
        let announced = self.announced.map(|n| n.to_string()).unwrap_or("?".into());
        rows.push((
            "upstream's kernel tests passed".into(),
            upstream.to_string(),
            self.finished,
        ));
        rows.push((
            "our kernel tests passed (port_*)".into(),
            format!("{ours} / {ours_expected}"),
            self.finished && ours == ours_expected,
        ));
        rows.push((
            "tests run / announced".into(),
            format!("{} / {announced}", self.passed.len()),
            self.finished && self.announced == Some(self.passed.len()),
        ));
        rows.push(("test run".into(), timing(self.tests_time), self.finished));
        self.conformance_rows(rows);
        if !self.timings.is_empty() {
            rows.push((
                "timings in this boot (port_tests/timing.rs):".into(),
                String::new(),
                true,
            ));
            rows.extend(
                self.timings
                    .iter()
                    .map(|(w, f)| (w.clone(), f.clone(), true)),
            );
        }
        if let Some(name) = &self.running {
            rows.push((format!("FAILED: {name}"), "did not finish".into(), false));
        }
        if let Some(p) = &self.panic {
            rows.push((format!("panic: {p}"), String::new(), false));
            if let Some(m) = &self.panic_message {
                rows.push((format!("  {m}"), String::new(), false));
            }
        }
        if let Some(why) = &self.timed_out {
            rows.push((why.clone(), String::new(), false));
        }
    }
}

pub(super) fn print_table(rows: &[(String, String, bool)], total: Duration) {
    println!();
    println!("{:<48} {:>36}  result", "twizzler port", "");
    for (what, value, ok) in rows {
        println!(
            "{:<48} {:>36}  {}",
            what,
            value,
            if *ok { "ok" } else { "FAILED" }
        );
    }
    println!(
        "{:<52} {:>14}",
        "total",
        format!("{:.0} s", total.as_secs_f64())
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table rows for a serial log made of `lines`.
    pub(super) fn rows_of(lines: &[&str]) -> Vec<(String, String, bool)> {
        let mut report = Report::default();
        let mut started = None;
        for line in lines {
            report.feed(line, Duration::ZERO, &mut started);
        }
        let mut rows = Vec::new();
        report.conformance_rows(&mut rows);
        rows
    }

    #[test]
    pub(super) fn a_passing_suite_is_one_row_with_its_summary() {
        let rows = rows_of(&[
            "conformance: one clock: pass",
            "conformance: an interrupt inside the engine calls nothing of it: skipped: no",
            "conformance: 2 checks, 1 pass, 0 fail, 1 skipped",
        ]);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].1, "2 checks, 1 pass, 0 fail, 1 skipped");
        assert!(rows.iter().all(|r| r.2), "a skip fails nothing: {rows:?}");
        assert!(rows[1].0.contains("skipped: no"));
    }

    #[test]
    pub(super) fn a_failed_check_fails_the_suite_and_is_listed_once() {
        let fail = "conformance: write-protection: FAIL: mapped r-x";
        // The test's panic message repeats the failing line.
        let rows = rows_of(&[
            fail,
            "conformance: 1 checks, 0 pass, 1 fail, 0 skipped",
            "[error] panicked at conformance.rs:1:1:",
            fail,
        ]);
        assert!(!rows[0].2, "the suite's row fails: {rows:?}");
        let listed: Vec<_> = rows.iter().filter(|r| r.0.contains("FAIL")).collect();
        assert_eq!(listed.len(), 1, "{rows:?}");
        assert!(!listed[0].2);
    }

    #[test]
    pub(super) fn a_suite_without_its_summary_fails() {
        let rows = rows_of(&["conformance: one clock: pass"]);
        assert_eq!(rows[0].1, "no summary");
        assert!(!rows[0].2);
    }

    #[test]
    pub(super) fn no_suite_output_adds_no_row() {
        assert!(rows_of(&["test port_x: ok"]).is_empty());
    }

    /// Every `port timing:` line is a row of the table, in the order printed, its figure
    /// after the last `: ` (labels hold commas, parentheses and `'s`).
    #[test]
    pub(super) fn timing_lines_are_rows_after_the_hit() {
        let mut report = Report::default();
        let mut started = None;
        for line in [
            "[log] port timing: hit, kuid in hand: 48970 ns",
            "[log] port timing: upstream's cached check (check_active_access, upstream's kernel \
             Mutex): 61234 ns",
            "[log] port timing: upstream's cached check against our hit: 1.25x",
        ] {
            report.feed(line, Duration::ZERO, &mut started);
        }
        let mut rows = Vec::new();
        report.rows(&mut rows, 0);
        let timings: Vec<_> = rows
            .iter()
            .skip_while(|r| !r.0.starts_with("timings in this boot"))
            .skip(1)
            .map(|r| (r.0.as_str(), r.1.as_str()))
            .collect();
        assert_eq!(
            timings,
            [
                ("  hit, kuid in hand", "48970 ns"),
                (
                    "  upstream's cached check (check_active_access, upstream's kernel Mutex)",
                    "61234 ns"
                ),
                ("  upstream's cached check against our hit", "1.25x"),
            ],
            "{rows:?}"
        );
    }
}
