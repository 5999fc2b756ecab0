//! `keytool convert-upstream-cap` and `keytool import --raw-p256`: capabilities signed the way
//! upstream Twizzler signs them (by this file's own signer, written from upstream's format)
//! convert, and the result grants exactly their rights; anything changed, signed by another
//! key, expired, or not expressible exactly is refused with one line, and nothing is written.

use std::time::{SystemTime, UNIX_EPOCH};

use p256::ecdsa::signature::Signer;
use serde_json::{Value, json};
use sha2::Digest;

use crate::support::{Kt, s};

/// The upstream owner's secret scalar (any value in 1..n-1).
const SCALAR: [u8; 32] = [
    0x3c, 0x91, 0x0e, 0x57, 0xa2, 0x4b, 0x6d, 0x18, 0xf0, 0x22, 0x7e, 0x95, 0x43, 0xc8, 0x1a, 0x6f,
    0x5d, 0x0b, 0xe4, 0x37, 0x89, 0x12, 0xcd, 0x70, 0x26, 0x9a, 0x41, 0xb3, 0x5e, 0x08, 0xd7, 0x64,
];
/// Another key's scalar.
const OTHER: [u8; 32] = [0x11; 32];
const TARGET: u128 = 0x1234;
const ACCESSOR: u128 = 0x5678;

fn hexs(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// The fields upstream signs.
#[derive(Clone)]
struct Fields {
    target: u128,
    accessor: u128,
    prots: u16,
    flags: u16,
    revocation: u128,
    gate: (u64, u64, u64),
}

fn fields(prots: u16, flags: u16) -> Fields {
    Fields {
        target: TARGET,
        accessor: ACCESSOR,
        prots,
        flags,
        revocation: 0,
        gate: (0, 0x10000, 1),
    }
}

/// Upstream's 78-byte message: every field little-endian, in upstream's order, then two zero
/// bytes.
fn message(f: &Fields) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend(f.accessor.to_le_bytes());
    m.extend(f.target.to_le_bytes());
    m.extend(f.prots.to_le_bytes());
    m.extend(f.flags.to_le_bytes());
    m.extend(f.revocation.to_le_bytes());
    m.extend(f.gate.0.to_le_bytes());
    m.extend(f.gate.1.to_le_bytes());
    m.extend(f.gate.2.to_le_bytes());
    m.extend([0, 0]);
    assert_eq!(m.len(), 78);
    m
}

/// Signs as upstream does: BLAKE3 (flags bit 0) or else SHA-256 of the message, then ECDSA
/// P-256 with SHA-256 over that digest. `high_s` gives the other of the two valid signatures.
fn sign(f: &Fields, scalar: &[u8; 32], high_s: bool) -> [u8; 64] {
    let m = message(f);
    let digest: [u8; 32] = if f.flags & 1 != 0 {
        *blake3::hash(&m).as_bytes()
    } else {
        sha2::Sha256::digest(&m).into()
    };
    let sk = p256::ecdsa::SigningKey::from_slice(scalar).expect("a valid scalar");
    let sig: p256::ecdsa::Signature = sk.sign(&digest);
    let low = sig.normalize_s();
    let sig = if high_s {
        p256::ecdsa::Signature::from_scalars(low.r(), -low.s()).expect("n - s is a valid s")
    } else {
        low
    };
    let mut out = [0u8; 64];
    out.copy_from_slice(&sig.to_bytes());
    out
}

/// The neutral form of `f` with signature `sig`.
fn doc(f: &Fields, sig: &[u8; 64]) -> Value {
    json!({
        "format": "twizzler-upstream-cap/1",
        "target": format!("{:#x}", f.target),
        "accessor": format!("{:#x}", f.accessor),
        "protections": f.prots,
        "flags": f.flags,
        "revocation": f.revocation.to_string(),
        "gate": { "offset": f.gate.0, "length": f.gate.1, "align": f.gate.2 },
        "signature": hexs(sig),
    })
}

/// Upstream's verifying-key bytes for `scalar`: the uncompressed SEC1 point.
fn public(scalar: &[u8; 32]) -> String {
    let sk = p256::ecdsa::SigningKey::from_slice(scalar).expect("a valid scalar");
    hexs(sk.verifying_key().to_sec1_point(false).as_bytes())
}

