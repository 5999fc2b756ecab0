//! Frozen format fixtures: one golden file of bytes per format and version this crate reads,
//! under `twizzler-security/tests/fixtures/<format>-v<N>.bin`, and the PEM text forms of both
//! key kinds of both schemes as `<key>-v1.pem` (PKCS#8 v1 for signing keys, as OpenSSL writes
//! them, and SubjectPublicKeyInfo): those pin the choice of PKCS#8 v1 against a dependency
//! that would write v2.
//!
//! For each file a test decodes it with the crate's public decoder, compares the value field
//! by field with the value written out below (ids, rights, gates, expiries, key bytes, and
//! signatures verified under the fixed keys), re-encodes it and compares the bytes. A change
//! to a format is then a diff of a golden file in review, and an old version stays readable
//! by test. [`every_single_byte_change_is_caught`] proves the fixtures bite: every file, with
//! each of its bytes replaced by each of the 255 other values, must fail to decode, decode to
//! another value, or fail verification; the few changes a decoder accepts as the same value
//! are listed per fixture (`aliases`), so a new one is a visible failure.
//!
//! Keys are fixed (raw seeds), ids and times are constants, and both signature schemes sign
//! deterministically (Ed25519 by definition, ECDSA P-256 by RFC 6979), so the generator
//! writes the same bytes every time. To regenerate — only together with a format version
//! bump, never to make a failing fixture pass —
//! `REGENERATE_FIXTURES=1 cargo test -p twizzler-capsec --test it fixtures::regenerate -- --ignored`.
//! It writes only the files that do not exist yet: a golden file is replaced only by deleting it.
//! When a version is bumped, the old version's file and check stay beside the new one's for as
//! long as the decoder reads it; once no encoder writes it, its `reencode` becomes `None` and its
//! `encode` a generator of the old bytes (as context version 2's is in `twizzler-security`).
//!
//! The information-flow formats (`docs/DIFC.md`): a label (`label-v1.bin`, `TLBL`), an
//! ownership record (`tag-cap-v1.bin`, a capability with the `TAG` flag) and a version 3
//! context with a label section holding it (`context-v3.bin`).
//!
//! Context version 2 (the overflow table) is written only by `secctx`'s in-place append, never
//! by [`SecCtxEditor`]; its file is built here the way that append builds it, and only its
//! decoding is tested against today's code.

use std::fmt::Debug;
use std::sync::OnceLock;

use crate::common_keys::hex;

use twizzler_capsec::ctx::{
    CTX_VERSION_OVERFLOW, ENTRY_LEN, HEADER_LEN, HEADER_LEN_V3, MASK_LEN, field,
};
use twizzler_capsec::{
    Cap, CapGrant, CtxFlags, Del, DelGrant, Expiry, Gate, HashAlg, Label, Mask, ObjID, OwnRights,
    OwnershipGrant, Protections, Record, RecordKind, SecCtx, SecCtxEditor, Signature, SigningKey,
    SigningScheme, VerifyingKey,
};

const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;
const X: Protections = Protections::EXEC;

/// The object the Ed25519 capability grants.
const TARGET: ObjID = ObjID::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
/// The object the P-256 capability grants (sorts after [`TARGET`]).
const TARGET_P256: ObjID = ObjID::new(0x7777_0000_1111_2222_3333_4444_5555_6666);
/// The contexts along the delegation chain: A holds the capability, B and C receive.
const CTX_A: ObjID = ObjID::new(0xa000_0000_0000_0000_0000_0000_0000_000a);
const CTX_B: ObjID = ObjID::new(0xb000_0000_0000_0000_0000_0000_0000_000b);
const CTX_C: ObjID = ObjID::new(0xc000_0000_0000_0000_0000_0000_0000_000c);

/// Tags of the label fixture: two secrecy tags and one integrity tag. The first is also the
/// tag of the ownership fixture, whose tag object's key is [`OBJECT_SEED`]'s (it sorts after
/// [`TARGET_P256`], so its record is the context fixture's last entry).
const TAG_MEDICAL: ObjID = ObjID::new(0x9e00_0000_0000_0000_0000_0000_0000_0001);
const TAG_LEGAL: ObjID = ObjID::new(0x9e00_0000_0000_0000_0000_0000_0000_0002);
const TAG_VETTED: ObjID = ObjID::new(0x3e00_0000_0000_0000_0000_0000_0000_0003);

