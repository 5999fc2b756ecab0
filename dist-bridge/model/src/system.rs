//! The system as stateright explores it: its initial states, its steps ([`Action`], each
//! naming the function of `dist-bridge` it stands for) and what each does, and the properties
//! checked in every reachable state.

use stateright::{Model, Property};

use crate::state::{Invocation, Life, Phase, Revoked, State, Tick, Token};
use crate::table::{GuardInfo, LookupError, Table};
use crate::version_file::{Boot, Disk};
use crate::{Mutation, ProtocolModel, Refusal};

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
