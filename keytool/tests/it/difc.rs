//! Information flow control (`docs/DIFC.md` §7.1): tags, ownership, labels on objects and
//! contexts, relabelling, and `check`'s explanation of each flow denial.

use crate::support::Kt;

/// A store with a key `owner`, a secrecy tag `medical`, an integrity tag `vetted`, and a
/// context `reader` holding rw capabilities for `diagnoses` ({medical}) and `notes-public`.
fn world() -> Kt {
    let kt = Kt::new();
    kt.ok(&["keygen", "--name", "owner", "--no-passphrase"]);
    kt.ok(&["tag", "create", "medical", "--key", "owner"]);
    kt.ok(&["tag", "create", "vetted", "--key", "owner", "--integrity"]);
    kt.ok(&["ctx", "new", "--name", "reader"]);
    kt.ok(&[
        "obj",
        "new",
        "--name",
        "diagnoses",
        "--kuid",
        "owner",
        "--secrecy",
        "medical",
        "--as",
        "reader",
    ]);
    kt.ok(&[
        "obj",
        "create",
        "--name",
        "notes-public",
        "--kuid",
        "owner",
        "--as",
        "reader",
    ]);
    grant_rw(&kt, "reader", "diagnoses");
    grant_rw(&kt, "reader", "notes-public");
    kt
}

fn grant_rw(kt: &Kt, ctx: &str, obj: &str) {
    let file = format!("{ctx}-{obj}.cap");
    kt.ok(&[
        "mint",
        "--key",
        "owner",
        "--target",
        obj,
        "--accessor",
        ctx,
        "--prots",
        "rw-",
        "--out",
        &file,
    ]);
    kt.ok(&["ctx", "add", ctx, &file]);
}

/// `check` at 0x1000: (exit code, stdout).
fn check(kt: &Kt, ctx: &str, obj: &str, access: &str) -> (i32, String) {
    let o = kt.run(&[
        "check", "--ctx", ctx, "--target", obj, "--offset", "0x1000", "--access", access,
    ]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn denied(kt: &Kt, ctx: &str, obj: &str, access: &str) -> String {
    let (code, out) = check(kt, ctx, obj, access);
    assert_eq!(code, 1, "expected a denial: {out}");
    out
}

#[test]
fn walk_through_secret_read_then_public_write_declassifier_and_revocation() {
    let kt = world();
    // Public reader: refused the secret, told how to fix it.
    let out = denied(&kt, "reader", "diagnoses", "read");
    assert!(
        out.contains("denied: read of 'diagnoses' under context 'reader'"),
        "{out}"
    );
    assert!(
        out.contains("the object carries secrecy tag 'medical'"),
        "{out}"
    );
    assert!(
        out.contains("keytool tag grant medical --to reader --rights +"),
        "{out}"
    );

    // With medical+ it must raise first, then it reads.
    kt.ok(&["tag", "grant", "medical", "--to", "reader", "--rights", "+"]);
    let out = denied(&kt, "reader", "diagnoses", "read");
    assert!(
        out.contains("it owns medical+, so it may add it first"),
        "{out}"
    );
    assert!(
        out.contains("keytool ctx relabel reader --secrecy medical"),
        "{out}"
    );
    kt.ok(&["ctx", "relabel", "reader", "--secrecy", "medical"]);
    assert_eq!(check(&kt, "reader", "diagnoses", "read").0, 0);

    // Secret read, then public write: refused, in §7.1's words.
    let out = denied(&kt, "reader", "notes-public", "write");
    assert!(
        out.contains("denied: write to 'notes-public' under context 'reader'"),
        "{out}"
    );
    assert!(
        out.contains("the context carries secrecy tag 'medical' ("),
        "{out}"
    );
    assert!(
        out.contains(
            "the context does not own medical− (no ownership record for 'medical' in 'reader')"
        ),
        "{out}"
    );
    assert!(
        out.contains("or write to an object that carries 'medical'"),
        "{out}"
    );

    // A declassifier: medical− delegated by an owner context.
    kt.ok(&["keygen", "--name", "boss-key", "--no-passphrase"]);
    kt.ok(&["ctx", "new", "--name", "boss", "--kuid", "boss-key"]);
    kt.ok(&["tag", "grant", "medical", "--to", "boss", "--rights", "+-"]);
    let out = denied(&kt, "reader", "notes-public", "write");
    assert!(
        out.contains("keytool tag delegate medical --from boss --to reader --rights -"),
        "the fix names the owner: {out}"
    );
    let d = kt.json(&[
        "tag", "delegate", "medical", "--from", "boss", "--to", "reader", "--rights", "-",
    ]);
    let record = d["record"].as_str().unwrap().to_owned();
    let (code, out) = check(&kt, "reader", "notes-public", "write");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "granted rw-: declassified by medical− (record {record}, expires never)"
        )),
        "{out}"
    );

    // Revoking the declassifier's medical− stops it.
    kt.ok(&["revoke", "--record", &record]);
    let out = denied(&kt, "reader", "notes-public", "write");
    assert!(out.contains("an ownership record for 'medical'"), "{out}");
    assert!(out.contains("record is revoked"), "{out}");

    // JSON names the denial and the tag.
    let j = kt.json_code(
        &[
            "check",
            "--ctx",
            "reader",
            "--target",
            "notes-public",
            "--offset",
            "0x1000",
            "--access",
            "write",
        ],
        1,
    );
    assert_eq!(j["granted"], false);
    assert_eq!(j["flow"]["denial"], "ownership");
}

