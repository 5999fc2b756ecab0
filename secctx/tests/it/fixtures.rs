//! Frozen format fixtures: one golden file of bytes per format `secctx` reads, under
//! `secctx/tests/fixtures/<format>-v<N>.bin`: the directory store's object file `TZOB`, the
//! revocation list `TZRV`, the verifying-key object `TZVK` and the signing-key object `TZSK`,
//! plain and passphrase-sealed, and the label table `TZLT` (information flow, `docs/DIFC.md`
//! §7.1). (The database store keeps its objects in redb, whose file
//! format is redb's; its own metadata record is pinned by a unit test in
//! `src/db_store/layout.rs`, since its codec is private to the store.)
//!
//! For each file a test decodes it with the crate's public decoder, compares the value field
//! by field with the value written out below (key bytes checked against the fixed seed),
//! re-encodes it and compares the bytes. [`every_single_byte_change_is_caught`] replaces each
//! byte of each file with each of the 255 other values and asserts that none reads as the
//! same value (see there for the bytes of the sealed key's cost parameters it leaves out).
//! [`context_append_writes_the_frozen_version_2`] checks that the in-place append writes
//! exactly `twizzler-security`'s frozen context version 2.
//!
//! Everything is fixed (key seed, ids, the RNG that draws the sealed key's salt and nonce), so
//! the generator writes the same bytes every time. To regenerate — only together with a
//! format version bump, never to make a failing fixture pass —
//! `REGENERATE_FIXTURES=1 cargo test -p secctx --test it fixtures::regenerate -- --ignored`.
//! It writes only the files that do not exist yet: a golden file is replaced only by deleting it.
//! When a version is bumped, the old version's file and check stay beside the new one's for as
//! long as the decoder reads it; once no encoder writes it, its `reencode` becomes `None` and its
//! `encode` a generator of the old bytes (as context version 2's is in `twizzler-security`).

use std::fmt::Debug;
use std::ops::Range;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use secctx::dir_store::{decode_object, encode_object};
use secctx::keypair::{
    KdfParams, KeyPairIds, load_signing_key, parse_verifying_key, signing_key_info, store_keypair,
    verifying_key_object,
};
use secctx::labels::{LabelTable, Principal, Row};
use secctx::revocations::RevocationList;
use secctx::{MemStore, ObjMeta, Object, ObjectStore};
use twizzler_capsec::{
    Label, ObjID, Protections, RecordId, SigningKey, SigningScheme, VerifyingKey,
};

/// The object of the object-file fixture, its `kuid` and its bytes.
const OBJECT: ObjID = ObjID::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
const KUID: ObjID = ObjID::new(0x7777_0000_1111_2222_3333_4444_5555_6666);
const OBJECT_DATA: &[u8] = b"twizzler object-file fixture\0\x01\x02\xff";

/// The revoked key objects and records of the revocation-list fixture (ascending).
const REVOKED_KEYS: [ObjID; 2] = [
    ObjID::new(0x1000),
    ObjID::new(0x0200_0000_0000_0000_0000_0000_0000_0001),
];
const REVOKED_RECORDS: [[u8; 32]; 2] = [[0x11; 32], [0xee; 32]];

/// The key pair: its seed, its objects' ids, and its verifying key (Ed25519).
const KEY_SEED: [u8; 32] = [7; 32];
const IDS: KeyPairIds = KeyPairIds {
    signing: ObjID::new(0x5e5e_0000_0000_0000_0000_0000_0000_0001),
    verifying: ObjID::new(0x7e7e_0000_0000_0000_0000_0000_0000_0002),
};
const PUBLIC: &str = "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";
/// The sealed key's passphrase, the seed of the RNG that draws its salt and nonce, and its
/// (deliberately cheap) Argon2id cost.
const PASSPHRASE: &str = "correct horse battery staple";
const SEAL_RNG_SEED: u64 = 26;
const KDF: KdfParams = KdfParams {
    memory_kib: 8,
    passes: 1,
    lanes: 1,
};

fn key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &KEY_SEED).expect("fixed seed")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex literal"))
        .collect()
}

