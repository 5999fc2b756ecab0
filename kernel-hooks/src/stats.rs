//! Counters of what the engine did.

use core::sync::atomic::{AtomicU64, Ordering};

/// The live counters (relaxed atomics: they are statistics, not synchronisation).
#[derive(Default)]
pub(crate) struct Counters {
    pub misses: AtomicU64,
    pub verifies: AtomicU64,
    pub memo_hits: AtomicU64,
    pub evictions: AtomicU64,
    pub invalidated: AtomicU64,
    pub torn_reads: AtomicU64,
    pub failed_verifies: AtomicU64,
    pub failed_memo_hits: AtomicU64,
}

impl Counters {
    pub(crate) const fn new() -> Self {
        Self {
            misses: AtomicU64::new(0),
            verifies: AtomicU64::new(0),
            memo_hits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            invalidated: AtomicU64::new(0),
            torn_reads: AtomicU64::new(0),
            failed_verifies: AtomicU64::new(0),
            failed_memo_hits: AtomicU64::new(0),
        }
    }

    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            // Counted per cache set; the engine fills it in.
            hits: 0,
            misses: get(&self.misses),
            verifies: get(&self.verifies),
            memo_hits: get(&self.memo_hits),
            evictions: get(&self.evictions),
            invalidated: get(&self.invalidated),
            torn_reads: get(&self.torn_reads),
            failed_verifies: get(&self.failed_verifies),
            failed_memo_hits: get(&self.failed_memo_hits),
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
    /// Signatures verified (a capability has one, a delegation one per link plus its root's).
    pub verifies: u64,
    /// Signature checks skipped because the memo remembered the same key, message and
    /// signature verifying.
    pub memo_hits: u64,
    /// Cache entries displaced by others (their mappings were unmapped).
    pub evictions: u64,
    /// Cache entries removed by revocation, expiry or invalidation.
    pub invalidated: u64,
    /// Reads of a context found torn by a concurrent writer and redone.
    pub torn_reads: u64,
    /// Signatures checked that did not verify (remembered as failed).
    pub failed_verifies: u64,
    /// Signature checks skipped because the same key, message and signature failed before.
    pub failed_memo_hits: u64,
}
