//! The engine's clock and the expiry timer: Unix time from the host's monotonic clock, and
//! the earliest expiry among cached grants, for the host to arm its timer with.

use core::cell::Cell;
use core::sync::atomic::Ordering;

use twizzler_capsec::Expiry;

use super::Engine;
use crate::host::Host;

/// Encodes an expiry so that "never" is 0 and sooner is larger (for `fetch_max`).
pub(super) fn expiry_key(e: Expiry) -> u64 {
    !e.raw().wrapping_sub(1)
}

/// The inverse of [`expiry_key`].
fn expiry_of_key(k: u64) -> Expiry {
    Expiry::from_raw((!k).wrapping_add(1))
}

/// The engine's time for one decision: read from the host the first time it is needed, then
/// kept. A decision reads the host's clock at most once, and a hit on grants that never expire
/// not at all: upstream's cached check reads no clock, and a kernel's clock read can cost more
/// than the rest of the hit (`docs/BENCHMARKS.md`, *Ninth session*).
pub(super) struct DecisionClock<'e, H: Host> {
    engine: &'e Engine<H>,
    read: Cell<Option<u64>>,
}

impl<'e, H: Host> DecisionClock<'e, H> {
    /// A clock not read yet.
    #[inline(always)]
    pub(super) fn new(engine: &'e Engine<H>) -> Self {
        Self {
            engine,
            read: Cell::new(None),
        }
    }

    /// The time ([`Engine::now`]): read on the first call, the same value after.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        match self.read.get() {
            Some(t) => t,
            None => {
                let t = self.engine.now();
                self.read.set(Some(t));
                t
            }
        }
    }

    /// The time, if it was read.
    #[inline]
    pub(super) fn read(&self) -> Option<u64> {
        self.read.get()
    }
}

impl<H: Host> Engine<H> {
    /// Sets the offset from the host's monotonic clock to Unix time (ns): the engine's time
    /// is `monotonic_ns() + offset`, and expiry times are Unix times.
    ///
    /// Moving it forward makes records expire sooner: call [`Engine::expire`] afterwards so
    /// pages mapped under records that are now expired are unmapped. Moving it backward makes
    /// records that had expired count again for *new* faults (the rule at the new time);
    /// nothing already unmapped is mapped back without a fault.
    pub fn set_wall_clock_offset(&self, offset_ns: u64) {
        let old = self.wall_offset.swap(offset_ns, Ordering::AcqRel);
        if offset_ns < old {
            // Decisions cached while a record was expired hold no record of it: make every
            // entry miss, so the next faults are decided at the new time.
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The offset set by [`Engine::set_wall_clock_offset`].
    pub fn wall_clock_offset(&self) -> u64 {
        self.wall_offset.load(Ordering::Acquire)
    }

    /// The engine's current time: ns since the Unix epoch.
    pub fn now(&self) -> u64 {
        self.host
            .monotonic_ns()
            .saturating_add(self.wall_offset.load(Ordering::Acquire))
    }

    /// When, on the host's monotonic clock, the earliest cached grant expires: arm a timer
    /// for then and call [`Engine::expire`]. `None` when no cached grant expires. Re-read it
    /// after every `Map` with a `valid_until` and after every `expire`.
    pub fn next_deadline(&self) -> Option<u64> {
        let k = self.next_expiry.load(Ordering::Acquire);
        expiry_of_key(k)
            .at()
            .map(|t| t.saturating_sub(self.wall_offset.load(Ordering::Acquire)))
    }

    /// How long from `now`, a reading of [`Host::monotonic_ns`], until the earliest cached
    /// grant expires: the one relative wait a host arms its timer with (`Some(0)` when it has
    /// passed, `None` when no cached grant expires). The deadline is on the host's monotonic
    /// clock, so a timer counting anything else (ticks of its own) must not be used for it.
    pub fn next_deadline_in(&self, now: u64) -> Option<u64> {
        self.next_deadline().map(|d| d.saturating_sub(now))
    }

    pub(super) fn note_expiry(&self, e: Expiry) {
        self.next_expiry.fetch_max(expiry_key(e), Ordering::AcqRel);
    }
}
