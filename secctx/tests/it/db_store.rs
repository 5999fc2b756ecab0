//! `DbStore`: objects by page, ranged I/O, transactions, names, and what a damaged, newer,
//! full or read-only store does. (Several processes, and processes killed mid-write, are in
//! `db_store_processes.rs`.)

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use secctx::db_store::{DB_FILE, PAGE, migrate};
use secctx::store::{MAX_OBJECT_LEN, ObjInfo};
use secctx::{DbStore, DirStore, MemStore, ObjMeta, Object, ObjectStore, StoreError};
use twizzler_capsec::{ObjID, Protections};

/// A directory under the system temp directory, removed when dropped.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("secctx-db-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        Self(p)
    }

    fn store(&self) -> DbStore {
        DbStore::open(&self.0).expect("open the store")
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn id(raw: u128) -> ObjID {
    ObjID::new(raw)
}

fn obj(raw: u128, data: Vec<u8>) -> Object {
    Object {
        id: id(raw),
        meta: ObjMeta {
            kuid: Some(id(0x9999)),
            default_prots: Protections::READ,
            secret: false,
        },
        data,
    }
}

fn database_error(e: StoreError, path: &Path) -> String {
    match &e {
        StoreError::Database { path: p, .. } => {
            assert!(p.starts_with(path), "the error names the store: {e}");
            let s = e.to_string();
            assert!(!s.contains('\n'), "one line: {s}");
            s
        }
        other => panic!("expected a database error, got {other:?}"),
    }
}

#[test]
fn objects_round_trip_with_metadata_and_sparse_pages() {
    let dir = TestDir::new("round-trip");
    let store = dir.store();
    let mut data = vec![0u8; 5 * PAGE as usize + 17];
    data[3] = 1;
    data[2 * PAGE as usize + 5] = 2; // pages 1, 3 and 4 are zeros: not stored
    data[5 * PAGE as usize + 16] = 3;
    let o = obj(1, data);
    store.create(&o).expect("create");
    assert_eq!(store.get(o.id).expect("get"), o);
    assert_eq!(
        store.info(o.id).expect("info"),
        ObjInfo {
            meta: o.meta,
            len: o.data.len() as u64
        }
    );
    let stats = store.stats().expect("stats");
    assert_eq!((stats.objects, stats.pages), (1, 3), "{stats:?}");
    // A secret object without a kuid, and an empty one.
    let s = Object {
        id: id(2),
        meta: ObjMeta {
            secret: true,
            ..ObjMeta::plain()
        },
        data: b"secret".to_vec(),
    };
    store.create(&s).expect("create");
    store.create(&obj(3, Vec::new())).expect("create empty");
    assert_eq!(store.get(s.id).expect("get"), s);
    assert_eq!(store.get(id(3)).expect("get").data, Vec::<u8>::new());
    assert_eq!(store.list().expect("list"), vec![id(1), id(2), id(3)]);
    // It is all still there when opened again.
    drop(store);
    let again = dir.store();
    assert_eq!(again.get(o.id).expect("get"), o);
    assert_eq!(again.get(s.id).expect("get"), s);
}

#[test]
fn database_file_and_directory_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("modes");
    let _store = dir.store();
    let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&dir.0), 0o700);
    assert_eq!(mode(&dir.0.join(DB_FILE)), 0o600);
}