/// 2030-01-01, 2029-01-01, 2028-01-01 and 2027-01-01 in ns since the epoch.
const CAP_EXPIRES: u64 = 1_893_456_000_000_000_000;
const LINK1_EXPIRES: u64 = 1_861_920_000_000_000_000;
const LINK2_EXPIRES: u64 = 1_830_297_600_000_000_000;
const NOW: u64 = 1_798_761_600_000_000_000;

/// The seeds of the fixed keys.
const OBJECT_SEED: [u8; 32] = [7; 32];
const P256_SCALAR: [u8; 32] = [0x11; 32];
const CTX_A_SEED: [u8; 32] = [8; 32];
const CTX_B_SEED: [u8; 32] = [9; 32];

/// The verifying key of [`OBJECT_SEED`] (Ed25519) and of [`P256_SCALAR`] (SEC1 uncompressed).
const OBJECT_PUBLIC: &str = "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";
const P256_PUBLIC: &str = "04\
0217e617f0b6443928278f96999e69a23a4f2c152bdf6d6cdf66e5b80282d4ed\
194a7debcb97712d2dda3ca85aa8765a56f45fc758599652f2897c65306e5794";

/// The message of the standalone signature fixture.
const SIGNED_MESSAGE: &[u8] = b"twizzler-security fixture message";

/// Generation of the context fixtures (the editor bumps it once per change).
const CTX_V1_GENERATION: u64 = 6;
const CTX_V2_GENERATION: u64 = 6;
/// One more than version 1's: setting the label is a change too.
const CTX_V3_GENERATION: u64 = 7;

fn object_key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &OBJECT_SEED).expect("fixed seed")
}

fn p256_key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::EcdsaP256, &P256_SCALAR).expect("fixed scalar")
}

fn ctx_a_key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &CTX_A_SEED).expect("fixed seed")
}

fn ctx_b_key() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &CTX_B_SEED).expect("fixed seed")
}

fn cap_grant() -> CapGrant {
    CapGrant {
        target: TARGET,
        accessor: CTX_A,
        prots: R | W,
        gate: Gate::new(0x1000, 0x4000, 0x10).expect("gate"),
        expires: Expiry::from_raw(CAP_EXPIRES),
        hash: HashAlg::Blake3,
    }
}

fn cap_p256_grant() -> CapGrant {
    CapGrant {
        target: TARGET_P256,
        accessor: CTX_B,
        prots: R | X,
        gate: Gate::WHOLE,
        expires: Expiry::NEVER,
        hash: HashAlg::Sha256,
    }
}

fn link1_grant() -> DelGrant {
    DelGrant {
        receiver: CTX_B,
        prots: R,
        gate: Gate::new(0x2000, 0x1000, 0x10).expect("gate"),
        expires: Expiry::from_raw(LINK1_EXPIRES),
        hash: HashAlg::Blake3,
    }
}

fn link2_grant() -> DelGrant {
    DelGrant {
        receiver: CTX_C,
        prots: R,
        gate: Gate::new(0x2000, 0x800, 0x20).expect("gate"),
        expires: Expiry::from_raw(LINK2_EXPIRES),
        hash: HashAlg::Sha256,
    }
}

/// The expected capability (Ed25519, BLAKE3), minted once.
fn cap() -> &'static Cap {
    static CAP: OnceLock<Cap> = OnceLock::new();
    CAP.get_or_init(|| Cap::mint(cap_grant(), &object_key()).expect("mint"))
}

/// The expected capability (P-256, SHA-256), minted once.
fn cap_p256() -> &'static Cap {
    static CAP: OnceLock<Cap> = OnceLock::new();
    CAP.get_or_init(|| Cap::mint(cap_p256_grant(), &p256_key()).expect("mint"))
}

/// The expected delegation: [`cap`], A to B, then B to C.
fn del() -> &'static Del {
    static DEL: OnceLock<Del> = OnceLock::new();
    DEL.get_or_init(|| {
        Del::from_cap(cap(), link1_grant(), &ctx_a_key())
            .and_then(|d| d.delegate(link2_grant(), &ctx_b_key()))
            .expect("delegate")
    })
}

fn p256_signature() -> &'static Signature {
    static SIG: OnceLock<Signature> = OnceLock::new();
    SIG.get_or_init(|| p256_key().sign(SIGNED_MESSAGE).expect("sign"))
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

