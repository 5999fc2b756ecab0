//! The conformance suite for hosts: the checks a [`Host`] and the fault path around it must
//! pass, written once and run by every host through a small [`Harness`].
//!
//! Each check drives the host as a kernel would (faults by a thread, revocation, expiry,
//! write-protection) and reads back what the host has mapped. It returns a typed
//! [`Outcome`]: a pass, a failure with its reason, or a skip when the harness cannot do what
//! the check needs (several CPUs, for the race). Hosts that run it:
//!
//! - the std test host (`kernel-hooks/tests/it/conformance.rs`, with threads for the race);
//! - the QEMU reference kernel (`kernel-hooks/kernel`), at boot: its lines
//!   (`conformance: <check>: pass`) are read by `cargo xtask test`'s boot steps;
//! - the Twizzler port (`twizzler-port/`).
//!
//! A harness builds the [`World`] into its host first (objects, keys, contexts; data objects
//! presented so that byte `offset` of the mapping is byte `offset` of the object).

mod checks;
mod world;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use twizzler_capsec::{AccessKind, ObjID, Protections, RecordId};

use crate::engine::Engine;
use crate::host::Host;
use crate::mgr::SecCtxMgr;

pub use world::{
    Body, DATA_PAGES, EXPIRY_AFTER_NS, GATE_ENTRY, Ids, Object, World, WorldError, page,
};

/// Calls the host received, counted since it started: the engine's calls, and the fault
/// path's own reads of object metadata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// [`Host::monotonic_ns`].
    pub clock: u64,
    /// Reads of object metadata: [`Host::object`], and every read the fault path makes itself
    /// to fill in a [`crate::Fault`] (the `kuid`, the default protections if they are not
    /// kept at hand).
    pub metadata: u64,
    /// Every other host call ([`Host::with_ctx`], [`Host::with_key`], the revocation sets,
    /// [`Host::unmap`]).
    pub other: u64,
}

impl Calls {
    /// The calls made between `earlier` and `self`.
    pub fn since(&self, earlier: &Calls) -> Calls {
        Calls {
            clock: self.clock.wrapping_sub(earlier.clock),
            metadata: self.metadata.wrapping_sub(earlier.metadata),
            other: self.other.wrapping_sub(earlier.other),
        }
    }
}

/// What the suite needs a host to do. Every method is what the host's own kernel code does;
/// none may bypass the host's fault path or page tables.
pub trait Harness: Sync {
    /// The host under test.
    type Host: Host;

    /// The engine the host decides with.
    fn engine(&self) -> &Engine<Self::Host>;