#[test]
fn missing_existing_and_out_of_range_are_named_errors() {
    let dir = TestDir::new("errors");
    let store = dir.store();
    assert!(matches!(store.get(id(5)), Err(StoreError::NotFound(i)) if i == id(5)));
    assert!(matches!(
        store.read_at(id(5), 0, 1),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.write_at(id(5), 0, b"x"),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(store.remove(id(5)), Err(StoreError::NotFound(_))));
    store.create(&obj(5, vec![1])).expect("create");
    assert!(matches!(
        store.create(&obj(5, vec![2])),
        Err(StoreError::AlreadyExists(_))
    ));
    assert_eq!(
        store.get(id(5)).expect("get").data,
        vec![1],
        "the first stays"
    );
    for (offset, len) in [(MAX_OBJECT_LEN, 1), (MAX_OBJECT_LEN - 1, 2), (u64::MAX, 1)] {
        let e = store
            .read_at(id(5), offset, len)
            .expect_err("past the largest object");
        assert!(matches!(e, StoreError::OutOfRange { .. }), "{e}");
    }
    let e = store
        .write_at(id(5), MAX_OBJECT_LEN - 1, b"ab")
        .expect_err("past the largest object");
    assert!(matches!(e, StoreError::OutOfRange { .. }), "{e}");
    assert_eq!(store.get(id(5)).expect("get").data, vec![1]);
}

#[test]
fn ranged_reads_and_writes_touch_only_their_pages() {
    let dir = TestDir::new("ranged");
    let store = dir.store();
    store
        .create(&obj(7, vec![7u8; 3 * PAGE as usize]))
        .expect("create");
    // Past the end reads as zeros; a write past the end extends with zeros.
    assert_eq!(
        store.read_at(id(7), 3 * PAGE - 2, 4).expect("read"),
        [7, 7, 0, 0]
    );
    let len = store.write_at(id(7), 10 * PAGE + 1, b"far").expect("write");
    assert_eq!(len, 10 * PAGE + 4);
    let all = store.get(id(7)).expect("get").data;
    assert_eq!(all.len() as u64, len);
    assert!(
        all[3 * PAGE as usize..10 * PAGE as usize + 1]
            .iter()
            .all(|&b| b == 0)
    );
    assert_eq!(&all[10 * PAGE as usize + 1..], b"far");
    // Across a page boundary.
    store.write_at(id(7), PAGE - 1, b"xy").expect("write");
    assert_eq!(
        store.read_at(id(7), PAGE - 2, 4).expect("read"),
        [7, b'x', b'y', 7]
    );
    // Zeroing a page removes it.
    let before = store.stats().expect("stats").pages;
    store
        .write_at(id(7), 2 * PAGE, &vec![0u8; PAGE as usize])
        .expect("write zeros");
    assert_eq!(store.stats().expect("stats").pages, before - 1);
    // An update that shrinks the object drops what is past its new end.
    store
        .update(id(7), |o| {
            o.data.truncate(5);
            Ok::<(), StoreError>(())
        })
        .expect("update");
    assert_eq!(store.get(id(7)).expect("get").data, vec![7; 5]);
    assert_eq!(
        store.read_at(id(7), 0, 8).expect("read"),
        [7, 7, 7, 7, 7, 0, 0, 0]
    );
    assert_eq!(store.stats().expect("stats").pages, 1);
    // Growing it again shows zeros, not what it held before.
    store.write_at(id(7), 2 * PAGE, b"z").expect("write");
    assert!(
        store
            .read_at(id(7), 5, 2 * PAGE - 5)
            .expect("read")
            .iter()
            .all(|&b| b == 0)
    );
}

#[test]
fn a_failed_transaction_changes_nothing() {
    let dir = TestDir::new("abort");
    let store = dir.store();
    store.create(&obj(1, b"one".to_vec())).expect("create");
    let r: Result<(), StoreError> = store.transact(|tx| {
        tx.write_at(id(1), 0, b"ONE")?;
        tx.create(&obj(2, b"two".to_vec()))?;
        tx.set_name("first", id(1))?;
        tx.remove(id(1))?;
        // Fails: object 2 exists (in this transaction).
        tx.create(&obj(2, b"again".to_vec()))
    });
    assert!(matches!(r, Err(StoreError::AlreadyExists(_))));
    assert_eq!(store.get(id(1)).expect("get").data, b"one");
    assert!(matches!(store.get(id(2)), Err(StoreError::NotFound(_))));
    assert_eq!(store.name("first").expect("name"), None);
    // A transaction sees its own changes; the store sees them after it commits.
    store
        .transact(|tx| {
            tx.write_at(id(1), 3, b"!")?;
            assert_eq!(tx.get(id(1))?.data, b"one!");
            assert_eq!(store.get(id(1))?.data, b"one", "not yet committed");
            tx.create(&obj(2, b"two".to_vec()))
        })
        .expect("transact");
    assert_eq!(store.get(id(1)).expect("get").data, b"one!");
    assert_eq!(store.get(id(2)).expect("get").data, b"two");
}

#[test]
fn names_name_objects_and_go_with_them() {
    let dir = TestDir::new("names");
    let store = dir.store();
    store.create(&obj(1, vec![1])).expect("create");
    store.create(&obj(2, vec![2])).expect("create");
    store
        .transact(|tx| tx.set_name("alice", id(1)))
        .expect("name");
    // Naming again is fine; naming another object is not.
    store
        .transact(|tx| tx.set_name("alice", id(1)))
        .expect("same name");
    let e = store
        .transact(|tx| tx.set_name("alice", id(2)))
        .expect_err("taken");
    assert!(
        matches!(e, StoreError::NameTaken { id: i, .. } if i == id(1)),
        "{e}"
    );
    for bad in ["", "-x", "a b", "cafe", "0x12", "ünïcode", &"n".repeat(65)] {
        let e = store.transact(|tx| tx.set_name(bad, id(2))).expect_err(bad);
        assert!(matches!(e, StoreError::BadName { .. }), "{bad:?}: {e}");
    }
    let e = store
        .transact(|tx| tx.set_name("ghost", id(9)))
        .expect_err("no object");
    assert!(matches!(e, StoreError::NotFound(_)));
    assert_eq!(store.name("alice").expect("name"), Some(id(1)));
    assert_eq!(store.names().expect("names"), vec![("alice".into(), id(1))]);
    store.remove(id(1)).expect("remove");
    assert_eq!(
        store.name("alice").expect("name"),
        None,
        "gone with the object"
    );
}

/// One step of a random history, applied to a `DbStore` and to a `MemStore` (the model).
#[derive(Clone, Debug)]
enum Step {
    Create(u8, Vec<u8>),
    WriteAt(u8, u64, Vec<u8>),
    Put(u8, Vec<u8>),
    Remove(u8),
    ReadAt(u8, u64, u64),
}

fn step() -> impl Strategy<Value = Step> {
    let offset = prop_oneof![
        0u64..3 * PAGE,
        Just(PAGE - 1),
        Just(2 * PAGE),
        0u64..40 * PAGE
    ];
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..20),
        prop::collection::vec(Just(0u8), 0..(2 * PAGE as usize)),
        prop::collection::vec(any::<u8>(), 0..(2 * PAGE as usize + 3)),
    ];
    prop_oneof![
        (0u8..3, bytes.clone()).prop_map(|(o, b)| Step::Create(o, b)),
        (0u8..3, offset.clone(), bytes.clone()).prop_map(|(o, at, b)| Step::WriteAt(o, at, b)),
        (0u8..3, bytes).prop_map(|(o, b)| Step::Put(o, b)),
        (0u8..3).prop_map(Step::Remove),
        (0u8..3, offset, 0u64..3 * PAGE).prop_map(|(o, at, n)| Step::ReadAt(o, at, n)),
    ]
}