fn object() -> Object {
    Object {
        id: OBJECT,
        meta: ObjMeta {
            kuid: Some(KUID),
            default_prots: Protections::READ | Protections::EXEC,
            secret: true,
        },
        data: OBJECT_DATA.to_vec(),
    }
}

fn revocations() -> RevocationList {
    RevocationList {
        keys: REVOKED_KEYS.into_iter().collect(),
        records: REVOKED_RECORDS.into_iter().map(RecordId).collect(),
    }
}

/// The signing-key object's bytes as the store writes them (sealed with `passphrase`).
fn signing_key_object(passphrase: Option<&str>) -> Vec<u8> {
    let store = MemStore::new();
    store_keypair(
        &store,
        &key(),
        IDS,
        passphrase,
        KDF,
        &mut ChaCha20Rng::seed_from_u64(SEAL_RNG_SEED),
    )
    .expect("store key pair");
    store.get(IDS.signing).expect("signing-key object").data
}

/// `Ok` if `got == want`, else why not.
fn same<T: PartialEq + Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn err(e: impl Debug) -> String {
    format!("{e:?}")
}

/// The label table's rows: an object with a data label, and a context registered at a
/// principal label that has changed twice (ids ascending). The tags are fixed ids.
const LABELLED_OBJECT: ObjID = ObjID::new(0x0b1e_c700_0000_0000_0000_0000_0000_0001);
const LABELLED_CONTEXT: ObjID = ObjID::new(0xc0c0_0000_0000_0000_0000_0000_0000_0002);
const TAG_SECRET: ObjID = ObjID::new(0x7a90_0000_0000_0000_0000_0000_0000_0001);
const TAG_VETTED: ObjID = ObjID::new(0x7a90_0000_0000_0000_0000_0000_0000_0002);
const PRINCIPAL_GENERATION: u64 = 2;

fn object_label() -> Label {
    Label::from_tags(&[TAG_SECRET], &[TAG_VETTED]).expect("label")
}

fn principal_label() -> Label {
    Label::from_tags(&[TAG_SECRET], &[]).expect("label")
}

fn label_table() -> LabelTable {
    let mut t = LabelTable::default();
    t.rows.insert(
        LABELLED_OBJECT,
        Row {
            data: object_label(),
            principal: None,
        },
    );
    t.rows.insert(
        LABELLED_CONTEXT,
        Row {
            data: Label::EMPTY,
            principal: Some(Principal {
                label: principal_label(),
                generation: PRINCIPAL_GENERATION,
            }),
        },
    );
    t
}

fn check_label_table(bytes: &[u8]) -> Result<(), String> {
    let t = LabelTable::decode(bytes).map_err(err)?;
    same(
        "ids",
        t.rows.keys().copied().collect::<Vec<_>>(),
        vec![LABELLED_OBJECT, LABELLED_CONTEXT],
    )?;
    let object = t.rows.get(&LABELLED_OBJECT).ok_or("no object row")?;
    same("object's data label", &object.data, &object_label())?;
    same("object's principal", &object.principal, &None)?;
    let context = t.rows.get(&LABELLED_CONTEXT).ok_or("no context row")?;
    same("context's data label", &context.data, &Label::EMPTY)?;
    same(
        "context's principal",
        &context.principal,
        &Some(Principal {
            label: principal_label(),
            generation: PRINCIPAL_GENERATION,
        }),
    )
}

fn check_object_file(bytes: &[u8]) -> Result<(), String> {
    let o = decode_object(OBJECT, bytes).map_err(err)?;
    same("id", o.id, OBJECT)?;
    same("kuid", o.meta.kuid, Some(KUID))?;
    same(
        "default prots",
        o.meta.default_prots,
        Protections::READ | Protections::EXEC,
    )?;
    same("secret", o.meta.secret, true)?;
    same("data", &o.data[..], OBJECT_DATA)
}

fn check_revocations(bytes: &[u8]) -> Result<(), String> {
    let l = RevocationList::decode(bytes).map_err(err)?;
    same(
        "keys",
        l.keys.iter().copied().collect::<Vec<_>>(),
        REVOKED_KEYS.to_vec(),
    )?;
    same(
        "records",
        l.records.iter().map(|r| r.0).collect::<Vec<_>>(),
        REVOKED_RECORDS.to_vec(),
    )
}

