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

pub mod table;
pub mod version_file;

use std::collections::BTreeSet;

use stateright::{Model, Property};

use table::{GuardInfo, InsertError, LookupError, Shape, Table};
use version_file::{Boot, Disk};

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

/// Revoked records and keys, as bit sets (bit `i`: capability or key `i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Revoked {
    /// Revoked capabilities, by record.
    pub records: u8,
    /// Revoked `kuid` keys.
    pub keys: u8,
}

impl Revoked {
    fn union(self, o: Revoked) -> Revoked {
        Revoked {
            records: self.records | o.records,
            keys: self.keys | o.keys,
        }
    }

    /// `StoreRevoked::reaches`: the root guard `g` comes from a revoked record or key.
    fn reaches(&self, g: &GuardInfo) -> bool {
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
    next_life: u8,
    /// Ghost: guards revoked (by a `Revoke` that returned, a tick, or a restart), by serial.
    pub dead: u64,
    /// Ghost: store revocations a tick has finished applying.
    pub applied: Revoked,
    /// Ghost: the controller versions served, in order.
    pub served: Vec<u8>,
    /// Ghost: a `Revoke` returned before some restart.
    pub restarted_after_revoke: bool,
    revoked_any: bool,
}

/// A step of the system; each names the function it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The next step of `VersionFile::open_and_bump` ([`Boot::step`]); the last one starts
    /// serving (`Node::start`: `Owner::new` with a fresh `NodeSecret`).
    Boot,
    /// The process dies, at any step (a crash or a restart): memory is lost, the disk keeps
    /// what was fsynced.
    Crash,
    /// `keytool revoke` of capability `i`: `RevocationList::add` (records).
    StoreRevokeRecord(u8),
    /// `keytool revoke` of key `i`: `RevocationList::add` (keys).
    StoreRevokeKey(u8),
    /// The `Export` RPC for capability `i` reads the list: `StoreKeys::new`.
    ExportRead(u8),
    /// The `Export` RPC's `Owner::export`, under the owner's lock.
    ExportCreate(usize),
    /// The `DeriveGuard` RPC: `Owner::export_from`.
    Derive(Token),
    /// The `Renew` RPC: `Owner::renew`.
    Renew(Token),
    /// The `Invoke` RPC (`Service::invoke_op`): its object's gate shared, then
    /// `Owner::check`. Only accepted invocations are steps.
    InvokeBegin(Token),
    /// The invocation's read or write done (`storage::read_bytes`/`write_bytes`); gate
    /// released.
    InvokeEnd(usize),
    /// The `Revoke` RPC (`gates::revoke`) up to the gate: `Owner::check_revoke`.
    RevokeCheck(Token),
    /// `gates::revoke`: the gate exclusively, `Owner::revoke`, the reply.
    RevokeGated(usize),
    /// `store_revocations::apply`: `RevocationList::load`.
    TickLoad,
    /// `store_revocations::apply`: `Owner::note_store_revocations`.
    TickNote,
    /// `store_revocations::apply`: the object's gate exclusively, `Owner::revoke_store_revoked`.
    TickRevoke(u8),
    /// `store_revocations::apply` returns.
    TickDone,
}

