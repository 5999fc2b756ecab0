//! Tests of `DbStore` shared by several processes: writers taking turns, readers that neither
//! wait for a writer nor see half of a transaction, and writers killed at arbitrary points.
//!
//! The tests re-run this test binary as child processes, each filtered (`--exact`) to one of
//! the `child_*` routines, with [`CHILD_ROLE_ENV`] naming the routine and [`CHILD_DIR_ENV`]
//! the test's directory; without those variables every `child_*` routine does nothing.
//!
//! Every transaction of these tests is [`step`]: it increments a counter object and writes the
//! new value into two pages of a second object, [`X`] (page 0 and page 100). A state in which
//! the two copies differ, or differ from the counter, is half of a transaction.

#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use secctx::db_store::{DB_FILE, PAGE};
use secctx::store::{ObjMeta, Object, StoreError, Txn};
use secctx::{DbStore, ObjectStore, SnapshotReader};
use twizzler_capsec::ObjID;

/// Set in child processes: the name of the `child_*` routine to run.
const CHILD_ROLE_ENV: &str = "SECCTX_DB_STORE_TEST_CHILD_ROLE";
/// Set in child processes: the test's directory (the store is its [`STORE_SUBDIR`]).
const CHILD_DIR_ENV: &str = "SECCTX_DB_STORE_TEST_CHILD_DIR";
/// Set in writer children: how many transactions to run.
const CHILD_COUNT_ENV: &str = "SECCTX_DB_STORE_TEST_CHILD_COUNT";

/// The store's directory inside a test's directory; signal files sit beside it, so that the
/// store's directory holds only what the store put there.
const STORE_SUBDIR: &str = "store";
/// Created by the parent: the children may start.
const GO_FILE: &str = "go";
/// Created by the parent once every writer has finished: the reader stops.
const WRITERS_DONE_FILE: &str = "writers-done";
/// Created by the reader child after its first read.
const READER_READY_FILE: &str = "reader-ready";
/// Created by [`child_blocked_writer`] once it has written, inside its transaction.
const IN_TXN_FILE: &str = "in-txn";
/// Created by the parent: [`child_blocked_writer`] may commit.
const COMMIT_FILE: &str = "commit";

/// What children print, each on a line of its own, after a transaction committed.
const COMMITTED: &str = "@committed ";
/// What [`child_looping_writer`] prints before and after opening the store.
const OPENING: &str = "@opening";
const OPENED: &str = "@opened";
/// What [`child_reader`] prints when it is done.
const READER_DONE: &str = "@reader-done ";

/// The counter object: its value, little-endian, in its first 8 bytes.
const COUNTER: ObjID = ObjID::new(0xdb00_0000_0000_0000_0000_0000_0000_0001);
/// The object that holds the counter's value twice, at offset 0 and at [`FAR`].
const X: ObjID = ObjID::new(0xdb00_0000_0000_0000_0000_0000_0000_0002);
/// The offset of the second copy in [`X`]: page 100.
const FAR: u64 = 100 * PAGE;
/// Transactions per writer in the concurrent test.
const WRITES_PER_WRITER: u64 = 200;
/// Kills in the crash test.
const KILLS: u32 = 200;
/// How long anything may take before a test calls it hung (never reached when all is well).
const HANG: Duration = Duration::from_secs(60);

