//! Names: given wherever an id is taken, refused when they read as an id, and shown beside
//! ids in what `check`, `ctx add` and `export` say.

use serde_json::Value;

use crate::support::{Kt, objects, s};

#[test]
fn names_work_wherever_an_id_is_taken() {
    let kt = Kt::new();
    let j = kt.json(&["keygen", "--name", "alice", "--no-passphrase"]);
    assert_eq!(j["name"], "alice");
    let (sk, vk) = (s(&j["signing"]), s(&j["verifying"]));
    // A kuid given as the key pair's name is its verifying key.
    let o = kt.json(&["obj", "new", "--name", "notes", "--kuid", "alice"]);
    assert_eq!(s(&o["kuid"]), vk);
    let o2 = kt.json(&["obj", "new", "--kuid", "alice.pub"]);
    assert_eq!(s(&o2["kuid"]), vk);
    kt.json(&["ctx", "new", "--name", "bob"]);
    // Names in mint, ctx add, check, show and inspect.
    kt.ok(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "bob",
        "--prots",
        "r--",
        "--out",
        "r.cap",
    ]);
    kt.ok(&["ctx", "add", "bob", "r.cap"]);
    let c = kt.json(&[
        "check", "--ctx", "bob", "--target", "notes", "--offset", "0x1000", "--access", "read",
    ]);
    assert_eq!(c["granted"], true, "{c}");
    assert_eq!(kt.json(&["ctx", "show", "bob"])["generation"], 1);
    assert_eq!(s(&kt.json(&["inspect", "alice"])["id"]), sk);
    assert_eq!(s(&kt.json(&["obj", "show", "alice.pub"])["id"]), vk);
    // Ids keep working, and every name is listed.
    assert_eq!(s(&kt.json(&["obj", "show", &vk])["id"]), vk);
    let info = kt.json(&["store", "info"]);
    let names: Vec<String> = info["names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| s(&n["name"]))
        .collect();
    assert_eq!(names, ["alice", "alice.pub", "bob", "notes"]);
    // A taken name, a bad name, an unknown name: one-line errors, nothing created.
    let before = info["objects"].clone();
    let e = kt.fails(&["keygen", "--name", "alice", "--no-passphrase"], 2);
    assert!(e.contains("already names"), "{e}");
    let e = kt.fails(&["ctx", "new", "--name", "notes"], 2);
    assert!(e.contains("already names"), "{e}");
    let e = kt.fails(&["obj", "new", "--name", "cafe"], 2);
    assert!(e.contains("reads as an object id"), "{e}");
    let e = kt.fails(&["ctx", "show", "nobody"], 2);
    assert!(e.contains("no object is named \"nobody\""), "{e}");
    assert_eq!(kt.json(&["store", "info"])["objects"], before);
}