// ---- The checks: decode, then compare with the expected value field by field. ----

fn check_cap_fields(c: &Cap, want: &CapGrant, sig: &Signature) -> Result<(), String> {
    same("target", c.target(), want.target)?;
    same("accessor", c.accessor(), want.accessor)?;
    same("prots", c.prots(), want.prots)?;
    same("gate", c.gate(), want.gate)?;
    same("expires", c.expires(), want.expires)?;
    same("hash", c.hash_alg(), want.hash)?;
    same("signature", c.signature(), sig)
}

fn check_cap(bytes: &[u8]) -> Result<(), String> {
    let c = Cap::decode(bytes).map_err(err)?;
    same("gate offset", c.gate().offset(), 0x1000)?;
    same("gate length", c.gate().length(), 0x4000)?;
    same("gate align", c.gate().align(), 0x10)?;
    same("expires", c.expires().raw(), CAP_EXPIRES)?;
    same("scheme", c.signature().scheme(), SigningScheme::Ed25519)?;
    check_cap_fields(&c, &cap_grant(), cap().signature())?;
    c.verify(&object_key().verifying_key(), NOW).map_err(err)
}

fn check_cap_p256(bytes: &[u8]) -> Result<(), String> {
    let c = Cap::decode(bytes).map_err(err)?;
    same("scheme", c.signature().scheme(), SigningScheme::EcdsaP256)?;
    check_cap_fields(&c, &cap_p256_grant(), cap_p256().signature())?;
    c.verify(&p256_key().verifying_key(), NOW).map_err(err)
}

fn check_link(
    link: &twizzler_capsec::Link,
    want: &DelGrant,
    provider: ObjID,
    sig: &Signature,
) -> Result<(), String> {
    same("receiver", link.grant().receiver, want.receiver)?;
    same("link prots", link.grant().prots, want.prots)?;
    same("link gate", link.grant().gate, want.gate)?;
    same("link expires", link.grant().expires, want.expires)?;
    same("link hash", link.grant().hash, want.hash)?;
    same("provider", link.provider(), provider)?;
    same("link signature", link.signature(), sig)
}

fn check_del(bytes: &[u8]) -> Result<(), String> {
    let d = Del::decode(bytes).map_err(err)?;
    let want = del();
    same("depth", d.depth(), 2)?;
    check_cap_fields(d.root(), &cap_grant(), cap().signature())?;
    let (got, exp): (Vec<_>, Vec<_>) = (d.links().collect(), want.links().collect());
    same("links", got.len(), 2)?;
    check_link(got[0], &link1_grant(), CTX_A, exp[0].signature())?;
    check_link(got[1], &link2_grant(), CTX_B, exp[1].signature())?;
    same("receiver", d.receiver(), CTX_C)?;
    same("effective prots", d.prots(), R)?;
    same(
        "effective expiry",
        d.expires(),
        Expiry::from_raw(LINK2_EXPIRES),
    )?;
    d.check_chain(NOW).map_err(err)?;
    let keys = [
        (TARGET, object_key().verifying_key()),
        (CTX_A, ctx_a_key().verifying_key()),
        (CTX_B, ctx_b_key().verifying_key()),
    ];
    d.verify_signatures(|id| {
        keys.iter()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| v)
            .ok_or(twizzler_capsec::KeyLookupError::UnknownKey(id))
    })
    .map_err(err)
}

fn check_verifying_key(
    bytes: &[u8],
    scheme: SigningScheme,
    public: &str,
) -> Result<VerifyingKey, String> {
    let k = VerifyingKey::decode(bytes).map_err(err)?;
    same("scheme", k.scheme(), scheme)?;
    same("key bytes", &k.to_raw()[..], &hex(public)[..])?;
    Ok(k)
}

fn check_vk_ed25519(bytes: &[u8]) -> Result<(), String> {
    let k = check_verifying_key(bytes, SigningScheme::Ed25519, OBJECT_PUBLIC)?;
    k.verify(&cap().signed_message(), cap().signature())
        .map_err(err)
}

fn check_vk_p256(bytes: &[u8]) -> Result<(), String> {
    let k = check_verifying_key(bytes, SigningScheme::EcdsaP256, P256_PUBLIC)?;
    k.verify(SIGNED_MESSAGE, p256_signature()).map_err(err)
}

