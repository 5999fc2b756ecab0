//! Frozen format fixtures: one golden file of bytes per format `dist-bridge` reads, under
//! `dist-bridge/tests/fixtures/<format>-v<N>.bin`: the guarded token `DBGT`, the controller
//! version file `DBCV`, the upgrade notice `DBUP`, the wire encoding of a [`ControllerId`] and
//! the baseline's [`BroadcastMessage`] (one file per kind), and the export proof: the message a
//! context's key signs ([`proof_message`], `dist-bridge/export-proof/v1`) and a signature over
//! it. The controller id and broadcast messages carry no version of their own; their files are
//! named `-v1` for the layout they have today. The proof message has no decoder (the node
//! rebuilds it from the request), so its test checks that today's encoder writes the golden
//! bytes and that the golden signature verifies over them.
//!
//! For each file a test decodes it with the crate's public decoder, compares the value field
//! by field with the value written out below, checks what can be checked (a token's tag by
//! its owner, a version file's checksum by its decoder), re-encodes it and compares the bytes.
//! [`every_single_byte_change_is_caught`] replaces each byte of each file with each of the
//! 255 other values and asserts that none reads as the same value (no decoder here accepts
//! an alias today; a new one is a visible failure).
//!
//! Everything is fixed: the owner's secret, ids, times and the signing key, so the generator
//! writes the same bytes every time. To regenerate — only together with a format version
//! bump, never to make a failing fixture pass —
//! `REGENERATE_FIXTURES=1 cargo test -p dist-bridge --test it fixtures::regenerate -- --ignored`.
//! It writes only the files that do not exist yet: a golden file is replaced only by deleting it.
//! When a version is bumped, the old version's file and check stay beside the new one's for as
//! long as the decoder reads it; once no encoder writes it, its `reencode` becomes `None` and its
//! `encode` a generator of the old bytes (as context version 2's is in `twizzler-security`).

use std::fmt::Debug;
use std::sync::OnceLock;

use dist_bridge::broadcast::CapName;
use dist_bridge::controller::{decode_version_file, encode_version_file};
use dist_bridge::export_proof::{ExportClaim, ExportProof, NONCE_LEN, proof_message};
use dist_bridge::*;
use twizzler_capsec::{
    Cap, CapGrant, Expiry, Gate, HashAlg, ObjID, Protections, Signature, SigningKey, SigningScheme,
};

/// The owner's node and controller version.
const NODE: u64 = 0x0102_0304_0506_0708;
const CONTROLLER_VERSION: u64 = 3;
/// The owner's secret (tests only: a real node draws it at start).
const SECRET: [u8; 32] = [0x42; 32];
/// The exported object, the context the capability is for, and the object's key seed.
const OBJECT: ObjID = ObjID::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
const CONTEXT: ObjID = ObjID::new(0xa000_0000_0000_0000_0000_0000_0000_000a);
const OBJECT_SEED: [u8; 32] = [7; 32];
/// The seed of the context's key, which signs export proofs, and the proof's time and nonce.
const CONTEXT_SEED: [u8; 32] = [8; 32];
const PROOF_NONCE: [u8; NONCE_LEN] = *b"fixed nonce 0123";
/// 2030-01-01, 2029-01-01 and 2027-01-01 in ns since the epoch.
const CAP_EXPIRES: u64 = 1_893_456_000_000_000_000;
const CAVEAT_EXPIRES: u64 = 1_861_920_000_000_000_000;
const NOW: u64 = 1_798_761_600_000_000_000;

/// The guard the owner's first export creates.
const GUARD: GuardRef = GuardRef {
    index: 0,
    version: 1,
};

fn range(offset: u64, len: u64) -> ByteRange {
    ByteRange::new(offset, len).expect("range")
}