/// A store holding the upstream owner's key (imported from its raw scalar), the target object
/// keyed by it, and the accessor context; the public key is in `owner.pub.hex`.
fn setup() -> Kt {
    let kt = Kt::new();
    kt.write("owner.hex", format!("{}\n", hexs(&SCALAR)).as_bytes());
    let j = kt.json(&[
        "import",
        "owner.hex",
        "--raw-p256",
        "--name",
        "owner",
        "--no-passphrase",
    ]);
    assert_eq!(j["scheme"], "p256", "{j}");
    // The imported key is upstream's: the same public key.
    assert_eq!(s(&j["public_key"]), public(&SCALAR));
    kt.write("owner.pub.hex", public(&SCALAR).as_bytes());
    kt.ok(&["obj", "new", "--id", "0x1234", "--kuid", "owner"]);
    kt.ok(&["ctx", "new", "--id", "0x5678"]);
    kt
}

fn convert<'a>(file: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "convert-upstream-cap",
        file,
        "--upstream-key",
        "owner.pub.hex",
        "--key",
        "owner",
    ];
    a.extend_from_slice(extra);
    a
}

/// `check` on the target in the accessor context: granted or not.
fn granted(kt: &Kt, offset: &str, access: &str) -> bool {
    let o = kt.run(&[
        "check", "--ctx", "0x5678", "--target", "0x1234", "--offset", offset, "--access", access,
    ]);
    match o.status.code() {
        Some(0) => true,
        Some(1) => false,
        c => panic!("check exited {c:?}: {}", String::from_utf8_lossy(&o.stderr)),
    }
}

#[test]
fn an_upstream_capability_converts_and_grants_exactly_its_rights() {
    let kt = setup();
    // rw- on 0..0x10000, SHA-256, never expiring (upstream's default revocation, 0).
    let f = fields(3, 2);
    kt.write(
        "rw.json",
        doc(&f, &sign(&f, &SCALAR, false)).to_string().as_bytes(),
    );
    let j = kt.json(&convert(
        "rw.json",
        &["--out", "rw.cap", "--add-to", "0x5678"],
    ));
    assert_eq!(j["kind"], "capability", "{j}");
    assert_eq!(j["prots"], "rw-");
    assert_eq!(j["expires"], Value::Null, "{j}");
    assert_eq!(j["upstream"]["verified"], true);
    assert_eq!(j["upstream"]["hash"], "sha256");
    assert_eq!(s(&j["upstream"]["signed_message"]), hexs(&message(&f)));
    assert_eq!(j["added_to"]["generation"], 1, "{j}");
    assert!(kt.path("rw.cap").exists());
    assert_eq!(kt.json(&["verify", "rw.cap"])["valid"], true);

    assert!(granted(&kt, "0x1000", "read"));
    assert!(granted(&kt, "0xf000", "write"));
    assert!(!granted(&kt, "0x1000", "exec"), "no EXEC was signed");
    assert!(!granted(&kt, "0x10000", "read"), "outside the gate");

    // r-x behind a code gate, BLAKE3, expiring in a day, with a high-S signature (upstream's
    // `p256` does not normalise s): converts to the same fields.
    let mut f = fields(5, 1);
    f.gate = (0x20000, 0x1000, 16);
    let day = 86_400 * 1_000_000_000u128;
    f.revocation = now_ns() + day;
    kt.write(
        "rx.json",
        doc(&f, &sign(&f, &SCALAR, true)).to_string().as_bytes(),
    );
    let j = kt.json(&convert("rx.json", &["--out", "rx.cap"]));
    assert_eq!(j["prots"], "r-x");
    assert_eq!(j["upstream"]["hash"], "blake3");
    assert_eq!(
        j["expires_ns"].as_u64().map(u128::from),
        Some(f.revocation),
        "{j}"
    );
    assert_eq!(j["gate"]["offset"], 0x20000, "{j}");
    assert_eq!(j["gate"]["length"], 0x1000, "{j}");
    assert_eq!(j["gate"]["align"], 16, "{j}");
    assert_eq!(j["added_to"], Value::Null);
    // Not added: the context still grants only the first capability.
    assert!(!granted(&kt, "0x20000", "read"));
    kt.ok(&["ctx", "add", "0x5678", "rx.cap"]);
    assert!(granted(&kt, "0x20000", "read"));
    assert!(!granted(&kt, "0x20000", "write"));

    // The text output says what was verified and minted.
    kt.write(
        "rw2.json",
        doc(&fields(1, 2), &sign(&fields(1, 2), &SCALAR, false))
            .to_string()
            .as_bytes(),
    );
    let text = kt.ok(&convert("rw2.json", &["--out", "r.cap"]));
    assert!(text.starts_with("verified upstream's signature"), "{text}");
    assert!(text.contains("capability "), "{text}");
    // The signature as a list of bytes (upstream's Debug form) is the same capability.
    let f = fields(1, 2);
    let mut d = doc(&f, &sign(&f, &SCALAR, false));
    d["signature"] = json!(sign(&f, &SCALAR, false).to_vec());
    kt.write("list.json", d.to_string().as_bytes());
    let a = kt.json(&convert("list.json", &["--out", "list.cap"]));
    let b = kt.json(&["inspect", "r.cap"]);
    assert_eq!(a["id"], b["id"]);
}

