//! The world of the `engine` target: a single-threaded [`Host`] over the fixture objects,
//! a pool of records signed once per process, and the rule's [`Authority`] over the same
//! host, for the oracle.
//!
//! # Why the engine pays for real signatures
//!
//! The engine checks signatures itself: its own authority (memo, failed memo, budget) asks the
//! host only for keys ([`Host::with_key`] lends a `VerifyingKey`) and revocations, and
//! `VerifyingKey::verify` is what it calls on a memo miss. There is no hook through which a
//! host could answer a check cheaply without changing the library. So the target keeps the
//! real work small instead:
//!
//! - the records come from a [`pool`] of 16 minted **once per process** (signing is never
//!   repeated per input);
//! - a fresh engine per input (so runs reproduce) verifies each distinct check once, then its
//!   memo answers; the pool's delegations are at most 2 links deep, so an input costs a
//!   handful of verifications at most;
//! - the rule's side of the oracle ([`RefAuthority`]) remembers check outcomes for the whole
//!   process (a check is a pure function of key, message and signature, so this changes no
//!   answer), so after warm-up the oracle costs no signature work at all;
//! - a context taken raw from the input may hold at most [`MAX_RAW_ENTRIES`] entries (more
//!   and the input is skipped), which bounds its failed checks too.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use kernel_hooks::{CtxBytes, Host, ObjectInfo, Unmap};
use twizzler_capsec::{
    Authority, Cap, CapGrant, Del, DelGrant, Expiry, Gate, KeyLookupError, ObjID, Protections,
    Record, RecordId, SigningKey, SigningScheme, VerifyingKey,
};

use crate::{CTX, CTX_P256, OBJ, OBJ_CODE, OBJ_NOKEY, OBJ_P256, ed25519_signing, p256_signing};

/// Key object of the Ed25519 fixture key (the `kuid` of [`crate::ED25519_OBJS`]).
pub const KEY_ED: ObjID = ObjID::new(0x3000);
/// Key object of the P-256 fixture key (the `kuid` of [`crate::P256_OBJS`]).
pub const KEY_P256: ObjID = ObjID::new(0x3001);
/// The host's monotonic clock at the start of every input (the wall offset starts at 0, so
/// this is also the engine's Unix time).
pub const START: u64 = 1 << 59;
/// Expiry of the pool's short-lived records: one second after [`START`].
pub const SOON: u64 = START + 1_000_000_000;
/// Expiry of the pool's long-lived records.
pub const LATER: u64 = START + (1 << 40);
/// Most entries a raw (input-given) context may have.
pub const MAX_RAW_ENTRIES: usize = 12;

/// The contexts the host has (`CTX[3]` is missing on purpose).
pub const CONTEXTS: [ObjID; 4] = [CTX[0], CTX[1], CTX[2], CTX_P256];

/// Seed of the key `KEY_ED` holds after a rotation.
const ROTATED_SEED: [u8; 32] = *b"twizzler-security fuzz rotated!!";

struct EngineKeys {
    ed25519: VerifyingKey,
    p256: VerifyingKey,
    rotated: VerifyingKey,
}

fn engine_keys() -> &'static EngineKeys {
    static KEYS: OnceLock<EngineKeys> = OnceLock::new();
    KEYS.get_or_init(|| EngineKeys {
        ed25519: crate::keys().ed25519.clone(),
        p256: crate::keys().p256.clone(),
        rotated: SigningKey::from_raw(SigningScheme::Ed25519, &ROTATED_SEED)
            .expect("fixed seed")
            .verifying_key(),
    })
}

fn cap(target: ObjID, holder: ObjID, prots: Protections) -> CapGrant {
    CapGrant::new(target, holder, prots)
}

fn ed_mint(g: CapGrant) -> Cap {
    Cap::mint(g, &ed25519_signing()).expect("minting a pool capability")
}

/// The records inputs choose from, signed once per process with the fixture keys.
pub fn pool() -> &'static [Record] {
    static POOL: OnceLock<Vec<Record>> = OnceLock::new();
    POOL.get_or_init(build_pool)
}

