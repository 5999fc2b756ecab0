//! `keytool` against the `openssl` command line for the same jobs, process for process, in one
//! run (issue 20: within 1.5× of openssl).
//!
//! Each iteration starts one process and waits for it, as a user or a script would:
//!
//! - `keygen`: `keytool keygen --no-passphrase` (an Ed25519 key pair, both objects committed to
//!   the store in one transaction) against `openssl genpkey -algorithm ed25519 -out FILE`;
//! - `mint`: `keytool mint` (load the signing key from the store, check the target's kuid, sign,
//!   write the capability file) against `openssl pkeyutl -sign -rawin` of a 106-byte file (the
//!   size of a capability's signed message) with a PEM key;
//! - `verify`: `keytool verify` of that capability (its target's kuid and key, and the
//!   revocation list, read from the store) against `openssl pkeyutl -verify -rawin`;
//! - `check`: `keytool check` (the simulator: load the context, decide, explain), against the
//!   same openssl verify;
//! - `start`: `keytool --version` against `openssl version`: starting the process and nothing
//!   else, the floor under every row.
//!
//! Criterion measures each row on its own. Then the same jobs run **paired**: each round runs
//! keytool and openssl once each, in alternating order, and its ratio is keytool's wall time over
//! openssl's; the report is the median ratio with a distribution-free 95% confidence interval
//! (order statistics n/2 ± 0.98√n). Both halves of a round see the same machine, so the ratio
//! holds still on a loaded machine while the absolute times drift.
//!
//! Run: `cargo bench -p keytool --bench vs_openssl -- --warm-up-time 1 --measurement-time 3`.
//! Needs `openssl` on `PATH`.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

const KEYTOOL: &str = env!("CARGO_BIN_EXE_keytool");