#[test]
fn integrity_denials_and_endorsement() {
    let kt = world();
    // `hi` runs at I = {vetted}: registered so by `vetter`, which owns vetted+. (A context
    // whose own bytes are unvetted can never raise to vetted: they would not flow to it.)
    kt.ok(&["ctx", "new", "--name", "vetter"]);
    kt.ok(&["ctx", "new", "--name", "plain"]);
    kt.ok(&["tag", "grant", "vetted", "--to", "plain", "--rights", "+"]);
    let e = kt.fails(&["ctx", "relabel", "plain", "--integrity", "vetted"], 2);
    assert!(e.contains("its own bytes carry 'vetted'"), "{e}");
    let e = kt.fails(
        &[
            "ctx",
            "create",
            "--name",
            "hi",
            "--integrity",
            "vetted",
            "--as",
            "vetter",
        ],
        2,
    );
    assert!(e.contains("does not own vetted+"), "{e}");
    kt.ok(&["tag", "grant", "vetted", "--to", "vetter", "--rights", "+"]);
    kt.ok(&[
        "ctx",
        "create",
        "--name",
        "hi",
        "--integrity",
        "vetted",
        "--as",
        "vetter",
    ]);
    kt.ok(&[
        "obj", "new", "--name", "firmware", "--kuid", "owner", "--as", "hi",
    ]);
    let shown = kt.json(&["label", "show", "firmware"]);
    assert_eq!(shown["data"]["integrity"].as_array().unwrap().len(), 1);
    grant_rw(&kt, "hi", "notes-public");
    grant_rw(&kt, "reader", "firmware");

    // Low-integrity input refused to `hi`.
    let out = denied(&kt, "hi", "notes-public", "read");
    assert!(
        out.contains("the context carries integrity tag 'vetted'"),
        "{out}"
    );
    assert!(
        out.contains("keytool tag grant vetted --to hi --rights -"),
        "{out}"
    );
    // Owning vetted− it is told to drop it first.
    kt.ok(&["tag", "grant", "vetted", "--to", "hi", "--rights", "-"]);
    let out = denied(&kt, "hi", "notes-public", "read");
    assert!(
        out.contains("it owns vetted−, so it may drop it first"),
        "{out}"
    );

    // A low-integrity writer is refused the vetted object ...
    let out = denied(&kt, "reader", "firmware", "write");
    assert!(
        out.contains("the object carries integrity tag 'vetted'")
            && out.contains("does not own vetted+"),
        "{out}"
    );
    // ... and with vetted+ it endorses.
    kt.ok(&["tag", "grant", "vetted", "--to", "reader", "--rights", "+"]);
    let (code, out) = check(&kt, "reader", "firmware", "write");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("endorsed by vetted+"), "{out}");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let kt = world();
    let e = kt.fails(&["obj", "new", "--kuid", "owner", "--secrecy", "nosuch"], 2);
    assert!(e.contains("unknown tag \"nosuch\""), "{e}");
    let e = kt.fails(
        &[
            "obj",
            "new",
            "--secrecy",
            "ffffffffffffffffffffffffffffffff",
        ],
        2,
    );
    assert!(
        e.contains("malformed label") && e.contains("ALL_CONTEXTS"),
        "{e}"
    );
    let e = kt.fails(&["obj", "new", "--secrecy", "0x1234"], 2);
    assert!(e.contains("unknown tag"), "{e}");

    // Relabel without ownership: refused, the label unchanged.
    let e = kt.fails(&["ctx", "relabel", "reader", "--secrecy", "medical"], 2);
    assert!(e.contains("does not own medical+"), "{e}");
    assert!(
        e.contains("keytool tag grant medical --to reader --rights +"),
        "{e}"
    );
    let shown = kt.json(&["label", "show", "reader"]);
    assert_eq!(shown["principal"]["generation"], 0);

    // An integrity label at creation needs vetted+.
    let e = kt.fails(
        &[
            "obj",
            "new",
            "--kuid",
            "owner",
            "--integrity",
            "vetted",
            "--as",
            "reader",
        ],
        2,
    );
    assert!(e.contains("does not own vetted+"), "{e}");

    // Bad rights.
    kt.fails(
        &["tag", "grant", "medical", "--to", "reader", "--rights", "x"],
        2,
    );

    // Public accessor misuse: ALL_CONTEXTS is not a context, and a public record is copied,
    // never delegated.
    let e = kt.fails(
        &[
            "tag",
            "grant",
            "medical",
            "--to",
            "ffffffffffffffffffffffffffffffff",
            "--rights",
            "-",
        ],
        2,
    );
    assert!(e.contains("use --public"), "{e}");
    let j = kt.json(&[
        "tag", "grant", "vetted", "--public", "--rights", "-", "--to", "reader",
    ]);
    assert_eq!(j["public"], true);
    assert_eq!(j["holder"], "ffffffffffffffffffffffffffffffff");
    kt.ok(&["ctx", "new", "--name", "other"]);
    let e = kt.fails(
        &[
            "tag", "delegate", "vetted", "--from", "reader", "--to", "other", "--rights", "-",
        ],
        2,
    );
    assert!(
        e.contains("is public (ALL_CONTEXTS): it cannot be delegated"),
        "{e}"
    );
}

