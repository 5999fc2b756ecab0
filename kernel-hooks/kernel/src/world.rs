//! The objects, keys, capabilities, delegations and security contexts the scenarios run
//! against, built at boot with `twizzler-security` from `rdrand` entropy.
//!
//! Nothing here is precomputed: keys are generated, capabilities and delegations signed, and
//! contexts encoded on every boot; the engine later verifies them from the bytes alone.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use twizzler_capsec::{
    BuildError, Cap, CapGrant, CtxFlags, Del, DelGrant, DelegateError, Expiry, Gate, GateError,
    ObjID, Protections, SecCtxEditor, SignError, SigningKey, SigningScheme,
};

use crate::clock::BOOT_EPOCH_NS;
use crate::objects::{Body, CtxObject, Object, ObjectTable};
use crate::paging::{Frame, MAX_SLOTS, PAGE, PageTables, PagingError};
use crate::rng::RdRand;
use crate::user;

/// Well-known object ids (small numbers, so reasons that print ids stay readable).
pub mod ids {
    use twizzler_capsec::ObjID;

    /// The program object: the user probes' code (default protections `r-x`, no `kuid`).
    pub const PROGRAM: ObjID = ObjID::new(0x7001);
    /// Data, Ed25519 key.
    pub const DATA: ObjID = ObjID::new(0xd001);
    /// Data, P-256 key.
    pub const DATA_P256: ObjID = ObjID::new(0xd002);
    /// Data behind a data gate.
    pub const GATED: ObjID = ObjID::new(0xd003);
    /// Code entered through a code gate.
    pub const CODE: ObjID = ObjID::new(0xc0de);
    /// Data without a `kuid`.
    pub const NO_KUID: ObjID = ObjID::new(0xd004);
    /// Data whose `kuid` names no key.
    pub const UNKNOWN_KEY: ObjID = ObjID::new(0xd005);
    /// Data signed by the key that is revoked.
    pub const REVOCABLE: ObjID = ObjID::new(0xd006);
    /// Data reached through a delegation.
    pub const DELEGATED: ObjID = ObjID::new(0xd007);
    /// Data under an expiring capability.
    pub const EXPIRING: ObjID = ObjID::new(0xd008);
    /// Data under a tampered capability.
    pub const TAMPERED: ObjID = ObjID::new(0xd009);
    /// Cycle measurement, Ed25519.
    pub const BENCH_ED25519: ObjID = ObjID::new(0xd00a);
    /// Cycle measurement, P-256.
    pub const BENCH_P256: ObjID = ObjID::new(0xd00b);
    /// Public data: default protections `r--`, no capability needed.
    pub const PUBLIC: ObjID = ObjID::new(0xd00c);
    /// Data that tasks write.
    pub const WRITABLE: ObjID = ObjID::new(0xd00d);
    /// Data read by [`CTX_SELF`] before and after it edits itself.
    pub const EDITED: ObjID = ObjID::new(0xd00e);
    /// Data under a capability that expires while a task reads it.
    pub const EXPIRING_LIVE: ObjID = ObjID::new(0xd00f);

    /// Key objects.
    pub const KEY_ED25519: ObjID = ObjID::new(0x6b01);
    /// See [`KEY_ED25519`].
    pub const KEY_P256: ObjID = ObjID::new(0x6b02);
    /// The key of context [`CTX_PROVIDER`] (signs its delegations).
    pub const KEY_PROVIDER: ObjID = ObjID::new(0x6b03);
    /// The key revoked by the revocation scenario.
    pub const KEY_REVOCABLE: ObjID = ObjID::new(0x6b04);
    /// A `kuid` no object has.
    pub const KEY_NONE: ObjID = ObjID::new(0x6bff);