#[test]
fn upstreams_default_gate_is_converted_as_it_is_with_a_warning() {
    let kt = setup();
    let mut f = fields(1, 2);
    f.gate = (0, 1_000_000_000, 1);
    kt.write(
        "d.json",
        doc(&f, &sign(&f, &SCALAR, false)).to_string().as_bytes(),
    );
    let o = kt.run(&convert(
        "d.json",
        &["--out", "d.cap", "--add-to", "0x5678", "--json"],
    ));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("not the whole"),
        "{err}"
    );
    let j: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(j["gate"]["length"], 1_000_000_000, "{j}");
    // The page holding byte 10^9 is not wholly inside the gate: not granted.
    // 10^9 = 0x3b9aca00: the page at 0x3b9ab000 ends before it, the next one does not.
    assert!(granted(&kt, "0x3b9ab000", "read"));
    assert!(!granted(&kt, "0x3b9ac000", "read"));
}

/// Everything the store holds, every object (id, metadata, bytes) and every name: a refused
/// conversion leaves it as it was.
fn db(kt: &Kt) -> (Vec<secctx::Object>, Vec<(String, twizzler_capsec::ObjID)>) {
    use secctx::ObjectStore;
    let store = secctx::DbStore::open_read_only(kt.store()).expect("open the store");
    let mut ids = store.list().expect("list the store");
    ids.sort();
    let objects = ids
        .into_iter()
        .map(|id| store.get(id).expect("read an object"))
        .collect();
    (objects, store.names().expect("the names"))
}

