//! Counters of what the engine did.

use core::sync::atomic::{AtomicU64, Ordering};

/// The live counters (relaxed atomics: they are statistics, not synchronisation).
#[derive(Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub verifies: AtomicU64,
    pub memo_hits: AtomicU64,
    pub evictions: AtomicU64,
    pub invalidated: AtomicU64,
}

impl Counters {
    pub const fn new() -> Self {
        Self {
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            verifies: AtomicU64::new(0),
            memo_hits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            invalidated: AtomicU64::new(0),
        }
    }

    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            verifies: get(&self.verifies),
            memo_hits: get(&self.memo_hits),
            evictions: get(&self.evictions),
            invalidated: get(&self.invalidated),
        }
    }
}

/// A snapshot of the engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups served from the verification cache.
    pub hits: u64,
    /// Lookups that had to read and verify the context.
    pub misses: u64,
    /// Records whose signatures were verified.
    pub verifies: u64,
    /// Records whose signatures were skipped because the memo vouched for them.
    pub memo_hits: u64,
    /// Cache entries displaced by others (their mappings were unmapped).
    pub evictions: u64,
    /// Cache entries removed by revocation, expiry or invalidation.
    pub invalidated: u64,
}