/// The scope the owner issues, then the two caveats a holder appends.
fn body_scope() -> Scope {
    Scope::new(
        Rights::READ | Rights::WRITE | Rights::DERIVE,
        range(0x1000, 0x3000),
        Expiry::from_raw(CAP_EXPIRES),
    )
}

fn caveat1() -> Scope {
    Scope::new(
        Rights::READ,
        range(0x1000, 0x2000),
        Expiry::from_raw(CAVEAT_EXPIRES),
    )
}

fn caveat2() -> Scope {
    caveat1().with_range(range(0x1800, 0x800))
}

/// The capability the token's guard was exported from.
fn cap() -> Cap {
    let key = SigningKey::from_raw(SigningScheme::Ed25519, &OBJECT_SEED).expect("key");
    Cap::mint(
        CapGrant {
            target: OBJECT,
            accessor: CONTEXT,
            prots: Protections::READ | Protections::WRITE,
            gate: Gate::WHOLE,
            expires: Expiry::from_raw(CAP_EXPIRES),
            hash: HashAlg::Blake3,
        },
        &key,
    )
    .expect("mint")
}

fn context_key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &CONTEXT_SEED).expect("key")
}

/// The export proof's message: the request for the token's body scope, to [`NODE`], at
/// [`NOW`], with [`PROOF_NONCE`].
fn expected_proof_message() -> Vec<u8> {
    static MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();
    MESSAGE
        .get_or_init(|| {
            let cap = cap().encode();
            let scope = body_scope();
            let claim = ExportClaim {
                node: NODE,
                cap: &cap,
                context: CONTEXT,
                scope: &scope,
            };
            proof_message(&claim, NOW, &PROOF_NONCE)
        })
        .clone()
}

fn check_proof_message(bytes: &[u8]) -> Result<(), String> {
    same("length", bytes.len(), expected_proof_message().len())?;
    same("message", bytes, &expected_proof_message()[..])
}

fn check_proof_signature(bytes: &[u8]) -> Result<(), String> {
    let signature = Signature::decode(bytes).map_err(err)?;
    same("scheme", signature.scheme(), SigningScheme::Ed25519)?;
    // Only the golden signature itself is worth a verification (each costs a mint too).
    static GOLDEN: OnceLock<Signature> = OnceLock::new();
    let golden =
        GOLDEN.get_or_init(|| context_key().sign(&expected_proof_message()).expect("sign"));
    same("signature", &signature, golden)?;
    let cap = cap().encode();
    let scope = body_scope();
    let claim = ExportClaim {
        node: NODE,
        cap: &cap,
        context: CONTEXT,
        scope: &scope,
    };
    ExportProof {
        time: NOW,
        nonce: PROOF_NONCE,
        signature,
    }
    .verify(&context_key().verifying_key(), &claim)
    .map_err(err)
}

/// The owner and the token it issued (with both caveats appended), made once.
fn owner_and_token() -> &'static (Owner, GuardedToken) {
    static IT: OnceLock<(Owner, GuardedToken)> = OnceLock::new();
    IT.get_or_init(|| {
        let owner = Owner::new(
            ControllerId::new(NODE, CONTROLLER_VERSION),
            NodeSecret::from_bytes(SECRET),
            GuardTableConfig::default(),
        )
        .expect("owner");
        let key = SigningKey::from_raw(SigningScheme::Ed25519, &OBJECT_SEED).expect("key");
        let cap = cap();
        let keys = MapKeys([(OBJECT, key.verifying_key())].into());
        // Never expiring, as asked: the owner clamps it to the capability's expiry.
        let request = ExportRequest::new(CONTEXT, body_scope().rights, body_scope().range);
        let token = owner
            .export(&cap, &keys, &request, NOW)
            .expect("export")
            .attenuate(caveat1())
            .and_then(|t| t.attenuate(caveat2()))
            .expect("attenuate");
        (owner, token)
    })
}

