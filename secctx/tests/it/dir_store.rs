//! Tests of `DirStore`: the file format, damaged files, modes, locking across threads and
//! across processes.
//!
//! The two-process test re-runs this test binary as child processes, filtered to
//! [`child_appender`], with [`CHILD_DIR_ENV`] set; without that variable `child_appender`
//! does nothing.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use secctx::DirStore;
use secctx::dir_store::{
    CHECKSUM_LEN, HEADER_LEN, MIN_FILE_LEN, ObjectFileError, decode_object, decode_object_file,
    encode_object,
};
use secctx::store::{ObjMeta, Object, StoreError};
use twizzler_capsec::{ObjID, Protections};

/// Set in child processes: the store directory to append in.
const CHILD_DIR_ENV: &str = "SECCTX_DIR_STORE_TEST_CHILD_DIR";
/// Set in child processes: the tag byte of this child's appends.
const CHILD_TAG_ENV: &str = "SECCTX_DIR_STORE_TEST_CHILD_TAG";
/// Set in child processes: the object to append to, in hex.
const CHILD_OBJ_ENV: &str = "SECCTX_DIR_STORE_TEST_CHILD_OBJ";
/// Appends per process or thread in the concurrency tests.
const APPENDS: u16 = 200;
/// The file whose appearance tells the children to start.
const GO_FILE: &str = "go";

/// A fresh directory under cargo's per-target temporary directory, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("dir_store-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        TestDir(path)
    }

    fn store(&self) -> DirStore {
        DirStore::open(&self.0).expect("open store")
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

fn sample(raw: u128) -> Object {
    Object {
        id: id(raw),
        meta: ObjMeta {
            kuid: Some(id(0xfeed_0000_0000_0000_0000_0000_0000_beef)),
            default_prots: Protections::READ | Protections::EXEC,
            secret: false,
        },
        data: b"twenty bytes of data".to_vec(),
    }
}

/// Recomputes the checksum of an encoding whose header was patched.
fn reseal(bytes: &mut Vec<u8>) {
    bytes.truncate(bytes.len().saturating_sub(CHECKSUM_LEN));
    let sum = blake3::hash(bytes);
    bytes.extend_from_slice(sum.as_bytes());
}

/// The `why` of a `Corrupt` error about `expected`; fails the test on anything else.
fn corrupt_why(result: Result<Object, StoreError>, expected: ObjID) -> String {
    match result {
        Err(StoreError::Corrupt { id, why }) => {
            assert_eq!(id, expected, "the error names the object");
            why
        }
        other => panic!("expected Corrupt for {expected}, got {other:?}"),
    }
}

/// Names in the store directory that are neither object nor lock files.
fn leftovers(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".obj") && !n.ends_with(".lock") && n != GO_FILE)
        .collect()
}

#[test]
fn round_trip_with_and_without_kuid() {
    let dir = TestDir::new("round-trip");
    let store = dir.store();
    assert_eq!(store.path(), dir.0);
    let with = sample(1);
    let without = Object {
        id: id(u128::MAX),
        meta: ObjMeta::plain(),
        data: Vec::new(),
    };
    let zero_kuid = Object {
        id: id(0),
        meta: ObjMeta::signed_by(id(0)),
        data: vec![0; 5000],
    };
    for obj in [&with, &without, &zero_kuid] {
        store.create(obj).expect("create");
    }
    for obj in [&with, &without, &zero_kuid] {
        assert_eq!(&store.get(obj.id).expect("get"), obj);
    }
    assert_eq!(
        store.list().expect("list"),
        vec![id(0), id(1), id(u128::MAX)]
    );
    assert!(
        store
            .object_path(with.id)
            .ends_with("00000000000000000000000000000001.obj")
    );
    // A second handle on the same directory sees the same objects.
    let again = DirStore::open(&dir.0).expect("reopen");
    assert_eq!(again.get(with.id).expect("get"), with);
    assert_eq!(leftovers(&dir.0), Vec::<String>::new());
}