fn check_signing_key(
    bytes: &[u8],
    scheme: SigningScheme,
    secret: &[u8; 32],
    public: &str,
) -> Result<(), String> {
    let k = SigningKey::decode(bytes).map_err(err)?;
    same("scheme", k.scheme(), scheme)?;
    same("secret bytes", &k.to_raw()[..], &secret[..])?;
    same(
        "public bytes",
        &k.verifying_key().to_raw()[..],
        &hex(public)[..],
    )
}

fn check_sk_ed25519(bytes: &[u8]) -> Result<(), String> {
    check_signing_key(bytes, SigningScheme::Ed25519, &OBJECT_SEED, OBJECT_PUBLIC)
}

fn check_sk_p256(bytes: &[u8]) -> Result<(), String> {
    check_signing_key(bytes, SigningScheme::EcdsaP256, &P256_SCALAR, P256_PUBLIC)
}

fn check_sig_p256(bytes: &[u8]) -> Result<(), String> {
    let s = Signature::decode(bytes).map_err(err)?;
    same("scheme", s.scheme(), SigningScheme::EcdsaP256)?;
    same("bytes", s.as_bytes(), p256_signature().as_bytes())?;
    p256_key()
        .verifying_key()
        .verify(SIGNED_MESSAGE, &s)
        .map_err(err)
}

/// What a context decodes to: header fields, every entry (index, target, kind, decoded
/// record) in table order, every mask.
struct CtxValue {
    flags: CtxFlags,
    generation: u64,
    global_mask: Protections,
    entry_count: usize,
    overflow_count: usize,
    heap_offset: u64,
    entries: Vec<(usize, ObjID, RecordKind, Record)>,
    masks: Vec<Mask>,
}

fn check_ctx(bytes: &[u8], want: &CtxValue) -> Result<(), String> {
    let ctx = SecCtx::parse(bytes).map_err(err)?;
    same("flags", ctx.flags(), want.flags)?;
    same("generation", ctx.generation(), want.generation)?;
    same("global mask", ctx.global_mask(), want.global_mask)?;
    same("entry count", ctx.entry_count(), want.entry_count)?;
    same("overflow count", ctx.overflow_count(), want.overflow_count)?;
    same("mask count", ctx.mask_count(), want.masks.len())?;
    same("heap offset", ctx.heap_offset(), want.heap_offset)?;
    // Entry by entry, stopping at the first difference (and without printing whole records:
    // the single-byte test calls this a few hundred thousand times).
    let mut count = 0;
    for (e, (index, target, kind, record)) in ctx.entries().zip(&want.entries) {
        same("entry index", e.index, *index)?;
        same("entry target", e.target, *target)?;
        same("entry kind", e.kind, *kind)?;
        if e.record().map_err(err)? != *record {
            return Err(format!("entry {index}: another record"));
        }
        count += 1;
    }
    same("entries", count, want.entries.len())?;
    same("masks", &ctx.masks().collect::<Vec<_>>(), &want.masks)?;
    for target in [TARGET, TARGET_P256] {
        same(
            "lookup",
            ctx.entries_for(target).count(),
            want.entries.iter().filter(|e| e.1 == target).count(),
        )?;
    }
    Ok(())
}

fn ctx_masks() -> Vec<Mask> {
    vec![Mask {
        target: TARGET,
        permmask: R | W,
        ovrmask: R,
    }]
}

fn check_ctx_v1(bytes: &[u8]) -> Result<(), String> {
    static WANT: OnceLock<CtxValue> = OnceLock::new();
    check_ctx(bytes, WANT.get_or_init(want_ctx_v1))
}

fn want_ctx_v1() -> CtxValue {
    CtxValue {
        flags: CtxFlags::UNDETACHABLE,
        generation: CTX_V1_GENERATION,
        global_mask: R | W,
        entry_count: 3,
        overflow_count: 0,
        heap_offset: (HEADER_LEN + 3 * ENTRY_LEN + MASK_LEN) as u64,
        entries: vec![
            (0, TARGET, RecordKind::Cap, Record::Cap(*cap())),
            (1, TARGET, RecordKind::Del, Record::Del(del().clone())),
            (2, TARGET_P256, RecordKind::Cap, Record::Cap(*cap_p256())),
        ],
        masks: ctx_masks(),
    }
}