/// A fresh directory under the system's temporary directory, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "secctx-db_store_processes-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create the test directory");
        TestDir(path)
    }

    fn store_dir(&self) -> PathBuf {
        self.0.join(STORE_SUBDIR)
    }

    fn store(&self) -> DbStore {
        DbStore::open(self.store_dir()).expect("open the store")
    }

    fn signal(&self, file: &str) {
        fs::write(self.0.join(file), b"").expect("create a signal file");
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The u64 in the first 8 bytes of `bytes`.
fn le_u64(bytes: &[u8]) -> u64 {
    let b: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .expect("at least 8 bytes");
    u64::from_le_bytes(b)
}

/// The transaction of every test: reads the counter, increments it, writes it back, and writes
/// the new value at offset 0 and at [`FAR`] of [`X`] (counter between the two, so that half of
/// the transaction would show); creates both objects when the counter does not exist yet.
/// Returns the new value.
fn step(tx: &mut dyn Txn) -> Result<u64, StoreError> {
    let old = match tx.read_at(COUNTER, 0, 8) {
        Ok(bytes) => le_u64(&bytes),
        Err(StoreError::NotFound(_)) => {
            for id in [COUNTER, X] {
                tx.create(&Object {
                    id,
                    meta: ObjMeta::plain(),
                    data: Vec::new(),
                })?;
            }
            0
        }
        Err(e) => return Err(e),
    };
    let new = old + 1;
    let bytes = new.to_le_bytes();
    tx.write_at(X, 0, &bytes)?;
    tx.write_at(COUNTER, 0, &bytes)?;
    tx.write_at(X, FAR, &bytes)?;
    Ok(new)
}

/// The two copies in [`X`], from one read (one snapshot): `get` when `whole`, else `read_at`
/// of the range holding both.
fn read_x(store: &DbStore, whole: bool) -> (u64, u64) {
    let bytes = if whole {
        store.get(X).expect("get X").data
    } else {
        store.read_at(X, 0, FAR + 8).expect("read X")
    };
    let far = usize::try_from(FAR).expect("FAR fits a usize");
    (
        le_u64(&bytes),
        le_u64(bytes.get(far..).expect("X reaches its second copy")),
    )
}

/// The counter's value.
fn read_counter(store: &DbStore) -> u64 {
    le_u64(&store.read_at(COUNTER, 0, 8).expect("read the counter"))
}

/// Asserts that the counter and both copies in [`X`] hold `expected`; `what` names the
/// situation.
fn assert_state(store: &DbStore, expected: u64, what: &str) {
    for whole in [false, true] {
        assert_eq!(
            read_x(store, whole),
            (expected, expected),
            "{what}: both copies in X (read whole: {whole})"
        );
    }
    assert_eq!(read_counter(store), expected, "{what}: the counter");
}

/// The names in the store's directory.
fn store_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list the store directory")
        .map(|e| {
            e.expect("read a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// A child process, killed and reaped if the test ends (fails) before taking it back.
struct Kid(Option<Child>);

impl Kid {
    fn get(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child was not taken yet")
    }

    fn take(mut self) -> Child {
        self.0.take().expect("the child was not taken yet")
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns this test binary running only `role`, in test directory `dir`, with `extra`
/// environment variables; stdout and stderr are piped.
fn spawn_child(role: &str, dir: &TestDir, extra: &[(&str, String)]) -> Kid {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        &crate::test_path(module_path!(), role),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ROLE_ENV, role)
    .env(CHILD_DIR_ENV, &dir.0)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Kid(Some(cmd.spawn().expect("spawn a child test process")))
}

/// A child's stdout and stderr, for failure messages.
fn describe(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for a child that must succeed; returns its output.
fn wait_success(child: Kid, what: &str) -> Output {
    let out = child.take().wait_with_output().expect("wait for a child");
    assert!(out.status.success(), "{what} failed: {}", describe(&out));
    out
}

/// The values after [`COMMITTED`] on the complete lines of `stdout`, in order.
fn committed_values(stdout: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(stdout);
    // A line cut short by a kill has no newline: it is not counted.
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .filter_map(|line| line.split_once(COMMITTED))
        .map(|(_, v)| v.trim().parse().expect("a committed value is a number"))
        .collect()
}

/// Prints `line` on a line of its own and flushes it out (a kill may come any moment after).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{line}").expect("write to stdout");
    out.flush().expect("flush stdout");
}

/// Waits, polling, until `file` exists in `dir`; panics after [`HANG`].
fn wait_for_file(dir: &Path, file: &str, what: &str) {
    let deadline = Instant::now() + HANG;
    while !dir.join(file).exists() {
        assert!(Instant::now() < deadline, "{what}: {file} never appeared");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `file` exists in the test directory, failing the test (with the child's output)
/// if `child` exits first.
/// A `child_blocked_writer` child, once it is inside its write transaction.
fn blocked_writer(dir: &TestDir, what: &str) -> Kid {
    let mut child = spawn_child("child_blocked_writer", dir, &[]);
    wait_for_child_signal(dir, IN_TXN_FILE, &mut child, what);
    child
}

/// Lets a blocked writer commit; asserts it committed the value `expected`.
fn commit_blocked_writer(dir: &TestDir, child: Kid, what: &str, expected: u64) {
    dir.signal(COMMIT_FILE);
    let out = wait_success(child, what);
    assert_eq!(
        committed_values(&out.stdout),
        [expected],
        "{}",
        describe(&out)
    );
}

fn wait_for_child_signal(dir: &TestDir, file: &str, child: &mut Kid, what: &str) {
    let child = child.get();
    let deadline = Instant::now() + HANG;
    while !dir.0.join(file).exists() {
        if let Some(status) = child.try_wait().expect("poll a child") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("{what} exited ({status}) before creating {file}; stderr:\n{err}");
        }
        assert!(Instant::now() < deadline, "{what} never created {file}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on another thread and returns its result, failing with `hung` if it takes longer
/// than [`HANG`] (a guard against hanging, not a performance threshold).
fn within_hang_guard<T: Send + 'static>(hung: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{hung}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the thread panicked ({hung})"),
    }
}

/// The test directory when this process is a child running `role`; `None` otherwise.
fn child_dir(role: &str) -> Option<PathBuf> {
    if std::env::var(CHILD_ROLE_ENV).ok()? != role {
        return None;
    }
    Some(PathBuf::from(
        std::env::var_os(CHILD_DIR_ENV).expect("a child is given the test directory"),
    ))
}

// ---------------------------------------------------------------------------------------------
// 1. Two writers and a reader.

/// Two writer processes each run [`WRITES_PER_WRITER`] read-increment-write transactions while
/// a reader process reads: no increment is lost, every value is committed exactly once, and
/// the reader never sees the two copies in `X` differ, nor anything go backwards.
#[test]
fn two_processes_and_a_reader_lose_nothing_and_see_no_half_change() {
    let started = Instant::now();
    let dir = TestDir::new("two-writers");
    let store = dir.store();
    assert_eq!(store.transact(step).expect("first transaction"), 1);

    let mut reader = spawn_child("child_reader", &dir, &[]);
    // The reader has read once before the writers start, so its reads overlap their writes.
    wait_for_child_signal(&dir, READER_READY_FILE, &mut reader, "the reader");
    let count = [(CHILD_COUNT_ENV, WRITES_PER_WRITER.to_string())];
    let writers: Vec<Kid> = (0..2)
        .map(|_| spawn_child("child_writer", &dir, &count))
        .collect();
    dir.signal(GO_FILE);

    let mut committed = Vec::new();
    for (i, writer) in writers.into_iter().enumerate() {
        let out = wait_success(writer, &format!("writer {i}"));
        let values = committed_values(&out.stdout);
        assert_eq!(
            values.len() as u64,
            WRITES_PER_WRITER,
            "writer {i} reported every commit: {}",
            describe(&out)
        );
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "writer {i}'s commits increase: {values:?}"
        );
        committed.extend(values);
    }
    dir.signal(WRITERS_DONE_FILE);
    let out = wait_success(reader, "the reader");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reader_report = stdout
        .lines()
        .find_map(|l| l.split_once(READER_DONE))
        .map(|(_, r)| r.to_owned())
        .unwrap_or_else(|| panic!("the reader reported: {}", describe(&out)));

    committed.sort_unstable();
    let total = 2 * WRITES_PER_WRITER + 1;
    assert_eq!(
        committed,
        (2..=total).collect::<Vec<_>>(),
        "every value from 2 to {total} was committed exactly once: no lost update"
    );
    assert_state(&store, total, "after both writers");
    assert_state(&dir.store(), total, "a fresh handle, after both writers");
    assert_eq!(store_files(&dir.store_dir()), [DB_FILE]);
    eprintln!(
        "two writers and a reader: {reader_report}; {:?}",
        started.elapsed()
    );
}

/// A writer child of [`two_processes_and_a_reader_lose_nothing_and_see_no_half_change`]:
/// A [`SnapshotReader`] keeps one read transaction while the file's header is unchanged. Each
/// of its reads still sees every commit that completed before it: another process's (a child
/// writer that has exited), another handle's in this process, and its own handle's; and reads
/// with no commit between them share one transaction. A missing object is still an error.
#[test]
fn a_snapshot_reader_sees_every_commit_before_the_read() {
    let dir = TestDir::new("snapshot-reader");
    let store = dir.store();
    assert_eq!(store.transact(step).expect("the first step"), 1);
    let reader = store.snapshot_reader(Duration::from_secs(3600));
    let read = |r: &SnapshotReader| {
        let x = r.read_at(X, 0, FAR + 8).expect("read X");
        let far = usize::try_from(FAR).expect("FAR fits a usize");
        let c = le_u64(&r.read_at(COUNTER, 0, 8).expect("read the counter"));
        (
            le_u64(&x),
            le_u64(x.get(far..).expect("the second copy")),
            c,
        )
    };
    for _ in 0..5 {
        assert_eq!(read(&reader), (1, 1, 1));
    }
    assert_eq!(
        reader.snapshots_taken(),
        1,
        "no commit: one transaction for every read"
    );
    // The counter (8 bytes) is cached after its first read; X (over 100 pages) never is.
    assert_eq!(reader.cache_hits(), 4, "the counter's later reads");
    assert!(matches!(
        reader.read_at(ObjID::new(0xdead), 0, 1),
        Err(StoreError::NotFound(_))
    ));

    dir.signal(GO_FILE);
    for expected in 2..=4 {
        let child = spawn_child("child_writer", &dir, &[(CHILD_COUNT_ENV, "1".to_owned())]);
        wait_success(child, "a writer");
        let expected = (expected, expected, expected);
        assert_eq!(read(&reader), expected, "another process's last commit");
        assert_eq!(read(&reader), expected);
    }
    assert_eq!(
        reader.snapshots_taken(),
        4,
        "a new transaction after each commit only"
    );
    assert_eq!(
        reader.cache_hits(),
        4 + 3,
        "after each child's commit the counter is read from the new snapshot, then cached"
    );

    let other = dir.store();
    assert_eq!(other.transact(step).expect("another handle's step"), 5);
    assert_eq!(read(&reader), (5, 5, 5), "another handle's commit");
    assert_eq!(store.transact(step).expect("this handle's step"), 6);
    assert_eq!(read(&reader), (6, 6, 6), "this handle's commit");
    assert_eq!(reader.snapshots_taken(), 6);

    // Kept at most its age: with none, each read begins a transaction; release drops it.
    let young = store.snapshot_reader(Duration::ZERO);
    assert_eq!(read(&young).2, 6);
    assert_eq!(young.snapshots_taken(), 2, "two reads, two transactions");
    young.release_stale();
    reader.release_stale();
    assert_eq!(read(&reader).2, 6);
    assert_eq!(
        reader.snapshots_taken(),
        6,
        "a young snapshot is not released"
    );
}

/// waits for [`GO_FILE`], then runs [`CHILD_COUNT_ENV`] transactions, printing each committed
/// value.
#[test]
fn child_writer() {
    let Some(dir) = child_dir("child_writer") else {
        return;
    };
    let count: u64 = std::env::var(CHILD_COUNT_ENV)
        .expect("a writer is given its count")
        .parse()
        .expect("the count is a number");
    let store = DbStore::open(dir.join(STORE_SUBDIR)).expect("the writer opens the store");
    wait_for_file(&dir, GO_FILE, "the writer");
    for _ in 0..count {
        let v = store.transact(step).expect("a writer's transaction");
        say(&format!("{COMMITTED}{v}"));
    }
}

/// The reader child of [`two_processes_and_a_reader_lose_nothing_and_see_no_half_change`]:
/// reads `X` (alternately whole and by range) and then the counter until
/// [`WRITERS_DONE_FILE`] appears, checking that the two copies in `X` agree, that no value goes
/// backwards, and that the counter, read after `X`, is not behind it; then checks that it sees
/// the final state.
#[test]
fn child_reader() {
    let Some(dir) = child_dir("child_reader") else {
        return;
    };
    let store = DbStore::open(dir.join(STORE_SUBDIR)).expect("the reader opens the store");
    let deadline = Instant::now() + HANG;
    let (mut reads, mut changes, mut last) = (0u64, 0u64, 0u64);
    loop {
        // Checked before reading, so that the last read comes after every commit.
        let done = dir.join(WRITERS_DONE_FILE).exists();
        let (a, b) = read_x(&store, reads % 2 == 1);
        assert_eq!(
            a, b,
            "read {reads}: the two copies in X differ: a half transaction"
        );
        assert!(a >= last, "read {reads}: X went back from {last} to {a}");
        let counter = read_counter(&store);
        assert!(
            counter >= a,
            "read {reads}: the counter ({counter}), read after X ({a}), is behind it"
        );
        changes += u64::from(a != last);
        last = a;
        reads += 1;
        if reads == 1 {
            fs::write(dir.join(READER_READY_FILE), b"").expect("signal the reader is ready");
        }
        if done {
            let total = 2 * WRITES_PER_WRITER + 1;
            assert_eq!(
                (a, counter),
                (total, total),
                "after the writers finished, the reader sees their last commit"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the writers never finished");
    }
    say(&format!(
        "{READER_DONE}{reads} reads, {changes} distinct states seen"
    ));
}

// ---------------------------------------------------------------------------------------------
// 2. Readers do not wait for a writer in another process.

/// While a child process holds a write transaction open (having written), the parent's reads
/// through its own handle (opened before) complete and see the last commit, not the child's
/// write; a write the parent begins meanwhile waits for the child's commit and builds on it;
/// after the commit everyone sees the new state.
#[test]
fn readers_do_not_wait_for_a_writer_in_another_process() {
    let started = Instant::now();
    let dir = TestDir::new("readers-no-wait");
    let store = dir.store();
    assert_eq!(store.transact(step).expect("first transaction"), 1);

    let mut child = blocked_writer(&dir, "the writer child");

    // The child holds its write transaction (it wrote 2) until COMMIT_FILE appears.
    let read_all = |s: &DbStore| {
        let (a, b) = read_x(s, false);
        let (c, d) = read_x(s, true);
        (a, b, c, d, read_counter(s))
    };
    let held = store.clone();
    let seen = within_hang_guard("a read waited for the writer", move || read_all(&held));
    assert_eq!(
        child.get().try_wait().expect("poll the child"),
        None,
        "the child still holds its write transaction"
    );
    assert_eq!(
        seen,
        (1, 1, 1, 1, 1),
        "reads during another process's write see the last commit (1), not its write (2)"
    );

    // A writer of ours, begun while the child writes, must wait for it and see its commit.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let writer_store = store.clone();
    std::thread::spawn(move || {
        let _ = ready_tx.send(());
        let _ = done_tx.send(writer_store.transact(step));
    });
    ready_rx
        .recv_timeout(HANG)
        .expect("the parent's writer thread started");
    // Most likely inside begin_write by now; if not, it begins after the child's commit, and
    // the outcome checked is the same.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        matches!(done_rx.try_recv(), Err(mpsc::TryRecvError::Empty)),
        "the parent's write did not complete while the child held the write transaction"
    );
    let reader = store.clone();
    within_hang_guard("a read waited for the writers", move || {
        assert_state(
            &reader,
            1,
            "while the child writes and the parent's write waits",
        );
    });

    commit_blocked_writer(&dir, child, "the writer child", 2);
    let ours = done_rx
        .recv_timeout(HANG)
        .expect("the parent's write waited for the child's, not forever")
        .expect("the parent's write");
    assert_eq!(
        ours, 3,
        "the parent's write came after the child's and saw it"
    );
    assert_state(&store, 3, "after both writes");
    assert_state(&dir.store(), 3, "a fresh handle, after both writes");
    assert_eq!(store_files(&dir.store_dir()), [DB_FILE]);
    eprintln!("readers do not wait: {:?}", started.elapsed());
}

/// While a child process holds a write transaction open, another process that opens the store
/// to read (`DbStore::open_read_only`, what a command that only reads uses) completes and sees
/// the last commit.
///
/// Found failing with `DbStore::open`: in multi-writer mode, redb's read-write open takes the
/// writer lock (to repair the file if needed: `open_writer_lock_for_mode` in redb 4.6's
/// `page_manager.rs`), so it waits until every other process's write transaction has ended.
/// A read-only open does not.
#[test]
fn a_process_opening_the_store_does_not_wait_for_a_writer_in_another_process() {
    let started = Instant::now();
    let dir = TestDir::new("open-no-wait");
    let store = dir.store();
    assert_eq!(store.transact(step).expect("first transaction"), 1);

    let mut writer = blocked_writer(&dir, "the writer child");
    // The writer holds its write transaction (it wrote 2) until COMMIT_FILE appears.
    let mut reader = spawn_child("child_opener", &dir, &[]);
    let deadline = Instant::now() + HANG;
    while reader.get().try_wait().expect("poll the reader").is_none() {
        assert!(
            Instant::now() < deadline,
            "a process opening the store waited for the writer in another process"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = wait_success(reader, "the reader child");
    assert_eq!(
        writer.get().try_wait().expect("poll the writer"),
        None,
        "the writer still holds its write transaction"
    );
    assert_eq!(
        committed_values(&out.stdout),
        [1],
        "the new process sees the last commit, not the open write: {}",
        describe(&out)
    );
    commit_blocked_writer(&dir, writer, "the writer child", 2);
    assert_state(&store, 2, "after the write");
    eprintln!("a process opening the store: {:?}", started.elapsed());
}

/// The child of [`a_process_opening_the_store_does_not_wait_for_a_writer_in_another_process`]:
/// opens the store, checks `X` agrees with the counter, and prints the counter (as committed).
#[test]
fn child_opener() {
    let Some(dir) = child_dir("child_opener") else {
        return;
    };
    let store = DbStore::open_read_only(dir.join(STORE_SUBDIR)).expect("the child opens the store");
    let v = read_counter(&store);
    assert_state(&store, v, "a process opened during a write");
    say(&format!("{COMMITTED}{v}"));
}

/// The child of [`readers_do_not_wait_for_a_writer_in_another_process`] and
/// [`a_killed_writer_does_not_block_the_next_writer`]: runs [`step`], creates [`IN_TXN_FILE`]
/// and, still inside the transaction, waits for [`COMMIT_FILE`]; then commits and prints the
/// value.
#[test]
fn child_blocked_writer() {
    let Some(dir) = child_dir("child_blocked_writer") else {
        return;
    };
    let store = DbStore::open(dir.join(STORE_SUBDIR)).expect("the child opens the store");
    let v = store
        .transact(|tx| {
            let v = step(tx)?;
            fs::write(dir.join(IN_TXN_FILE), b"").expect("signal being inside the transaction");
            wait_for_file(&dir, COMMIT_FILE, "the blocked writer");
            Ok::<_, StoreError>(v)
        })
        .expect("the child's transaction");
    say(&format!("{COMMITTED}{v}"));
}

/// A writer killed while no other process has the store open leaves the file marked unclean
/// with no live writer: redb refuses such a file to a read-only open ("repair aborted"),
/// since only a writer may repair it. `DbStore::open_read_only` then has it repaired (by a
/// read-write open, which waits its turn like any writer) and reads the last commit.
///
/// Found by keytool's `keytools_in_parallel_lose_no_edit` in CI: a `ctx show` run among 16
/// `ctx add` processes failed with "Database repair aborted".
#[test]
fn a_reader_opens_a_store_a_killed_writer_left_unclean() {
    let dir = TestDir::new("killed-unclean");
    {
        let store = dir.store();
        assert_eq!(store.transact(step).expect("first transaction"), 1);
    }
    let mut child = blocked_writer(&dir, "the writer child");
    child.get().kill().expect("kill the child");
    let _ = child.take().wait();
    let store_dir = dir.store_dir();
    let store = within_hang_guard("the read-only open hung", move || {
        DbStore::open_read_only(store_dir)
    })
    .expect("a read-only open of a file a killed writer left");
    assert_state(&store, 1, "the killed writer's transaction is not kept");
    assert!(
        store.transact(step).is_err(),
        "a read-only store does not write"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Writers killed at arbitrary points.

/// A linear congruential generator (Knuth's MMIX constants): reproducible delays.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// [`KILLS`] times, a child writer that commits transactions in a loop is killed (SIGKILL)
/// after a varying delay: in its start-up, in `DbStore::open`, inside a transaction or in a
/// commit. Every time, the store opens, holds every commit the child reported and at most one
/// more, `X` agrees with the counter, and the store's directory holds only the database file.
/// The store starts empty (the first child creates the objects) and is reused throughout;
/// every other time the parent holds a handle open across the kill.
#[test]
fn killed_writers_lose_no_commit_and_leave_nothing_half_done() {
    let started = Instant::now();
    let dir = TestDir::new("killed-writers");
    // An empty store, without the objects (the first child creates them). Killing the child
    // that creates the store itself is a test of its own, because it fails
    // (a_writer_killed_while_creating_the_store_leaves_a_store_that_opens).
    drop(dir.store());
    let mut rng = Lcg(0x5eed_db57_0e00_0001);
    // What the last check found; 0 while the store has no counter.
    let mut value = 0u64;
    // Kills before DbStore::open began, during it, after it with no commit, and after commits.
    let (mut before_open, mut in_open, mut no_commit, mut after_commits) = (0, 0, 0, 0);
    // Kills after a commit the child had no time to report.
    let mut unreported = 0;
    for i in 0..KILLS {
        let held = (i % 2 == 1).then(|| dir.store());
        let delay = Duration::from_micros(rng.next() % 40_001);
        let mut child = spawn_child("child_looping_writer", &dir, &[]);
        std::thread::sleep(delay);
        child.get().kill().expect("kill the child");
        let out = child
            .take()
            .wait_with_output()
            .expect("wait for the killed child");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "kill {i}: the child was killed, not ended by itself: {}",
            describe(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let values = committed_values(&out.stdout);
        match (
            stdout.contains(OPENING),
            stdout.contains(OPENED),
            values.len(),
        ) {
            (false, ..) => before_open += 1,
            (true, false, _) => in_open += 1,
            (true, true, 0) => no_commit += 1,
            (true, true, _) => after_commits += 1,
        }
        let expected: Vec<u64> = (value + 1..).take(values.len()).collect();
        assert_eq!(
            values, expected,
            "kill {i}: the child's commits continue from {value} one by one"
        );
        let reported = values.last().copied().unwrap_or(value);

        let store = DbStore::open(dir.store_dir())
            .unwrap_or_else(|e| panic!("kill {i}: the store opens after the kill: {e}"));
        let found = match store.read_at(COUNTER, 0, 8) {
            Ok(bytes) => le_u64(&bytes),
            Err(StoreError::NotFound(_)) => 0,
            Err(e) => panic!("kill {i}: read the counter: {e}"),
        };
        assert!(
            found == reported || found == reported + 1,
            "kill {i}: the counter is {found}; the child reported {reported} committed (one \
             more may have committed unreported, nothing may be lost)"
        );
        if found > 0 {
            assert_state(&store, found, &format!("kill {i}"));
            if let Some(held) = &held {
                assert_state(held, found, &format!("kill {i}, the handle held across it"));
            }
        }
        assert_eq!(
            store_files(&dir.store_dir()),
            [DB_FILE],
            "kill {i}: the store's directory holds only the database"
        );
        unreported += u32::from(found > reported);
        value = found;
        if (i + 1) % 20 == 0 {
            eprintln!(
                "killed writers: {} kills, counter {value}, {:?}",
                i + 1,
                started.elapsed()
            );
        }
    }
    eprintln!(
        "killed writers: {KILLS} kills ({before_open} before open, {in_open} in open, \
         {no_commit} after open before any commit, {after_commits} after commits; \
         {unreported} after an unreported commit), counter {value}, {:?}",
        started.elapsed()
    );
}

/// The child of [`killed_writers_lose_no_commit_and_leave_nothing_half_done`]: opens the store
/// and commits [`step`] in a loop, printing each committed value, until killed (or, if never
/// killed, for [`HANG`]).
#[test]
fn child_looping_writer() {
    let Some(dir) = child_dir("child_looping_writer") else {
        return;
    };
    say(OPENING);
    let store = DbStore::open(dir.join(STORE_SUBDIR)).expect("the child opens the store");
    say(OPENED);
    let deadline = Instant::now() + HANG;
    while Instant::now() < deadline {
        let v = store.transact(step).expect("the child's transaction");
        say(&format!("{COMMITTED}{v}"));
    }
}

// ---------------------------------------------------------------------------------------------
// 4. A killed writer's lock dies with it.

/// A child killed while it holds a write transaction (having written) does not block the next
/// writer, through a handle opened before the kill or after it, and its write is not kept.
#[test]
fn a_killed_writer_does_not_block_the_next_writer() {
    let started = Instant::now();
    let dir = TestDir::new("killed-lock");
    let store = dir.store();
    assert_eq!(store.transact(step).expect("first transaction"), 1);

    let mut child = blocked_writer(&dir, "the writer child");
    child.get().kill().expect("kill the child");
    let out = child
        .take()
        .wait_with_output()
        .expect("wait for the killed child");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the child was killed inside its transaction: {}",
        describe(&out)
    );
    assert_state(&store, 1, "the killed child's write is not kept");

    let held = store.clone();
    let v = within_hang_guard(
        "the next writer waited for the killed writer's lock",
        move || held.transact(step),
    )
    .expect("a write through the handle opened before the kill");
    assert_eq!(v, 2, "the next write follows the last commit");
    let store_dir = dir.store_dir();
    let v = within_hang_guard(
        "a writer with a new handle waited for the killed writer's lock",
        move || {
            DbStore::open(store_dir)
                .expect("open the store")
                .transact(step)
        },
    )
    .expect("a write through a handle opened after the kill");
    assert_eq!(v, 3, "the second write follows the first");

    // And another process can write too.
    fs::remove_file(dir.0.join(IN_TXN_FILE)).expect("remove the killed child's signal");
    let next = blocked_writer(&dir, "the next writer child");
    commit_blocked_writer(&dir, next, "the next writer child", 4);
    assert_state(&store, 4, "after the writes that followed the kill");
    assert_eq!(store_files(&dir.store_dir()), [DB_FILE]);
    eprintln!("killed writer's lock: {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// 5. A writer killed while it creates the store.

/// A child killed while `DbStore::open` creates a new store (kill delays swept over its
/// start-up, 50 µs apart) leaves a store that opens, and nothing else in its directory.
///
/// Found failing: redb creates a database by sizing the file and writing its header, and
/// writes the magic number last; a non-empty file without it is then refused for good ("Not a
/// redb database: magic number mismatch"). `DbStore::open` now creates the database under a
/// temporary name and links it into place only once it is complete.
#[test]
fn a_writer_killed_while_creating_the_store_leaves_a_store_that_opens() {
    let started = Instant::now();
    let dir = TestDir::new("killed-creating");
    for k in 0..600u64 {
        let _ = fs::remove_dir_all(dir.store_dir());
        let delay = Duration::from_micros(k * 50);
        let mut child = spawn_child("child_looping_writer", &dir, &[]);
        std::thread::sleep(delay);
        child.get().kill().expect("kill the child");
        let out = child
            .take()
            .wait_with_output()
            .expect("wait for the killed child");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "kill {k}: the child was killed, not ended by itself: {}",
            describe(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let phase = match (stdout.contains(OPENING), stdout.contains(OPENED)) {
            (false, _) => "before DbStore::open",
            (true, false) => "in DbStore::open",
            (true, true) => "after DbStore::open",
        };
        let file_len = fs::metadata(dir.store_dir().join(DB_FILE)).map(|m| m.len());
        let store = DbStore::open(dir.store_dir()).unwrap_or_else(|e| {
            panic!(
                "kill {k}, {delay:?} after the spawn, {phase}: the store does not open: {e} \
                 (the database file's length: {file_len:?})"
            )
        });
        match store.read_at(COUNTER, 0, 8) {
            Ok(bytes) => assert_state(&store, le_u64(&bytes), &format!("kill {k}")),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => panic!("kill {k}: read the counter: {e}"),
        }
        assert_eq!(store_files(&dir.store_dir()), [DB_FILE], "kill {k}");
    }
    eprintln!("killed while creating: {:?}", started.elapsed());
}