#[test]
fn encoding_layout() {
    let obj = sample(0x0102);
    let bytes = encode_object(&obj);
    assert_eq!(bytes.len(), MIN_FILE_LEN + obj.data.len());
    assert_eq!(&bytes[0..4], b"TZOB");
    assert_eq!(&bytes[4..6], &1u16.to_le_bytes());
    assert_eq!(&bytes[6..8], &1u16.to_le_bytes(), "has kuid, not secret");
    assert_eq!(&bytes[8..24], &0x0102u128.to_le_bytes());
    assert_eq!(
        &bytes[24..40],
        &obj.meta.kuid.unwrap_or_default().to_le_bytes()
    );
    assert_eq!(&bytes[40..42], &5u16.to_le_bytes());
    assert_eq!(&bytes[42..44], &[0, 0]);
    assert_eq!(&bytes[44..52], &20u64.to_le_bytes());
    assert_eq!(&bytes[HEADER_LEN..HEADER_LEN + 20], obj.data.as_slice());
    assert_eq!(&bytes[72..], blake3::hash(&bytes[..72]).as_bytes());
}

#[cfg(unix)]
#[test]
fn modes_of_directory_and_files() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;

    let dir = TestDir::new("modes");
    let nested = dir.0.join("a").join("store");
    let store = DirStore::open(&nested).expect("open nested");
    assert_eq!(mode(&nested), 0o700);

    let mut secret = sample(7);
    secret.meta.secret = true;
    store.create(&secret).expect("create secret");
    assert_eq!(mode(&store.object_path(secret.id)), 0o600);
    assert!(store.get(secret.id).expect("get").meta.secret);

    let public = sample(8);
    store.create(&public).expect("create public");
    let public_mode = mode(&store.object_path(public.id));
    assert_eq!(public_mode & 0o700, 0o600, "owner reads and writes");
    assert_eq!(
        public_mode & !0o644,
        0,
        "at most 0644 (umask may remove more)"
    );

    // An update that makes the object secret writes a 0600 file, and back.
    store
        .update(public.id, |o| {
            o.meta.secret = true;
            Ok::<_, StoreError>(())
        })
        .expect("update");
    assert_eq!(mode(&store.object_path(public.id)), 0o600);
    store
        .update(secret.id, |o| {
            o.data.push(1);
            Ok::<_, StoreError>(())
        })
        .expect("update");
    assert_eq!(mode(&store.object_path(secret.id)), 0o600, "stays secret");
}

#[test]
fn open_refuses_a_file() {
    let dir = TestDir::new("open-file");
    fs::create_dir_all(&dir.0).expect("mkdir");
    let file = dir.0.join("plain-file");
    fs::write(&file, b"x").expect("write");
    match DirStore::open(&file) {
        Err(StoreError::Io { id: None, path, .. }) => assert_eq!(path, file),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn create_twice_is_already_exists_and_keeps_the_original() {
    let dir = TestDir::new("create-twice");
    let store = dir.store();
    let obj = sample(3);
    store.create(&obj).expect("create");
    let mut other = sample(3);
    other.data = b"clobber".to_vec();
    match store.create(&other) {
        Err(StoreError::AlreadyExists(got)) => assert_eq!(got, obj.id),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(store.get(obj.id).expect("get"), obj);
    assert_eq!(leftovers(&dir.0), Vec::<String>::new());
}

#[test]
fn concurrent_creates_of_one_id_have_one_winner() {
    let dir = TestDir::new("create-race");
    let store = dir.store();
    for round in 0..20u128 {
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u8)
                .map(|t| {
                    let store = &store;
                    s.spawn(move || {
                        let mut obj = sample(round);
                        obj.data = vec![t];
                        store.create(&obj).map(|()| t)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("join"))
                .collect()
        });
        let winners: Vec<u8> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(_) | Err(StoreError::AlreadyExists(_))))
        );
        assert_eq!(store.get(id(round)).expect("get").data, winners);
    }
}