    /// Security contexts.
    pub const CTX_MAIN: ObjID = ObjID::new(0x5c01);
    /// Holds a tampered capability.
    pub const CTX_TAMPERED: ObjID = ObjID::new(0x5c02);
    /// A per-object mask `r--` on [`WRITABLE`].
    pub const CTX_OBJ_MASK: ObjID = ObjID::new(0x5c03);
    /// A global mask `r-x`.
    pub const CTX_GLOBAL_MASK: ObjID = ObjID::new(0x5c04);
    /// Holds a capability minted for [`CTX_OTHER`].
    pub const CTX_WRONG: ObjID = ObjID::new(0x5c05);
    /// The accessor of the copied capability (no such object is needed).
    pub const CTX_OTHER: ObjID = ObjID::new(0x5c06);
    /// Holds a capability and delegates from it.
    pub const CTX_PROVIDER: ObjID = ObjID::new(0x5c07);
    /// Receives the delegation.
    pub const CTX_RECEIVER: ObjID = ObjID::new(0x5c08);
    /// No records at all.
    pub const CTX_EMPTY: ObjID = ObjID::new(0x5c09);
    /// `UNDETACHABLE`, no records.
    pub const CTX_LOCKED: ObjID = ObjID::new(0x5c0a);
    /// A code capability with an entry gate on [`CODE`].
    pub const CTX_GATE: ObjID = ObjID::new(0x5c0b);
    /// A valid context cut short.
    pub const CTX_TRUNCATED: ObjID = ObjID::new(0x5c0c);
    /// Random bytes.
    pub const CTX_JUNK: ObjID = ObjID::new(0x5c0d);
    /// Names no object.
    pub const CTX_MISSING: ObjID = ObjID::new(0x5cff);
    /// Contexts for the cycle measurements: each holds its own capabilities for
    /// [`BENCH_ED25519`] and [`BENCH_P256`], so its first fault on each is a true miss.
    pub const CTX_BENCH: [ObjID; 3] = [ObjID::new(0x5c10), ObjID::new(0x5c11), ObjID::new(0x5c12)];
    /// A context a task edits: it holds a capability for [`EDITED`] and one with `rw-` on
    /// itself (signed by its `kuid`), which is what lets its tasks write it.
    pub const CTX_SELF: ObjID = ObjID::new(0x5c13);

    /// Several-CPU scenarios: objects each signed by its own key, revoked by one race each
    /// (with 1, 2 and 4 CPUs busy).
    pub const SMP_KEYED: [ObjID; 3] = [ObjID::new(0xe001), ObjID::new(0xe002), ObjID::new(0xe003)];
    /// Their keys.
    pub const KEY_SMP: [ObjID; 3] = [ObjID::new(0x6b11), ObjID::new(0x6b12), ObjID::new(0x6b13)];
    /// Data whose capability record is revoked by id.
    pub const SMP_RECORD: ObjID = ObjID::new(0xe004);
    /// Data reached through [`CTX_SMP_EDIT`], whose capability the kernel edits away.
    pub const SMP_EDIT: ObjID = ObjID::new(0xe005);
    /// Data under a capability that expires while tasks on several CPUs use it.
    pub const SMP_EXPIRING: ObjID = ObjID::new(0xe006);
    /// The context of the several-CPU races: `rw-` on every `SMP_*` object but [`SMP_EDIT`].
    pub const CTX_SMP: ObjID = ObjID::new(0x5c20);
    /// `rw-` on [`SMP_EDIT`]; edited by the kernel while tasks use it.
    pub const CTX_SMP_EDIT: ObjID = ObjID::new(0x5c21);

    /// The first of the 64 objects faulted on by every CPU at once with the verification
    /// cache full (`CACHE_OBJ_FIRST + i` for `i < CACHE_OBJECTS`), all signed by
    /// [`KEY_CACHE`].
    pub const CACHE_OBJ_FIRST: u128 = 0xf000;
    /// The key every cache-pressure object shares (revoked once, at the scenario's end).
    pub const KEY_CACHE: ObjID = ObjID::new(0x6b21);
    /// One capability (`r--`) for each cache-pressure object.
    pub const CTX_CACHE: ObjID = ObjID::new(0x5c22);
    /// Data that only [`CTX_SWITCH_B`] grants (`rw-`).
    pub const SWITCH_DATA: ObjID = ObjID::new(0xe007);
    /// The active context of the switch-vs-detach race: no record for [`SWITCH_DATA`].
    pub const CTX_SWITCH_A: ObjID = ObjID::new(0x5c23);
    /// The inactive context of that race, attached and detached by another CPU.
    pub const CTX_SWITCH_B: ObjID = ObjID::new(0x5c24);
    /// Data only [`CTX_WRITTEN`] grants (`r--`): read on another CPU while a thread writes
    /// that context.
    pub const WRITTEN_DATA: ObjID = ObjID::new(0xe008);
    /// A context written while another CPU misses under it: `r--` on [`WRITTEN_DATA`] and
    /// `rw-` on itself (its `kuid` signs), which lets its threads write it.
    pub const CTX_WRITTEN: ObjID = ObjID::new(0x5c25);
}

