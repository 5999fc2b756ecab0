//! Why a denied fault was denied, from the cache entry of the active context: no record is
//! read or verified again, so a repeated denial costs what a hit costs.

use core::cell::Cell;

use twizzler_capsec::{ObjID, Protections};

use super::{Engine, data_or_exec};
use crate::fault::{DenyCause, Fault, Violation};
use crate::host::Host;

impl<H: Host> Engine<H> {
    /// Why the active context denies `fault`. The lookup that just denied left (or found) the
    /// context's entry for the object, so this is a cache hit; a context that cannot be read
    /// now (it changed since the lookup) is reported as holding nothing.
    pub(super) fn diagnose(
        &self,
        ctx_id: ObjID,
        fault: &Fault,
        provided: Protections,
        now: u64,
        budget: &Cell<u32>,
    ) -> Violation {
        let needed = fault.kind.required();
        let access = data_or_exec(fault);
        let cause = self
            .with_entry(ctx_id, fault.target, &fault.object, now, budget, |e| {
                e.deny_cause(&access, needed)
            })
            .map_or(DenyCause::NoRecord, |(c, _)| c);
        Violation::Denied {
            ctx: ctx_id,
            needed,
            provided,
            cause,
        }
    }
}
