//! The model's state: the version file on disk, the store's revocation list, the node (booting
//! or serving one life: its guard table, gates and requests in flight) and the tokens the
//! attacker keeps, with the ghost variables the properties read.

use std::collections::BTreeSet;

use crate::Bounds;
use crate::table::{GuardInfo, Table};
use crate::version_file::{Boot, Disk};

/// Revoked records and keys, as bit sets (bit `i`: capability or key `i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Revoked {
    /// Revoked capabilities, by record.
    pub records: u8,
    /// Revoked `kuid` keys.
    pub keys: u8,
}

impl Revoked {
    pub(crate) fn union(self, o: Revoked) -> Revoked {
        Revoked {
            records: self.records | o.records,
            keys: self.keys | o.keys,
        }
    }

    /// `StoreRevoked::reaches`: the root guard `g` comes from a revoked record or key.
    pub(crate) fn reaches(&self, g: &GuardInfo) -> bool {
        g.source.is_some_and(|r| self.records & (1 << r) != 0)
            || g.key.is_some_and(|k| self.keys & (1 << k) != 0)
    }
}

/// A token as the attacker holds it: what its bytes say, and whether its tag is one the
/// owner made (`forged` tokens name an object with any tag but a genuine one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    /// The life of the node that issued it (its `NodeSecret`: fresh at every start).
    pub life: u8,
    /// `ControllerId::version` in the body.
    pub controller: u8,
    /// `GuardRef::index`.
    pub index: u8,
    /// `GuardRef::version`.
    pub version: u8,
    /// The generation of the version's range whose key made the tag.
    pub generation: u8,
    /// The object in the body.
    pub object: u8,
    /// Ghost: the guard it was issued for.
    pub serial: u8,
    /// Not made by the owner.
    pub forged: bool,
}

/// An invocation past its check, holding its object's gate shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Invocation {
    /// The object.
    pub object: u8,
    /// Ghost: the guard its token was issued for.
    pub token_serial: u8,
    /// Ghost: the guard the check accepted it against.
    pub guard_serial: u8,
}

/// Where the maintenance tick is (`store_revocations::apply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tick {
    /// Between ticks.
    Idle,
    /// The list read.
    Loaded(Revoked),
    /// Recorded in the owner; these objects' guards still to revoke (bit set).
    Revoking {
        /// The list it read.
        seen: Revoked,
        /// Objects left.
        objects: u8,
    },
}

/// One life of a serving node: its owner, gates and requests in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Life {
    /// Which life (its `NodeSecret`).
    pub life: u8,
    /// Its controller version.
    pub controller: u8,
    /// The owner's guard table.
    pub table: Table,
    /// `State::store_revoked`: what `Owner::note_store_revocations` recorded.
    pub noted: Revoked,
    /// Per object: invocations holding its gate shared.
    pub readers: Vec<u8>,
    /// Invocations in flight.
    pub in_flight: Vec<Invocation>,
    /// `Revoke` RPCs waiting for their object's gate.
    pub revokes: Vec<Token>,
    /// `Export` RPCs that read the list (`StoreKeys::new`): capability and what they read.
    pub exports: Vec<(u8, Revoked)>,
    /// The maintenance tick.
    pub tick: Tick,
}

/// The node: starting, or serving.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Starting (`VersionFile::open_and_bump`).
    Booting(Boot),
    /// Serving.
    Serving(Box<Life>),
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The version file on disk.
    pub disk: Disk,
    /// The store's revocation list.
    pub store: Revoked,
    /// The node.
    pub phase: Phase,
    /// Every token ever issued (and one forged token per object): the attacker keeps them all.
    pub kept: BTreeSet<Token>,
    /// Operations left: exports, derives, revokes, store revocations, crashes.
    pub left: Bounds,
    /// The serial the next guard gets; the next life's number.
    pub next_serial: u8,
    pub(crate) next_life: u8,
    /// Ghost: guards revoked (by a `Revoke` that returned, a tick, or a restart), by serial.
    pub dead: u64,
    /// Ghost: store revocations a tick has finished applying.
    pub applied: Revoked,
    /// Ghost: the controller versions served, in order.
    pub served: Vec<u8>,
    /// Ghost: a `Revoke` returned before some restart.
    pub restarted_after_revoke: bool,
    pub(crate) revoked_any: bool,
}
