//! The `dist-bridge` binary: starts from a config file, serves, stops on SIGTERM with exit
//! code 0; refuses bad configurations with a one-line error.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::net::*;
use dist_bridge::client::Reach;
use dist_bridge::*;

const BIN: &str = env!("CARGO_BIN_EXE_dist-bridge");

/// Waits (bounded) for the child to exit.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dist-bridge did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_from_a_config_file_serves_and_stops_on_sigterm() {
    let root = scratch("binary");
    let site = Site::new(&root, 4, b"served by the binary");
    let config = root.join("node4.toml");
    // The binary's own certificates: a CA, node 4, an operator.
    let certs = root.join("certs");
    for args in [
        vec!["certs", "ca", "--dir", certs.to_str().unwrap()],
        vec![
            "certs",
            "issue",
            "--dir",
            certs.to_str().unwrap(),
            "node:4",
            "operator:ops",
        ],
    ] {
        let (code, stderr) = run_with(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
    // Relative paths are relative to the config file.
    std::fs::write(
        &config,
        "node_id = 4\nlisten = \"127.0.0.1:0\"\nstore_dir = \"node4/store\"\n\
         version_file = \"node4/controller.version\"\nlog_format = \"json\"\n\
         maintenance_interval_ms = 100\n\n[tls]\nca = \"certs/ca.crt\"\n\
         cert = \"certs/node-4.crt\"\nkey = \"certs/node-4.key\"\n\n\
         [guard_table]\ncapacity = 64\nbatch_size = 4\n",
    )
    .unwrap();
    let (mut child, addr) = spawn_node(&config, true);

    bounded(async {
        let ops = TlsFiles::in_dir(&certs, "operator-ops").load().unwrap();
        let client = NodeClient::connect(&addr, 4, Reach::Tls(&ops))
            .await
            .unwrap();
        let status = client.status().await.unwrap();
        assert_eq!(status.controller, ControllerId::new(4, 1));
        assert_eq!(status.table.capacity, 64);
        let token = client
            .export(&site.cap, CTX, &ctx_key(), read_all())
            .await
            .unwrap();
        assert_eq!(client.read(&token, 0, 6).await.unwrap(), b"served");
    })
    .await;

    let kill = Command::new("kill")
        .arg("-TERM")
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_exit(&mut child.0, Duration::from_secs(30));
    let mut logs = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut logs).unwrap();
    assert!(status.success(), "exit {status:?}; logs:\n{logs}");
    // Structured (JSON) logs: serving, the signal, stopped.
    for needle in ["node serving", "SIGTERM received", "node stopped"] {
        assert!(logs.contains(needle), "no {needle:?} in logs:\n{logs}");
    }
    assert!(
        logs.lines().all(|l| l.starts_with('{')),
        "not JSON lines:\n{logs}"
    );
    // The lock is released: the next life starts at version 2.
    let v = VersionFile::open_and_bump(root.join("node4/controller.version"), 4).unwrap();
    assert_eq!(v.controller_id().version, 2);
}