#[test]
fn missing_objects_are_not_found_naming_the_id() {
    let dir = TestDir::new("missing");
    let store = dir.store();
    let missing = id(0xabcdef);
    let err = store.get(missing).expect_err("missing");
    assert!(matches!(err, StoreError::NotFound(got) if got == missing));
    assert!(
        err.to_string().contains("00000000000000000000000000abcdef"),
        "{err}"
    );
    assert!(matches!(
        store.update(missing, |_| Ok::<_, StoreError>(())),
        Err(StoreError::NotFound(got)) if got == missing
    ));
    assert!(matches!(store.remove(missing), Err(StoreError::NotFound(got)) if got == missing));
    assert!(store.list().expect("list").is_empty());
}

#[test]
fn remove_deletes_the_object() {
    let dir = TestDir::new("remove");
    let store = dir.store();
    store.create(&sample(1)).expect("create");
    store.create(&sample(2)).expect("create");
    store.remove(id(1)).expect("remove");
    assert!(matches!(store.get(id(1)), Err(StoreError::NotFound(_))));
    assert!(!store.object_path(id(1)).exists());
    assert_eq!(store.list().expect("list"), vec![id(2)]);
    // The id can be used again.
    store.create(&sample(1)).expect("create again");
    assert_eq!(store.get(id(1)).expect("get"), sample(1));
}

#[test]
fn every_truncation_is_corrupt() {
    let dir = TestDir::new("truncation");
    let store = dir.store();
    let obj = sample(0x77);
    store.create(&obj).expect("create");
    let path = store.object_path(obj.id);
    let full = fs::read(&path).expect("read");
    for len in 0..full.len() {
        fs::write(&path, &full[..len]).expect("write");
        let why = corrupt_why(store.get(obj.id), obj.id);
        assert!(why.starts_with("truncated: "), "length {len}: {why}");
        assert!(why.contains(&format!("{len} of ")), "length {len}: {why}");
    }
    fs::write(&path, &full[..37]).expect("write");
    let err = store.get(obj.id).expect_err("truncated");
    assert_eq!(
        err.to_string(),
        format!(
            "object {} is corrupt: truncated: 37 of at least 84 bytes",
            obj.id
        )
    );
    fs::write(&path, &full[..60]).expect("write");
    assert_eq!(
        corrupt_why(store.get(obj.id), obj.id),
        "truncated: 60 of 104 bytes"
    );
    // An update of a damaged object fails and does not "repair" it.
    let updated = store.update(obj.id, |o| {
        o.data.clear();
        Ok::<_, StoreError>(())
    });
    assert!(matches!(updated, Err(StoreError::Corrupt { .. })));
    assert_eq!(fs::read(&path).expect("read"), &full[..60]);
}

#[test]
fn the_typed_decoder_names_the_variant() {
    let obj = sample(6);
    let mut bytes = encode_object(&obj);
    assert_eq!(decode_object_file(obj.id, &bytes), Ok(obj.clone()));
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    assert_eq!(
        decode_object_file(obj.id, &bytes),
        Err(ObjectFileError::Checksum)
    );
    assert_eq!(
        decode_object_file(obj.id, b"TZ"),
        Err(ObjectFileError::TooShort(2))
    );
    assert!(matches!(
        decode_object_file(obj.id, b"TZOC"),
        Err(ObjectFileError::BadMagic { len: 4, .. })
    ));
}

#[test]
fn trailing_bytes_are_corrupt() {
    let obj = sample(5);
    let mut bytes = encode_object(&obj);
    bytes.push(0);
    let why = corrupt_why(decode_object(obj.id, &bytes), obj.id);
    assert_eq!(why, "trailing bytes: 105 bytes where the header says 104");
}

