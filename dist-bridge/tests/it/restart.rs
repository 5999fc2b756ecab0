//! Controller versions: durable, monotonic across restarts and simulated crashes; a restarted
//! owner refuses every earlier token.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;
use dist_bridge::controller::{VERSION_FILE_LEN, encode_version_file};
use dist_bridge::token::HEADER_LEN;
use dist_bridge::*;

/// A fresh directory under this process's scratch root (no extra dev-dependency for temp
/// dirs).
fn scratch(name: &str) -> PathBuf {
    let dir = crate::net::scratch_root().join(format!("restart-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn start(path: &Path) -> Result<u64, VersionFileError> {
    VersionFile::open_and_bump(path, NODE).map(|v| v.controller_id().version)
}

#[test]
fn versions_start_at_one_and_only_grow() {
    let dir = scratch("monotonic");
    let path = dir.join("controller.version");
    let mut last = 0;
    for _ in 0..50 {
        let v = start(&path).unwrap();
        assert_eq!(v, last + 1);
        last = v;
        // Durable before it was returned: the file already says so.
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes, encode_version_file(NODE, v));
    }
    assert!(!dir.join("controller.version.tmp").exists());
}

#[test]
fn a_crash_before_the_rename_leaves_a_temp_file_that_is_ignored() {
    let dir = scratch("leftover");
    let path = dir.join("v");
    assert_eq!(start(&path).unwrap(), 1);
    assert_eq!(start(&path).unwrap(), 2);
    // A crash while writing version 3: the temp file is torn, the real one still says 2.
    let tmp = dir.join("v.tmp");
    fs::write(&tmp, &encode_version_file(NODE, 3)[..20]).unwrap();
    assert_eq!(start(&path).unwrap(), 3);
    // A crash after writing the temp file in full but before the rename: never served with
    // it, so reusing the number is safe; and the next start is still newer than any served.
    fs::write(&tmp, encode_version_file(NODE, 4)).unwrap();
    assert_eq!(start(&path).unwrap(), 4);
    assert_eq!(start(&path).unwrap(), 5);
    // A crash during the very first start: only a temp file exists.
    let first = dir.join("first");
    fs::write(dir.join("first.tmp"), b"garbage").unwrap();
    assert_eq!(start(&first).unwrap(), 1);
}

#[test]
fn a_damaged_file_is_an_error_naming_the_file_never_a_reset() {
    let dir = scratch("corrupt");
    let path = dir.join("v");
    for _ in 0..3 {
        start(&path).unwrap();
    }
    let good = fs::read(&path).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("torn", good[..VERSION_FILE_LEN / 2].to_vec()),
        ("long", [good.clone(), vec![0]].concat()),
        ("flipped", {
            let mut b = good.clone();
            b[17] ^= 1;
            b
        }),
        ("bad checksum", {
            let mut b = good.clone();
            b[VERSION_FILE_LEN - 1] ^= 1;
            b
        }),
        ("zeroes", vec![0; VERSION_FILE_LEN]),
        ("version 0", encode_version_file(NODE, 0).to_vec()),
        ("format 2", {
            let mut b = encode_version_file(NODE, 3);
            b[4] = 2;
            b.to_vec()
        }),
    ];
    for (what, bytes) in cases {
        fs::write(&path, &bytes).unwrap();
        let err = start(&path).unwrap_err();
        assert!(
            matches!(err, VersionFileError::Corrupt { .. }),
            "{what}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{what}: {msg}");
        // Refusing did not touch the file.
        assert_eq!(fs::read(&path).unwrap(), bytes, "{what}");
    }
    fs::write(&path, &good).unwrap();
    assert_eq!(start(&path).unwrap(), 4);
}

#[test]
fn another_nodes_file_and_a_second_process_are_refused() {
    let dir = scratch("mismatch");
    let path = dir.join("v");
    start(&path).unwrap();
    let err = VersionFile::open_and_bump(&path, NODE + 1).unwrap_err();
    assert!(matches!(
        err,
        VersionFileError::NodeMismatch {
            found: NODE,
            expected,
            ..
        } if expected == NODE + 1
    ));
    // While one life holds the file, another cannot start from it.
    let running = VersionFile::open_and_bump(&path, NODE).unwrap();
    assert_eq!(running.controller_id(), ControllerId::new(NODE, 2));
    assert!(matches!(
        VersionFile::open_and_bump(&path, NODE),
        Err(VersionFileError::Locked { .. })
    ));
    drop(running);
    assert_eq!(start(&path).unwrap(), 3);
    // A missing directory is an I/O error naming the path.
    let err = start(&dir.join("no/such/dir/v")).unwrap_err();
    assert!(matches!(err, VersionFileError::Io { .. }), "{err}");
}

#[test]
fn an_owner_restart_rejects_every_earlier_token() {
    let dir = scratch("restart");
    let path = dir.join("v");
    let secret = [7u8; 32];
    let f = fixture();
    let life1 = VersionFile::open_and_bump(&path, NODE).unwrap();
    let owner1 = Owner::new(
        life1.controller_id(),
        NodeSecret::from_bytes(secret),
        GuardTableConfig::default(),
    )
    .unwrap();
    let req = ExportRequest::new(f.ctx, Rights::all(), ByteRange::WHOLE);
    let tokens: Vec<_> = (0..5)
        .map(|_| owner1.export(&f.cap, &f.keys, &req, NOW).unwrap())
        .flat_map(|t| [t.with_rights(Rights::READ).unwrap(), t])
        .collect();
    for t in &tokens {
        assert!(owner1.check(t, Op::Read, 0, 1, NOW).is_ok());
    }
    drop(owner1);
    drop(life1);

    // The node restarts (even with the same secret, which a real node never reuses).
    let life2 = VersionFile::open_and_bump(&path, NODE).unwrap();
    assert_eq!(life2.controller_id().version, 2);
    let owner2 = Owner::new(
        life2.controller_id(),
        NodeSecret::from_bytes(secret),
        GuardTableConfig::default(),
    )
    .unwrap();
    let fresh: Vec<_> = (0..5)
        .map(|_| owner2.export(&f.cap, &f.keys, &req, NOW).unwrap())
        .collect();
    for t in &tokens {
        assert_eq!(
            owner2.check(t, Op::Read, 0, 1, NOW),
            Err(InvokeError::StaleController {
                token: 1,
                current: 2
            })
        );
        assert!(owner2.revoke(t, NOW).is_err());
        assert!(owner2.renew(t, NOW).is_err());
        // Relabelled with the new version, the same guard refs exist again, but the tag was
        // made under the old life's key: refused cryptographically.
        let mut b = t.encode();
        b[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(
            owner2.check_bytes(&b, Op::Read, 0, 1, NOW),
            Err(InvokeError::BadTag)
        );
    }
    for t in &fresh {
        assert!(owner2.check(t, Op::Write, 0, 1, NOW).is_ok());
    }
}