fn run_with(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configurations_exit_non_zero_with_one_line() {
    let root = scratch("binary-bad");
    let bad = root.join("bad.toml");
    let missing = root.join("missing.toml");
    std::fs::write(&bad, "node_id = 1\nstore_dirr = \"x\"\n").unwrap();
    let files = tls_files(&PeerIdentity::Node(2));
    let (ca, cert, key) = (
        files.ca.to_str().unwrap(),
        files.cert.to_str().unwrap(),
        files.key.to_str().unwrap(),
    );
    let base = ["--node-id", "1", "--store-dir", "s", "--version-file", "v"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().chain(extra).copied().collect::<Vec<_>>()
    };
    let no_tls = with(&[]);
    let both = [
        &base[..],
        &[
            "--insecure",
            "--tls-ca",
            ca,
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
    ]
    .concat();
    let half = [&base[..], &["--tls-ca", ca]].concat();
    // Flags clap refuses: its error on the first line (then its usage hint).
    for (args, needle) in [(&both, "cannot be used with"), (&half, "--tls-cert")] {
        let (code, stderr) = run_with(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(stderr.starts_with("error:"), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
    let cases: [(&[&str], &str); 5] = [
        (&["--config", bad.to_str().unwrap()], "bad.toml:2:"),
        (
            &["--config", missing.to_str().unwrap()],
            "cannot read config file",
        ),
        (&["--node-id", "1", "--store-dir", "s"], "no version_file"),
        (&[], "no node_id"),
        // No transport chosen: refused, with the way out.
        (&no_tls, "dist-bridge certs"),
    ];
    for (args, needle) in cases {
        let (code, stderr) = run_with(args);
        assert_ne!(code, 0, "{args:?}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // A configuration the node refuses at start (batch size 0) also fails in one line.
    let dir = root.join("n");
    let (code, stderr) = run_with(&[
        "--node-id",
        "1",
        "--store-dir",
        dir.join("s").to_str().unwrap(),
        "--version-file",
        dir.join("v").to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--batch-size",
        "0",
        "--log-format",
        "json",
        "--insecure",
    ]);
    assert_ne!(code, 0);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("dist-bridge: "), "{stderr}");
    assert!(stderr.contains("batch size must be at least 1"), "{stderr}");
}

/// A node refuses to start with a certificate that names another node, or TLS files that
/// are missing or not PEM, in one line, before touching its files.
#[test]
fn tls_material_that_is_not_this_nodes_is_refused_at_start() {
    let root = scratch("binary-tls");
    let other = tls_files(&PeerIdentity::Node(2));
    let client = tls_files(&holder());
    let junk = root.join("junk.pem");
    std::fs::write(&junk, "not pem").unwrap();
    let missing = root.join("missing.pem");
    let ca = other.ca.to_str().unwrap();
    let cases: [(&str, &str, &str); 4] = [
        (
            other.cert.to_str().unwrap(),
            other.key.to_str().unwrap(),
            "names node 2, not node 1",
        ),
        (
            client.cert.to_str().unwrap(),
            client.key.to_str().unwrap(),
            "names client app, not node 1",
        ),
        (
            junk.to_str().unwrap(),
            other.key.to_str().unwrap(),
            "no certificate",
        ),
        (
            missing.to_str().unwrap(),
            other.key.to_str().unwrap(),
            "cannot read",
        ),
    ];
    for (cert, key, needle) in cases {
        let (code, stderr) = run_with(&[
            "--node-id",
            "1",
            "--store-dir",
            root.join("s").to_str().unwrap(),
            "--version-file",
            root.join("v").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--tls-ca",
            ca,
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ]);
        assert_ne!(code, 0);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{needle}: {stderr}");
        assert!(!root.join("v").exists(), "the version file was touched");
    }
}

/// `dist-bridge certs`: keys 0600, never overwritten without --force, nothing written when
/// one identity is bad or one file exists.
#[test]
fn certs_command_writes_whole_files_and_never_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch("binary-certs");
    let dir = root.join("certs");
    let d = dir.to_str().unwrap();
    assert_eq!(run_with(&["certs", "ca", "--dir", d]).0, 0);
    let ca_before = std::fs::read(dir.join("ca.key")).unwrap();
    let (code, stderr) = run_with(&["certs", "ca", "--dir", d]);
    assert_ne!(code, 0);
    assert!(stderr.contains("exists"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("ca.key")).unwrap(), ca_before);
    for bad in ["node:x", "client:Bob", "operator:-a", "admin:x", "client"] {
        let (code, stderr) = run_with(&["certs", "issue", "--dir", d, "client:a", bad]);
        assert_ne!(code, 0, "{bad}");
        assert!(
            stderr.starts_with("error: invalid value"),
            "{bad}: {stderr}"
        );
    }
    assert!(!dir.join("client-a.crt").exists());
    let (code, stderr) = run_with(&["certs", "issue", "--dir", d, "client:a", "--host", "*.x"]);
    assert_ne!(code, 0, "{stderr}");
    assert!(!dir.join("client-a.crt").exists());
    assert_eq!(run_with(&["certs", "issue", "--dir", d, "node:3"]).0, 0);
    // node-3 exists: node-4 is not written either.
    let (code, _) = run_with(&["certs", "issue", "--dir", d, "node:4", "node:3"]);
    assert_ne!(code, 0);
    assert!(!dir.join("node-4.crt").exists());
    for key in ["ca.key", "node-3.key"] {
        let mode = std::fs::metadata(dir.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let files = TlsFiles::in_dir(&dir, "node-3");
    assert_eq!(files.load().unwrap().identity(), &PeerIdentity::Node(3));
    // No CA there: a clear error.
    let (code, stderr) = run_with(&["certs", "issue", "--dir", root.to_str().unwrap(), "node:1"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("ca.key"), "{stderr}");
}

/// `dist-bridge certs revoke`: lists a certificate's SHA-256 once, by identity or by file;
/// reads every certificate before touching the file; never rewrites a file it cannot parse.
#[test]
fn certs_revoke_lists_each_certificate_once_and_keeps_bad_files() {
    use dist_bridge::revoked_certs::{RevokedList, fingerprint_of_pem_file};
    let root = scratch("binary-revoke");
    let dir = root.join("certs");
    let d = dir.to_str().unwrap();
    assert_eq!(run_with(&["certs", "ca", "--dir", d]).0, 0);
    assert_eq!(
        run_with(&["certs", "issue", "--dir", d, "client:a", "client:b"]).0,
        0
    );
    let list = dir.join("revoked.txt");
    let fp = |stem: &str| fingerprint_of_pem_file(&dir.join(format!("{stem}.crt"))).unwrap();

    assert_eq!(run_with(&["certs", "revoke", "--dir", d, "client:a"]).0, 0);
    let read = || RevokedList::load(&list).unwrap();
    assert!(read().contains(&fp("client-a")) && !read().contains(&fp("client-b")));
    // Again, and b by its file: a is not listed twice.
    let b = dir.join("client-b.crt");
    let (code, _) = run_with(&[
        "certs",
        "revoke",
        "--dir",
        d,
        "client:a",
        "--cert",
        b.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(read().len(), 2);
    let text = std::fs::read_to_string(&list).unwrap();
    assert_eq!(text.matches(&fp("client-a").to_hex()).count(), 1, "{text}");

    // A certificate that does not exist: nothing changes.
    let (code, stderr) = run_with(&["certs", "revoke", "--dir", d, "client:c"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("client-c.crt"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&list).unwrap(), text);
    // An identity without --dir, or nothing to revoke: refused.
    let l = list.to_str().unwrap();
    assert_ne!(run_with(&["certs", "revoke", "--list", l, "client:a"]).0, 0);
    assert_ne!(run_with(&["certs", "revoke", "--dir", d]).0, 0);
    // A file that does not parse is not rewritten.
    std::fs::write(&list, "garbage\n").unwrap();
    let (code, stderr) = run_with(&[
        "certs",
        "revoke",
        "--list",
        l,
        "--cert",
        b.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("line 1"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&list).unwrap(), "garbage\n");
}

#[test]
fn help_shows_an_example_config() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--config",
        "--peer",
        "[guard_table]",
        "version_file",
        "RUST_LOG",
    ] {
        assert!(help.contains(needle), "no {needle:?} in --help");
    }
}

/// A child process killed when dropped (so a failing test leaves no node running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `config`; returns the child and its printed address.
/// With `logs`, its stderr is piped at `info` for the test to read.
fn spawn_node(config: &std::path::Path, logs: bool) -> (Running, String) {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", if logs { "info" } else { "warn" })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if logs { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    let child = Running(child);
    let Some(addr) = line.trim().strip_prefix("listening on ").map(str::to_owned) else {
        panic!("no address printed: {line:?}");
    };
    (child, addr)
}

/// A development CA in `root/certs` and a certificate for each of `parties`, as the README
/// makes them (`dist-bridge certs ca`, then `certs issue`).
fn dev_ca(root: &std::path::Path, parties: &[&str]) {
    let dir = root.join("certs");
    let dir = dir.to_str().unwrap();
    let (code, stderr) = run_with(&["certs", "ca", "--dir", dir]);
    assert_eq!(code, 0, "{stderr}");
    let mut issue = vec!["certs", "issue", "--dir", dir];
    issue.extend_from_slice(parties);
    let (code, stderr) = run_with(&issue);
    assert_eq!(code, 0, "{stderr}");
}

/// The README's operator section, step by step: certificates, two configs that name each
/// other as peers, two nodes, `status`, `probe-peers` over mutual TLS, metrics, SIGTERM.
#[test]
fn two_nodes_talk_over_mutual_tls_as_the_readme_says() {
    let root = scratch("binary-readme");
    let d = |p: &str| root.join(p).to_str().unwrap().to_owned();
    dev_ca(&root, &["node:1", "node:2", "operator:ops"]);
    // Ports: reserved, then released for the nodes.
    let ports: Vec<u16> = {
        let ls: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
    };
    for (id, other) in [(1u16, 2u16), (2, 1)] {
        let port = |n: u16| ports[usize::from(n - 1)];
        let metrics = if id == 1 {
            format!("metrics_listen = \"127.0.0.1:{}\"\n", ports[2])
        } else {
            String::new()
        };
        std::fs::write(
            root.join(format!("node{id}.toml")),
            format!(
                "node_id = {id}\nlisten = \"127.0.0.1:{}\"\nstore_dir = \"node{id}/store\"\n\
                 version_file = \"node{id}/controller.version\"\n{metrics}\n\
                 [tls]\nca = \"certs/ca.crt\"\ncert = \"certs/node-{id}.crt\"\n\
                 key = \"certs/node-{id}.key\"\n\n[[peers]]\nid = {other}\naddr = \"127.0.0.1:{}\"\n",
                port(id),
                port(other)
            ),
        )
        .unwrap();
    }
    let (mut n1, a1) = spawn_node(&root.join("node1.toml"), false);
    let (mut n2, a2) = spawn_node(&root.join("node2.toml"), false);
    let ops = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let certs = d("certs");
    let (code, out, err) = ops(&[
        "status",
        "--addr",
        &a1,
        "--node",
        "1",
        "--certs",
        &certs,
        "--as",
        "operator-ops",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("node 1, controller version 1\n"), "{out}");
    assert!(out.contains("peers: [2]"), "{out}");
    let (code, out, err) = ops(&[
        "probe-peers",
        "--addr",
        &a1,
        "--node",
        "1",
        "--certs",
        &certs,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "1 of 1 peers acknowledged over mutual TLS");
    let (code, out, _) = ops(&["status", "--addr", &a2, "--node", "2", "--certs", &certs]);
    assert_eq!(code, 0);
    assert!(out.contains("  broadcast: 1"), "{out}");
    // The wrong node id for an address: refused in the handshake, in one line.
    let (code, _, err) = ops(&["status", "--addr", &a1, "--node", "2", "--certs", &certs]);
    assert_ne!(code, 0);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not valid for name"), "{err}");
    // A node's certificate is no operator's: Status is denied.
    let (code, _, err) = ops(&[
        "status", "--addr", &a1, "--node", "1", "--certs", &certs, "--as", "node-2",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("denied"), "{err}");
    // Metrics over plain HTTP.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", ports[2])).unwrap();
    std::io::Write::write_all(
        &mut tcp,
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut tcp, &mut body).unwrap();
    assert!(
        body.contains("dist_bridge_requests_total{rpc=\"broadcast_revoke\"} 1"),
        "{body}"
    );
    for child in [&mut n1, &mut n2] {
        Command::new("kill")
            .arg("-TERM")
            .arg(child.0.id().to_string())
            .status()
            .unwrap();
        assert!(wait_exit(&mut child.0, Duration::from_secs(30)).success());
    }
}

/// Runs the binary with `stdin` on its standard input: exit code, stdout, stderr.
fn run_io(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts a one-line failure with `code` that says `needle`.
fn assert_one_line(r: &(i32, String, String), code: i32, needle: &str) {
    let (c, out, err) = r;
    assert_eq!(*c, code, "stdout {out:?}, stderr {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("dist-bridge: "), "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
}

/// The README's token walk-through against two real nodes over mutual TLS: export on the
/// owner, read and write as another client, the local refusals (a token sent to the wrong
/// node, a missing right, a malformed token file), revoke, and the refused read after it.
#[test]
fn a_tokens_life_from_the_command_line_as_the_readme_says() {
    let root = scratch("binary-token");
    let d = |p: &str| root.join(p).to_str().unwrap().to_owned();
    dev_ca(&root, &["node:1", "node:2", "client:app", "client:bob"]);
    // Each node's store: an object with a key, the context; node 1's capability and the
    // context's key as files (what keytool's `mint --out` and `export --secret` write).
    let cap = Site::new(&root, 1, b"hello from node 1").cap;
    drop(Site::new(&root, 2, b"node 2"));
    std::fs::write(root.join("rw.cap"), cap.encode()).unwrap();
    std::fs::write(
        root.join("ctx.pem"),
        ctx_key().to_pkcs8_pem().unwrap().as_bytes(),
    )
    .unwrap();
    for id in [1, 2] {
        std::fs::write(
            root.join(format!("node{id}.toml")),
            format!(
                "node_id = {id}\nlisten = \"127.0.0.1:0\"\nstore_dir = \"node{id}/store\"\n\
                 version_file = \"node{id}/controller.version\"\n\n\
                 [tls]\nca = \"certs/ca.crt\"\ncert = \"certs/node-{id}.crt\"\n\
                 key = \"certs/node-{id}.key\"\n"
            ),
        )
        .unwrap();
    }
    let (mut n1, a1) = spawn_node(&root.join("node1.toml"), false);
    let (mut n2, a2) = spawn_node(&root.join("node2.toml"), false);
    let certs = d("certs");
    let at = |addr: &str, node: &str, who: &str| -> Vec<String> {
        [
            "--addr", addr, "--node", node, "--certs", &certs, "--as", who,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let run = |cmd: &str, target: Vec<String>, rest: &[&str]| {
        let mut args = vec![cmd.to_owned()];
        args.extend(target);
        args.extend(rest.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_io(&args, b"")
    };
    let ctx = format!("{:x}", CTX.raw());
    let (token, ro) = (d("app.token"), d("ro.token"));

    let r = run("health", at(&a1, "1", "client-app"), &["--json"]);
    assert_eq!(r.0, 0, "{}", r.2);
    assert!(r.1.contains("\"status\":\"SERVING\""), "{}", r.1);

    // Export on the owner: the whole object, every right; then a read-only one.
    let export = |out: &str, rights: &str| {
        run(
            "export",
            at(&a1, "1", "client-app"),
            &[
                "--cap",
                &d("rw.cap"),
                "--context",
                &ctx,
                "--context-key",
                &d("ctx.pem"),
                "--rights",
                rights,
                "--out",
                out,
            ],
        )
    };
    let r = export(&token, "rwdv");
    assert_eq!(r.0, 0, "{}", r.2);
    assert!(r.1.starts_with("exported guard "), "{}", r.1);
    assert!(r.1.contains("of node 1: rwdv"), "{}", r.1);
    let r = export(&ro, "r");
    assert_eq!(r.0, 0, "{}", r.2);
    // The documented encoding: hex of the token's bytes, one line; it decodes.
    let text = std::fs::read_to_string(&token).unwrap();
    assert_eq!(text.lines().count(), 1);
    let bytes = base16ct::lower::decode_vec(text.trim()).unwrap();
    assert_eq!(GuardedToken::decode(&bytes).unwrap().owner().node, 1);
    // `-`: the token on stdout, and read back from stdin.
    let r = export("-", "r");
    assert_eq!(r.0, 0, "{}", r.2);
    let piped = run_io(
        &[
            "read",
            "--addr",
            &a1,
            "--node",
            "1",
            "--certs",
            &certs,
            "--as",
            "client-bob",
            "--token",
            "-",
            "--len",
            "5",
        ],
        r.1.as_bytes(),
    );
    assert_eq!((piped.0, piped.1.as_str()), (0, "hello"), "{}", piped.2);

    // Another client holding the token file reads and writes at the owner.
    let bob = || at(&a1, "1", "client-bob");
    let r = run(
        "read",
        bob(),
        &["--token", &token, "--offset", "6", "--len", "4"],
    );
    assert_eq!((r.0, r.1.as_str()), (0, "from"), "{}", r.2);
    let r = run(
        "write",
        bob(),
        &["--token", &token, "--data", "HELLO", "--json"],
    );
    assert_eq!(r.0, 0, "{}", r.2);
    assert_eq!(r.1.trim(), r#"{"offset":0,"written":5}"#);
    let r = run("read", bob(), &["--token", &ro, "--len", "5", "--json"]);
    assert_eq!(r.0, 0, "{}", r.2);
    assert!(
        r.1.contains(&format!(
            "\"data_hex\":\"{}\"",
            base16ct::lower::encode_string(b"HELLO")
        )),
        "{}",
        r.1
    );

    // Local refusals, before anything is sent: the wrong node, a missing right, a range
    // outside the token's, a malformed file.
    let r = run(
        "read",
        at(&a2, "2", "client-bob"),
        &["--token", &token, "--len", "5"],
    );
    assert_one_line(&r, 2, "the token belongs to node 1, not node 2");
    let r = run("write", bob(), &["--token", &ro, "--data", "x"]);
    assert_one_line(
        &r,
        2,
        "the token cannot write: it needs -w--, the token carries r---",
    );
    let r = run("revoke", bob(), &["--token", &ro]);
    assert_one_line(
        &r,
        2,
        "the token cannot revoke: it needs ---v, the token carries r---",
    );
    let r = run(
        "read",
        bob(),
        &[
            "--token",
            &token,
            "--offset",
            &u64::MAX.to_string(),
            "--len",
            "2",
        ],
    );
    assert_one_line(&r, 2, "outside the token's range");
    std::fs::write(root.join("bad.token"), "not a token\n").unwrap();
    let r = run("read", bob(), &["--token", &d("bad.token"), "--len", "1"]);
    assert_one_line(&r, 2, "bad.token: not a token file (expected hex text)");
    std::fs::write(root.join("short.token"), "4442475401\n").unwrap();
    let r = run("revoke", bob(), &["--token", &d("short.token")]);
    assert_one_line(&r, 2, "short.token: not a token:");
    let r = run(
        "read",
        bob(),
        &["--token", &d("missing.token"), "--len", "1"],
    );
    assert_one_line(&r, 2, "cannot read");
    // Export's files: a capability that does not decode, a key that is not PKCS#8 PEM.
    let export_with = |cap: &str, key: &str| {
        let args = [
            "--cap",
            cap,
            "--context",
            &ctx,
            "--context-key",
            key,
            "--out",
            "-",
        ];
        run("export", at(&a1, "1", "client-app"), &args)
    };
    let r = export_with(&d("bad.token"), &d("ctx.pem"));
    assert_one_line(&r, 2, "bad.token: not a capability");
    let r = export_with(&d("rw.cap"), &d("rw.cap"));
    assert_one_line(&r, 2, "rw.cap: not a PKCS#8 PEM signing key");
    // A token whose tag is forged passes the local checks; the node says only `denied`.
    let mut forged = bytes.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    std::fs::write(
        root.join("forged.token"),
        base16ct::lower::encode_string(&forged),
    )
    .unwrap();
    let r = run(
        "read",
        bob(),
        &["--token", &d("forged.token"), "--len", "1"],
    );
    assert_one_line(&r, 1, "denied");

    // Revoke: this guard and its descendants (none), not the read-only token's guard.
    let r = run(
        "revoke",
        at(&a1, "1", "client-app"),
        &["--token", &token, "--json"],
    );
    assert_eq!(r.0, 0, "{}", r.2);
    assert!(r.1.contains("\"guards_revoked\":1"), "{}", r.1);
    // The revoked token is refused by the node, in one line that says only `denied`.
    let r = run("read", bob(), &["--token", &token, "--len", "5"]);
    assert_one_line(&r, 1, "denied");
    // The other guard is untouched.
    let r = run("read", bob(), &["--token", &ro, "--len", "5"]);
    assert_eq!((r.0, r.1.as_str()), (0, "HELLO"), "{}", r.2);

    for child in [&mut n1, &mut n2] {
        Command::new("kill")
            .arg("-TERM")
            .arg(child.0.id().to_string())
            .status()
            .unwrap();
        assert!(wait_exit(&mut child.0, Duration::from_secs(30)).success());
    }
}

/// `--help` teaches: the examples and the token file format are in the long help.
#[test]
fn client_commands_help_shows_examples_and_the_token_format() {
    for cmd in ["export", "read", "write", "revoke", "health"] {
        let out = Command::new(BIN).args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for needle in ["lowercase hex", "dist-bridge export --addr", "Exit status"] {
            assert!(
                text.contains(needle),
                "{cmd} --help lacks {needle:?}:\n{text}"
            );
        }
    }
}