fn build_pool() -> Vec<Record> {
    const R: Protections = Protections::READ;
    const W: Protections = Protections::WRITE;
    const X: Protections = Protections::EXEC;
    let (ed, p) = (ed25519_signing(), p256_signing());
    let mut out = Vec::new();
    let mut c = |cap: Cap| out.push(Record::Cap(cap));
    c(ed_mint(cap(OBJ, CTX[0], R)));
    c(ed_mint(CapGrant {
        expires: Expiry::from_raw(SOON),
        ..cap(OBJ, CTX[0], R | W)
    }));
    c(ed_mint(CapGrant {
        gate: Gate::new(0x2000, 0x3000, 1).unwrap(),
        ..cap(OBJ, CTX[0], R | W | X)
    }));
    c(ed_mint(cap(OBJ, CTX[1], R | W)));
    c(ed_mint(CapGrant {
        gate: Gate::new(0x2000, 0x100, 16).unwrap(),
        ..cap(OBJ_CODE, CTX[0], R | X)
    }));
    c(ed_mint(CapGrant {
        gate: Gate::new(0x1000, 0x1000, 8).unwrap(),
        ..cap(OBJ_CODE, CTX[1], R | X)
    }));
    c(Cap::mint(
        CapGrant {
            expires: Expiry::from_raw(LATER),
            ..cap(OBJ_P256, CTX[0], R)
        },
        &p,
    )
    .unwrap());
    c(Cap::mint(cap(OBJ_P256, CTX_P256, R | W), &p).unwrap());
    c(ed_mint(CapGrant {
        expires: Expiry::from_raw(START - 1),
        ..cap(OBJ, CTX[0], W)
    }));
    c(ed_mint(cap(OBJ_NOKEY, CTX[0], R)));
    // Signed by the wrong key, and a signature copied onto other rights.
    c(Cap::mint(cap(OBJ, CTX[0], R | W | X), &p).unwrap());
    let first = ed_mint(cap(OBJ, CTX[0], R));
    c(Cap::from_parts(cap(OBJ, CTX[0], R | W), *first.signature()));
    c(ed_mint(cap(CTX[1], CTX[0], R | W)));

    // Delegations: CTX1 -> CTX0; CTX2 -> CTX1 -> CTX0 expiring; a P-256 provider.
    let root = ed_mint(cap(OBJ, CTX[1], R | W | X));
    let d = Del::from_cap(&root, DelGrant::new(CTX[0], R | W), &ed).expect("pool link");
    out.push(Record::Del(d));
    let root = ed_mint(cap(OBJ, CTX[2], R | W));
    let d = Del::from_cap(&root, DelGrant::new(CTX[1], R | W), &ed).expect("pool link");
    let d = d
        .delegate(
            DelGrant {
                expires: Expiry::from_raw(SOON),
                ..DelGrant::new(CTX[0], R)
            },
            &ed,
        )
        .expect("pool link");
    out.push(Record::Del(d));
    let root = ed_mint(CapGrant {
        gate: Gate::new(0x2000, 0x1000, 16).unwrap(),
        ..cap(OBJ_CODE, CTX_P256, R | X)
    });
    let grant = DelGrant {
        gate: root.gate(),
        ..DelGrant::new(CTX[0], R | X)
    };
    out.push(Record::Del(
        Del::from_cap(&root, grant, &p).expect("pool link"),
    ));
    out
}

/// The engine's host: objects with `kuid`s, context bytes, keys (one rotatable), revocation
/// sets, a settable clock. Single-threaded: everything is in cells.
pub struct FuzzHost {
    /// Object metadata, as the fault handler and [`Host::object`] see it.
    pub objects: RefCell<HashMap<ObjID, ObjectInfo>>,
    /// Context bytes.
    pub contexts: RefCell<HashMap<ObjID, Vec<u8>>>,
    /// Whether `KEY_ED` holds the rotated key.
    pub rotated: Cell<bool>,
    /// Revoked key objects.
    pub revoked_keys: RefCell<HashSet<ObjID>>,
    /// Revoked records.
    pub revoked_records: RefCell<HashSet<RecordId>>,
    /// The monotonic clock.
    pub clock: Cell<u64>,
    /// Number of unmaps the engine asked for.
    pub unmaps: Cell<u64>,
}

impl Default for FuzzHost {
    fn default() -> Self {
        Self::new()
    }
}