/// A directory under the system temp directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("keytool-vs-openssl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create the bench directory");
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `prog args` in `dir` with the bench's store, output discarded; panics unless it exits
/// with one of `codes`.
fn run<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    dir: &Path,
    prog: &str,
    args: &[S],
    codes: &[i32],
) {
    let st = Command::new(prog)
        .args(args)
        .current_dir(dir)
        .env("TWZ_KEYTOOL_STORE", dir.join("store"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run {prog}: {e}"));
    assert!(
        st.code().is_some_and(|c| codes.contains(&c)),
        "{prog} {args:?}: {st}"
    );
}

/// Runs keytool with `--json` and returns the document.
fn keytool_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let o = Command::new(KEYTOOL)
        .args(args)
        .arg("--json")
        .current_dir(dir)
        .env("TWZ_KEYTOOL_STORE", dir.join("store"))
        .stdin(Stdio::null())
        .output()
        .expect("run keytool");
    assert!(
        o.status.success(),
        "keytool {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("keytool's JSON")
}

fn field(v: &serde_json::Value, k: &str) -> String {
    v[k].as_str()
        .unwrap_or_else(|| panic!("no {k} in {v}"))
        .to_owned()
}

/// The store and files both tools work on, and the arguments of each job.
struct Fixture {
    _tmp: TempDir,
    dir: PathBuf,
    /// (job, keytool's arguments, openssl's arguments).
    jobs: Vec<(&'static str, Vec<String>, Vec<String>)>,
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

impl Fixture {
    fn new() -> Self {
        let tmp = TempDir::new();
        let d = tmp.0.clone();
        // The store: a key pair, an object it signs for, a context holding a capability.
        let k = keytool_json(&d, &["keygen", "--no-passphrase"]);
        let (sk, vk) = (field(&k, "signing"), field(&k, "verifying"));
        let obj = field(&keytool_json(&d, &["obj", "new", "--kuid", &vk]), "id");
        let ctx = field(&keytool_json(&d, &["ctx", "new"]), "id");
        let mint = strings(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            "bench.cap",
            "--force",
        ]);
        run(&d, KEYTOOL, &mint, &[0]);
        run(
            &d,
            KEYTOOL,
            &strings(&["ctx", "add", &ctx, "bench.cap"]),
            &[0],
        );
        let check = strings(&[
            "check", "--ctx", &ctx, "--target", &obj, "--offset", "0x1000", "--access", "read",
        ]);
        // OpenSSL's side: a key, a 106-byte message, its signature, the public key.
        let genpkey = strings(&["genpkey", "-algorithm", "ed25519", "-out", "gen.pem"]);
        run(
            &d,
            "openssl",
            &strings(&["genpkey", "-algorithm", "ed25519", "-out", "ossl.pem"]),
            &[0],
        );
        run(
            &d,
            "openssl",
            &strings(&["pkey", "-in", "ossl.pem", "-pubout", "-out", "ossl.pub"]),
            &[0],
        );
        std::fs::write(d.join("msg"), [0x5a; 106]).expect("write the message");
        let sign = strings(&[
            "pkeyutl", "-sign", "-rawin", "-inkey", "ossl.pem", "-in", "msg", "-out", "msg.sig",
        ]);
        run(&d, "openssl", &sign, &[0]);
        let verify = strings(&[
            "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", "ossl.pub", "-in", "msg",
            "-sigfile", "msg.sig",
        ]);
        run(&d, "openssl", &verify, &[0]);
        let jobs = vec![
            ("start", strings(&["--version"]), strings(&["version"])),
            ("keygen", strings(&["keygen", "--no-passphrase"]), genpkey),
            ("mint", mint, sign),
            ("verify", strings(&["verify", "bench.cap"]), verify.clone()),
            ("check", check, verify),
        ];
        Fixture {
            _tmp: tmp,
            dir: d,
            jobs,
        }
    }
}

fn bench(c: &mut Criterion) {
    let f = Fixture::new();
    let d = f.dir.as_path();
    let mut g = c.benchmark_group("keytool_vs_openssl");
    g.sample_size(20);
    for (job, kt, ossl) in &f.jobs {
        g.bench_function(format!("{job}/keytool"), |b| {
            b.iter(|| run(d, KEYTOOL, kt, &[0]))
        });
        g.bench_function(format!("{job}/openssl"), |b| {
            b.iter(|| run(d, "openssl", ossl, &[0]))
        });
    }
    g.finish();
}

/// Wall time of one run.
fn timed(dir: &Path, prog: &str, args: &[String]) -> Duration {
    let t = Instant::now();
    run(dir, prog, args, &[0]);
    t.elapsed()
}

/// The paired rounds (see the module documentation): 60 per job, about 5 s in all on a quiet
/// machine. Printed, not stored by criterion.
fn paired(_: &mut Criterion) {
    const ROUNDS: usize = 60;
    let f = Fixture::new();
    let d = f.dir.as_path();
    println!("paired: keytool / openssl, {ROUNDS} rounds each, alternating order");
    for (job, kt, ossl) in &f.jobs {
        let mut ratios = Vec::with_capacity(ROUNDS);
        let (mut a, mut b) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
        for round in 0..ROUNDS {
            let (ka, ob) = if round % 2 == 0 {
                let k = timed(d, KEYTOOL, kt);
                (k, timed(d, "openssl", ossl))
            } else {
                let o = timed(d, "openssl", ossl);
                (timed(d, KEYTOOL, kt), o)
            };
            ratios.push(ka.as_secs_f64() / ob.as_secs_f64());
            a.push(ka.as_secs_f64() * 1e3);
            b.push(ob.as_secs_f64() * 1e3);
        }
        let (r, lo, hi) = median_ci(&mut ratios);
        let (ma, _, _) = median_ci(&mut a);
        let (mb, _, _) = median_ci(&mut b);
        println!(
            "paired/{job}: ratio {r:.3} [{lo:.3}, {hi:.3}]  medians keytool {ma:.2} ms, openssl {mb:.2} ms"
        );
    }
}

/// The median of `v` and a distribution-free 95% confidence interval for it: the order
/// statistics n/2 ± 0.98√n.
fn median_ci(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let half = 0.98 * (n as f64).sqrt();
    let at = |i: f64| v[(i.round().max(0.0) as usize).min(n - 1)];
    (
        at(n as f64 / 2.0),
        at(n as f64 / 2.0 - half),
        at(n as f64 / 2.0 + half),
    )
}

criterion_group!(benches, bench, paired);
criterion_main!(benches);