/// The tag of the version-2 token's object label, and its context's label generation.
const LABEL_TAG: ObjID = ObjID::new(0x7a67_0000_0000_0000_0000_0000_0000_0001);
const LABEL_GENERATION: u64 = 5;

/// Fixed labels: the object and the context both at secrecy {LABEL_TAG}, no ownership.
struct FixedLabels;

impl dist_bridge::difc::LabelSource for FixedLabels {
    fn object_label(
        &self,
        _: ObjID,
    ) -> Result<twizzler_capsec::Label, dist_bridge::difc::LabelSourceError> {
        Ok(twizzler_capsec::Label::from_tags(&[LABEL_TAG], &[]).expect("label"))
    }
    fn principal(
        &self,
        _: ObjID,
    ) -> Result<(twizzler_capsec::Label, u64), dist_bridge::difc::LabelSourceError> {
        Ok((
            twizzler_capsec::Label::from_tags(&[LABEL_TAG], &[]).expect("label"),
            LABEL_GENERATION,
        ))
    }
    fn owns(
        &self,
        _: ObjID,
        _: ObjID,
        _: twizzler_capsec::Right,
        _: u64,
    ) -> Result<bool, twizzler_capsec::Verdict> {
        Ok(false)
    }
}

/// The owner and the labelled (version 2) token it issued, with both caveats appended.
fn owner_and_labelled_token() -> &'static (Owner, GuardedToken) {
    static IT: OnceLock<(Owner, GuardedToken)> = OnceLock::new();
    IT.get_or_init(|| {
        let owner = Owner::new(
            ControllerId::new(NODE, CONTROLLER_VERSION),
            NodeSecret::from_bytes(SECRET),
            GuardTableConfig::default(),
        )
        .expect("owner");
        let key = SigningKey::from_raw(SigningScheme::Ed25519, &OBJECT_SEED).expect("key");
        let keys = MapKeys([(OBJECT, key.verifying_key())].into());
        let request = ExportRequest::new(CONTEXT, body_scope().rights, body_scope().range);
        let token = owner
            .export_labelled(&cap(), &keys, &FixedLabels, &request, NOW)
            .expect("export")
            .attenuate(caveat1())
            .and_then(|t| t.attenuate(caveat2()))
            .expect("attenuate");
        (owner, token)
    })
}

fn check_labelled_token(bytes: &[u8]) -> Result<(), String> {
    let t = GuardedToken::decode(bytes).map_err(err)?;
    let (owner, want) = owner_and_labelled_token();
    same("guard", t.guard(), GUARD)?;
    same("object", t.object(), OBJECT)?;
    same("body scope", t.body().scope, body_scope())?;
    same("caveats", t.caveats(), &[caveat1(), caveat2()][..])?;
    let l = t.labels().ok_or("no labels")?;
    same("context", l.context, CONTEXT)?;
    same("generation", l.generation, LABEL_GENERATION)?;
    same("secrecy", l.label.secrecy.as_slice(), &[LABEL_TAG][..])?;
    same("integrity", l.label.integrity.as_slice(), &[][..])?;
    same("tag", t.tag(), want.tag())?;
    let mut policy = dist_bridge::difc::DifcPolicy::default();
    policy.trusted_nodes.insert(LABEL_TAG, [2].into());
    owner
        .check_labelled(
            &t,
            Op::Read,
            0x1800,
            0x800,
            NOW,
            &FixedLabels,
            &policy,
            Some(2),
        )
        .map(|_| ())
        .map_err(err)
}

fn upgrade_notice() -> UpgradeNotice {
    UpgradeNotice {
        owner: ControllerId::new(NODE, CONTROLLER_VERSION),
        changes: vec![
            VersionChange {
                index: 5,
                old: 17,
                new: 18,
            },
            VersionChange {
                index: 0x0009_0000,
                old: 1 << 40,
                new: (1 << 40) + 0x10,
            },
        ],
    }
}