#[test]
fn every_single_bit_flip_is_corrupt() {
    let dir = TestDir::new("bit-flips");
    let store = dir.store();
    let obj = sample(0x99);
    store.create(&obj).expect("create");
    let path = store.object_path(obj.id);
    let full = fs::read(&path).expect("read");
    for bit in 0..full.len() * 8 {
        let mut bytes = full.clone();
        bytes[bit / 8] ^= 1 << (bit % 8);
        fs::write(&path, &bytes).expect("write");
        let why = corrupt_why(store.get(obj.id), obj.id);
        let byte = bit / 8;
        if (8..44).contains(&byte) || byte >= HEADER_LEN {
            // Fields after the length, data and checksum: only the checksum can tell.
            assert_eq!(why, "checksum mismatch", "bit {bit}");
        }
    }
}

#[test]
fn a_file_under_another_ids_name_is_corrupt() {
    let dir = TestDir::new("wrong-name");
    let store = dir.store();
    let obj = sample(0x1111);
    store.create(&obj).expect("create");
    let other = id(0x2222);
    fs::copy(store.object_path(obj.id), store.object_path(other)).expect("copy");
    let why = corrupt_why(store.get(other), other);
    assert!(why.contains(&obj.id.to_string()), "{why}");
    assert_eq!(store.get(obj.id).expect("get"), obj);
}

#[test]
fn header_errors_are_named() {
    let obj = sample(0x42);
    let clean = encode_object(&obj);
    let patched = |offset: usize, value: &[u8], reseal_it: bool| {
        let mut bytes = clean.clone();
        bytes[offset..offset + value.len()].copy_from_slice(value);
        if reseal_it {
            reseal(&mut bytes);
        }
        corrupt_why(decode_object(obj.id, &bytes), obj.id)
    };
    assert_eq!(
        patched(0, b"TZOC", true),
        "bad magic TZOC, expected \"TZOB\""
    );
    assert_eq!(
        corrupt_why(decode_object(obj.id, b"{\n"), obj.id),
        "bad magic {\\n, expected \"TZOB\""
    );
    assert_eq!(
        corrupt_why(decode_object(obj.id, b""), obj.id),
        "truncated: 0 of at least 84 bytes"
    );
    assert_eq!(
        patched(4, &2u16.to_le_bytes(), true),
        "unsupported format version 2 (this build reads 1)"
    );
    assert_eq!(
        patched(6, &5u16.to_le_bytes(), true),
        "unknown flag bits 0x0004"
    );
    assert_eq!(
        patched(6, &0x8001u16.to_le_bytes(), true),
        "unknown flag bits 0x8000"
    );
    assert_eq!(
        patched(6, &0u16.to_le_bytes(), true),
        format!(
            "kuid {} is set but the has-kuid flag is clear",
            obj.meta.kuid.unwrap_or_default()
        )
    );
    assert_eq!(
        patched(40, &8u16.to_le_bytes(), true),
        "default protections 0x0008 have bits that name no right"
    );
    assert_eq!(
        patched(42, &1u16.to_le_bytes(), true),
        "reserved field is 0x0001, not 0"
    );
    assert_eq!(
        patched(44, &u64::MAX.to_le_bytes(), true),
        "data length 18446744073709551615 is impossibly large"
    );
    assert_eq!(
        patched(44, &(u64::MAX - 84).to_le_bytes(), true),
        "truncated: 104 of 18446744073709551615 bytes"
    );
    assert_eq!(
        patched(44, &19u64.to_le_bytes(), true),
        "trailing bytes: 104 bytes where the header says 103"
    );
    assert_eq!(
        patched(50, &[1], false),
        "truncated: 104 of 281474976710760 bytes"
    );
    assert!(patched(8, &[0x43], true).contains("not the object its name says"));
    // Without resealing, any header change is a checksum mismatch.
    assert_eq!(patched(6, &5u16.to_le_bytes(), false), "checksum mismatch");
}