fn check_ctx_v2(bytes: &[u8]) -> Result<(), String> {
    static WANT: OnceLock<CtxValue> = OnceLock::new();
    check_ctx(bytes, WANT.get_or_init(want_ctx_v2))
}

fn want_ctx_v2() -> CtxValue {
    CtxValue {
        flags: CtxFlags::UNDETACHABLE,
        generation: CTX_V2_GENERATION,
        global_mask: R | W,
        entry_count: 3,
        overflow_count: 1,
        heap_offset: (HEADER_LEN + 3 * ENTRY_LEN + MASK_LEN) as u64,
        entries: vec![
            (0, TARGET, RecordKind::Cap, Record::Cap(*cap())),
            (1, TARGET_P256, RecordKind::Cap, Record::Cap(*cap_p256())),
            (2, TARGET, RecordKind::Del, Record::Del(del().clone())),
        ],
        masks: ctx_masks(),
    }
}

/// PEM text as UTF-8, or why not.
fn pem_text(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(err)
}

fn check_sk_pem(
    bytes: &[u8],
    scheme: SigningScheme,
    secret: &[u8; 32],
    public: &str,
) -> Result<(), String> {
    let k = SigningKey::from_pkcs8_pem(pem_text(bytes)?).map_err(err)?;
    same("scheme", k.scheme(), scheme)?;
    same("secret bytes", &k.to_raw()[..], &secret[..])?;
    same(
        "public bytes",
        &k.verifying_key().to_raw()[..],
        &hex(public)[..],
    )
}

fn check_vk_pem(bytes: &[u8], scheme: SigningScheme, public: &str) -> Result<(), String> {
    let k = VerifyingKey::from_public_key_pem(pem_text(bytes)?).map_err(err)?;
    same("scheme", k.scheme(), scheme)?;
    same("key bytes", &k.to_raw()[..], &hex(public)[..])
}

// ---- The encoders: today's encoder writing the expected value. ----

fn label() -> Label {
    Label::from_tags(&[TAG_LEGAL, TAG_MEDICAL], &[TAG_VETTED]).expect("label")
}

fn check_label(bytes: &[u8]) -> Result<(), String> {
    let l = Label::decode(bytes).map_err(err)?;
    same(
        "secrecy",
        l.secrecy.as_slice(),
        &[TAG_MEDICAL, TAG_LEGAL][..],
    )?;
    same("integrity", l.integrity.as_slice(), &[TAG_VETTED][..])
}

fn tag_grant() -> OwnershipGrant {
    OwnershipGrant {
        tag: TAG_MEDICAL,
        holder: CTX_A,
        rights: OwnRights::MINUS,
        expires: Expiry::from_raw(CAP_EXPIRES),
        hash: HashAlg::Blake3,
    }
}

fn tag_cap() -> &'static Cap {
    static C: OnceLock<Cap> = OnceLock::new();
    C.get_or_init(|| Cap::mint_ownership(tag_grant(), &object_key()).expect("sign"))
}

fn check_tag_cap(bytes: &[u8]) -> Result<(), String> {
    let c = Cap::decode(bytes).map_err(err)?;
    same("ownership", c.ownership_rights(), Some(OwnRights::MINUS))?;
    same("tag", c.target(), TAG_MEDICAL)?;
    same("holder", c.accessor(), CTX_A)?;
    same("gate", c.gate(), Gate::WHOLE)?;
    same("expires", c.expires(), Expiry::from_raw(CAP_EXPIRES))?;
    same("signature", c.signature(), tag_cap().signature())?;
    c.verify(&object_key().verifying_key(), NOW).map_err(err)
}

fn check_ctx_v3(bytes: &[u8]) -> Result<(), String> {
    static WANT: OnceLock<CtxValue> = OnceLock::new();
    check_ctx(bytes, WANT.get_or_init(want_ctx_v3))?;
    let ctx = SecCtx::parse(bytes).map_err(err)?;
    same("initial label", ctx.initial_label().map_err(err)?, label())
}

fn want_ctx_v3() -> CtxValue {
    CtxValue {
        flags: CtxFlags::UNDETACHABLE,
        generation: CTX_V3_GENERATION,
        global_mask: R | W,
        entry_count: 3,
        overflow_count: 0,
        heap_offset: (HEADER_LEN_V3 + label().encoded_len() + 3 * ENTRY_LEN + MASK_LEN) as u64,
        entries: vec![
            (0, TARGET, RecordKind::Cap, Record::Cap(*cap())),
            (1, TARGET_P256, RecordKind::Cap, Record::Cap(*cap_p256())),
            (2, TAG_MEDICAL, RecordKind::Cap, Record::Cap(*tag_cap())),
        ],
        masks: ctx_masks(),
    }
}