/// How many cache-pressure objects there are (the several-CPU eviction scenario).
pub const CACHE_OBJECTS: u64 = 64;
/// The slot of the first cache-pressure object; the others follow (up to `MAX_SLOTS`).
pub const FIRST_CACHE_SLOT: u64 = 64;

/// The cache-pressure object `i`.
pub fn cache_obj(i: u64) -> ObjID {
    ObjID::new(ids::CACHE_OBJ_FIRST + u128::from(i))
}

/// The `u64` every page past the null page of cache-pressure object `i` is tiled with (its
/// id), so a task can check each read against the object it read.
pub fn cache_word(i: u64) -> u64 {
    cache_obj(i).raw() as u64
}

/// The slot of the first several-CPU object (`SMP_KEYED[0]`); the others follow.
pub const FIRST_SMP_SLOT: u64 = 50;
/// The slot of [`ids::SWITCH_DATA`] (past the other several-CPU objects).
pub const SWITCH_SLOT: u64 = FIRST_SMP_SLOT + 6;
/// The slot of [`ids::WRITTEN_DATA`] (past the conformance suite's, before the cache's).
pub const WRITTEN_SLOT: u64 = 63;
/// When the capability on [`ids::SMP_EXPIRING`] expires: five hours after boot (the race
/// moves the engine's clock to shortly before it).
pub const SMP_EXPIRY_NS: u64 = BOOT_EPOCH_NS + 5 * 3_600 * 1_000_000_000;

/// The id of the capability record for [`ids::SMP_RECORD`] in [`ids::CTX_SMP`] (set by
/// [`build`]).
pub static SMP_RECORD_ID: spin::Once<twizzler_capsec::RecordId> = spin::Once::new();

use ids::*;

/// Pages of every data and code object (page 0 is the null page).
pub const OBJECT_PAGES: u64 = 8;
/// The data gate on [`ids::GATED`]: bytes `0x2800 .. 0x5000` (page 2 in part, 3 and 4 whole).
pub const DATA_GATE: (u64, u64) = (0x2800, 0x2800);
/// The code gate on [`ids::CODE`]: entry points every 16 bytes in `0x2000 .. 0x2100`.
pub const CODE_GATE: (u64, u64, u64) = (0x2000, 0x100, 16);
/// When the expiring capability expires: one hour after boot.
pub const EXPIRY_NS: u64 = BOOT_EPOCH_NS + 3_600 * 1_000_000_000;
/// When the capability on [`ids::EXPIRING_LIVE`] expires: three hours after boot (the scenario
/// sets the engine's clock to shortly before it).
pub const LIVE_EXPIRY_NS: u64 = BOOT_EPOCH_NS + 3 * 3_600 * 1_000_000_000;
/// The first slot of the context objects (data and code use the slots below).
pub const FIRST_CTX_SLOT: u64 = 20;

/// The byte every page `page` of the object in slot `slot` is filled with.
pub fn fill_byte(slot: u64, page: u64) -> u8 {
    ((slot << 4) | (page & 0xf)) as u8
}

/// Why the world could not be built.
#[derive(Debug)]
pub enum WorldError {
    /// Signing failed.
    Sign(SignError),
    /// Delegating failed.
    Delegate(DelegateError),
    /// A gate was invalid.
    Gate(GateError),
    /// A context did not encode.
    Build(BuildError),
    /// Out of frames.
    Paging(PagingError),
    /// The tampering target was not found in the context bytes.
    TamperTarget,
    /// The probe code does not fit a page.
    ProbesTooLarge,
    /// More objects than slots.
    OutOfSlots,
    /// A context's bytes did not fit its frames.
    ContextFrames,
    /// The conformance suite's world could not be added.
    Conformance(alloc::string::String),
}

impl fmt::Display for WorldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sign(e) => write!(f, "signing: {e}"),
            Self::Delegate(e) => write!(f, "delegating: {e}"),
            Self::Gate(e) => write!(f, "gate: {e}"),
            Self::Build(e) => write!(f, "encoding a context: {e}"),
            Self::Paging(e) => write!(f, "backing frames: {e}"),
            Self::TamperTarget => {
                f.write_str("the capability to tamper with is not in its context")
            }
            Self::ProbesTooLarge => f.write_str("the user probes do not fit one page"),
            Self::OutOfSlots => f.write_str("more objects than slots"),
            Self::ContextFrames => f.write_str("a context does not fit its frames"),
            Self::Conformance(e) => write!(f, "the conformance world: {e}"),
        }
    }
}

