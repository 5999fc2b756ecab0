//! Why a denied fault was denied: the active context evaluated once more, explained.

use twizzler_capsec::{Grant, ObjID, Protections, Verdict, evaluate_explained};

use super::{Engine, data_or_exec};
use crate::fault::{DenyCause, Fault, Violation};
use crate::host::Host;

impl<H: Host> Engine<H> {
    /// Why the active context denies `fault`: evaluates it once more, explained. A context
    /// that cannot be read now (it changed since the lookup) is reported as holding nothing.
    pub(super) fn diagnose(
        &self,
        ctx_id: ObjID,
        fault: &Fault,
        provided: Protections,
        now: u64,
    ) -> Violation {
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let cause = self
            .read_ctx(ctx_id, |ctx| {
                let auth = self.authority(fault.target, &fault.object);
                let mut unmasked = fault.object.default_prots;
                let mut seen = false;
                let mut best: Option<Verdict> = None;
                let perms = evaluate_explained(
                    ctx_id,
                    ctx,
                    fault.target,
                    fault.object.default_prots,
                    &auth,
                    access,
                    now,
                    |report| {
                        seen = true;
                        match &report.verdict {
                            Verdict::Counted(c) => unmasked |= *c,
                            Verdict::Redundant => {
                                if let Some(Ok(c)) =
                                    report.record.map(|r| Grant::of(r).contribution(&access))
                                {
                                    unmasked |= c;
                                }
                            }
                            v => {
                                if best.as_ref().is_none_or(|b| rank(v) > rank(b)) {
                                    best = Some(v.clone());
                                }
                            }
                        }
                    },
                );
                if unmasked.contains(needed) && !perms.grants(needed) {
                    DenyCause::Masked {
                        removed: needed & perms.restrict,
                    }
                } else if let Some(v) = best {
                    DenyCause::Record(v)
                } else if seen {
                    DenyCause::Record(Verdict::NoUsefulRights)
                } else {
                    DenyCause::NoRecord
                }
            })
            .unwrap_or(DenyCause::NoRecord);
        Violation::Denied {
            ctx: ctx_id,
            needed,
            provided,
            cause,
        }
    }
}

/// How much a verdict explains a denial: a record that is invalid says more than one that is
/// for another context.
fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Invalid(_) => 7,
        Verdict::NotAnEntry => 6,
        Verdict::OutsideGate => 5,
        Verdict::NoUsefulRights => 4,
        Verdict::WrongHolder(_) => 3,
        Verdict::WrongTarget(_) => 2,
        Verdict::Malformed(_) => 1,
        Verdict::Counted(_) | Verdict::Redundant => 0,
    }
}