fn check_verifying_key_object(bytes: &[u8]) -> Result<(), String> {
    let obj = Object {
        id: IDS.verifying,
        meta: ObjMeta::plain(),
        data: bytes.to_vec(),
    };
    let k = parse_verifying_key(&obj).map_err(err)?;
    same("scheme", k.scheme(), SigningScheme::Ed25519)?;
    same("key bytes", &k.to_raw()[..], &hex(PUBLIC)[..])
}

/// Loads the signing key from an object holding `bytes`, as the store does.
fn check_signing_key_object(
    bytes: &[u8],
    protected: bool,
    passphrase: Option<&str>,
) -> Result<(), String> {
    let obj = Object {
        id: IDS.signing,
        meta: ObjMeta {
            secret: true,
            ..ObjMeta::plain()
        },
        data: bytes.to_vec(),
    };
    let info = signing_key_info(&obj).map_err(err)?;
    same("verifying-key object", info.verifying, IDS.verifying)?;
    same("protected", info.protected, protected)?;
    let store = MemStore::new();
    store.create(&obj).map_err(err)?;
    let k = load_signing_key(&store, IDS.signing, passphrase).map_err(err)?;
    same("scheme", k.scheme(), SigningScheme::Ed25519)?;
    same("secret bytes", &k.to_raw()[..], &KEY_SEED[..])?;
    same(
        "public bytes",
        &k.verifying_key().to_raw()[..],
        &hex(PUBLIC)[..],
    )
}

/// Decodes bytes and encodes the result again.
type Reencode = fn(&[u8]) -> Vec<u8>;

/// One golden file.
struct Fixture {
    /// File name under `tests/fixtures/`.
    file: &'static str,
    /// The bytes today's encoder writes for the expected value.
    encode: fn() -> Vec<u8>,
    /// Decodes the bytes: `Ok` if they are exactly the expected value.
    check: fn(&[u8]) -> Result<(), String>,
    /// Decodes and re-encodes the bytes, or `None` where the encoder needs what the bytes do
    /// not hold (a sealed key's passphrase and random salt: `encode` covers it).
    reencode: Option<Reencode>,
    /// Bytes the single-byte test leaves out (most fixtures: none, `0..0`), and why.
    not_mutated: Range<usize>,
}

const OBJECT_FILE_V1: Fixture = Fixture {
    file: "object-file-v1.bin",
    encode: || encode_object(&object()),
    check: check_object_file,
    reencode: Some(|b| encode_object(&decode_object(OBJECT, b).expect("decode"))),
    not_mutated: 0..0,
};

const REVOCATIONS_V1: Fixture = Fixture {
    file: "revocations-v1.bin",
    encode: || revocations().encode(),
    check: check_revocations,
    reencode: Some(|b| RevocationList::decode(b).expect("decode").encode()),
    not_mutated: 0..0,
};

const VERIFYING_KEY_OBJECT_V1: Fixture = Fixture {
    file: "verifying-key-object-v1.bin",
    encode: || verifying_key_object(IDS.verifying, &key().verifying_key()).data,
    check: check_verifying_key_object,
    reencode: Some(|b| {
        let obj = Object {
            id: IDS.verifying,
            meta: ObjMeta::plain(),
            data: b.to_vec(),
        };
        let k: VerifyingKey = parse_verifying_key(&obj).expect("decode");
        verifying_key_object(IDS.verifying, &k).data
    }),
    not_mutated: 0..0,
};

const SIGNING_KEY_OBJECT_V1: Fixture = Fixture {
    file: "signing-key-object-v1.bin",
    encode: || signing_key_object(None),
    check: |b| check_signing_key_object(b, false, None),
    // The plain object's encoder is the store's; from the decoded key it writes the same.
    reencode: Some(|b| {
        let obj = Object {
            id: IDS.signing,
            meta: ObjMeta::plain(),
            data: b.to_vec(),
        };
        let store = MemStore::new();
        store.create(&obj).expect("create");
        let k = load_signing_key(&store, IDS.signing, None).expect("decode");
        let out = MemStore::new();
        store_keypair(&out, &k, IDS, None, KDF, &mut ChaCha20Rng::seed_from_u64(0)).expect("store");
        out.get(IDS.signing).expect("get").data
    }),
    not_mutated: 0..0,
};