impl From<SignError> for WorldError {
    fn from(e: SignError) -> Self {
        Self::Sign(e)
    }
}
impl From<DelegateError> for WorldError {
    fn from(e: DelegateError) -> Self {
        Self::Delegate(e)
    }
}
impl From<GateError> for WorldError {
    fn from(e: GateError) -> Self {
        Self::Gate(e)
    }
}
impl From<BuildError> for WorldError {
    fn from(e: BuildError) -> Self {
        Self::Build(e)
    }
}
impl From<PagingError> for WorldError {
    fn from(e: PagingError) -> Self {
        Self::Paging(e)
    }
}

/// A data or code object in `slot`, its pages filled by `fill(page, frame)`.
fn frames_object(
    pt: &mut PageTables,
    id: ObjID,
    slot: u64,
    kuid: Option<ObjID>,
    default_prots: Protections,
    mut fill: impl FnMut(u64, &mut Frame),
) -> Result<Object, WorldError> {
    let mut frames = Vec::new();
    for page in 0..OBJECT_PAGES {
        let mut frame = pt.alloc_frame()?;
        fill(page, &mut frame);
        frames.push(frame);
    }
    Ok(Object {
        id,
        kuid,
        default_prots,
        slot: Some(slot),
        label: twizzler_capsec::LabelId::EMPTY,
        body: Body::Frames(frames),
    })
}

/// A context object holding `bytes`, in the next context slot (`next_slot`). Contexts have no
/// default protections: a task reads or writes one only with a capability for it.
fn context(
    pt: &mut PageTables,
    next_slot: &mut u64,
    id: ObjID,
    kuid: Option<ObjID>,
    bytes: Vec<u8>,
) -> Result<Object, WorldError> {
    let slot = *next_slot;
    if slot > MAX_SLOTS {
        return Err(WorldError::OutOfSlots);
    }
    *next_slot += 1;
    // The null page, then the bytes (at least one page, so the object has a base).
    let pages = bytes.len().div_ceil(PAGE as usize).max(1);
    let frames = pt.alloc_contiguous(1 + pages)?;
    let ctx = CtxObject::new(frames, &bytes).ok_or(WorldError::ContextFrames)?;
    Ok(Object {
        id,
        kuid,
        default_prots: Protections::empty(),
        slot: Some(slot),
        label: twizzler_capsec::LabelId::EMPTY,
        body: Body::Context(ctx),
    })
}

fn key(id: ObjID, key: &SigningKey) -> Object {
    Object {
        id,
        kuid: None,
        default_prots: Protections::READ,
        slot: None,
        label: twizzler_capsec::LabelId::EMPTY,
        body: Body::Key(key.verifying_key()),
    }
}

/// A capability for `target` to `accessor`.
fn cap(
    target: ObjID,
    accessor: ObjID,
    prots: Protections,
    key: &SigningKey,
) -> Result<Cap, WorldError> {
    Ok(Cap::mint(CapGrant::new(target, accessor, prots), key)?)
}

