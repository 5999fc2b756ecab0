//! The objects, keys and contexts every conformance check runs on, built the same way in
//! every host from fixed key material.

use alloc::vec::Vec;

use twizzler_capsec::{
    Cap, CapGrant, Expiry, Gate, ObjID, PAGE_SIZE, Protections, RecordId, SecCtxEditor, SigningKey,
    SigningScheme, VerifyingKey,
};

/// How long after the world is built its expiring capability expires (ns). Long enough for a
/// host to build the world and start the suite first under emulation; the clock check waits
/// for it.
pub const EXPIRY_AFTER_NS: u64 = 3_000_000_000;

/// Pages of each data object (page 0 is the null page).
pub const DATA_PAGES: u64 = 4;

/// Where a code object's gate starts: its one entry point, not page aligned.
pub const GATE_ENTRY: u64 = 0x1010;

/// Ids are small numbers (`0xa000 | n`), so a host's tables that index objects by rank (the
/// reference kernel tags pages with a context's index) keep these contexts early.
const fn id(n: u128) -> ObjID {
    ObjID::new(0xa000 | n)
}

/// The key object that signs for every target but [`RACE`].
pub const K_TARGETS: ObjID = id(0x900);
/// The key object that signs for [`RACE`] (revoked by the race check).
pub const K_RACE: ObjID = id(0x901);
/// Context A: a thread's active context in most checks.
pub const CTX_A: ObjID = id(0x200);
/// Context B: holds the code gate on [`CODE`].
pub const CTX_B: ObjID = id(0x201);
/// Context C: a second holder of [`SHARED`].
pub const CTX_C: ObjID = id(0x202);
/// Read for A until [`World::expires`].
pub const EXPIRING: ObjID = id(0x100);
/// Read for A, presented by the host in a region that allows read, write and execute.
pub const RWX: ObjID = id(0x101);
/// Read and execute for B, through a code gate whose one entry point is [`GATE_ENTRY`].
pub const CODE: ObjID = id(0x102);
/// Read and write for A on the whole object (the hit and the metadata page).
pub const PLAIN: ObjID = id(0x103);
/// Read for A and for C, by two records ([`World::shared_a`] is A's).
pub const SHARED: ObjID = id(0x104);
/// Read for A, signed by [`K_RACE`].
pub const RACE: ObjID = id(0x105);

/// What an object of the world holds.
pub enum Body {
    /// Data or code: [`DATA_PAGES`] pages.
    Data,
    /// A security context's encoded bytes.
    Context(Vec<u8>),
    /// A key object's verifying key.
    Key(VerifyingKey),
}

/// One object of the world.
pub struct Object {
    /// Its id.
    pub id: ObjID,
    /// The key object that signs for it (every id here is the host's own: trusted).
    pub kuid: Option<ObjID>,
    /// Rights every context has on it.
    pub default_prots: Protections,
    /// The protections of the region a host maps it in (upstream Twizzler: the region's,
    /// which the engine's grant is then narrower than). Data objects are in read, write and
    /// execute regions, so a host that re-applies the region's protections shows it.
    pub region: Protections,
    /// What it holds.
    pub body: Body,
}

/// The world of the conformance suite.
pub struct World {
    /// Every object, key and context.
    pub objects: Vec<Object>,
    /// When A's capability on [`EXPIRING`] expires (Unix ns).
    pub expires: Expiry,
    /// The record id of A's capability on [`SHARED`] (the unmap-granularity check revokes it).
    pub shared_a: RecordId,
}

/// Why the world could not be built (a signing error: never, with these keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldError(pub &'static str);

impl World {
    /// Builds the world at Unix time `unix_now` (ns): the expiring capability expires
    /// [`EXPIRY_AFTER_NS`] later. Deterministic but for that expiry.
    pub fn build(unix_now: u64) -> Result<World, WorldError> {
        let key = |seed: u8| {
            SigningKey::from_entropy(SigningScheme::Ed25519, &[seed; 32])
                .map_err(|_| WorldError("key generation"))
        };
        let targets = key(1)?;
        let race = key(2)?;
        let mint = |g: CapGrant, k: &SigningKey| {
            Cap::mint(g, k).map_err(|_| WorldError("signing a capability"))
        };
        let expires = Expiry::from_raw(unix_now.saturating_add(EXPIRY_AFTER_NS));
        let mut expiring = CapGrant::new(EXPIRING, CTX_A, Protections::READ);
        expiring.expires = expires;
        let mut gate = CapGrant::new(CODE, CTX_B, Protections::READ | Protections::EXEC);
        gate.gate = Gate::new(GATE_ENTRY, 0x10, 0x10).map_err(|_| WorldError("gate"))?;
        let shared_a = mint(CapGrant::new(SHARED, CTX_A, Protections::READ), &targets)?;
        let a = [
            mint(expiring, &targets)?,
            mint(CapGrant::new(RWX, CTX_A, Protections::READ), &targets)?,
            mint(
                CapGrant::new(PLAIN, CTX_A, Protections::READ | Protections::WRITE),
                &targets,
            )?,
            shared_a,
            mint(CapGrant::new(RACE, CTX_A, Protections::READ), &race)?,
        ];
        let b = [mint(gate, &targets)?];
        let c = [mint(
            CapGrant::new(SHARED, CTX_C, Protections::READ),
            &targets,
        )?];
        let encode = |caps: &[Cap]| {
            let mut e = SecCtxEditor::new();
            for cap in caps {
                e.add_cap(cap);
            }
            e.encode().map_err(|_| WorldError("encoding a context"))
        };
        let all = Protections::READ | Protections::WRITE | Protections::EXEC;
        let data = |id, kuid| Object {
            id,
            kuid: Some(kuid),
            default_prots: Protections::empty(),
            region: all,
            body: Body::Data,
        };
        let ctx = |id, bytes| Object {
            id,
            kuid: None,
            default_prots: Protections::empty(),
            region: Protections::READ,
            body: Body::Context(bytes),
        };
        let keyobj = |id, k: &SigningKey| Object {
            id,
            kuid: None,
            default_prots: Protections::empty(),
            region: Protections::READ,
            body: Body::Key(k.verifying_key()),
        };
        let objects = alloc::vec![
            keyobj(K_TARGETS, &targets),
            keyobj(K_RACE, &race),
            ctx(CTX_A, encode(&a)?),
            ctx(CTX_B, encode(&b)?),
            ctx(CTX_C, encode(&c)?),
            data(EXPIRING, K_TARGETS),
            data(RWX, K_TARGETS),
            data(CODE, K_TARGETS),
            data(PLAIN, K_TARGETS),
            data(SHARED, K_TARGETS),
            data(RACE, K_RACE),
        ];
        Ok(World {
            objects,
            expires,
            shared_a: shared_a.id(),
        })
    }

    /// The object `id`.
    pub fn object(&self, id: ObjID) -> Option<&Object> {
        self.objects.iter().find(|o| o.id == id)
    }
}

/// Byte offset of page `n` of an object.
pub const fn page(n: u64) -> u64 {
    n * PAGE_SIZE
}
