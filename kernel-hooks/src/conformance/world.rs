//! The objects, keys and contexts every conformance check runs on, built the same way in
//! every host from fixed key material.

use alloc::vec::Vec;

use twizzler_capsec::{
    Cap, CapGrant, Expiry, Gate, ObjID, PAGE_SIZE, Protections, RecordId, SecCtxEditor, SigningKey,
    SigningScheme, VerifyingKey,
};

/// How long after the world is built its expiring capability expires (ns). Long enough for a
/// host to build the world and start the suite first under emulation on a loaded machine
/// (3 s was not: the port's unoptimised kernel under TCG, beside two builds and another QEMU,
/// reached the check after the deadline, run 44); the clock check waits for it.
pub const EXPIRY_AFTER_NS: u64 = 10_000_000_000;

/// Pages of each data object (page 0 is the null page).
pub const DATA_PAGES: u64 = 4;

/// Where a code object's gate starts: its one entry point, not page aligned.
pub const GATE_ENTRY: u64 = 0x1010;

/// Ids are small numbers (`0xa000 | n`), so a host's tables that index objects by rank (the
/// reference kernel tags pages with a context's index) keep these contexts early.
const fn id(n: u128) -> ObjID {
    ObjID::new(0xa000 | n)
}

/// The ids of the world's objects, by role. A host that chooses its objects' ids builds the
/// world with [`Ids::FIXED`]; a host whose ids are derived (Twizzler's: from an object's
/// `kuid` and a nonce) creates the objects first, then builds the world with theirs
/// ([`World::build_with`]). The checks name objects only through [`World::ids`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    /// The key object that signs for every target but [`Ids::race`].
    pub k_targets: ObjID,
    /// The key object that signs for [`Ids::race`] (revoked by the race check).
    pub k_race: ObjID,
    /// Context A: a thread's active context in most checks.
    pub ctx_a: ObjID,
    /// Context B: holds the code gate on [`Ids::code`].
    pub ctx_b: ObjID,
    /// Context C: a second holder of [`Ids::shared`].
    pub ctx_c: ObjID,
    /// Read for A until [`World::expires`].
    pub expiring: ObjID,
    /// Read for A, presented by the host in a region that allows read, write and execute.
    pub rwx: ObjID,
    /// Read and execute for B, through a code gate whose one entry point is [`GATE_ENTRY`].
    pub code: ObjID,
    /// Read and write for A on the whole object (the hit and the metadata page).
    pub plain: ObjID,
    /// Read for A and for C, by two records ([`World::shared_a`] is A's).
    pub shared: ObjID,
    /// Read for A, signed by [`Ids::k_race`].
    pub race: ObjID,
}

impl Ids {
    /// The ids a host that chooses them uses: `0xa000 | n`.
    pub const FIXED: Ids = Ids {
        k_targets: id(0x900),
        k_race: id(0x901),
        ctx_a: id(0x200),
        ctx_b: id(0x201),
        ctx_c: id(0x202),
        expiring: id(0x100),
        rwx: id(0x101),
        code: id(0x102),
        plain: id(0x103),
        shared: id(0x104),
        race: id(0x105),
    };

    /// The key object (a [`Body::Key`]) that signs for data object `target`, if `target` is
    /// one of the world's data objects: a host whose ids derive from the `kuid` creates the
    /// key objects first, then each data object keyed by this.
    pub fn kuid_of(&self, target: ObjID) -> Option<ObjID> {
        if target == self.race {
            Some(self.k_race)
        } else if [self.expiring, self.rwx, self.code, self.plain, self.shared].contains(&target) {
            Some(self.k_targets)
        } else {
            None
        }
    }
}

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
    /// When A's capability on [`Ids::expiring`] expires (Unix ns).
    pub expires: Expiry,
    /// The record id of A's capability on [`Ids::shared`] (the unmap-granularity check
    /// revokes it).
    pub shared_a: RecordId,
    /// The objects' ids.
    pub ids: Ids,
}

/// Why the world could not be built (a signing error: never, with these keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldError(pub &'static str);

impl World {
    /// Builds the world at Unix time `unix_now` (ns) with [`Ids::FIXED`]: the expiring
    /// capability expires [`EXPIRY_AFTER_NS`] later. Deterministic but for that expiry.
    pub fn build(unix_now: u64) -> Result<World, WorldError> {
        World::build_with(unix_now, Ids::FIXED)
    }

    /// [`World::build`] with the host's own ids. Every id must be distinct.
    pub fn build_with(unix_now: u64, ids: Ids) -> Result<World, WorldError> {
        let Ids {
            k_targets,
            k_race,
            ctx_a,
            ctx_b,
            ctx_c,
            expiring,
            rwx,
            code,
            plain,
            shared,
            race,
        } = ids;
        let all_ids = [
            k_targets, k_race, ctx_a, ctx_b, ctx_c, expiring, rwx, code, plain, shared, race,
        ];
        for (i, a) in all_ids.iter().enumerate() {
            if all_ids.iter().skip(i + 1).any(|b| b == a) {
                return Err(WorldError("two of the world's objects share an id"));
            }
        }
        let key = |seed: u8| {
            SigningKey::from_entropy(SigningScheme::Ed25519, &[seed; 32])
                .map_err(|_| WorldError("key generation"))
        };
        let targets_key = key(1)?;
        let race_key = key(2)?;
        let mint = |g: CapGrant, k: &SigningKey| {
            Cap::mint(g, k).map_err(|_| WorldError("signing a capability"))
        };
        let expires = Expiry::from_raw(unix_now.saturating_add(EXPIRY_AFTER_NS));
        let mut expiring_grant = CapGrant::new(expiring, ctx_a, Protections::READ);
        expiring_grant.expires = expires;
        let mut gate = CapGrant::new(code, ctx_b, Protections::READ | Protections::EXEC);
        gate.gate = Gate::new(GATE_ENTRY, 0x10, 0x10).map_err(|_| WorldError("gate"))?;
        let shared_a = mint(
            CapGrant::new(shared, ctx_a, Protections::READ),
            &targets_key,
        )?;
        let a = [
            mint(expiring_grant, &targets_key)?,
            mint(CapGrant::new(rwx, ctx_a, Protections::READ), &targets_key)?,
            mint(
                CapGrant::new(plain, ctx_a, Protections::READ | Protections::WRITE),
                &targets_key,
            )?,
            shared_a,
            mint(CapGrant::new(race, ctx_a, Protections::READ), &race_key)?,
        ];
        let b = [mint(gate, &targets_key)?];
        let c = [mint(
            CapGrant::new(shared, ctx_c, Protections::READ),
            &targets_key,
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
            keyobj(k_targets, &targets_key),
            keyobj(k_race, &race_key),
            ctx(ctx_a, encode(&a)?),
            ctx(ctx_b, encode(&b)?),
            ctx(ctx_c, encode(&c)?),
            data(expiring, k_targets),
            data(rwx, k_targets),
            data(code, k_targets),
            data(plain, k_targets),
            data(shared, k_targets),
            data(race, k_race),
        ];
        Ok(World {
            objects,
            expires,
            shared_a: shared_a.id(),
            ids,
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