fn encode_ctx_v3() -> Vec<u8> {
    let mut ed = ctx_editor();
    ed.add_cap(cap_p256());
    ed.add_cap(tag_cap());
    ed.set_initial_label(label());
    ed.encode().expect("encode")
}

fn ctx_editor() -> SecCtxEditor {
    let mut ed = SecCtxEditor::new();
    ed.add_cap(cap());
    ed.set_mask(TARGET, R | W, R);
    ed.set_global_mask(R | W);
    ed.set_flags(CtxFlags::UNDETACHABLE);
    ed
}

fn encode_ctx_v1() -> Vec<u8> {
    let mut ed = ctx_editor();
    ed.add_del(del());
    ed.add_cap(cap_p256());
    ed.encode().expect("encode")
}

/// Version 2, built as `secctx`'s in-place append builds it: a context laid out for update
/// with room for one overflow row, then the delegation appended as that row, the record at
/// the heap's end and the patched header.
fn encode_ctx_v2() -> Vec<u8> {
    let mut ed = ctx_editor();
    ed.add_cap(cap_p256());
    let tables_end = HEADER_LEN + 2 * ENTRY_LEN + MASK_LEN;
    let mut out = ed
        .encode_for_update(Some((tables_end + ENTRY_LEN) as u64))
        .expect("encode");
    let item = del().encode();
    let heap_len = u32::from_le_bytes(out[field::HEAP_LEN..][..4].try_into().expect("u32"));
    let generation = u64::from_le_bytes(out[field::GENERATION..][..8].try_into().expect("u64"));
    let row_at = tables_end;
    out[row_at..row_at + 16].copy_from_slice(&TARGET.to_le_bytes());
    out[row_at + 16..row_at + 20].copy_from_slice(&RecordKind::Del.raw().to_le_bytes());
    out[row_at + 20..row_at + 24].copy_from_slice(&heap_len.to_le_bytes());
    out[row_at + 24..row_at + 28].copy_from_slice(&(item.len() as u32).to_le_bytes());
    out.extend_from_slice(&item);
    out[field::VERSION..][..2].copy_from_slice(&CTX_VERSION_OVERFLOW.to_le_bytes());
    out[field::GENERATION..][..8].copy_from_slice(&(generation + 1).to_le_bytes());
    out[field::HEAP_LEN..][..4].copy_from_slice(&(heap_len + item.len() as u32).to_le_bytes());
    out[field::OVERFLOW..][..4].copy_from_slice(&1u32.to_le_bytes());
    out
}

// ---- The fixtures. ----

/// Decodes bytes and encodes the result again.
type Reencode = fn(&[u8]) -> Vec<u8>;

/// One golden file.
struct Fixture {
    /// File name under `tests/fixtures/`.
    file: &'static str,
    /// The bytes today's encoder writes for the expected value (for context v2, the
    /// generator's: see the module doc).
    encode: fn() -> Vec<u8>,
    /// Decodes the bytes: `Ok` if they are exactly the expected value (signatures verified).
    check: fn(&[u8]) -> Result<(), String>,
    /// Decodes and re-encodes the bytes, or `None` where no encoder writes this version.
    reencode: Option<Reencode>,
    /// Single-byte changes `(offset, new byte)` that the decoder accepts as the same value.
    aliases: &'static [(usize, u8)],
}