const LABEL_TABLE_V1: Fixture = Fixture {
    file: "label-table-v1.bin",
    encode: || label_table().encode(),
    check: check_label_table,
    reencode: Some(|b| LabelTable::decode(b).expect("decode").encode()),
    not_mutated: 0..0,
};

/// Offset of the sealed object's Argon2 memory cost (a little-endian `u32`, in KiB).
const SEALED_MEMORY_AT: usize = 24;

const SIGNING_KEY_OBJECT_SEALED_V1: Fixture = Fixture {
    file: "signing-key-object-sealed-v1.bin",
    encode: || signing_key_object(Some(PASSPHRASE)),
    check: |b| check_signing_key_object(b, true, Some(PASSPHRASE)),
    reencode: None,
    // The memory cost's upper three bytes: a change there asks Argon2 for up to the decoder's
    // cap of 4 GiB before the AEAD (whose associated data holds the cost) refuses it, which
    // the test cannot afford. `sealed_cost_is_authenticated` covers them.
    not_mutated: SEALED_MEMORY_AT + 1..SEALED_MEMORY_AT + 4,
};

const ALL: [&Fixture; 6] = [
    &OBJECT_FILE_V1,
    &LABEL_TABLE_V1,
    &REVOCATIONS_V1,
    &VERIFYING_KEY_OBJECT_V1,
    &SIGNING_KEY_OBJECT_V1,
    &SIGNING_KEY_OBJECT_SEALED_V1,
];

fn path(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file)
}