/// Builds every object. Generates five keys (four Ed25519, one P-256) with `rng`.
pub fn build(rng: &mut RdRand, pt: &mut PageTables) -> Result<ObjectTable, WorldError> {
    let r = Protections::READ;
    let rw = Protections::READ | Protections::WRITE;
    let rx = Protections::READ | Protections::EXEC;
    let none = Protections::empty();

    let ed = SigningKey::generate(SigningScheme::Ed25519, rng);
    let p256 = SigningKey::generate(SigningScheme::EcdsaP256, rng);
    let provider = SigningKey::generate(SigningScheme::Ed25519, rng);
    let revocable = SigningKey::generate(SigningScheme::Ed25519, rng);
    let stray = SigningKey::generate(SigningScheme::Ed25519, rng);

    let mut objects = Vec::new();
    let mut next_ctx_slot = FIRST_CTX_SLOT;
    let slot = &mut next_ctx_slot;

    // Program: the probes on page 1, the rest zero.
    let probes = user::probe_bytes();
    if probes.len() > PAGE as usize {
        return Err(WorldError::ProbesTooLarge);
    }
    objects.push(frames_object(pt, PROGRAM, 1, None, rx, |page, frame| {
        if page == 1 {
            frame.tile(probes);
        }
    })?);
    // Data objects: every page filled with its own byte.
    let data_objects = [
        (DATA, 2, Some(KEY_ED25519), none),
        (DATA_P256, 3, Some(KEY_P256), none),
        (GATED, 4, Some(KEY_ED25519), none),
        (NO_KUID, 6, None, none),
        (UNKNOWN_KEY, 7, Some(KEY_NONE), none),
        (REVOCABLE, 8, Some(KEY_REVOCABLE), none),
        (DELEGATED, 9, Some(KEY_ED25519), none),
        (EXPIRING, 10, Some(KEY_ED25519), none),
        (TAMPERED, 11, Some(KEY_ED25519), none),
        (BENCH_ED25519, 12, Some(KEY_ED25519), none),
        (BENCH_P256, 13, Some(KEY_P256), none),
        (PUBLIC, 14, None, r),
        (WRITABLE, 15, Some(KEY_ED25519), none),
        (EDITED, 16, Some(KEY_ED25519), none),
        (EXPIRING_LIVE, 17, Some(KEY_ED25519), none),
    ];
    for (id, slot, kuid, default_prots) in data_objects {
        objects.push(frames_object(
            pt,
            id,
            slot,
            kuid,
            default_prots,
            |page, frame| {
                frame.fill(fill_byte(slot, page));
            },
        )?);
    }
    // Code: every page is exit blocks.
    objects.push(frames_object(
        pt,
        CODE,
        5,
        Some(KEY_ED25519),
        none,
        |_, frame| {
            frame.tile(&user::EXIT_BLOCK);
        },
    )?);

    objects.push(key(KEY_ED25519, &ed));
    objects.push(key(KEY_P256, &p256));
    objects.push(key(KEY_PROVIDER, &provider));
    objects.push(key(KEY_REVOCABLE, &revocable));

    // The main context: one capability per object it may use.
    let mut main = SecCtxEditor::new();
    main.add_cap(&cap(DATA, CTX_MAIN, r, &ed)?);
    main.add_cap(&cap(DATA_P256, CTX_MAIN, r, &p256)?);
    let mut gated = CapGrant::new(GATED, CTX_MAIN, rw);
    gated.gate = Gate::new(DATA_GATE.0, DATA_GATE.1, 1)?;
    main.add_cap(&Cap::mint(gated, &ed)?);
    main.add_cap(&cap(NO_KUID, CTX_MAIN, r, &stray)?);
    main.add_cap(&cap(UNKNOWN_KEY, CTX_MAIN, r, &stray)?);
    main.add_cap(&cap(REVOCABLE, CTX_MAIN, r, &revocable)?);
    let mut expiring = CapGrant::new(EXPIRING, CTX_MAIN, r);
    expiring.expires = Expiry::from_raw(EXPIRY_NS);
    main.add_cap(&Cap::mint(expiring, &ed)?);
    main.add_cap(&cap(WRITABLE, CTX_MAIN, rw, &ed)?);
    let mut live = CapGrant::new(EXPIRING_LIVE, CTX_MAIN, r);
    live.expires = Expiry::from_raw(LIVE_EXPIRY_NS);
    main.add_cap(&Cap::mint(live, &ed)?);
    objects.push(context(pt, slot, CTX_MAIN, None, main.encode()?)?);

    // Tampered: a read-only capability whose rights are then edited to rw- in the bytes.
    let honest = cap(TAMPERED, CTX_TAMPERED, r, &ed)?;
    let mut ed_ctx = SecCtxEditor::new();
    ed_ctx.add_cap(&honest);
    let mut bytes = ed_ctx.encode()?;
    tamper_prots(&mut bytes, &honest.encode(), rw)?;
    objects.push(context(pt, slot, CTX_TAMPERED, None, bytes)?);

    // Masks: the records grant rw-, the masks take w away.
    let mut obj_mask = SecCtxEditor::new();
    obj_mask.add_cap(&cap(WRITABLE, CTX_OBJ_MASK, rw, &ed)?);
    obj_mask.set_mask(WRITABLE, r, none);
    objects.push(context(pt, slot, CTX_OBJ_MASK, None, obj_mask.encode()?)?);
    let mut global = SecCtxEditor::new();
    global.add_cap(&cap(WRITABLE, CTX_GLOBAL_MASK, rw, &ed)?);
    global.set_global_mask(rx);
    objects.push(context(pt, slot, CTX_GLOBAL_MASK, None, global.encode()?)?);

    // Wrong accessor: a valid capability for another context, copied in.
    let mut wrong = SecCtxEditor::new();
    wrong.add_cap(&cap(DATA, CTX_OTHER, r, &ed)?);
    objects.push(context(pt, slot, CTX_WRONG, None, wrong.encode()?)?);

    // Delegation: the provider holds rw-, and delegates r-- to the receiver.
    let parent = cap(DELEGATED, CTX_PROVIDER, rw, &ed)?;
    let mut prov = SecCtxEditor::new();
    prov.add_cap(&parent);
    objects.push(context(
        pt,
        slot,
        CTX_PROVIDER,
        Some(KEY_PROVIDER),
        prov.encode()?,
    )?);
    let del = Del::from_cap(&parent, DelGrant::new(CTX_RECEIVER, r), &provider)?;
    let mut recv = SecCtxEditor::new();
    recv.add_del(&del);
    objects.push(context(pt, slot, CTX_RECEIVER, None, recv.encode()?)?);

    objects.push(context(
        pt,
        slot,
        CTX_EMPTY,
        None,
        SecCtxEditor::new().encode()?,
    )?);
    let mut locked = SecCtxEditor::new();
    locked.set_flags(CtxFlags::UNDETACHABLE);
    objects.push(context(pt, slot, CTX_LOCKED, None, locked.encode()?)?);

    // Code gate: r-x on CODE, entry points every 16 bytes of 0x2000..0x2100.
    let mut code = CapGrant::new(CODE, CTX_GATE, rx);
    code.gate = Gate::new(CODE_GATE.0, CODE_GATE.1, CODE_GATE.2)?;
    let mut gate_ctx = SecCtxEditor::new();
    gate_ctx.add_cap(&Cap::mint(code, &ed)?);
    objects.push(context(pt, slot, CTX_GATE, None, gate_ctx.encode()?)?);

    for ctx in CTX_BENCH {
        let mut bench = SecCtxEditor::new();
        bench.add_cap(&cap(BENCH_ED25519, ctx, r, &ed)?);
        bench.add_cap(&cap(BENCH_P256, ctx, r, &p256)?);
        objects.push(context(pt, slot, ctx, None, bench.encode()?)?);
    }

    // Self-editing: a capability for EDITED, and rw- on the context object itself (whose kuid
    // is the signing key), so its tasks may write it (the kernel's rule for context writers).
    let mut self_ctx = SecCtxEditor::new();
    self_ctx.add_cap(&cap(EDITED, CTX_SELF, r, &ed)?);
    self_ctx.add_cap(&cap(CTX_SELF, CTX_SELF, rw, &ed)?);
    objects.push(context(
        pt,
        slot,
        CTX_SELF,
        Some(KEY_ED25519),
        self_ctx.encode()?,
    )?);

    // Several CPUs: one key per revocation race, a record revoked by id, an expiring grant,
    // and a context the kernel edits.
    let smp_keys: Vec<SigningKey> = KEY_SMP
        .iter()
        .map(|_| SigningKey::generate(SigningScheme::Ed25519, rng))
        .collect();
    let smp_objects = SMP_KEYED
        .iter()
        .zip(KEY_SMP)
        .map(|(o, k)| (*o, Some(k)))
        .chain([
            (SMP_RECORD, Some(KEY_ED25519)),
            (SMP_EDIT, Some(KEY_ED25519)),
            (SMP_EXPIRING, Some(KEY_ED25519)),
        ]);
    for (slot, (id, kuid)) in (FIRST_SMP_SLOT..).zip(smp_objects) {
        objects.push(frames_object(pt, id, slot, kuid, none, |page, frame| {
            frame.fill(fill_byte(slot, page));
        })?);
    }
    for (k, key_id) in smp_keys.iter().zip(KEY_SMP) {
        objects.push(key(key_id, k));
    }
    let mut smp = SecCtxEditor::new();
    for (o, k) in SMP_KEYED.iter().zip(&smp_keys) {
        smp.add_cap(&cap(*o, CTX_SMP, rw, k)?);
    }
    let record = cap(SMP_RECORD, CTX_SMP, rw, &ed)?;
    SMP_RECORD_ID.call_once(|| record.id());
    smp.add_cap(&record);
    let mut smp_expiring = CapGrant::new(SMP_EXPIRING, CTX_SMP, rw);
    smp_expiring.expires = Expiry::from_raw(SMP_EXPIRY_NS);
    smp.add_cap(&Cap::mint(smp_expiring, &ed)?);
    objects.push(context(pt, slot, CTX_SMP, None, smp.encode()?)?);
    let mut smp_edit = SecCtxEditor::new();
    smp_edit.add_cap(&cap(SMP_EDIT, CTX_SMP_EDIT, rw, &ed)?);
    objects.push(context(pt, slot, CTX_SMP_EDIT, None, smp_edit.encode()?)?);

    // Cache pressure: 64 objects under one key of their own, one capability each in one
    // context; every page past the null page holds the object's id.
    let cache_key = SigningKey::generate(SigningScheme::Ed25519, rng);
    objects.push(key(KEY_CACHE, &cache_key));
    let mut cache_ctx = SecCtxEditor::new();
    for i in 0..CACHE_OBJECTS {
        let id = cache_obj(i);
        let word = cache_word(i).to_le_bytes();
        objects.push(frames_object(
            pt,
            id,
            FIRST_CACHE_SLOT + i,
            Some(KEY_CACHE),
            none,
            |page, frame| {
                if page > 0 {
                    frame.tile(&word);
                }
            },
        )?);
        cache_ctx.add_cap(&cap(id, CTX_CACHE, r, &cache_key)?);
    }
    objects.push(context(pt, slot, CTX_CACHE, None, cache_ctx.encode()?)?);

    // Switch vs detach: data only the inactive context B grants.
    objects.push(frames_object(
        pt,
        SWITCH_DATA,
        SWITCH_SLOT,
        Some(KEY_ED25519),
        none,
        |page, frame| {
            frame.fill(fill_byte(SWITCH_SLOT, page));
        },
    )?);
    objects.push(context(
        pt,
        slot,
        CTX_SWITCH_A,
        None,
        SecCtxEditor::new().encode()?,
    )?);
    let mut switch_b = SecCtxEditor::new();
    switch_b.add_cap(&cap(SWITCH_DATA, CTX_SWITCH_B, rw, &ed)?);
    objects.push(context(pt, slot, CTX_SWITCH_B, None, switch_b.encode()?)?);

    // A context write racing a miss on another CPU: data only CTX_WRITTEN grants, and rw-
    // on the context itself, so a thread under it may write it.
    objects.push(frames_object(
        pt,
        WRITTEN_DATA,
        WRITTEN_SLOT,
        Some(KEY_ED25519),
        none,
        |page, frame| {
            frame.fill(fill_byte(WRITTEN_SLOT, page));
        },
    )?);
    let mut written = SecCtxEditor::new();
    written.add_cap(&cap(WRITTEN_DATA, CTX_WRITTEN, r, &ed)?);
    written.add_cap(&cap(CTX_WRITTEN, CTX_WRITTEN, rw, &ed)?);
    objects.push(context(
        pt,
        slot,
        CTX_WRITTEN,
        Some(KEY_ED25519),
        written.encode()?,
    )?);

    // Malformed: a valid context cut in half, and random bytes.
    let mut whole = main.encode()?;
    whole.truncate(whole.len() / 2);
    objects.push(context(pt, slot, CTX_TRUNCATED, None, whole)?);
    let mut junk = vec![0u8; 256];
    let Ok(()) = rand_core::TryRng::try_fill_bytes(rng, &mut junk);
    objects.push(context(pt, slot, CTX_JUNK, None, junk)?);

    // The conformance suite's objects (`kernel_hooks::conformance`), in their own slots.
    crate::conformance::add_world(pt, slot, &mut objects).map_err(WorldError::Conformance)?;

    Ok(ObjectTable::new(objects))
}

/// Finds the encoded capability `cap` in context bytes `ctx` and rewrites its rights field
/// to `prots`, leaving the signature as it was.
fn tamper_prots(ctx: &mut [u8], cap: &[u8], prots: Protections) -> Result<(), WorldError> {
    // Body layout: magic u32, version u16, flags u16, target u128, accessor u128, prots u16.
    const PROTS_AT: usize = 4 + 2 + 2 + 16 + 16;
    let at = ctx
        .windows(cap.len())
        .position(|w| w == cap)
        .ok_or(WorldError::TamperTarget)?;
    let field = ctx
        .get_mut(at + PROTS_AT..at + PROTS_AT + 2)
        .ok_or(WorldError::TamperTarget)?;
    field.copy_from_slice(&prots.bits().to_le_bytes());
    Ok(())
}