const CAP_NAME: CapName = CapName {
    issuer: 0x1111_2222_3333_4444,
    serial: 0x0505_0606_0707_0808,
};

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

fn check_token(bytes: &[u8]) -> Result<(), String> {
    let t = GuardedToken::decode(bytes).map_err(err)?;
    let (owner, want) = owner_and_token();
    same("owner node", t.owner().node, NODE)?;
    same("owner version", t.owner().version, CONTROLLER_VERSION)?;
    same("guard", t.guard(), GUARD)?;
    same("object", t.object(), OBJECT)?;
    same("body scope", t.body().scope, body_scope())?;
    same("caveats", t.caveats(), &[caveat1(), caveat2()][..])?;
    same("effective scope", t.scope(), caveat2())?;
    same("tag", t.tag(), want.tag())?;
    owner
        .check(&t, Op::Read, 0x1800, 0x800, NOW)
        .map(|_| ())
        .map_err(err)?;
    // The caveats bind: the owner refuses what the first caveat removed.
    match owner.check(&t, Op::Write, 0x1800, 1, NOW) {
        Err(InvokeError::RightsExceeded { .. }) => Ok(()),
        other => Err(format!("write through a read-only token: {other:?}")),
    }
}

fn check_version_file(bytes: &[u8]) -> Result<(), String> {
    let (node, version) = decode_version_file(bytes).map_err(err)?;
    same("node", node, NODE)?;
    same("version", version, CONTROLLER_VERSION)
}

fn check_upgrade_notice(bytes: &[u8]) -> Result<(), String> {
    let n = UpgradeNotice::decode(bytes).map_err(err)?;
    same(
        "owner",
        n.owner,
        ControllerId::new(NODE, CONTROLLER_VERSION),
    )?;
    same("change count", n.changes.len(), 2)?;
    let want = upgrade_notice();
    for (got, want) in n.changes.iter().zip(&want.changes) {
        same("index", got.index, want.index)?;
        same("old", got.old, want.old)?;
        same("new", got.new, want.new)?;
    }
    Ok(())
}

fn check_controller_id(bytes: &[u8]) -> Result<(), String> {
    let id = ControllerId::decode(bytes).map_err(err)?;
    same("node", id.node, NODE)?;
    same("version", id.version, CONTROLLER_VERSION)
}

fn check_broadcast(bytes: &[u8], want: BroadcastMessage) -> Result<(), String> {
    let m = BroadcastMessage::decode(bytes).map_err(err)?;
    let (BroadcastMessage::Revoke(name) | BroadcastMessage::Ack(name)) = m;
    same("issuer", name.issuer, CAP_NAME.issuer)?;
    same("serial", name.serial, CAP_NAME.serial)?;
    same("message", m, want)
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
    /// Decodes and re-encodes the bytes, or `None` where there is no decoder.
    reencode: Option<Reencode>,
}

const TOKEN_V1: Fixture = Fixture {
    file: "token-v1.bin",
    encode: || owner_and_token().1.encode(),
    check: check_token,
    reencode: Some(|b| GuardedToken::decode(b).expect("decode").encode()),
};

const TOKEN_V2: Fixture = Fixture {
    file: "token-v2.bin",
    encode: || owner_and_labelled_token().1.encode(),
    check: check_labelled_token,
    reencode: Some(|b| GuardedToken::decode(b).expect("decode").encode()),
};

const VERSION_FILE_V1: Fixture = Fixture {
    file: "version-file-v1.bin",
    encode: || encode_version_file(NODE, CONTROLLER_VERSION).to_vec(),
    check: check_version_file,
    reencode: Some(|b| {
        let (node, version) = decode_version_file(b).expect("decode");
        encode_version_file(node, version).to_vec()
    }),
};

const UPGRADE_NOTICE_V1: Fixture = Fixture {
    file: "upgrade-notice-v1.bin",
    encode: || upgrade_notice().encode(),
    check: check_upgrade_notice,
    reencode: Some(|b| UpgradeNotice::decode(b).expect("decode").encode()),
};