#[test]
fn invalid_protections_are_refused_and_nothing_is_written() {
    let dir = TestDir::new("bad-prots");
    let store = dir.store();
    let mut obj = sample(9);
    obj.meta.default_prots = Protections::from_bits_retain(0x10);
    assert!(matches!(store.create(&obj), Err(StoreError::Rejected { id, .. }) if id == obj.id));
    assert!(matches!(store.get(obj.id), Err(StoreError::NotFound(_))));
    store.create(&sample(9)).expect("create");
    let before = fs::read(store.object_path(obj.id)).expect("read");
    let result = store.update(obj.id, |o| {
        o.meta.default_prots = Protections::from_bits_retain(0x10);
        Ok::<_, StoreError>(())
    });
    assert!(matches!(result, Err(StoreError::Rejected { .. })));
    assert_eq!(fs::read(store.object_path(obj.id)).expect("read"), before);
    assert_eq!(leftovers(&dir.0), Vec::<String>::new());
}

/// A caller's error type for `update`.
#[derive(Debug)]
enum EditError {
    Store(StoreError),
    Refused(&'static str),
}

impl From<StoreError> for EditError {
    fn from(e: StoreError) -> Self {
        EditError::Store(e)
    }
}

#[test]
fn a_failing_edit_leaves_the_object_unchanged() {
    let dir = TestDir::new("failing-edit");
    let store = dir.store();
    let obj = sample(0x10);
    store.create(&obj).expect("create");
    let path = store.object_path(obj.id);
    let before = fs::read(&path).expect("read");
    let result = store.update(obj.id, |o| {
        o.data = b"half-done change".to_vec();
        o.meta.secret = true;
        Err(EditError::Refused("no"))
    });
    assert!(
        matches!(result, Err(EditError::Refused("no"))),
        "{result:?}"
    );
    // Store errors reach the caller through its own error type.
    let missing = store.update(id(0xdead), |_| Ok::<_, EditError>(()));
    assert!(
        matches!(missing, Err(EditError::Store(StoreError::NotFound(got))) if got == id(0xdead)),
        "{missing:?}"
    );
    assert_eq!(fs::read(&path).expect("read"), before);
    assert_eq!(store.get(obj.id).expect("get"), obj);
    // The lock was released: another update goes through.
    let after = store
        .update(obj.id, |o| {
            o.data.push(b'!');
            Ok::<_, EditError>(())
        })
        .expect("update");
    assert_eq!(after.data, b"twenty bytes of data!");
    assert_eq!(store.get(obj.id).expect("get"), after);
    assert_eq!(leftovers(&dir.0), Vec::<String>::new());
}

#[test]
fn a_panicking_edit_releases_the_lock() {
    let dir = TestDir::new("panicking-edit");
    let store = dir.store();
    let obj = sample(0x11);
    store.create(&obj).expect("create");
    let store2 = store.clone();
    let joined = std::thread::spawn(move || {
        store2.update(obj.id, |o| -> Result<(), StoreError> {
            o.data.clear();
            panic!("edit panics on purpose");
        })
    })
    .join();
    assert!(joined.is_err(), "the edit panicked");
    assert_eq!(store.get(obj.id).expect("get"), obj);
    // If the lock were still held this would block forever.
    store
        .update(obj.id, |o| {
            o.data.clear();
            Ok::<_, StoreError>(())
        })
        .expect("update after panic");
    assert!(store.get(obj.id).expect("get").data.is_empty());
}

#[test]
fn an_edit_cannot_move_the_object() {
    let dir = TestDir::new("move");
    let store = dir.store();
    store.create(&sample(1)).expect("create");
    let updated = store
        .update(id(1), |o| {
            o.id = id(2);
            o.data = b"moved?".to_vec();
            Ok::<_, StoreError>(())
        })
        .expect("update");
    assert_eq!(updated.id, id(1));
    assert_eq!(store.get(id(1)).expect("get").data, b"moved?");
    assert_eq!(store.list().expect("list"), vec![id(1)]);
}

#[test]
fn list_ignores_stray_files() {
    let dir = TestDir::new("stray");
    let store = dir.store();
    store.create(&sample(0xa)).expect("create");
    store.create(&sample(0xb)).expect("create");
    let hex = id(0xc).to_string();
    for name in [
        format!(".{hex}.123.0.tmp"),
        format!("{hex}.lock"),
        format!("{hex}.obj.tmp"),
        format!("{}.obj", hex.to_uppercase().replace('0', "A")),
        format!("{}.obj", &hex[1..]),
        format!("0{hex}.obj"),
        format!("0x{}.obj", &hex[2..]),
        "README".to_string(),
        ".obj".to_string(),
    ] {
        fs::write(dir.0.join(name), b"stray").expect("write");
    }
    fs::create_dir(dir.0.join("subdir")).expect("mkdir");
    assert_eq!(store.list().expect("list"), vec![id(0xa), id(0xb)]);
}

/// The append of `tag`'s `i`-th update: distinct for every (tag, i).
fn record(tag: u8, i: u16) -> [u8; 4] {
    let [lo, hi] = i.to_le_bytes();
    [tag, lo, hi, !tag]
}

fn append_all(store: &DirStore, obj: ObjID, tag: u8) {
    for i in 0..APPENDS {
        store
            .update(obj, |o| {
                o.data.extend_from_slice(&record(tag, i));
                Ok::<_, StoreError>(())
            })
            .unwrap_or_else(|e| panic!("append {i} of {tag}: {e}"));
    }
}

/// Checks that `data` holds every append of every tag, each tag's in order.
fn assert_all_appends(data: &[u8], tags: &[u8]) {
    assert_eq!(
        data.len(),
        tags.len() * usize::from(APPENDS) * 4,
        "every append is there exactly once"
    );
    let mut next = vec![0u16; tags.len()];
    for chunk in data.chunks_exact(4) {
        let k = tags
            .iter()
            .position(|&t| t == chunk[0])
            .unwrap_or_else(|| panic!("unknown record {chunk:?}"));
        assert_eq!(
            chunk,
            record(tags[k], next[k]),
            "records are whole and in order"
        );
        next[k] += 1;
    }
    assert!(next.iter().all(|&n| n == APPENDS));
}

#[test]
fn threads_appending_concurrently_lose_nothing() {
    let dir = TestDir::new("threads");
    let store = dir.store();
    let obj = Object {
        id: id(0x7777),
        meta: ObjMeta::plain(),
        data: Vec::new(),
    };
    store.create(&obj).expect("create");
    let tags = [3u8, 4];
    std::thread::scope(|s| {
        for tag in tags {
            let store = &store;
            s.spawn(move || append_all(store, obj.id, tag));
        }
    });
    assert_all_appends(&store.get(obj.id).expect("get").data, &tags);
    assert_eq!(
        leftovers(&dir.0),
        Vec::<String>::new(),
        "no temporary file is left"
    );
}

#[test]
fn two_processes_appending_concurrently_lose_nothing() {
    let dir = TestDir::new("processes");
    let store = dir.store();
    let obj = Object {
        id: id(0x5555_0000_0000_0000_0000_0000_0000_0001),
        meta: ObjMeta::plain(),
        data: Vec::new(),
    };
    store.create(&obj).expect("create");
    let exe = std::env::current_exe().expect("current exe");
    let tags = [1u8, 2];
    let children: Vec<_> = tags
        .iter()
        .map(|tag| {
            Command::new(&exe)
                .args([
                    "--exact",
                    &crate::test_path(module_path!(), "child_appender"),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR_ENV, &dir.0)
                .env(CHILD_TAG_ENV, tag.to_string())
                .env(CHILD_OBJ_ENV, obj.id.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    // Both children are running (or starting): let them go at once.
    fs::write(dir.0.join(GO_FILE), b"").expect("go");
    for child in children {
        let out = child.wait_with_output().expect("wait for child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("child appender done"),
            "the child ran: {stdout}"
        );
    }
    assert_all_appends(&store.get(obj.id).expect("get").data, &tags);
    assert_eq!(
        leftovers(&dir.0),
        Vec::<String>::new(),
        "no temporary file is left"
    );
}

/// The child routine of [`two_processes_appending_concurrently_lose_nothing`]; does nothing
/// unless run as its child.
#[test]
fn child_appender() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let tag: u8 = std::env::var(CHILD_TAG_ENV)
        .expect("tag")
        .parse()
        .expect("tag");
    let obj: ObjID = std::env::var(CHILD_OBJ_ENV)
        .expect("obj")
        .parse()
        .expect("obj");
    let store = DirStore::open(PathBuf::from(dir)).expect("open");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !store.path().join(GO_FILE).exists() {
        assert!(Instant::now() < deadline, "no go signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    append_all(&store, obj, tag);
    println!("child appender done");
}

fn arb_object() -> impl Strategy<Value = Object> {
    (
        any::<u128>(),
        proptest::option::of(any::<u128>()),
        0u16..8,
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(raw, kuid, prots, secret, data)| Object {
            id: id(raw),
            meta: ObjMeta {
                kuid: kuid.map(ObjID::new),
                default_prots: Protections::from_bits_retain(prots),
                secret,
            },
            data,
        })
}

/// Decoding `bytes` as object `expected` either fails with `Corrupt` naming it, or gives an
/// object that encodes back to exactly `bytes`.
fn check_total_and_canonical(expected: ObjID, bytes: &[u8]) -> Result<bool, TestCaseError> {
    match decode_object(expected, bytes) {
        Ok(obj) => {
            prop_assert_eq!(obj.id, expected);
            prop_assert_eq!(encode_object(&obj), bytes);
            Ok(true)
        }
        Err(StoreError::Corrupt { id, why }) => {
            prop_assert_eq!(id, expected);
            prop_assert!(!why.is_empty());
            // The store's message is the typed decoder's.
            let typed = decode_object_file(expected, bytes);
            prop_assert_eq!(typed.map_err(|e| e.to_string()), Err(why));
            Ok(false)
        }
        Err(other) => Err(TestCaseError::fail(format!("not Corrupt: {other:?}"))),
    }
}

proptest! {
    #[test]
    fn objects_round_trip(obj in arb_object()) {
        let bytes = encode_object(&obj);
        prop_assert_eq!(decode_object(obj.id, &bytes).ok(), Some(obj));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_decode(
        raw in any::<u128>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        check_total_and_canonical(id(raw), &bytes)?;
    }

    /// Headers with every field arbitrary but a correct checksum: accepted exactly when every
    /// field is valid.
    #[test]
    fn sealed_arbitrary_headers_decode_only_when_valid(
        file_id in 0u128..3,
        stored_id in 0u128..3,
        version in prop_oneof![Just(1u16), any::<u16>()],
        flags in prop_oneof![0u16..4, any::<u16>()],
        kuid in prop_oneof![Just(0u128), any::<u128>()],
        prots in prop_oneof![0u16..8, any::<u16>()],
        reserved in prop_oneof![Just(0u16), any::<u16>()],
        data in proptest::collection::vec(any::<u8>(), 0..50),
        len_delta in prop_oneof![Just(0i64), -3i64..3],
    ) {
        let mut bytes = b"TZOB".to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&stored_id.to_le_bytes());
        bytes.extend_from_slice(&kuid.to_le_bytes());
        bytes.extend_from_slice(&prots.to_le_bytes());
        bytes.extend_from_slice(&reserved.to_le_bytes());
        let len = (data.len() as i64 + len_delta).max(0) as u64;
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&data);
        bytes.extend_from_slice(blake3::hash(&bytes).as_bytes());
        let valid = version == 1
            && flags & !3 == 0
            && (flags & 1 != 0 || kuid == 0)
            && prots < 8
            && reserved == 0
            && len == data.len() as u64
            && file_id == stored_id;
        let decoded = check_total_and_canonical(id(file_id), &bytes)?;
        prop_assert_eq!(decoded, valid);
    }

    /// Valid encodings with one damage, with or without a recomputed checksum.
    #[test]
    fn damaged_encodings_never_decode_to_something_else(
        obj in arb_object(),
        pos in any::<prop::sample::Index>(),
        value in any::<u8>(),
        kind in 0u8..3,
        seal in any::<bool>(),
    ) {
        let mut bytes = encode_object(&obj);
        let at = pos.index(bytes.len());
        match kind {
            0 => bytes[at] ^= value | 1,
            1 => bytes.truncate(at),
            _ => bytes.insert(at, value),
        }
        if seal && bytes.len() >= CHECKSUM_LEN {
            reseal(&mut bytes);
        }
        let decoded = check_total_and_canonical(obj.id, &bytes)?;
        if !seal {
            prop_assert!(!decoded, "unsealed damage is always detected");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same through the file system: `get` on arbitrary file contents.
    #[test]
    fn arbitrary_files_never_panic_get(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            arb_object().prop_map(|mut o| { o.id = id(1); encode_object(&o) }),
        ],
    ) {
        let dir = TestDir::new("arbitrary-files");
        let store = dir.store();
        fs::write(store.object_path(id(1)), &bytes).expect("write");
        match store.get(id(1)) {
            Ok(obj) => prop_assert_eq!(encode_object(&obj), bytes),
            Err(StoreError::Corrupt { id: got, .. }) => prop_assert_eq!(got, id(1)),
            Err(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
        }
        let ids: BTreeSet<_> = store.list().expect("list").into_iter().collect();
        prop_assert_eq!(ids, BTreeSet::from([id(1)]));
    }
}

/// Runs `f` on another thread; fails the test (instead of hanging it) after `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: did not return within {secs} s"))
}

#[test]
fn a_fifo_planted_as_an_object_is_an_error_not_a_hang() {
    let dir = TestDir::new("fifo");
    let store = DirStore::open(&dir.0).unwrap();
    let fifo = store.object_path(id(0x77));
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let r = within(10, "get of a FIFO", move || store.get(id(0x77)));
    match r {
        Err(StoreError::Corrupt { id: i, why }) => {
            assert_eq!(i, id(0x77));
            assert!(why.contains("not a regular file"), "{why}");
        }
        other => panic!("expected a clear error, got {other:?}"),
    }
}

#[test]
#[cfg(unix)]
fn a_lock_file_that_is_a_symlink_is_refused_and_not_followed() {
    let dir = TestDir::new("locklink");
    let store = DirStore::open(&dir.0).unwrap();
    store.create(&sample(0x78)).unwrap();
    let outside = dir.0.with_extension("outside");
    let _ = fs::remove_file(&outside);
    let lock = dir.0.join(format!("{}.lock", id(0x78)));
    let _ = fs::remove_file(&lock);
    std::os::unix::fs::symlink(&outside, &lock).unwrap();
    let r = store.update(id(0x78), |o| {
        o.data.push(1);
        Ok::<(), StoreError>(())
    });
    assert!(
        r.is_err(),
        "an update through a symlinked lock file succeeded"
    );
    assert!(
        !outside.exists(),
        "the store created a file outside its directory through the link"
    );
    // An object file that is a symlink is refused too.
    let target = dir.0.with_extension("target");
    fs::write(&target, encode_object(&sample(0x79))).unwrap();
    std::os::unix::fs::symlink(&target, store.object_path(id(0x79))).unwrap();
    assert!(matches!(
        store.get(id(0x79)),
        Err(StoreError::Corrupt { .. }) | Err(StoreError::Io { .. })
    ));
    let _ = fs::remove_file(&target);
}
