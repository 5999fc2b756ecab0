//! An explicit-state model of dist-bridge's guard/version/revocation protocol, checked
//! exhaustively at small bounds with [`stateright`] (see this crate's README for what it
//! covers, the bounds, the state counts and how to run the deep check).
//!
//! The model is written from the code, transition by transition: every [`Action`] names the
//! function of `dist-bridge` it stands for, and so does every method of [`table::Table`] and
//! every step of [`version_file::Boot`]. One action is one atomic step of the code: a call
//! made under the owner's lock, a gate taken, a store read, one system call of the version
//! file's write. Between two actions anything else may run.
//!
//! One abstraction in the steps: an invocation takes its object's gate and is checked in one
//! step ([`Action::InvokeBegin`]), where the code takes the gate, then checks. In between, the
//! code can only run what does not take that gate; the model lets those run before the step
//! or after it, and also lets that object's revocations run before it (which the held gate
//! would have delayed, and which the code can also produce by taking the gate a little
//! later). The model's interleavings are therefore a superset of the code's here.
//!
//! What it leaves out, on purpose: expiry (a guard's scope is all rights, whole object,
//! never expiring: expiry only refuses more), rights other than the ones the protocol turns
//! on (every token carries `DERIVE` and `REVOKE`), attenuation (a caveat changes neither the
//! guard a token names nor its version or generation, so the model's token stands for all
//! its attenuations), upgrade notices (`Owner::renew` reads the upgrade records, which are
//! modelled), and the node transport.
//!
//! - this module: the model's configuration ([`ProtocolModel`], [`Bounds`], [`Mutation`]) and
//!   the owner's checks it mirrors ([`ProtocolModel::validate`], [`ProtocolModel::renew`]);
//! - `state`: the state space (its types re-exported here);
//! - `system`: the steps ([`Action`]), their effects and the properties;
//! - [`table`] and [`version_file`]: the guard table and the version file, as the code has them.

pub mod table;
pub mod version_file;

mod state;
mod system;

pub use state::{Invocation, Life, Phase, Revoked, State, Tick, Token};
pub use system::Action;

use table::{GuardInfo, InsertError, LookupError, Shape};

/// A step of the protocol taken out, to show that the checker notices (each gives a
/// counterexample to a property; see the tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// `GuardTable::advance_epoch` does not increment the epoch within a range.
    NoEpochBump,
    /// `GuardTable::advance_epoch` does not increment the generation of the range it opens.
    NoGenerationBump,
    /// `write_version` does not fsync the directory after the rename (`sync_parent`).
    NoDirFsync,
    /// `gates::revoke` does not take the object's gate.
    NoRevokeGate,
    /// `gates::revoke` takes the gate before `Owner::check_revoke` (issue 25, defect 2).
    GateBeforeCheck,
    /// The tick does not record the list in the owner (`Owner::note_store_revocations`) and
    /// `Owner::export` does not look there (issue 25, defect 1).
    NoStoreNote,
}

/// How far the checker explores: how many of each operation, in all lives together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Objects (object `i`: capability `i`, signed by key `i`).
    pub objects: u8,
    /// `Export` RPCs.
    pub exports: u8,
    /// `DeriveGuard` RPCs.
    pub derives: u8,
    /// `Revoke` RPCs (forged ones included).
    pub revokes: u8,
    /// Revocations committed to the store's list (`keytool revoke`).
    pub store_revocations: u8,
    /// Crashes (at any step, starting included).
    pub crashes: u8,
    /// Invocations in flight at once.
    pub in_flight: u8,
}

/// The protocol model: a table shape, bounds, and at most one step taken out.
#[derive(Clone, Debug)]
pub struct ProtocolModel {
    /// The guard table's configuration.
    pub shape: Shape,
    /// The bounds.
    pub bounds: Bounds,
    /// A step taken out, if any.
    pub mutation: Option<Mutation>,
}

/// Why the owner refused a token (`InvokeError`, the variants the model reaches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `BadTag` (or `StaleController`).
    BadTag,
    /// `Revoked`, `StaleGuard`, `Upgraded`.
    Lookup(LookupError),
    /// `GuardMismatch`.
    Mismatch,
    /// `DeriveQuota`, `TableFull`, `NotRenewable`.
    Other,
}

impl ProtocolModel {
    /// `Owner::check_tag` then `GuardTable::lookup` and the body (`Owner::validate`).
    pub fn validate(&self, life: &Life, t: &Token) -> Result<GuardInfo, Refusal> {
        let genuine = !t.forged
            && t.life == life.life
            && t.controller == life.controller
            && self
                .shape
                .range_of(t.version)
                .is_some_and(|r| life.table.generations[usize::from(r)] == t.generation);
        if !genuine {
            return Err(Refusal::BadTag);
        }
        let info = life
            .table
            .lookup(t.index, t.version)
            .map_err(Refusal::Lookup)?;
        if info.object != t.object {
            return Err(Refusal::Mismatch);
        }
        Ok(info)
    }

    /// `Owner::renew`.
    pub fn renew(&self, life: &Life, t: &Token) -> Result<Token, Refusal> {
        let new = match self.validate(life, t) {
            Ok(_) => return Ok(*t),
            Err(Refusal::Lookup(LookupError::Upgraded(new))) => new,
            Err(Refusal::Lookup(LookupError::Stale)) => return Err(Refusal::Other),
            Err(e) => return Err(e),
        };
        let info = life.table.lookup(t.index, new).map_err(Refusal::Lookup)?;
        if info.object != t.object {
            return Err(Refusal::Mismatch);
        }
        let r = self.shape.range_of(new).ok_or(Refusal::Other)?;
        Ok(Token {
            version: new,
            generation: life.table.generations[usize::from(r)],
            ..*t
        })
    }

    /// `Owner::create`: insert, then the token under the key of its version's range.
    fn create(
        &self,
        life: &mut Life,
        next_serial: &mut u8,
        info: GuardInfo,
    ) -> Result<Token, InsertError> {
        let info = GuardInfo {
            serial: *next_serial,
            ..info
        };
        let (index, version) = life.table.insert(&self.shape, self.mutation, info)?;
        *next_serial += 1;
        let r = self.shape.range_of(version).unwrap_or(0);
        Ok(Token {
            life: life.life,
            controller: life.controller,
            index,
            version,
            generation: life.table.generations[usize::from(r)],
            object: info.object,
            serial: info.serial,
            forged: false,
        })
    }

    /// The guards of object `o` the tick revokes: those the owner's records reach (or,
    /// without them, those the list it read reaches).
    fn tick_targets(&self, life: &Life, seen: Revoked, o: u8) -> Vec<u8> {
        let by = if self.mutation == Some(Mutation::NoStoreNote) {
            seen
        } else {
            life.noted
        };
        life.table
            .live_guards()
            .filter(|(_, g)| g.object == o && by.reaches(g))
            .map(|(i, _)| i)
            .collect()
    }

    fn gated(&self, life: &Life, object: u8) -> bool {
        self.mutation == Some(Mutation::NoRevokeGate) || life.readers[usize::from(object)] == 0
    }
}