    /// The host's fault path: `thread` touches byte `offset` of object `target` with `kind`.
    /// The host fills in the fault as its handler does, decides, applies `switch_to`, and
    /// installs the page under the ticket protocol. `Ok` with the protections installed, or
    /// `Err` with why nothing was (a violation, in words).
    fn fault(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Result<Protections, String>;

    /// The protections the host's page tables give the page holding byte `offset` of
    /// `target` under context `ctx`, or `None` if it is not mapped there.
    fn mapped(&self, ctx: ObjID, target: ObjID, offset: u64) -> Option<Protections>;

    /// Takes write access away from every mapping of `target` as the host does for a context
    /// object that was written (the integration guide, section 5), leaving the mappings in
    /// place.
    fn write_protect(&self, target: ObjID);

    /// The host's monotonic clock, as [`Host::monotonic_ns`] reads it.
    fn now(&self) -> u64;

    /// Returns once [`Harness::now`] has reached `t` (a test host moves its clock; a kernel
    /// waits).
    fn wait_until(&self, t: u64);

    /// What the host's expiry timer does when it fires: [`Engine::expire`], then re-arming.
    fn expire(&self);

    /// The host's key revocation: records it in its set, then [`Engine::revoke_key`].
    fn revoke_key(&self, kuid: ObjID);

    /// The host's record revocation: records it, then [`Engine::revoke_record`].
    fn revoke_record(&self, id: RecordId);

    /// The calls the host received so far.
    fn calls(&self) -> Calls;

    /// Runs `a` and `b` at the same time on two CPUs (or threads), returning when both have
    /// finished; `false` without running them if the host cannot.
    fn race(&self, a: &(dyn Fn() + Sync), b: &(dyn Fn() + Sync)) -> bool {
        let _ = (a, b);
        false
    }

    /// Runs `during` (a fault) with the host's expiry timer made to fire on this CPU while
    /// the fault is inside the engine, as its interrupts would (the kernel takes interrupts
    /// in kernel mode), and reports what the interrupt handling did. `None` if the host
    /// never takes an interrupt while it runs the engine (then no entry point can be
    /// interrupted), or if the harness cannot aim its timer inside the engine (the Twizzler
    /// port: it answers by construction, running `expire` only in a thread); the check is
    /// then skipped.
    fn interrupt_in_engine(&self, during: &dyn Fn()) -> Option<Interrupted> {
        let _ = during;
        None
    }

    /// The kernel touches byte `offset` of `target` on `thread`'s behalf (a copy from user
    /// memory for `Read`, to it for `Write`), through the host's kernel-mode fault path when
    /// the page is not mapped: `Ok` if the copy was done, `Err` with why it was refused.
    /// `None` if the host has no such path (the check is skipped).
    fn kernel_access(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Option<Result<(), String>> {
        let _ = (thread, target, offset, kind);
        None
    }
}

/// What a host's interrupt handling did while a fault was inside the engine
/// ([`Harness::interrupt_in_engine`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interrupted {
    /// Timer interrupts taken on this CPU while it was inside the engine.
    pub in_engine: u64,
    /// Calls into the engine made from interrupt context (an `expire()` from the handler):
    /// the engine's spin locks do not mask interrupts, so there must be none.
    pub engine_calls_in_interrupt: u64,
    /// `expire()` calls made afterwards, in ordinary kernel code, for what the interrupt
    /// deferred.
    pub deferred_expiries: u64,
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The host does what the contract says.
    Pass,
    /// It does not: why.
    Fail(String),
    /// The harness cannot run the check (why).
    Skipped(&'static str),
}

/// One check's name and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The check.
    pub name: &'static str,
    /// What it found.
    pub outcome: Outcome,
}

impl fmt::Display for Report {
    /// `conformance: <name>: pass`, `... FAIL: <reason>` or `... skipped: <why>`: the line
    /// `cargo xtask test` reads from the reference kernel.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Pass => write!(f, "conformance: {}: pass", self.name),
            Outcome::Fail(why) => write!(f, "conformance: {}: FAIL: {why}", self.name),
            Outcome::Skipped(why) => write!(f, "conformance: {}: skipped: {why}", self.name),
        }
    }
}

/// What a check is: a name and the function that runs it.
pub type Check<T> = (&'static str, fn(&T, &World) -> Result<(), String>);

/// Every check, in the order [`run`] runs them (the clock first: it waits for a deadline set
/// when the world was built).
pub fn checks<T: Harness>() -> Vec<Check<T>> {
    checks::all()
}

/// Runs every check against `harness`, whose host holds `world`; each starts from an engine
/// with nothing cached ([`Engine::flush`]). A race the harness cannot run is skipped.
pub fn run<T: Harness>(harness: &T, world: &World) -> Vec<Report> {
    checks::all::<T>()
        .into_iter()
        .map(|(name, check)| {
            // Everything the previous check left cached is gone (and unmapped).
            let _ = harness.engine().flush();
            let outcome = match check(harness, world) {
                Ok(()) => Outcome::Pass,
                Err(why) => match checks::SKIPS.iter().find(|s| **s == why) {
                    Some(s) => Outcome::Skipped(s),
                    None => Outcome::Fail(why),
                },
            };
            Report { name, outcome }
        })
        .collect()
}

/// The summary line: `conformance: N checks, P pass, F fail, S skipped`.
pub fn summary(reports: &[Report]) -> String {
    let count = |f: fn(&Outcome) -> bool| reports.iter().filter(|r| f(&r.outcome)).count();
    alloc::format!(
        "conformance: {} checks, {} pass, {} fail, {} skipped",
        reports.len(),
        count(|o| matches!(o, Outcome::Pass)),
        count(|o| matches!(o, Outcome::Fail(_))),
        count(|o| matches!(o, Outcome::Skipped(_))),
    )
}
