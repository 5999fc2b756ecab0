//! Shared fixtures: an object with a key, a read-write capability for a context, an owner.

#![allow(dead_code)]

use dist_bridge::*;
use rand_core::SeedableRng;
use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};

pub const NOW: u64 = 1_000_000_000;
pub const NODE: u64 = 7;

pub struct Fixture {
    pub object: ObjID,
    pub ctx: ObjID,
    pub key: SigningKey,
    pub keys: MapKeys,
    pub cap: Cap,
    pub owner: Owner,
}

pub fn rng(seed: u64) -> rand_chacha::ChaCha20Rng {
    rand_chacha::ChaCha20Rng::seed_from_u64(seed)
}

pub fn owner(id: ControllerId, config: GuardTableConfig) -> Owner {
    Owner::new(id, NodeSecret::generate().unwrap(), config).unwrap()
}

pub fn fixture_with(config: GuardTableConfig) -> Fixture {
    let (object, ctx) = (ObjID::new(0xabc0), ObjID::new(0xc7c7));
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng(1));
    let cap = Cap::mint(
        CapGrant::new(object, ctx, Protections::READ | Protections::WRITE),
        &key,
    )
    .unwrap();
    let keys = MapKeys([(object, key.verifying_key())].into());
    Fixture {
        object,
        ctx,
        key,
        keys,
        cap,
        owner: owner(ControllerId::new(NODE, 1), config),
    }
}

pub fn fixture() -> Fixture {
    fixture_with(GuardTableConfig::default())
}

/// A tiny version space: versions 1..=16 in 4 ranges, every release flushes.
pub fn tiny(capacity: u32) -> GuardTableConfig {
    GuardTableConfig {
        capacity,
        batch_size: 1,
        max_version: 16,
        ranges: 4,
        ..GuardTableConfig::default()
    }
}

impl Fixture {
    /// A root token with every right over the whole object.
    pub fn export(&self) -> GuardedToken {
        self.export_scope(Rights::all(), ByteRange::WHOLE)
    }

    pub fn export_scope(&self, rights: Rights, range: ByteRange) -> GuardedToken {
        self.owner
            .export(
                &self.cap,
                &self.keys,
                &ExportRequest::new(self.ctx, rights, range),
                NOW,
            )
            .unwrap()
    }

    pub fn read(&self, t: &GuardedToken, offset: u64, len: u64) -> Result<Grant, InvokeError> {
        self.owner.check(t, Op::Read, offset, len, NOW)
    }

    pub fn write(&self, t: &GuardedToken, offset: u64, len: u64) -> Result<Grant, InvokeError> {
        self.owner.check(t, Op::Write, offset, len, NOW)
    }
}

pub fn range(offset: u64, len: u64) -> ByteRange {
    ByteRange::new(offset, len).unwrap()
}