fn apply(store: &impl ObjectStore, s: &Step) -> Result<Vec<u8>, String> {
    let r = match s {
        Step::Create(o, b) => store
            .create(&obj(u128::from(*o), b.clone()))
            .map(|()| vec![]),
        Step::WriteAt(o, at, b) => store
            .write_at(id(u128::from(*o)), *at, b)
            .map(|n| n.to_le_bytes().to_vec()),
        Step::Put(o, b) => store
            .update(id(u128::from(*o)), |x| {
                x.data = b.clone();
                Ok::<(), StoreError>(())
            })
            .map(|_| vec![]),
        Step::Remove(o) => store.remove(id(u128::from(*o))).map(|()| vec![]),
        Step::ReadAt(o, at, n) => store.read_at(id(u128::from(*o)), *at, *n),
    };
    r.map_err(|e| format!("{e:?}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any history of creates, ranged writes, whole updates, removes and ranged reads gives
    /// the same answers and the same objects as the in-memory store.
    #[test]
    fn behaves_like_the_in_memory_model(steps in prop::collection::vec(step(), 1..12)) {
        let dir = TestDir::new("model");
        let db = dir.store();
        let mem = MemStore::new();
        for s in &steps {
            prop_assert_eq!(apply(&db, s), apply(&mem, s), "{:?}", s);
        }
        for o in 0..3u128 {
            prop_assert_eq!(db.get(id(o)).ok(), mem.get(id(o)).ok());
        }
        prop_assert_eq!(db.list().expect("list"), mem.list().expect("list"));
    }
}

#[test]
fn a_damaged_database_is_one_clear_error() {
    let dir = TestDir::new("damaged");
    let store = dir.store();
    store
        .create(&obj(1, vec![5u8; 3 * PAGE as usize]))
        .expect("create");
    drop(store);
    let file = dir.0.join(DB_FILE);
    let good = fs::read(&file).expect("read the file");

    // Not a database at all.
    fs::write(&file, b"this is not a redb file, it is text").expect("write");
    let e = DbStore::open(&dir.0).expect_err("garbage opens");
    database_error(e, &dir.0);

    // Truncated.
    fs::write(&file, &good[..good.len() / 3]).expect("write");
    match DbStore::open(&dir.0) {
        Err(e) => {
            database_error(e, &dir.0);
        }
        // redb may repair a truncation from its last good commit: then the data must be whole.
        Ok(s) => match s.get(id(1)) {
            Ok(o) => assert_eq!(o.data, vec![5u8; 3 * PAGE as usize]),
            Err(e) => {
                database_error(e, &dir.0);
            }
        },
    }

    // Bytes damaged in the middle: an error or the data, never other data or a panic.
    for (i, at) in [good.len() / 2, good.len() / 4, 600, 4096 + 64]
        .into_iter()
        .enumerate()
    {
        let mut bad = good.clone();
        for b in bad.iter_mut().skip(at).take(64) {
            *b ^= 0x5a;
        }
        fs::write(&file, &bad).expect("write");
        match DbStore::open(&dir.0).and_then(|s| s.get(id(1))) {
            Ok(o) => assert_eq!(o.data, vec![5u8; 3 * PAGE as usize], "case {i}"),
            Err(StoreError::Corrupt { .. }) => {}
            Err(e) => {
                database_error(e, &dir.0);
            }
        }
    }
}

#[test]
fn a_newer_format_is_refused_and_left_alone() {
    let dir = TestDir::new("newer");
    fs::create_dir_all(&dir.0).expect("mkdir");
    let file = dir.0.join(DB_FILE);
    {
        // What a later version would write: a greater format number.
        let db = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .create(&file)
            .expect("open with redb");
        let w = db.begin_write().expect("write");
        {
            let mut t = w
                .open_table(redb::TableDefinition::<&str, u64>::new("info"))
                .expect("table");
            t.insert("format", 99).expect("insert");
        }
        w.commit().expect("commit");
    }
    let e = DbStore::open(&dir.0).expect_err("newer format opens");
    let msg = database_error(e, &dir.0);
    assert!(msg.contains("99") && msg.contains("newer"), "{msg}");
    // Its data is left as it was: still format 99, and no table of ours was added.
    let db = redb::Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .create(&file)
        .expect("open with redb");
    let r = redb::ReadableDatabase::begin_read(&db).expect("read");
    let t = r
        .open_table(redb::TableDefinition::<&str, u64>::new("info"))
        .expect("table");
    let format = redb::ReadableTable::get(&t, "format")
        .expect("get")
        .map(|v| v.value());
    assert_eq!(format, Some(99));
    assert!(matches!(
        r.open_table(redb::TableDefinition::<u128, &[u8]>::new("objects")),
        Err(redb::TableError::TableDoesNotExist(_))
    ));
}

#[test]
fn an_old_directory_store_is_refused_then_migrated() {
    let dir = TestDir::new("legacy");
    let legacy = DirStore::open(&dir.0).expect("legacy store");
    let objects: Vec<Object> = (1..=5u128)
        .map(|i| obj(i, vec![i as u8; (i as usize) * 3000]))
        .collect();
    for o in &objects {
        legacy.create(o).expect("create");
    }
    // Never converted silently.
    let e = DbStore::open(&dir.0).expect_err("opened a directory store");
    let msg = database_error(e, &dir.0);
    assert!(msg.contains("migrate"), "{msg}");
    assert!(!dir.0.join(DB_FILE).exists());

    let target = TestDir::new("legacy-target");
    let db = target.store();
    let mut seen = Vec::new();
    let n = migrate(&legacy, &db, |done, all| seen.push((done, all))).expect("migrate");
    assert_eq!(n, 5);
    assert_eq!(seen.last(), Some(&(5, 5)));
    for o in &objects {
        assert_eq!(&db.get(o.id).expect("get"), o);
    }
    // Again: nothing new; with a conflicting object: refused, nothing copied.
    assert_eq!(migrate(&legacy, &db, |_, _| {}).expect("again"), 0);
    legacy.create(&obj(6, vec![6])).expect("create");
    db.update(id(1), |o| {
        o.data = b"changed".to_vec();
        Ok::<(), StoreError>(())
    })
    .expect("update");
    let e = migrate(&legacy, &db, |_, _| {}).expect_err("conflict");
    assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
    assert!(
        matches!(db.get(id(6)), Err(StoreError::NotFound(_))),
        "nothing copied"
    );
}

/// A small tmpfs mounted at a fresh directory, unmounted when dropped; `None` (and a note on
/// stderr) where this process may not mount (not root, or no `mount`).
struct SmallFs(TestDir);

impl SmallFs {
    fn mount(name: &str, size: &str) -> Option<Self> {
        let dir = TestDir::new(name);
        fs::create_dir_all(&dir.0).expect("mkdir");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs root and mount(8))");
            return None;
        }
        Some(Self(dir))
    }

    fn remount(&self, how: &str) {
        let ok = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&self.0.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount {how}");
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0.0).status();
    }
}

