//! Editing contexts: `delegate`, `ctx add`, `mask`, `flags` and `rm`, and concurrent edits by
//! several `keytool` processes that lose nothing.

use serde_json::Value;

use crate::support::{check, s, world};

#[test]
fn delegation_masks_flags_expiry_and_removal() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("rw-", "rw.cap", &["--expires", "1h", "--hash", "sha256"]));
    kt.ok(&["ctx", "add", &w.c1, "rw.cap"]);
    // c1 delegates read on two pages to c2; gate and expiry can only narrow.
    let d = kt.json(&[
        "delegate",
        "--parent",
        "rw.cap",
        "--key",
        &w.c1_sk,
        "--receiver",
        &w.c2,
        "--prots",
        "r--",
        "--gate",
        "0x1000:0x2000",
        "--out",
        "r.del",
    ]);
    assert_eq!(d["kind"], "delegation");
    assert_eq!(d["provider"], Value::String(w.c1.clone()));
    assert_eq!(
        d["expires_ns"], d["root"]["expires_ns"],
        "expiry defaults to the parent's"
    );
    let e = kt.fails(
        &[
            "delegate",
            "--parent",
            "rw.cap",
            "--key",
            &w.c1_sk,
            "--receiver",
            &w.c2,
            "--prots",
            "rwx",
            "--out",
            "x.del",
        ],
        2,
    );
    assert!(
        e.contains("grants protections its parent does not have"),
        "{e}"
    );
    let e = kt.fails(
        &[
            "delegate",
            "--parent",
            "rw.cap",
            "--key",
            &w.sk,
            "--receiver",
            &w.c2,
            "--prots",
            "r--",
            "--out",
            "x.del",
        ],
        2,
    );
    assert!(e.contains("does not sign for context"), "{e}");
    assert!(!kt.path("x.del").exists());

    kt.ok(&["ctx", "add", &w.c2, "r.del"]);
    assert_eq!(kt.json(&["verify", "r.del"])["valid"], true);
    assert!(check(&w, &[&w.c2], "0x2000", "read", &[]).0);
    assert!(
        !check(&w, &[&w.c2], "0x3000", "read", &[]).0,
        "outside the gate"
    );
    assert!(!check(&w, &[&w.c2], "0x2000", "write", &[]).0);
    // An inactive context that grants is switched to.
    let (granted, j) = check(&w, &[&w.c2, &w.c1], "0x2000", "write", &[]);
    assert!(granted);
    assert_eq!(j["decision"]["switch_to"], Value::String(w.c1.clone()));
    // ... unless the active one is undetachable.
    assert_eq!(
        kt.json(&["ctx", "flags", &w.c2, "--undetachable", "true"])["undetachable"],
        true
    );
    let (granted, j) = check(&w, &[&w.c2, &w.c1], "0x2000", "write", &[]);
    assert!(!granted);
    assert_eq!(j["decision"]["violation"], "undetachable");
    kt.ok(&["ctx", "flags", &w.c2, "--undetachable", "false"]);

    // Expiry: both records end within the hour.
    assert!(!check(&w, &[&w.c1], "0x1000", "read", &["--at", "2h"]).0);
    let v = kt.json_code(&["verify", "r.del", "--at", "2h"], 1);
    assert!(s(&v["reason"]).contains("expired"), "{v}");

    // Masks.
    kt.ok(&["ctx", "mask", &w.c1, "--target", &w.obj, "--perm", "r--"]);
    assert!(!check(&w, &[&w.c1], "0x1000", "write", &[]).0);
    assert!(check(&w, &[&w.c1], "0x1000", "read", &[]).0);
    kt.ok(&["ctx", "rm", &w.c1, "--mask", &w.obj]);
    kt.ok(&["ctx", "mask", &w.c1, "--global", "r--"]);
    assert!(!check(&w, &[&w.c1], "0x1000", "write", &[]).0);
    let show = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(show["global_mask"], "r--");
    assert_eq!(show["masks"].as_array().unwrap().len(), 0);
    kt.ok(&[
        "ctx", "mask", &w.c1, "--target", &w.obj, "--perm", "rw-", "--ovr", "rw-",
    ]);
    assert!(
        check(&w, &[&w.c1], "0x1000", "write", &[]).0,
        "ovr lets write through"
    );

    // Removal: by record file, then nothing is left to remove.
    kt.ok(&["ctx", "rm", &w.c2, "--record", "r.del"]);
    assert!(!check(&w, &[&w.c2], "0x2000", "read", &[]).0);
    let e = kt.fails(&["ctx", "rm", &w.c2, "--target", &w.obj], 2);
    assert!(e.contains("holds nothing that matches"), "{e}");
    let before = kt.json(&["ctx", "show", &w.c1])["generation"].clone();
    kt.ok(&["ctx", "rm", &w.c1, "--target", &w.obj]);
    let after = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(after["records"].as_array().unwrap().len(), 0);
    assert_eq!(after["generation"], before.as_u64().unwrap() + 1);
}

#[test]
fn two_processes_adding_to_one_context_lose_nothing() {
    let w = world();
    let kt = &w.kt;
    const EACH: usize = 25;
    // 50 different capabilities: one per page.
    for i in 0..2 * EACH {
        let gate = format!("{:#x}:0x1000", (i + 1) * 0x1000);
        kt.ok(&w.mint("r--", &format!("{i}.cap"), &["--gate", &gate]));
    }
    std::thread::scope(|scope| {
        for half in 0..2 {
            let kt = &w.kt;
            let c1 = &w.c1;
            scope.spawn(move || {
                for i in half * EACH..(half + 1) * EACH {
                    kt.ok(&["ctx", "add", c1, &format!("{i}.cap")]);
                }
            });
        }
    });
    let show = kt.json(&["ctx", "show", &w.c1]);
    let records = show["records"].as_array().unwrap();
    assert_eq!(records.len(), 2 * EACH, "lost an update");
    assert_eq!(show["generation"], 2 * EACH as u64);
    let mut ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2 * EACH);
    assert!(check(&w, &[&w.c1], "0x32000", "read", &[]).0);
}

#[test]
fn keytools_in_parallel_lose_no_edit() {
    let w = world();
    let kt = &w.kt;
    // 16 capabilities, added by 16 keytool processes at once to one context.
    let files: Vec<String> = (0..16)
        .map(|i| {
            let f = format!("cap{i}.cap");
            let expires = format!("{}d", i + 1);
            kt.ok(&w.mint("r--", &f, &["--expires", &expires]));
            f
        })
        .collect();
    let children: Vec<_> = files
        .iter()
        .map(|f| {
            kt.cmd(&["ctx", "add", &w.c1, f])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn keytool")
        })
        .collect();
    // A reader in the middle of it all.
    let shown = kt.json(&["ctx", "show", &w.c1]);
    assert!(shown["generation"].as_u64().expect("generation") <= 16);
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let j = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(
        j["generation"], 16,
        "every edit bumped the generation once: {j}"
    );
    assert_eq!(j["records"].as_array().map(Vec::len), Some(16), "{j}");
}