fn read(file: &str) -> Vec<u8> {
    std::fs::read(path(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn golden(f: &Fixture) {
    let bytes = read(f.file);
    if let Err(why) = (f.check)(&bytes) {
        panic!("{} does not decode to the expected value: {why}", f.file);
    }
    if let Some(reencode) = f.reencode {
        assert!(reencode(&bytes) == bytes, "{}: re-encoding differs", f.file);
    }
    assert!(
        (f.encode)() == bytes,
        "{}: today's encoder writes the expected value differently",
        f.file
    );
}

#[test]
fn object_file_v1() {
    golden(&OBJECT_FILE_V1);
}

#[test]
fn label_table_v1() {
    golden(&LABEL_TABLE_V1);
}

#[test]
fn revocations_v1() {
    golden(&REVOCATIONS_V1);
}

#[test]
fn verifying_key_object_v1() {
    golden(&VERIFYING_KEY_OBJECT_V1);
}

#[test]
fn signing_key_object_v1() {
    golden(&SIGNING_KEY_OBJECT_V1);
}

/// Sealed with a passphrase: decoded (and decrypted) against today's code; re-encoded only
/// from the expected value, since sealing draws a fresh salt and nonce.
#[test]
fn signing_key_object_sealed_v1() {
    golden(&SIGNING_KEY_OBJECT_SEALED_V1);
}

/// Every byte of every golden file, replaced by each of the 255 other values, is refused or
/// read as another value (except the ranges a fixture leaves out, named there).
#[test]
fn every_single_byte_change_is_caught() {
    for f in ALL {
        let bytes = read(f.file);
        let mut accepted = Vec::new();
        let mut changed = bytes.clone();
        for at in 0..bytes.len() {
            if f.not_mutated.contains(&at) {
                continue;
            }
            for v in 0..=u8::MAX {
                if v == bytes[at] {
                    continue;
                }
                changed[at] = v;
                if (f.check)(&changed).is_ok() {
                    accepted.push((at, v));
                }
            }
            changed[at] = bytes[at];
        }
        assert_eq!(
            accepted,
            Vec::<(usize, u8)>::new(),
            "{}: single-byte changes read as the same value",
            f.file
        );
    }
}

/// The sealed key's cost parameters are authenticated: the bytes the single-byte test leaves
/// out, changed to a cost the test can afford (and every lower byte's change is covered
/// there), do not decrypt.
#[test]
fn sealed_cost_is_authenticated() {
    let bytes = read(SIGNING_KEY_OBJECT_SEALED_V1.file);
    let mut changed = bytes.clone();
    // memory_kib 8 -> 8 + 1024 (byte 25 of the little-endian u32: 1 MiB more).
    changed[SEALED_MEMORY_AT + 1] ^= 0x04;
    let got = check_signing_key_object(&changed, true, Some(PASSPHRASE));
    assert!(
        got.as_ref().is_err_and(|e| e.contains("WrongPassphrase")),
        "{got:?}"
    );
}

/// The golden revocation-list bytes with keys or records out of order, or repeated, are not
/// the list's canonical encoding; the decoder refuses them as its layout says ("ascending"),
/// as every other decoder here refuses a non-canonical encoding.
#[test]
fn revocations_refuse_unsorted_or_repeated_ids() {
    let bytes = read(REVOCATIONS_V1.file);
    let (k0, k1) = (16..32, 32..48);
    let mut swapped = bytes.clone();
    swapped[k0.clone()].copy_from_slice(&bytes[k1.clone()]);
    swapped[k1].copy_from_slice(&bytes[k0.clone()]);
    let mut repeated = bytes.clone();
    repeated.copy_within(k0.clone(), k0.end);
    for (what, b) in [("unsorted", swapped), ("repeated", repeated)] {
        assert!(
            RevocationList::decode(&b).is_err(),
            "{what} key ids accepted as {:?}",
            RevocationList::decode(&b).map(|l| l.keys.len()).ok()
        );
    }
}

/// `context_append` writes exactly the frozen context version 2 of `twizzler-security`'s
/// fixtures, from the version-1 context laid out for update that its generator starts from.
#[test]
fn context_append_writes_the_frozen_version_2() {
    use twizzler_capsec::ctx::{ENTRY_LEN, HEADER_LEN, MASK_LEN};
    use twizzler_capsec::{Cap, CtxFlags, Del, RecordKind, SecCtxEditor};

    let capsec = |file: &str| {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../twizzler-security/tests/fixtures")
            .join(file);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let cap = Cap::decode(&capsec("cap-v1.bin")).expect("cap");
    let cap_p256 = Cap::decode(&capsec("cap-p256-sha256-v1.bin")).expect("cap");
    let del = capsec("del-v1.bin");
    Del::decode(&del).expect("del");
    let want = capsec("context-v2.bin");

    // The same editor as twizzler-security's generator (fixtures::encode_ctx_v2).
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&cap);
    ed.set_mask(
        cap.target(),
        Protections::READ | Protections::WRITE,
        Protections::READ,
    );
    ed.set_global_mask(Protections::READ | Protections::WRITE);
    ed.set_flags(CtxFlags::UNDETACHABLE);
    ed.add_cap(&cap_p256);
    let room_for_one_row = (HEADER_LEN + 3 * ENTRY_LEN + MASK_LEN) as u64;
    let base = ed
        .encode_for_update(Some(room_for_one_row))
        .expect("encode");

    let id = ObjID::new(0xc7c7);
    let store = MemStore::new();
    store
        .create(&Object {
            id,
            meta: ObjMeta::plain(),
            data: base,
        })
        .expect("create");
    let generation = store
        .transact(|tx| secctx::context_append::append(tx, id, cap.target(), RecordKind::Del, &del))
        .expect("append");
    assert!(
        generation.is_some(),
        "the context was not laid out for append"
    );
    assert!(
        store.get(id).expect("get").data == want,
        "context_append no longer writes the frozen version 2"
    );
}

/// Writes the golden files that do not exist yet; see the module doc for when that is
/// allowed. It never overwrites one: replacing a golden file means deleting it, knowingly.
#[test]
#[ignore = "writes the golden files; run with REGENERATE_FIXTURES=1"]
fn regenerate() {
    assert!(
        std::env::var_os("REGENERATE_FIXTURES").is_some_and(|v| v == "1"),
        "set REGENERATE_FIXTURES=1 to write the missing golden files"
    );
    std::fs::create_dir_all(path("")).expect("mkdir");
    for f in ALL {
        let p = path(f.file);
        if p.exists() {
            eprintln!("kept {} (delete it to write it anew)", f.file);
            continue;
        }
        std::fs::write(&p, (f.encode)()).expect("write");
        eprintln!("wrote {}", f.file);
    }
}