impl FuzzHost {
    /// The fixture objects (`OBJ_NOKEY` has no `kuid`), no contexts, nothing revoked.
    pub fn new() -> Self {
        let mut objects = HashMap::new();
        for (obj, kuid) in [
            (OBJ, Some(KEY_ED)),
            (OBJ_CODE, Some(KEY_ED)),
            (OBJ_P256, Some(KEY_P256)),
            (OBJ_NOKEY, None),
            (CTX[0], Some(KEY_ED)),
            (CTX[1], Some(KEY_ED)),
            (CTX[2], Some(KEY_ED)),
            (CTX[3], Some(KEY_ED)),
            (CTX_P256, Some(KEY_P256)),
        ] {
            objects.insert(obj, ObjectInfo::new(kuid, Protections::empty()));
        }
        Self {
            objects: RefCell::new(objects),
            contexts: RefCell::default(),
            rotated: Cell::new(false),
            revoked_keys: RefCell::default(),
            revoked_records: RefCell::default(),
            clock: Cell::new(START),
            unmaps: Cell::new(0),
        }
    }

    /// What the fault handler knows of `id` (an unknown object: no `kuid`, no rights).
    pub fn info(&self, id: ObjID) -> ObjectInfo {
        self.objects
            .borrow()
            .get(&id)
            .copied()
            .unwrap_or(ObjectInfo::new(None, Protections::empty()))
    }

    /// A copy of context `ctx`'s bytes.
    pub fn ctx_bytes(&self, ctx: ObjID) -> Option<Vec<u8>> {
        self.contexts.borrow().get(&ctx).cloned()
    }
}

impl Host for FuzzHost {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.objects.borrow().get(&id).copied()
    }

    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        let contexts = self.contexts.borrow();
        contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
    }

    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        let k = engine_keys();
        match kuid {
            KEY_ED if self.rotated.get() => Some(f(&k.rotated)),
            KEY_ED => Some(f(&k.ed25519)),
            KEY_P256 => Some(f(&k.p256)),
            _ => None,
        }
    }

    fn key_revoked(&self, kuid: ObjID) -> bool {
        self.revoked_keys.borrow().contains(&kuid)
    }

    fn record_revoked(&self, id: &RecordId) -> bool {
        self.revoked_records.borrow().contains(id)
    }

    fn monotonic_ns(&self) -> u64 {
        self.clock.get()
    }

    fn unmap(&self, _what: Unmap) {
        self.unmaps.set(self.unmaps.get() + 1);
    }
}

thread_local! {
    /// Outcomes of signature checks by id, for the whole process (pure, so never stale).
    static CHECKS: RefCell<HashMap<RecordId, bool>> = RefCell::new(HashMap::new());
}

/// Bound on [`CHECKS`]: forgotten all at once when reached.
const MAX_CHECKS: usize = 1 << 16;

/// The rule's [`Authority`] over a [`FuzzHost`], looking keys and revocations up exactly as
/// the engine does (the target's `kuid`, a provider's `kuid` from [`Host::object`], revoked
/// keys are errors), with a process-wide memory of check outcomes.
pub struct RefAuthority<'h>(pub &'h FuzzHost);

impl Authority for RefAuthority<'_> {
    fn with_key<R>(
        &self,
        obj: ObjID,
        f: impl FnOnce(&VerifyingKey) -> R,
    ) -> Result<R, KeyLookupError> {
        let host = self.0;
        let kuid = host
            .object(obj)
            .and_then(|o| o.kuid)
            .ok_or(KeyLookupError::NoKuid(obj))?;
        if host.key_revoked(kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        host.with_key(kuid, f)
            .ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.0.record_revoked(id)
    }

    fn is_verified(&self, id: &RecordId) -> bool {
        CHECKS.with(|c| c.borrow().get(id) == Some(&true))
    }

    fn is_known_bad(&self, id: &RecordId) -> bool {
        CHECKS.with(|c| c.borrow().get(id) == Some(&false))
    }

    fn remember_verified(&self, id: &RecordId) {
        remember(id, true);
    }

    fn remember_failed(&self, id: &RecordId) {
        remember(id, false);
    }
}

fn remember(id: &RecordId, ok: bool) {
    CHECKS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CHECKS {
            c.clear();
        }
        c.insert(*id, ok);
    });
}