fn bit(i: u8) -> u64 {
    1u64 << i
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

fn serving(s: &State) -> Option<&Life> {
    match &s.phase {
        Phase::Serving(l) => Some(l),
        Phase::Booting(_) => None,
    }
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let kept = (0..self.bounds.objects)
            .map(|object| Token {
                life: 0,
                controller: 0,
                index: 0,
                version: 1,
                generation: 1,
                object,
                serial: 0,
                forged: true,
            })
            .collect();
        vec![State {
            disk: Disk::new(),
            store: Revoked::default(),
            phase: Phase::Booting(Boot::Read),
            kept,
            left: self.bounds,
            next_serial: 1,
            next_life: 1,
            dead: 0,
            applied: Revoked::default(),
            served: Vec::new(),
            restarted_after_revoke: false,
            revoked_any: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.left.store_revocations > 0 {
            for i in 0..self.bounds.objects {
                if s.store.records & (1 << i) == 0 {
                    actions.push(Action::StoreRevokeRecord(i));
                }
                if s.store.keys & (1 << i) == 0 {
                    actions.push(Action::StoreRevokeKey(i));
                }
            }
        }
        if s.left.crashes > 0 && !matches!(s.phase, Phase::Booting(Boot::Refused)) {
            actions.push(Action::Crash);
        }
        let life = match &s.phase {
            Phase::Booting(Boot::Refused) => return,
            Phase::Booting(_) => {
                actions.push(Action::Boot);
                return;
            }
            Phase::Serving(l) => l,
        };
        if s.left.exports > 0 {
            for i in 0..self.bounds.objects {
                actions.push(Action::ExportRead(i));
            }
        }
        for i in 0..life.exports.len() {
            actions.push(Action::ExportCreate(i));
        }
        for t in &s.kept {
            let valid = self.validate(life, t);
            if valid.is_ok() {
                if s.left.derives > 0 {
                    actions.push(Action::Derive(*t));
                }
                if life.in_flight.len() < usize::from(self.bounds.in_flight) {
                    actions.push(Action::InvokeBegin(*t));
                }
            }
            if matches!(valid, Err(Refusal::Lookup(LookupError::Upgraded(_)))) {
                actions.push(Action::Renew(*t));
            }
            if s.left.revokes > 0 {
                actions.push(Action::RevokeCheck(*t));
            }
        }
        for i in 0..life.in_flight.len() {
            actions.push(Action::InvokeEnd(i));
        }
        for (i, t) in life.revokes.iter().enumerate() {
            if self.gated(life, t.object) {
                actions.push(Action::RevokeGated(i));
            }
        }
        match life.tick {
            Tick::Idle => actions.push(Action::TickLoad),
            Tick::Loaded(_) => actions.push(Action::TickNote),
            Tick::Revoking { objects: 0, .. } => actions.push(Action::TickDone),
            Tick::Revoking { objects, .. } => {
                for o in 0..self.bounds.objects {
                    if objects & (1 << o) != 0 && life.readers[usize::from(o)] == 0 {
                        actions.push(Action::TickRevoke(o));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let m = self.mutation;
        match action {
            Action::StoreRevokeRecord(i) => {
                s.store.records |= 1 << i;
                s.left.store_revocations -= 1;
            }
            Action::StoreRevokeKey(i) => {
                s.store.keys |= 1 << i;
                s.left.store_revocations -= 1;
            }
            Action::Crash => {
                s.left.crashes -= 1;
                if let Phase::Serving(life) = &s.phase {
                    // A restart revokes every token of the life that ends.
                    for (_, g) in life.table.live_guards() {
                        s.dead |= bit(g.serial);
                    }
                }
                s.restarted_after_revoke |= s.revoked_any;
                s.disk.crash();
                s.phase = Phase::Booting(Boot::Read);
            }
            Action::Boot => {
                let Phase::Booting(step) = s.phase else {
                    return None;
                };
                s.phase = match step {
                    Boot::Serve(v) => {
                        s.served.push(v);
                        let life = s.next_life;
                        s.next_life += 1;
                        Phase::Serving(Box::new(Life {
                            life,
                            controller: v,
                            table: Table::new(&self.shape),
                            noted: Revoked::default(),
                            readers: vec![0; usize::from(self.bounds.objects)],
                            in_flight: Vec::new(),
                            revokes: Vec::new(),
                            exports: Vec::new(),
                            tick: Tick::Idle,
                        }))
                    }
                    step => Phase::Booting(step.step(&mut s.disk, m)),
                };
            }
            action => {
                let store = s.store;
                let Phase::Serving(life) = &mut s.phase else {
                    return None;
                };
                match action {
                    Action::ExportRead(cap) => {
                        s.left.exports -= 1;
                        life.exports.push((cap, store));
                    }
                    Action::ExportCreate(i) => {
                        let (cap, read) = life.exports.remove(i);
                        let revoked = Revoked {
                            records: read.records,
                            keys: read.keys,
                        };
                        let info = GuardInfo {
                            object: cap,
                            parent: None,
                            source: Some(cap),
                            key: Some(cap),
                            serial: 0,
                        };
                        // `StoreKeys::kuid_key_named` and `is_record_revoked` (as read), then
                        // the owner's records, under its lock.
                        let refused = revoked.reaches(&info)
                            || (m != Some(Mutation::NoStoreNote) && life.noted.reaches(&info));
                        if !refused && let Ok(t) = self.create(life, &mut s.next_serial, info) {
                            s.kept.insert(t);
                        }
                    }
                    Action::Derive(t) => {
                        s.left.derives -= 1;
                        self.validate(life, &t).ok()?;
                        let quota = self.shape.max_derived;
                        if life.table.derived_in_tree(t.index, quota) < quota {
                            let info = GuardInfo {
                                object: t.object,
                                parent: Some(t.index),
                                source: None,
                                key: None,
                                serial: 0,
                            };
                            if let Ok(child) = self.create(life, &mut s.next_serial, info) {
                                s.kept.insert(child);
                            }
                        }
                    }
                    Action::Renew(t) => {
                        let fresh = self.renew(life, &t).ok()?;
                        s.kept.insert(fresh);
                    }
                    Action::InvokeBegin(t) => {
                        let g = self.validate(life, &t).ok()?;
                        life.readers[usize::from(t.object)] += 1;
                        life.in_flight.push(Invocation {
                            object: t.object,
                            token_serial: t.serial,
                            guard_serial: g.serial,
                        });
                    }
                    Action::InvokeEnd(i) => {
                        let inv = life.in_flight.remove(i);
                        life.readers[usize::from(inv.object)] -= 1;
                    }
                    Action::RevokeCheck(t) => {
                        s.left.revokes -= 1;
                        // `Owner::check_revoke` (every token carries REVOKE in the model).
                        if m == Some(Mutation::GateBeforeCheck) || self.validate(life, &t).is_ok() {
                            life.revokes.push(t);
                        }
                    }
                    Action::RevokeGated(i) => {
                        let t = life.revokes.remove(i);
                        if !self.gated(life, t.object) {
                            return None;
                        }
                        if self.validate(life, &t).is_ok() {
                            for serial in life.table.revoke(&self.shape, m, t.index) {
                                s.dead |= bit(serial);
                            }
                        }
                        s.revoked_any = true;
                    }
                    Action::TickLoad => life.tick = Tick::Loaded(store),
                    Action::TickNote => {
                        let Tick::Loaded(seen) = life.tick else {
                            return None;
                        };
                        if m != Some(Mutation::NoStoreNote) {
                            life.noted = life.noted.union(seen);
                        }
                        let mut objects = 0;
                        for o in 0..self.bounds.objects {
                            if !self.tick_targets(life, seen, o).is_empty() {
                                objects |= 1 << o;
                            }
                        }
                        life.tick = Tick::Revoking { seen, objects };
                    }
                    Action::TickRevoke(o) => {
                        let Tick::Revoking { seen, objects } = life.tick else {
                            return None;
                        };
                        for i in self.tick_targets(life, seen, o) {
                            for serial in life.table.revoke(&self.shape, m, i) {
                                s.dead |= bit(serial);
                            }
                        }
                        life.tick = Tick::Revoking {
                            seen,
                            objects: objects & !(1 << o),
                        };
                    }
                    Action::TickDone => {
                        let Tick::Revoking { seen, .. } = life.tick else {
                            return None;
                        };
                        s.applied = s.applied.union(seen);
                        life.tick = Tick::Idle;
                    }
                    Action::Boot
                    | Action::Crash
                    | Action::StoreRevokeRecord(_)
                    | Action::StoreRevokeKey(_) => return None,
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a revoke that has returned stops every later invocation",
                |_, s: &State| {
                    serving(s).is_none_or(|l| {
                        l.in_flight
                            .iter()
                            .all(|i| s.dead & (bit(i.token_serial) | bit(i.guard_serial)) == 0)
                    })
                },
            ),
            Property::always(
                "a revoked token never validates again",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_none_or(|l| {
                        s.kept
                            .iter()
                            .all(|t| m.validate(l, t).is_err() || s.dead & bit(t.serial) == 0)
                    })
                },
            ),
            Property::always(
                "a token never validates against another guard",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_none_or(|l| {
                        s.kept.iter().all(|t| {
                            m.validate(l, t).is_ok_and(|g| g.serial == t.serial)
                                || m.validate(l, t).is_err()
                        })
                    })
                },
            ),
            Property::always(
                "a current token always checks",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_none_or(|l| {
                        s.kept.iter().all(|t| {
                            // Issued (or renewed) for this guard at its current version, under
                            // its range's current generation. (A token of the same guard at the
                            // same version from before a wrap is not current: refusing it is
                            // right, its holder renewed since.)
                            let current = !t.forged
                                && t.life == l.life
                                && l.table
                                    .live_guard(t.index)
                                    .is_some_and(|(v, g)| v == t.version && g.serial == t.serial)
                                && m.shape.range_of(t.version).is_some_and(|r| {
                                    l.table.generations[usize::from(r)] == t.generation
                                });
                            !current || m.validate(l, t).is_ok()
                        })
                    })
                },
            ),
            Property::always(
                "an upgrade refusal always renews",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_none_or(|l| {
                        s.kept.iter().all(|t| {
                            !matches!(
                                m.validate(l, t),
                                Err(Refusal::Lookup(LookupError::Upgraded(_)))
                            ) || m.renew(l, t).is_ok_and(|r| {
                                m.validate(l, &r).is_ok_and(|g| g.serial == t.serial)
                            })
                        })
                    })
                },
            ),
            Property::always(
                "a store revocation leaves no guard behind",
                |_, s: &State| {
                    serving(s)
                        .is_none_or(|l| l.table.live_guards().all(|(_, g)| !s.applied.reaches(g)))
                },
            ),
            Property::always("a forged revoke never waits for a gate", |_, s: &State| {
                serving(s).is_none_or(|l| l.revokes.iter().all(|t| !t.forged))
            }),
            Property::always(
                "a controller version is never served twice",
                |_, s: &State| s.served.windows(2).all(|w| w[0] < w[1]),
            ),
            Property::always(
                "an exported guard never has more derived guards than the quota",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_none_or(|l| {
                        l.table.live_guards().all(|(i, g)| {
                            g.parent.is_some()
                                || l.table.descendants(i) <= usize::from(m.shape.max_derived)
                        })
                    })
                },
            ),
            Property::always("a range is empty when it is opened", |_, s: &State| {
                serving(s).is_none_or(|l| !l.table.opened_nonempty)
            }),
            // Not vacuous: the paths the properties are about are reached.
            Property::sometimes("a wrap", |_, s: &State| {
                serving(s).is_some_and(|l| l.table.generations[0] >= 2)
            }),
            Property::sometimes("a reused version with an old token kept", |_, s: &State| {
                serving(s).is_some_and(|l| {
                    s.kept.iter().any(|t| {
                        !t.forged
                            && t.life == l.life
                            && l.table
                                .live_guard(t.index)
                                .is_some_and(|(v, g)| v == t.version && g.serial != t.serial)
                    })
                })
            }),
            Property::sometimes(
                "a revoke waiting behind an accepted invocation",
                |_, s: &State| {
                    serving(s).is_some_and(|l| {
                        l.revokes
                            .iter()
                            .any(|t| l.readers[usize::from(t.object)] > 0)
                    })
                },
            ),
            Property::sometimes("a restart after a revocation", |_, s: &State| {
                s.restarted_after_revoke && serving(s).is_some()
            }),
            Property::sometimes(
                "an upgraded token waiting to be renewed",
                |m: &ProtocolModel, s: &State| {
                    serving(s).is_some_and(|l| {
                        s.kept.iter().any(|t| {
                            matches!(
                                m.validate(l, t),
                                Err(Refusal::Lookup(LookupError::Upgraded(_)))
                            )
                        })
                    })
                },
            ),
            Property::sometimes(
                "an export in flight across a tick that saw its revocation",
                |_, s: &State| {
                    serving(s).is_some_and(|l| {
                        l.exports.iter().any(|&(cap, read)| {
                            let g = GuardInfo {
                                object: cap,
                                parent: None,
                                source: Some(cap),
                                key: Some(cap),
                                serial: 0,
                            };
                            s.applied.reaches(&g) && !read.reaches(&g)
                        })
                    })
                },
            ),
            Property::sometimes("a derived guard", |_, s: &State| {
                serving(s).is_some_and(|l| l.table.live_guards().any(|(_, g)| g.parent.is_some()))
            }),
        ]
    }
}