const CONTROLLER_ID_V1: Fixture = Fixture {
    file: "controller-id-v1.bin",
    encode: || {
        ControllerId::new(NODE, CONTROLLER_VERSION)
            .encode()
            .to_vec()
    },
    check: check_controller_id,
    reencode: Some(|b| ControllerId::decode(b).expect("decode").encode().to_vec()),
};

const BROADCAST_REVOKE_V1: Fixture = Fixture {
    file: "broadcast-revoke-v1.bin",
    encode: || BroadcastMessage::Revoke(CAP_NAME).encode().to_vec(),
    check: |b| check_broadcast(b, BroadcastMessage::Revoke(CAP_NAME)),
    reencode: Some(|b| {
        BroadcastMessage::decode(b)
            .expect("decode")
            .encode()
            .to_vec()
    }),
};

const BROADCAST_ACK_V1: Fixture = Fixture {
    file: "broadcast-ack-v1.bin",
    encode: || BroadcastMessage::Ack(CAP_NAME).encode().to_vec(),
    check: |b| check_broadcast(b, BroadcastMessage::Ack(CAP_NAME)),
    reencode: Some(|b| {
        BroadcastMessage::decode(b)
            .expect("decode")
            .encode()
            .to_vec()
    }),
};

const PROOF_MESSAGE_V1: Fixture = Fixture {
    file: "export-proof-message-v1.bin",
    encode: expected_proof_message,
    check: check_proof_message,
    reencode: None,
};

const PROOF_SIGNATURE_V1: Fixture = Fixture {
    file: "export-proof-signature-v1.bin",
    encode: || {
        let sig = context_key().sign(&expected_proof_message()).expect("sign");
        sig.encode().to_vec()
    },
    check: check_proof_signature,
    reencode: Some(|b| Signature::decode(b).expect("decode").encode().to_vec()),
};

const ALL: [&Fixture; 9] = [
    &TOKEN_V1,
    &TOKEN_V2,
    &VERSION_FILE_V1,
    &UPGRADE_NOTICE_V1,
    &CONTROLLER_ID_V1,
    &BROADCAST_REVOKE_V1,
    &BROADCAST_ACK_V1,
    &PROOF_MESSAGE_V1,
    &PROOF_SIGNATURE_V1,
];

fn path(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file)
}

fn golden(f: &Fixture) {
    let bytes = std::fs::read(path(f.file)).unwrap_or_else(|e| panic!("{}: {e}", f.file));
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
fn token_v1() {
    golden(&TOKEN_V1);
}

#[test]
fn token_v2() {
    golden(&TOKEN_V2);
}

#[test]
fn version_file_v1() {
    golden(&VERSION_FILE_V1);
}

#[test]
fn upgrade_notice_v1() {
    golden(&UPGRADE_NOTICE_V1);
}

#[test]
fn controller_id_v1() {
    golden(&CONTROLLER_ID_V1);
}

#[test]
fn broadcast_revoke_v1() {
    golden(&BROADCAST_REVOKE_V1);
}

#[test]
fn broadcast_ack_v1() {
    golden(&BROADCAST_ACK_V1);
}

/// No decoder: today's encoder must write the golden message.
#[test]
fn export_proof_message_v1() {
    golden(&PROOF_MESSAGE_V1);
}

#[test]
fn export_proof_signature_v1() {
    golden(&PROOF_SIGNATURE_V1);
}

/// Every byte of every golden file, replaced by each of the 255 other values, is refused or
/// read as another value.
#[test]
fn every_single_byte_change_is_caught() {
    for f in ALL {
        let bytes = std::fs::read(path(f.file)).unwrap_or_else(|e| panic!("{}: {e}", f.file));
        let mut accepted = Vec::new();
        let mut changed = bytes.clone();
        for at in 0..bytes.len() {
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