/// Found by the outside review: `keygen --name 0XDEAD` succeeded, and the name could never be
/// reached (`0XDEAD` reads as object 0xdead wherever an id is taken). Every spelling of an id
/// is refused as a name, and each string means one thing.
#[test]
fn a_name_that_reads_as_an_id_in_any_case_is_refused() {
    let kt = Kt::new();
    for name in ["0XDEAD", "0xDEAD", "0Xbeef", "DEAD", "0X0"] {
        let e = kt.fails(&["keygen", "--name", name, "--no-passphrase"], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
        let e = kt.fails(&["obj", "new", "--name", name], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
        let e = kt.fails(&["ctx", "new", "--name", name], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
    }
    assert_eq!(objects(&kt), 0, "a refused name created something");
    // Where an id is taken, `0XDEAD` is object 0xdead.
    let id = "0000000000000000000000000000dead";
    kt.ok(&["ctx", "new", "--id", "0XDEAD"]);
    assert_eq!(s(&kt.json(&["ctx", "show", "0XDEAD"])["id"]), id);
    assert_eq!(s(&kt.json(&["obj", "show", "0xdead"])["id"]), id);
}

/// What [`named_reader`] made, as keytool reported it.
struct Named {
    /// `keygen --json` of the key `alice`.
    key: Value,
    /// The id of the object `notes` (kuid `alice`).
    obj: String,
    /// The id of the context `reader`.
    ctx: String,
    /// `mint --json` of a read-only capability for `reader` on `notes`, in `read.cap`.
    cap: Value,
}

/// Everything named, as a user who names things sets up: the key `alice`, the object `notes`
/// under it, the context `reader`, and a read-only capability for it in `read.cap` (not yet
/// added to the context).
fn named_reader(kt: &Kt) -> Named {
    let key = kt.json(&["keygen", "--name", "alice", "--no-passphrase"]);
    let obj = s(&kt.json(&["obj", "new", "--name", "notes", "--kuid", "alice"])["id"]);
    let ctx = s(&kt.json(&["ctx", "new", "--name", "reader"])["id"]);
    let cap = kt.json(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "reader",
        "--prots",
        "r--",
        "--out",
        "read.cap",
    ]);
    Named { key, obj, ctx, cap }
}

#[test]
fn check_names_the_objects_and_explains_a_denial_as_needs_and_provided() {
    let kt = Kt::new();
    let Named { obj, ctx, .. } = named_reader(&kt);
    kt.ok(&["ctx", "add", "reader", "read.cap"]);
    let check = |access: &str, code: i32| {
        let o = kt.run(&[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            access,
        ]);
        assert_eq!(o.status.code(), Some(code), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let text = check("read", 0);
    assert!(
        text.starts_with(&format!("GRANTED read at 0x1000 of notes ({obj})\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("context reader ({ctx}) (active)")),
        "{text}"
    );
    // A write with a read-only capability: what it needs and what it got, in those words.
    let text = check("write", 1);
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "DENIED write at 0x1000 of notes ({obj}): needs rw-, provided r-- by context reader ({ctx})"
        ),
        "{text}"
    );
    assert!(!text.contains("none of the needed"), "{text}");
    let j = kt.json_code(
        &[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            "write",
        ],
        1,
    );
    assert!(
        s(&j["decision"]["reason"]).starts_with("needs rw-, provided r-- by context reader"),
        "{j}"
    );
    // A record that grants none of what the access needs says so in the same words.
    let text = check("exec", 1);
    let first = text.lines().next().unwrap();
    assert!(
        first.contains(": needs r-x, provided r-- by context reader"),
        "{text}"
    );
    kt.ok(&["revoke", "--record", "read.cap"]);
    kt.ok(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "reader",
        "--prots=--x",
        "--out",
        "exec.cap",
    ]);
    kt.ok(&["ctx", "add", "reader", "exec.cap"]);
    let j = kt.json_code(
        &[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            "read",
        ],
        1,
    );
    let reason = s(&j["decision"]["reason"]);
    assert!(
        reason.starts_with("needs r--, provided --- by context reader"),
        "{j}"
    );
    assert!(!reason.contains("none of the needed"), "{j}");
    let records = j["contexts"][0]["records"].as_array().unwrap();
    let exec = records
        .iter()
        .find(|r| r["prots"] == "--x")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(exec["verdict"], "no_useful_rights", "{j}");
    assert_eq!(exec["explanation"], "needs r--, provided ---", "{j}");
}

#[test]
fn ctx_add_and_export_name_what_they_touch() {
    let kt = Kt::new();
    let Named { key, obj, ctx, cap } = named_reader(&kt);
    let (sk, vk) = (s(&key["signing"]), s(&key["verifying"]));
    let rid = s(&cap["id"]);
    let text = kt.ok(&["ctx", "add", "reader", "read.cap"]);
    assert_eq!(
        text.trim_end(),
        format!(
            "added capability {rid} for notes ({obj}) to context reader ({ctx}) (generation 1)"
        )
    );
    let text = kt.ok(&["ctx", "add", "reader", "read.cap"]);
    assert!(
        text.starts_with(&format!(
            "context reader ({ctx}) already holds capability {rid}"
        )),
        "{text}"
    );
    let text = kt.ok(&["export", "alice", "--out", "alice.pem"]);
    assert!(
        text.starts_with(&format!(
            "wrote the ed25519 verifying key alice.pub ({vk}) to "
        )),
        "{text}"
    );
    let text = kt.ok(&["export", "alice", "--secret", "--out", "alice.key"]);
    assert!(
        text.starts_with(&format!("wrote the ed25519 signing key alice ({sk}) to ")),
        "{text}"
    );
    // An object without a name is shown by its id alone.
    let (plain_sk, _) = kt.keygen(&["--no-passphrase"]);
    let text = kt.ok(&["export", &plain_sk, "--secret", "--out", "plain.key"]);
    assert!(
        text.starts_with(&format!("wrote the ed25519 signing key {plain_sk} to ")),
        "{text}"
    );
}