const CAP_V1: Fixture = Fixture {
    file: "cap-v1.bin",
    encode: || cap().encode().to_vec(),
    check: check_cap,
    reencode: Some(|b| Cap::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const CAP_P256_V1: Fixture = Fixture {
    file: "cap-p256-sha256-v1.bin",
    encode: || cap_p256().encode().to_vec(),
    check: check_cap_p256,
    reencode: Some(|b| Cap::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const DEL_V1: Fixture = Fixture {
    file: "del-v1.bin",
    encode: || del().encode().to_vec(),
    check: check_del,
    reencode: Some(|b| Del::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const VK_ED25519_V1: Fixture = Fixture {
    file: "verifying-key-ed25519-v1.bin",
    encode: || object_key().verifying_key().encode().to_vec(),
    check: check_vk_ed25519,
    reencode: Some(|b| VerifyingKey::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const VK_P256_V1: Fixture = Fixture {
    file: "verifying-key-p256-v1.bin",
    encode: || p256_key().verifying_key().encode().to_vec(),
    check: check_vk_p256,
    reencode: Some(|b| VerifyingKey::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const SK_ED25519_V1: Fixture = Fixture {
    file: "signing-key-ed25519-v1.bin",
    encode: || object_key().encode().to_vec(),
    check: check_sk_ed25519,
    reencode: Some(|b| SigningKey::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const SK_P256_V1: Fixture = Fixture {
    file: "signing-key-p256-v1.bin",
    encode: || p256_key().encode().to_vec(),
    check: check_sk_p256,
    reencode: Some(|b| SigningKey::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const SIG_P256_V1: Fixture = Fixture {
    file: "signature-p256-v1.bin",
    encode: || p256_signature().encode().to_vec(),
    check: check_sig_p256,
    reencode: Some(|b| Signature::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const CONTEXT_V1: Fixture = Fixture {
    file: "context-v1.bin",
    encode: encode_ctx_v1,
    check: check_ctx_v1,
    reencode: Some(|b| {
        SecCtxEditor::from_ctx(&SecCtx::parse(b).expect("parse"))
            .encode()
            .expect("encode")
    }),
    // Two single-byte changes read as the same context, both by design:
    // - byte 4 (version) 1 -> 2: a version-2 context with an empty overflow table (its count,
    //   at 44, is 0) is the same context;
    // - byte 68 (entry 0's item offset) 0 -> 212: the delegation at heap offset 204 embeds the
    //   same capability at its byte 8, and entries may share bytes.
    aliases: &[(4, 2), (68, 212)],
};

const CONTEXT_V2: Fixture = Fixture {
    file: "context-v2.bin",
    encode: encode_ctx_v2,
    check: check_ctx_v2,
    reencode: None,
    aliases: &[],
};

const LABEL_V1: Fixture = Fixture {
    file: "label-v1.bin",
    encode: || label().encode().to_vec(),
    check: check_label,
    reencode: Some(|b| Label::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const TAG_CAP_V1: Fixture = Fixture {
    file: "tag-cap-v1.bin",
    encode: || tag_cap().encode().to_vec(),
    check: check_tag_cap,
    reencode: Some(|b| Cap::decode(b).expect("decode").encode().to_vec()),
    aliases: &[],
};

const CONTEXT_V3: Fixture = Fixture {
    file: "context-v3.bin",
    encode: encode_ctx_v3,
    check: check_ctx_v3,
    reencode: Some(|b| {
        SecCtxEditor::from_ctx(&SecCtx::parse(b).expect("parse"))
            .encode()
            .expect("encode")
    }),
    aliases: &[],
};

const SK_ED25519_PEM: Fixture = Fixture {
    file: "signing-key-ed25519-v1.pem",
    encode: || {
        object_key()
            .to_pkcs8_pem()
            .expect("pem")
            .as_bytes()
            .to_vec()
    },
    check: |b| check_sk_pem(b, SigningScheme::Ed25519, &OBJECT_SEED, OBJECT_PUBLIC),
    reencode: Some(|b| {
        let k = SigningKey::from_pkcs8_pem(pem_text(b).expect("utf-8")).expect("decode");
        k.to_pkcs8_pem().expect("pem").as_bytes().to_vec()
    }),
    // Every line feed may be a carriage return: RFC 7468 allows CR, LF or CRLF line ends.
    aliases: &[(27, b'\r'), (92, b'\r'), (118, b'\r')],
};

const SK_P256_PEM: Fixture = Fixture {
    file: "signing-key-p256-v1.pem",
    encode: || p256_key().to_pkcs8_pem().expect("pem").as_bytes().to_vec(),
    check: |b| check_sk_pem(b, SigningScheme::EcdsaP256, &P256_SCALAR, P256_PUBLIC),
    reencode: Some(|b| {
        let k = SigningKey::from_pkcs8_pem(pem_text(b).expect("utf-8")).expect("decode");
        k.to_pkcs8_pem().expect("pem").as_bytes().to_vec()
    }),
    // Every line feed may be a carriage return: RFC 7468 allows CR, LF or CRLF line ends.
    aliases: &[
        (27, b'\r'),
        (92, b'\r'),
        (157, b'\r'),
        (214, b'\r'),
        (240, b'\r'),
    ],
};

const VK_ED25519_PEM: Fixture = Fixture {
    file: "verifying-key-ed25519-v1.pem",
    encode: || {
        object_key()
            .verifying_key()
            .to_public_key_pem()
            .expect("pem")
            .into_bytes()
    },
    check: |b| check_vk_pem(b, SigningScheme::Ed25519, OBJECT_PUBLIC),
    reencode: Some(|b| {
        let k = VerifyingKey::from_public_key_pem(pem_text(b).expect("utf-8")).expect("decode");
        k.to_public_key_pem().expect("pem").into_bytes()
    }),
    // Every line feed may be a carriage return: RFC 7468 allows CR, LF or CRLF line ends.
    aliases: &[(26, b'\r'), (87, b'\r'), (112, b'\r')],
};

const VK_P256_PEM: Fixture = Fixture {
    file: "verifying-key-p256-v1.pem",
    encode: || {
        p256_key()
            .verifying_key()
            .to_public_key_pem()
            .expect("pem")
            .into_bytes()
    },
    check: |b| check_vk_pem(b, SigningScheme::EcdsaP256, P256_PUBLIC),
    reencode: Some(|b| {
        let k = VerifyingKey::from_public_key_pem(pem_text(b).expect("utf-8")).expect("decode");
        k.to_public_key_pem().expect("pem").into_bytes()
    }),
    // Every line feed may be a carriage return: RFC 7468 allows CR, LF or CRLF line ends.
    aliases: &[(26, b'\r'), (91, b'\r'), (152, b'\r'), (177, b'\r')],
};

const ALL: [&Fixture; 17] = [
    &LABEL_V1,
    &TAG_CAP_V1,
    &CONTEXT_V3,
    &CAP_V1,
    &CAP_P256_V1,
    &DEL_V1,
    &VK_ED25519_V1,
    &VK_P256_V1,
    &SK_ED25519_V1,
    &SK_P256_V1,
    &SIG_P256_V1,
    &CONTEXT_V1,
    &CONTEXT_V2,
    &SK_ED25519_PEM,
    &SK_P256_PEM,
    &VK_ED25519_PEM,
    &VK_P256_PEM,
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
fn cap_v1() {
    golden(&CAP_V1);
}

#[test]
fn cap_p256_sha256_v1() {
    golden(&CAP_P256_V1);
}

#[test]
fn del_v1() {
    golden(&DEL_V1);
}

#[test]
fn verifying_key_ed25519_v1() {
    golden(&VK_ED25519_V1);
}

#[test]
fn verifying_key_p256_v1() {
    golden(&VK_P256_V1);
}

#[test]
fn signing_key_ed25519_v1() {
    golden(&SK_ED25519_V1);
}

#[test]
fn signing_key_p256_v1() {
    golden(&SK_P256_V1);
}

#[test]
fn signature_p256_v1() {
    golden(&SIG_P256_V1);
}

#[test]
fn context_v1() {
    golden(&CONTEXT_V1);
}

#[test]
fn signing_key_ed25519_pem_v1() {
    golden(&SK_ED25519_PEM);
}

#[test]
fn signing_key_p256_pem_v1() {
    golden(&SK_P256_PEM);
}

#[test]
fn verifying_key_ed25519_pem_v1() {
    golden(&VK_ED25519_PEM);
}

#[test]
fn verifying_key_p256_pem_v1() {
    golden(&VK_P256_PEM);
}

#[test]
fn label_v1() {
    golden(&LABEL_V1);
}

#[test]
fn tag_cap_v1() {
    golden(&TAG_CAP_V1);
}

#[test]
fn context_v3() {
    golden(&CONTEXT_V3);
}

/// Version 2 is decoded only: no encoder of this crate writes it.
#[test]
fn context_v2() {
    golden(&CONTEXT_V2);
}

/// Every byte of every golden file, replaced by each of the 255 other values, is refused or
/// read as another value, except the listed aliases.
#[test]
fn every_single_byte_change_is_caught() {
    let mut wrong = Vec::new();
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
        if accepted != f.aliases {
            wrong.push(format!(
                "{}: single-byte changes read as the same value: {accepted:?}, listed: {:?}",
                f.file, f.aliases
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