#[test]
fn labelled_context_creation_registers_and_the_section_is_then_ignored() {
    let kt = world();
    kt.ok(&["ctx", "new", "--name", "boss"]);
    // Without a registrar owning medical+, a {medical} context is refused.
    let e = kt.fails(
        &["ctx", "create", "--name", "lab", "--secrecy", "medical"],
        2,
    );
    assert!(e.contains("does not own medical+"), "{e}");
    assert!(
        kt.run(&["label", "show", "lab"]).status.code() == Some(2),
        "nothing created"
    );
    kt.ok(&["tag", "grant", "medical", "--to", "boss", "--rights", "+"]);
    let j = kt.json(&[
        "ctx",
        "create",
        "--name",
        "lab",
        "--secrecy",
        "medical",
        "--as",
        "boss",
    ]);
    assert_eq!(j["label"]["secrecy"].as_array().unwrap().len(), 1);
    let out = kt.ok(&["label", "show", "lab"]);
    assert!(
        out.contains("principal label  secrecy {'medical'}"),
        "{out}"
    );
    assert!(!out.contains("ignored"), "{out}");
    // After a change, the section no longer matches: the table is the truth.
    kt.ok(&["tag", "grant", "medical", "--to", "lab", "--rights", "-"]);
    kt.ok(&["ctx", "relabel", "lab"]);
    let out = kt.ok(&["label", "show", "lab"]);
    assert!(out.contains("section ignored since registration"), "{out}");
}