#[test]
fn anything_changed_unsigned_or_inexpressible_is_refused_and_nothing_is_written() {
    let kt = setup();
    let good = fields(3, 2);
    let sig = sign(&good, &SCALAR, false);
    // A signature over `f` by the owner, in the document of `f`.
    let signed = |f: &Fields| doc(f, &sign(f, &SCALAR, false));
    let tamper = |edit: &dyn Fn(&mut Value)| {
        let mut d = doc(&good, &sig);
        edit(&mut d);
        d
    };
    let with = |edit: &dyn Fn(&mut Fields)| {
        let mut f = good.clone();
        edit(&mut f);
        signed(&f)
    };
    let mut flipped = sig;
    flipped[40] ^= 1;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a widened right",
            tamper(&|d| d["protections"] = json!(7)).to_string(),
            "does not verify",
        ),
        (
            "another accessor",
            tamper(&|d| d["accessor"] = json!("0x9999")).to_string(),
            "does not verify",
        ),
        (
            "a longer gate",
            tamper(&|d| d["gate"]["length"] = json!(0x20000)).to_string(),
            "does not verify",
        ),
        (
            "no expiry",
            tamper(&|d| d["revocation"] = json!(1)).to_string(),
            "does not verify",
        ),
        (
            "the other hash",
            tamper(&|d| d["flags"] = json!(1)).to_string(),
            "does not verify",
        ),
        (
            "a changed signature",
            doc(&good, &flipped).to_string(),
            "does not verify",
        ),
        (
            "another key's signature",
            doc(&good, &sign(&good, &OTHER, false)).to_string(),
            "does not verify",
        ),
        (
            "a zero signature",
            doc(&good, &[0; 64]).to_string(),
            "not an ECDSA P-256 signature",
        ),
        (
            "expired",
            with(&|f| f.revocation = 1).to_string(),
            "expired",
        ),
        (
            "expired a second ago",
            with(&|f| f.revocation = now_ns() - 1_000_000_000).to_string(),
            "expired",
        ),
        (
            "an expiry past 64 bits",
            with(&|f| f.revocation = 1 << 64).to_string(),
            "64-bit expiry",
        ),
        (
            "an unknown protection bit",
            with(&|f| f.prots = 0x9).to_string(),
            "bits other than READ",
        ),
        (
            "an unknown flag bit",
            with(&|f| f.flags = 0x12).to_string(),
            "does not define",
        ),
        (
            "both hashes",
            with(&|f| f.flags = 3).to_string(),
            "both hashes",
        ),
        ("no hash", with(&|f| f.flags = 0).to_string(), "no hash"),
        (
            "an empty gate",
            with(&|f| f.gate = (0, 0, 1)).to_string(),
            "cannot be expressed exactly",
        ),
        (
            "align 0",
            with(&|f| f.gate = (0, 4096, 0)).to_string(),
            "cannot be expressed exactly",
        ),
        (
            "a gate past 1 GiB",
            with(&|f| f.gate = (1 << 30, 4096, 1)).to_string(),
            "cannot be expressed exactly",
        ),
        (
            "not JSON",
            "target = 0x1234".to_string(),
            "not the neutral form",
        ),
        (
            "an unknown field",
            tamper(&|d| d["kuid"] = json!("0x1")).to_string(),
            "unknown field",
        ),
        (
            "a missing field",
            tamper(&|d| {
                d.as_object_mut().unwrap().remove("gate");
            })
            .to_string(),
            "missing field",
        ),
        (
            "another format",
            tamper(&|d| d["format"] = json!("twizzler-upstream-cap/2")).to_string(),
            "format",
        ),
        (
            "a short signature",
            tamper(&|d| d["signature"] = json!("ab".repeat(63))).to_string(),
            "signature",
        ),
    ];
    let before = db(&kt);
    for (what, text, needle) in &cases {
        kt.write("in.json", text.as_bytes());
        let e = kt.fails(
            &convert("in.json", &["--out", "out.cap", "--add-to", "0x5678"]),
            2,
        );
        assert!(e.contains(needle), "{what}: {e:?} does not say {needle:?}");
        assert!(
            e.contains("in.json"),
            "{what}: {e:?} does not name the file"
        );
        assert!(!kt.path("out.cap").exists(), "{what}: out.cap written");
        assert!(db(&kt) == before, "{what}: the store changed");
    }

    // A genuine capability, but the store's key is not upstream's.
    kt.write("good.json", doc(&good, &sig).to_string().as_bytes());
    kt.write("other.hex", hexs(&OTHER).as_bytes());
    kt.ok(&[
        "import",
        "other.hex",
        "--raw-p256",
        "--name",
        "other",
        "--no-passphrase",
    ]);
    kt.write("other.pub.hex", public(&OTHER).as_bytes());
    kt.write("bad.pub.hex", b"04abcd");
    kt.ok(&["ctx", "new", "--id", "0x9999"]);
    kt.ok(&["obj", "new", "--id", "0x4321", "--kuid", "other"]);
    let mut t = good.clone();
    t.target = 0x4321;
    kt.write("t.json", signed(&t).to_string().as_bytes());
    let refusals: [(&[&str], &str); 5] = [
        // The store's key is another one than the one that signed upstream.
        (
            &[
                "good.json",
                "--upstream-key",
                "owner.pub.hex",
                "--key",
                "other",
                "--add-to",
                "0x5678",
            ],
            "is not the upstream key",
        ),
        // Checked with another upstream key: the signature does not verify.
        (
            &[
                "good.json",
                "--upstream-key",
                "other.pub.hex",
                "--key",
                "other",
                "--add-to",
                "0x5678",
            ],
            "does not verify",
        ),
        // Added to a context it is not for.
        (
            &[
                "good.json",
                "--upstream-key",
                "owner.pub.hex",
                "--key",
                "owner",
                "--add-to",
                "0x9999",
            ],
            "is for context",
        ),
        // A target whose kuid is another key.
        (
            &[
                "t.json",
                "--upstream-key",
                "owner.pub.hex",
                "--key",
                "owner",
            ],
            "does not sign for target",
        ),
        // A malformed upstream key.
        (
            &[
                "good.json",
                "--upstream-key",
                "bad.pub.hex",
                "--key",
                "owner",
            ],
            "not a P-256 verifying key",
        ),
    ];
    let before = db(&kt);
    for (args, needle) in refusals {
        let mut a = vec!["convert-upstream-cap"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--out", "out.cap"]);
        let e = kt.fails(&a, 2);
        assert!(
            e.contains(needle),
            "{args:?}: {e:?} does not say {needle:?}"
        );
        assert!(!kt.path("out.cap").exists(), "{args:?}: out.cap written");
        assert!(db(&kt) == before, "{args:?}: the store changed");
    }
}

/// The number of objects in the store.
fn objects(kt: &Kt) -> usize {
    use secctx::ObjectStore;
    let store = secctx::DbStore::open(kt.store()).expect("open the store");
    store.list().expect("list the store").len()
}

