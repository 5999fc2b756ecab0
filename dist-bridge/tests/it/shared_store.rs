//! A running node and other processes sharing one object store, as `keytool` and a node do:
//! two writer processes edit the store while clients read and write through the node; nothing
//! is lost, nobody sees half a change, and a revocation another process commits reaches the
//! node's guards.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::net::*;
use dist_bridge::*;
use secctx::{DbStore, ObjMeta, Object, ObjectStore, StoreError, Txn};
use twizzler_capsec::ObjID;

/// The environment variables that make [`child_store_writer`] run.
const CHILD_STORE: &str = "DIST_BRIDGE_TEST_CHILD_STORE";
/// Transactions each child runs.
const STEPS: u64 = 100;
/// The counter object the children increment.
const COUNTER: ObjID = ObjID::new(0xc0_0417);
/// The object whose pages 0 and 50 every child transaction sets to the new count.
const PAIR: ObjID = ObjID::new(0xc0_0418);

fn le(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

/// One child transaction: count + 1, written to the counter and to two pages of `PAIR`.
fn step(tx: &mut dyn Txn) -> Result<u64, StoreError> {
    let v = le(&tx.read_at(COUNTER, 0, 8)?) + 1;
    tx.write_at(COUNTER, 0, &v.to_le_bytes())?;
    tx.write_at(PAIR, 0, &v.to_le_bytes())?;
    tx.write_at(PAIR, 50 * 4096, &v.to_le_bytes())?;
    Ok(v)
}

fn spawn_writer(store: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            &crate::test_path(module_path!(), "child_store_writer"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STORE, store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a writer process")
}

/// A node serves small reads from its kept snapshot and its cache of objects' bytes
/// (`secctx::SnapshotReader`): a commit another handle makes between two reads of the same
/// object (an overwrite, then a write that grows it) is seen by the second read, never the
/// cached bytes; and a read with nothing committed since is the same as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_the_node_sees_a_commit_made_beside_it() {
    bounded(async {
        let net = Net::start("read-after-commit", 1, |_| {}).await;
        let site = &net.sites[0];
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        let first = net.cluster.read(&token, 0, 6).await.expect("a read");
        assert_eq!(first, b"object");
        assert_eq!(net.cluster.read(&token, 0, 6).await.expect("again"), first);
        for v in 1..=3u8 {
            site.store
                .write_at(site.object, 0, &[v; 6])
                .expect("a write beside the node");
            assert_eq!(net.cluster.read(&token, 0, 6).await.expect("read"), [v; 6]);
            assert_eq!(net.cluster.read(&token, 0, 6).await.expect("read"), [v; 6]);
        }
        let end = site.stored().len() as u64;
        assert_eq!(
            net.cluster.read(&token, end, 2).await.expect("read"),
            [0, 0]
        );
        site.store
            .write_at(site.object, end, &[9, 9])
            .expect("a write that grows the object");
        assert_eq!(
            net.cluster.read(&token, end, 2).await.expect("read"),
            [9, 9]
        );
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_and_two_writer_processes_share_one_store() {
    bounded(async {
        let net = Net::start("shared-store", 1, |_| {}).await;
        let site = &net.sites[0];
        let store_dir: PathBuf = site.dir.join("store");
        for id in [COUNTER, PAIR] {
            site.store
                .create(&Object {
                    id,
                    meta: ObjMeta::plain(),
                    data: vec![0; 8],
                })
                .expect("create");
        }
        let token = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        let writers = [spawn_writer(&store_dir), spawn_writer(&store_dir)];

        // Meanwhile, writes and reads through the node, each checked.
        for i in 0..STEPS {
            let at = 64 + i * 8;
            net.cluster
                .write(&token, at, &i.to_le_bytes())
                .await
                .expect("a write through the node");
            let got = net.cluster.read(&token, at, 8).await.expect("a read");
            assert_eq!(le(&got), i, "the node reads its own write back");
            // The children's state, read from the test's own handle: never half a change.
            // One read, one snapshot (zeros past the end, before the children's first write).
            let pair = site
                .store
                .read_at(PAIR, 0, 50 * 4096 + 8)
                .expect("read the pair");
            let (a, b) = (le(&pair[..8]), le(&pair[50 * 4096..]));
            assert_eq!(a, b, "a transaction seen half-applied");
        }
        for w in writers {
            let out = w.wait_with_output().expect("wait for a writer");
            assert!(
                out.status.success(),
                "a writer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Nothing lost: both children's increments, and every write through the node.
        assert_eq!(
            le(&site.store.read_at(COUNTER, 0, 8).expect("read")),
            2 * STEPS
        );
        let stored = site.stored();
        for i in 0..STEPS {
            let at = (64 + i * 8) as usize;
            assert_eq!(le(&stored[at..at + 8]), i);
        }

        // Another process writes the node's object, between reads through the node: each read
        // sees the commit that completed before it (the node keeps a read snapshot between
        // commits; it must not serve one older than the last commit of any process).
        for v in 1..=3u64 {
            assert_ne!(
                le(&net.cluster.read(&token, 8, 8).await.expect("a read")),
                v * 1000,
                "before the write"
            );
            let status = Command::new(std::env::current_exe().expect("current exe"))
                .args([
                    "--exact",
                    &crate::test_path(module_path!(), "child_store_writer"),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_STORE, &store_dir)
                .env(
                    "DIST_BRIDGE_TEST_CHILD_WRITE",
                    format!("{}:{}", site.object.raw(), v * 1000),
                )
                .stdout(Stdio::null())
                .status()
                .expect("run the writing process");
            assert!(status.success());
            let got = net.cluster.read(&token, 8, 8).await.expect("a read");
            assert_eq!(le(&got), v * 1000, "the other process's last commit");
        }

        // Another process revokes the capability (as `keytool revoke --record` does): the
        // node's guards from it go.
        let status = Command::new(std::env::current_exe().expect("current exe"))
            .args([
                "--exact",
                &crate::test_path(module_path!(), "child_store_writer"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_STORE, &store_dir)
            .env("DIST_BRIDGE_TEST_CHILD_REVOKE", site.cap.id().to_string())
            .stdout(Stdio::null())
            .status()
            .expect("run the revoking process");
        assert!(status.success());
        // However long the node's maintenance task takes to apply it (the test's own limit
        // bounds the wait).
        loop {
            if let Err(e) = net.cluster.read(&token, 0, 1).await {
                assert_eq!(e.kind(), Some(ErrorKind::Revoked), "{e}");
                break;
            }
            // A pause between checks, not a guess at how long the node takes.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        net.shutdown().await;
    })
    .await;
}

/// The child of [`a_node_and_two_writer_processes_share_one_store`]: [`STEPS`] transactions
/// on the store (or, with `DIST_BRIDGE_TEST_CHILD_REVOKE`, one revocation of that record; with
/// `DIST_BRIDGE_TEST_CHILD_WRITE=object:value`, the value written at offset 8 of the object).
#[test]
fn child_store_writer() {
    let Some(dir) = std::env::var_os(CHILD_STORE) else {
        return;
    };
    let store = DbStore::open(PathBuf::from(dir)).expect("the child opens the store");
    if let Ok(what) = std::env::var("DIST_BRIDGE_TEST_CHILD_WRITE") {
        let (object, value) = what.split_once(':').expect("object:value");
        let object = ObjID::new(object.parse().expect("an object id"));
        let value: u64 = value.parse().expect("a value");
        store
            .write_at(object, 8, &value.to_le_bytes())
            .expect("the child's write");
        return;
    }
    if let Ok(record) = std::env::var("DIST_BRIDGE_TEST_CHILD_REVOKE") {
        let bytes: Vec<u8> = (0..record.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&record[i..i + 2], 16).expect("hex"))
            .collect();
        let id = twizzler_capsec::RecordId(bytes.try_into().expect("32 bytes"));
        secctx::revocations::RevocationList::add(&store, |l| l.records.insert(id)).expect("revoke");
        return;
    }
    for _ in 0..STEPS {
        store.transact(step).expect("a child transaction");
    }
}
