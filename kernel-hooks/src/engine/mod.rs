//! [`Engine`]: the page-fault decision, its caches and revocation.
//!
//! - this module: the [`Engine`] itself, its construction and its counters, and the module map;
//! - [`decide`]: deciding a fault ([`Engine::decide`]): the lock-free hit path, and the full
//!   search over the thread's contexts behind it;
//! - [`lookup`]: the other lookups upstream's `SecCtxMgr` offers (an access, an object as a
//!   whole, what was granted);
//! - [`miss`]: the miss path: the cache entry a lookup needs, found or built and cached,
//!   redone when a revocation races with it;
//! - [`build`]: building an entry by reading the context's records and verifying those an
//!   access needs, within a fault's budget;
//! - [`read`]: reading a context inside the host's scope, and noticing it change;
//! - [`clock`]: the engine's time, and the earliest expiry for the host's timer;
//! - [`invalidate`]: revocation, invalidation and expiry, and the unmaps they cause.
//!
//! # Locks
//!
//! The engine's locks are the cache sets' writer locks (a hit takes none: it reads the set's
//! seqlocked mirror), the validated-context table's spinlock and the memo sets' spinlocks
//! (the revocation sets are the host's). None is held
//! while another is taken, none is held across a call into the host, and nothing is
//! allocated under any of them. A thread's [`SecCtxMgr`](crate::mgr::SecCtxMgr) lock is taken only to copy one id
//! out of it.

mod build;
mod clock;
mod decide;
mod invalidate;
mod labels;
mod lookup;
mod miss;
mod read;

use core::sync::atomic::AtomicU64;

use spin::Mutex;
use twizzler_capsec::{CtxFlags, FlowDenial, LabelId, PrincipalLabels, Protections};

pub use build::MAX_VERIFICATIONS_PER_FAULT;
pub use invalidate::{INVALIDATION_LIST, Invalidation};

use crate::cache::{Evaluated, VerifyCache};
use crate::fault::{DenyCause, Fault, KuidAt};
use crate::host::{Host, ObjectInfo};
use crate::memo::RecordMemo;
use crate::stats::{Counters, Stats};
use crate::ticket::MapTicket;
use read::ValidatedCtxs;

/// The faulting object as a lookup knows it: its metadata, and where its `kuid` is.
#[derive(Clone, Copy)]
struct Subject {
    info: ObjectInfo,
    kuid_at: KuidAt,
}

impl Subject {
    fn of(fault: &Fault) -> Self {
        Self {
            info: fault.object,
            kuid_at: fault.kuid_at,
        }
    }
}

/// One context's answer for one access.
struct Looked {
    eval: Evaluated,
    flags: CtxFlags,
    ticket: MapTicket,
    /// Why the entry does not grant the access, when it does not (worked out in the same
    /// lookup, so a denial reads the cache once).
    cause: Option<DenyCause>,
    /// Why the flow rule refuses the access, when the capabilities grant it and the flow
    /// does not.
    flow_denial: Option<FlowDenial>,
    /// The context's principal labels the entry was computed from.
    labels: PrincipalLabels<LabelId>,
    /// What the capabilities alone provide (before the flow mask): what a refusal by the
    /// capabilities reports, as the pure rule does.
    caps_provided: Protections,
}

/// The page-fault decision engine.
///
/// Generic over the [`Host`] kernel; `const`-constructible, heap-free and all zero bytes when
/// new, so a kernel keeps it in a `static` in `.bss`. Safe to share between CPUs: the caches
/// are split into sets read without a lock and written under a lock each, revocations move
/// an epoch, counters are atomics.
pub struct Engine<H: Host> {
    host: H,
    cache: VerifyCache,
    memo: RecordMemo,
    /// Signature checks that failed (a check's outcome never changes: remembered for ever).
    failed: RecordMemo,
    /// Bumped by every revocation and invalidation; cache entries stamped with an older epoch
    /// miss.
    epoch: AtomicU64,
    validated: Mutex<ValidatedCtxs>,
    counters: Counters,
    /// Added to [`Host::monotonic_ns`] to give Unix time.
    wall_offset: AtomicU64,
    /// The earliest expiry among cached decisions, encoded so that `0` means none and a
    /// larger value is sooner (see [`clock::expiry_key`]).
    next_expiry: AtomicU64,
}

impl<H: Host> Engine<H> {
    /// An engine with empty caches and nothing revoked.
    pub const fn new(host: H) -> Self {
        Self {
            host,
            cache: VerifyCache::new(),
            memo: RecordMemo::new(),
            failed: RecordMemo::new(),
            epoch: AtomicU64::new(0),
            validated: Mutex::new(ValidatedCtxs::EMPTY),
            counters: Counters::new(),
            wall_offset: AtomicU64::new(0),
            next_expiry: AtomicU64::new(0),
        }
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The host, to change it while no one else uses the engine (a kernel that builds its
    /// tables before the first fault; benchmarks and tests).
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        Stats {
            hits: self.cache.hits(),
            ..self.counters.snapshot()
        }
    }

    /// Number of decisions cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}