#[test]
fn a_full_disk_is_one_clear_error_and_keeps_what_was_committed() {
    let Some(mnt) = SmallFs::mount("full", "2m") else {
        return;
    };
    let root = mnt.0.0.join("store");
    let store = DbStore::open(&root).expect("open");
    let mut committed = Vec::new();
    let mut failure = None;
    for i in 0..200u128 {
        let o = obj(i + 1, vec![(i % 251) as u8 + 1; 64 * 1024]);
        match store.create(&o) {
            Ok(()) => committed.push(o),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let e = failure.expect("2 MB filled up");
    let msg = e.to_string();
    eprintln!("full: {msg}");
    assert!(
        !msg.contains('\n') && msg.contains(&*root.to_string_lossy()),
        "{msg}"
    );
    assert!(!committed.is_empty());
    drop(store);
    // Everything committed before is there, whole, when opened again.
    let again = DbStore::open(&root).expect("reopen a full store");
    for o in &committed {
        assert_eq!(&again.get(o.id).expect("committed object"), o);
    }
}

#[test]
fn a_read_only_store_is_one_clear_error_and_left_intact() {
    let Some(mnt) = SmallFs::mount("ro", "8m") else {
        return;
    };
    let root = mnt.0.0.join("store");
    let o = obj(1, b"kept".to_vec());
    DbStore::open(&root)
        .expect("open")
        .create(&o)
        .expect("create");
    mnt.remount("ro");
    let e = DbStore::open(&root).expect_err("a read-only store opens for writing");
    let msg = e.to_string();
    assert!(
        !msg.contains('\n') && msg.contains(&*root.to_string_lossy()),
        "{msg}"
    );
    // A new store in a read-only directory: the same.
    eprintln!("read-only: {msg}");
    let e = DbStore::open(mnt.0.0.join("new")).expect_err("created on a read-only fs");
    assert!(!e.to_string().contains('\n'), "{e}");
    mnt.remount("rw");
    let again = DbStore::open(&root).expect("open again");
    assert_eq!(again.get(o.id).expect("still there"), o);
}

/// Found by the model test: an empty write past the end extended the in-memory store's
/// object but not the database's. Writing nothing changes nothing, in both.
#[test]
fn an_empty_write_past_the_end_changes_nothing() {
    let dir = TestDir::new("empty-write");
    let db = dir.store();
    let mem = MemStore::new();
    for (name, len) in [
        ("db", {
            db.create(&obj(1, vec![1; 10])).expect("create");
            db.write_at(id(1), 10 * PAGE, &[]).expect("write")
        }),
        ("mem", {
            mem.create(&obj(1, vec![1; 10])).expect("create");
            mem.write_at(id(1), 10 * PAGE, &[]).expect("write")
        }),
    ] {
        assert_eq!(len, 10, "{name}");
    }
    assert_eq!(db.get(id(1)).expect("get").data, vec![1; 10]);
    assert_eq!(mem.get(id(1)).expect("get").data, vec![1; 10]);
}

/// A batch of ranged reads answers each exactly as `read_at` does, errors included.
#[test]
fn read_batches_answer_like_single_reads() {
    let dir = TestDir::new("read-batch");
    let store = dir.store();
    store
        .create(&obj(1, (0..3 * PAGE).map(|i| i as u8).collect()))
        .expect("create");
    store.create(&obj(2, b"short".to_vec())).expect("create");
    let reads = [
        (id(1), 0, 1),
        (id(1), PAGE - 3, 7),
        (id(1), 3 * PAGE - 2, 9),
        (id(2), 0, 5),
        (id(2), 3, 10),
        (id(2), 0, 0),
        (id(3), 0, 1),
        (id(1), MAX_OBJECT_LEN, 1),
        (id(1), u64::MAX, 2),
    ];
    let batch = store.read_batch(&reads).expect("batch");
    assert_eq!(batch.len(), reads.len());
    for (&(o, off, len), got) in reads.iter().zip(&batch) {
        let single = store.read_at(o, off, len);
        assert_eq!(format!("{got:?}"), format!("{single:?}"), "{o} {off} {len}");
    }
    assert!(store.read_batch(&[]).expect("empty batch").is_empty());
}

/// Opens the store in `dir` on another thread, read-only or not, and waits at most a minute
/// for the answer: an open that blocks fails the test instead of hanging it.
fn open_bounded(dir: &Path, read_only: bool) -> Result<DbStore, StoreError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let r = if read_only {
            DbStore::open_read_only(&dir)
        } else {
            DbStore::open(&dir)
        };
        let _ = tx.send(r);
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("opening the store blocked (read_only: {read_only})"))
}