#[test]
fn import_raw_p256_refuses_what_is_not_a_scalar() {
    let kt = Kt::new();
    for (what, text, needle) in [
        ("63 digits", "ab".repeat(31) + "a", "64 hex digits"),
        ("not hex", "zz".repeat(32), "64 hex digits"),
        ("zero", "00".repeat(32), "1..n-1"),
        (
            "the group order",
            "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551".to_string(),
            "1..n-1",
        ),
    ] {
        kt.write("k.hex", text.as_bytes());
        let e = kt.fails(&["import", "k.hex", "--raw-p256", "--no-passphrase"], 2);
        assert!(e.contains(needle), "{what}: {e}");
        assert_eq!(objects(&kt), 0, "{what}: a key was stored");
    }
    // Whitespace around and between the digits, and 0x, are fine.
    let spaced = format!("0x{}\n{}\n", hexs(&SCALAR[..16]), hexs(&SCALAR[16..]));
    kt.write("k.hex", spaced.as_bytes());
    let j = kt.json(&["import", "k.hex", "--raw-p256", "--no-passphrase"]);
    assert_eq!(s(&j["public_key"]), public(&SCALAR));
    // The PEM import refuses a hex file without --raw-p256, saying what it wanted.
    let e = kt.fails(&["import", "k.hex", "--no-passphrase"], 2);
    assert!(e.contains("PEM"), "{e}");
}

/// The docs promise that revoking a converted capability also covers converting it again:
/// signatures are deterministic, so the second conversion is the same record.
#[test]
fn a_revoked_conversion_stays_revoked_when_converted_again() {
    let kt = setup();
    let f = fields(1, 1);
    kt.write(
        "r.json",
        doc(&f, &sign(&f, &SCALAR, false)).to_string().as_bytes(),
    );
    let first = kt.json(&convert(
        "r.json",
        &["--out", "1.cap", "--add-to", "0x5678"],
    ));
    assert!(granted(&kt, "0x1000", "read"));
    kt.ok(&["revoke", "--record", "1.cap"]);
    assert!(!granted(&kt, "0x1000", "read"));
    // The high-S form of the same upstream signature converts to the same record too.
    kt.write(
        "r2.json",
        doc(&f, &sign(&f, &SCALAR, true)).to_string().as_bytes(),
    );
    let again = kt.json(&convert(
        "r2.json",
        &["--out", "2.cap", "--add-to", "0x5678"],
    ));
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["added_to"]["already_held"], true, "{again}");
    assert!(!granted(&kt, "0x1000", "read"));
    let v = kt.json_code(&["verify", "2.cap"], 1);
    assert!(s(&v["reason"]).contains("revoked"), "{v}");
}

/// A sealed upstream key asks for its passphrase as every signing command does; a target the
/// store does not hold needs --unchecked.
#[test]
fn a_sealed_key_and_a_target_kept_elsewhere() {
    let kt = Kt::new();
    kt.write("owner.hex", hexs(&SCALAR).as_bytes());
    kt.write("owner.pub.hex", public(&SCALAR).as_bytes());
    let mut c = kt.cmd(&[
        "import",
        "owner.hex",
        "--raw-p256",
        "--name",
        "owner",
        "--passphrase-env",
        "PASS",
    ]);
    let o = c
        .env("PASS", "upstream horse")
        .output()
        .expect("run keytool");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let f = fields(3, 2);
    kt.write(
        "rw.json",
        doc(&f, &sign(&f, &SCALAR, false)).to_string().as_bytes(),
    );
    // No passphrase, no terminal: refused.
    let e = kt.fails(&convert("rw.json", &["--out", "rw.cap", "--unchecked"]), 2);
    assert!(e.contains("passphrase"), "{e}");
    // The target 0x1234 is not in this store.
    let mut c = kt.cmd(&convert(
        "rw.json",
        &["--out", "rw.cap", "--passphrase-env", "PASS"],
    ));
    let o = c
        .env("PASS", "upstream horse")
        .output()
        .expect("run keytool");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--unchecked"), "{err}");
    assert!(!kt.path("rw.cap").exists());
    let mut c = kt.cmd(&convert(
        "rw.json",
        &[
            "--out",
            "rw.cap",
            "--passphrase-env",
            "PASS",
            "--unchecked",
            "--json",
        ],
    ));
    let o = c
        .env("PASS", "upstream horse")
        .output()
        .expect("run keytool");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(j["prots"], "rw-", "{j}");
    assert!(kt.path("rw.cap").exists());
}