#[test]
fn help_teaches_with_examples() {
    let kt = Kt::new();
    for args in [["tag", "--help"], ["label", "--help"]] {
        let out = kt.ok(&args);
        assert!(out.contains("Walk-through"), "{out}");
        assert!(out.contains("keytool tag delegate medical --from boss --to reader --rights -"));
    }
    let out = kt.ok(&["tag", "grant", "--help"]);
    assert!(out.contains("--public"), "{out}");
    assert!(out.contains("Examples:"), "{out}");
    let out = kt.ok(&["ctx", "relabel", "--help"]);
    assert!(out.contains("Examples:"), "{out}");
}

#[test]
fn the_readme_difc_walkthrough_runs_as_written() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let steps = crate::readme::steps_after(&readme, "<!-- walkthrough:keytool-difc -->");
    let lines: Vec<&str> = steps.iter().map(|s| s.line.as_str()).collect();
    for needed in [
        "keytool tag create",
        "keytool tag grant",
        "keytool tag delegate",
        "keytool ctx relabel",
        "keytool label show",
        "keytool revoke",
    ] {
        assert!(lines.iter().any(|l| l.starts_with(needed)), "no `{needed}`");
    }
    crate::readme::run_steps(&steps);
}

#[test]
fn an_unregistered_labelled_context_is_refused_until_registered() {
    use secctx::ObjectStore;
    let kt = world();
    let medical = kt.json(&["label", "show", "medical"])["id"]
        .as_str()
        .unwrap()
        .parse::<twizzler_capsec::ObjID>()
        .unwrap();
    // A context written elsewhere with a version-3 section proposing {medical}.
    {
        let store = secctx::DbStore::open(kt.store()).unwrap();
        let mut ed = twizzler_capsec::SecCtxEditor::new();
        ed.set_initial_label(twizzler_capsec::Label::from_tags(&[medical], &[]).unwrap());
        let id = twizzler_capsec::ObjID::new(0x1ab);
        store
            .transact(|tx| {
                tx.create(&secctx::Object {
                    id,
                    meta: secctx::ObjMeta::plain(),
                    data: ed.encode().unwrap(),
                })?;
                tx.set_name("lab", id)
            })
            .unwrap();
    }
    grant_rw(&kt, "lab", "diagnoses");
    let out = denied(&kt, "lab", "diagnoses", "read");
    assert!(
        out.contains("proposes a label in its section but is not registered"),
        "{out}"
    );
    assert!(out.contains("keytool ctx register lab --as CTX"), "{out}");
    let e = kt.fails(&["ctx", "register", "lab"], 2);
    assert!(e.contains("does not own medical+"), "{e}");
    kt.ok(&["ctx", "new", "--name", "boss"]);
    kt.ok(&["tag", "grant", "medical", "--to", "boss", "--rights", "+"]);
    let out = kt.ok(&["ctx", "register", "lab", "--as", "boss"]);
    assert!(out.contains("registered at secrecy {'medical'}"), "{out}");
    assert_eq!(check(&kt, "lab", "diagnoses", "read").0, 0);
    let e = kt.fails(&["ctx", "register", "lab", "--as", "boss"], 2);
    assert!(e.contains("registered already"), "{e}");
}

#[test]
fn a_switch_that_would_shed_secrecy_is_explained() {
    let kt = world();
    kt.ok(&["ctx", "new", "--name", "plain"]);
    kt.ok(&["obj", "new", "--name", "ledger", "--kuid", "owner"]);
    grant_rw(&kt, "plain", "ledger");
    kt.ok(&["tag", "grant", "medical", "--to", "reader", "--rights", "+"]);
    kt.ok(&["ctx", "relabel", "reader", "--secrecy", "medical"]);
    let o = kt.run(&[
        "check", "--ctx", "reader", "--ctx", "plain", "--target", "ledger", "--offset", "0x1000",
        "--access", "write",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("denied: write to 'ledger' under context 'reader'"),
        "{out}"
    );
    assert!(
        out.contains(
            "only context 'plain' grants it, and switching there would shed secrecy tag 'medical'"
        ),
        "{out}"
    );
}