/// Puts something at a database's path; a socket is kept open by what it returns.
type Plant<'a> = dyn Fn(&Path) -> Option<std::os::unix::net::UnixListener> + 'a;

/// A FIFO planted as the database hung every reader for ever (issue 20, defect 3). Anything
/// that is not a regular file is refused, by read-only and read-write opens alike, at once,
/// with an error naming the path and what is there; it is left in place.
#[test]
fn a_database_that_is_not_a_regular_file_is_refused_without_blocking() {
    let real = TestDir::new("irregular-real");
    real.store().create(&obj(1, vec![1])).expect("create");
    let real_db = real.0.join(DB_FILE);
    let real_bytes = fs::read(&real_db).expect("read");
    let kinds: [(&str, &Plant<'_>); 6] = [
        ("FIFO", &|db| {
            let st = std::process::Command::new("mkfifo").arg(db).status();
            assert!(st.expect("mkfifo").success());
            None
        }),
        ("directory", &|db| {
            fs::create_dir(db).expect("mkdir");
            None
        }),
        ("socket", &|db| {
            Some(std::os::unix::net::UnixListener::bind(db).expect("bind"))
        }),
        ("symbolic link", &|db| {
            std::os::unix::fs::symlink(&real_db, db).expect("symlink");
            None
        }),
        ("symbolic link", &|db| {
            std::os::unix::fs::symlink(db.with_extension("nowhere"), db).expect("symlink");
            None
        }),
        // The null device (1:3): only root may make one, so elsewhere this case is skipped.
        ("character device", &|db| {
            let _ = std::process::Command::new("mknod")
                .arg(db)
                .args(["c", "1", "3"])
                .stderr(std::process::Stdio::null())
                .status();
            None
        }),
    ];
    for (i, (kind, plant)) in kinds.iter().enumerate() {
        let dir = TestDir::new(&format!("irregular-{i}"));
        fs::create_dir(&dir.0).expect("mkdir");
        let db = dir.0.join(DB_FILE);
        let _keep = plant(&db);
        if fs::symlink_metadata(&db).is_err() {
            eprintln!("skipped: cannot make a {kind} here");
            continue;
        }
        for read_only in [true, false] {
            let e = open_bounded(&dir.0, read_only).expect_err(kind);
            assert!(
                matches!(&e, StoreError::Database { path, .. } if *path == db),
                "{kind}: {e}"
            );
            assert!(e.to_string().contains(kind), "{kind}: {e}");
        }
        let t = fs::symlink_metadata(&db).expect("still there").file_type();
        assert!(!t.is_file(), "{kind} was replaced");
        let left: Vec<_> = fs::read_dir(&dir.0).expect("list").flatten().collect();
        assert_eq!(left.len(), 1, "{kind}: something was created beside it");
    }
    assert_eq!(fs::read(&real_db).expect("read"), real_bytes);
}

/// Reading never creates a store (issue 22, item 5): `open_read_only` of a missing store, or
/// of a directory without a database, is an error naming the database's path, and leaves the
/// file system as it was.
#[test]
fn open_read_only_never_creates_a_store() {
    let dir = TestDir::new("read-only-missing");
    let e = open_bounded(&dir.0, true).expect_err("opened a missing store");
    assert!(
        matches!(&e, StoreError::Database { path, .. } if *path == dir.0.join(DB_FILE)),
        "{e}"
    );
    assert!(e.to_string().contains("no store"), "{e}");
    assert!(!dir.0.exists(), "the store directory was created");
    fs::create_dir(&dir.0).expect("mkdir");
    open_bounded(&dir.0, true).expect_err("opened an empty directory");
    assert_eq!(fs::read_dir(&dir.0).expect("list").count(), 0);
    // Once a writer has created it, readers open it.
    dir.store().create(&obj(1, vec![7])).expect("create");
    let r = open_bounded(&dir.0, true).expect("read-only open");
    assert_eq!(r.get(id(1)).expect("get").data, [7]);
}
