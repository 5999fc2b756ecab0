//! [`MapTicket`]: closing the window between a decision and the mapping it allows.
//!
//! On several CPUs a revocation can run between `decide` returning `Map` and the kernel
//! installing the page-table entry; if the revocation's unmap ran first, the entry installed
//! afterwards would outlive the grant. The ticket closes the window:
//!
//! 1. the kernel takes the lock its [`crate::Host::unmap`] takes (its page-table lock);
//! 2. it installs the entry only if [`crate::Engine::is_current`] says the ticket is still
//!    current, else it releases the lock and decides again;
//! 3. it releases the lock.
//!
//! Why that suffices: a decision is served from one cache entry, in one cache set. Everything
//! that takes a grant away (revocation, context or key invalidation, expiry, eviction, flush)
//! removes the entries it affects, and each removal bumps its set's removal counter *under the
//! set's lock, before* the engine calls `unmap`, in the same seqlocked write that takes the
//! entry out of the set's mirror (see [`crate::seqset`]). A ticket records the set and the
//! counter a lookup saw in the same published state as the entry it read. If the counter still matches while the kernel holds the page-table lock, no removal
//! has happened in that set since the decision, so any later one will call `unmap`, which
//! waits for the lock and then removes the entry just installed. If it does not match, some
//! entry of the set was removed (perhaps another one): decide again, usually a cache hit.
//! Entries re-stamped by a sweep are not removed, so unrelated revocations do not disturb
//! tickets.
//!
//! One more case makes the argument whole: an entry built from what a revocation took away
//! can be inserted, with the pre-revocation stamp, after the revocation's sweep passed its set
//! (its builder then sees the epoch moved and verifies again, but the entry stays). A lookup
//! that read the same old stamp could hit it and take a ticket that already counts the sweep.
//! So a hit, like an insert, counts only if the epoch still equals the stamp it was matched
//! against; the QEMU-style race in `tests/it/window.rs` found this (one stale install in about 50
//! runs before the check).
//!
//! A decision made after revocations kept racing with its lookup carries the engine's epoch
//! instead, which every revocation and invalidation moves; what it granted is cached all the
//! same, so an expiry finds it. Every other decision is served from the cache entry that holds
//! the grant it maps (an access the entry did not grant is decided by adding the records it
//! needs to the entry, merged under the set's lock, and the ticket is taken from that insert).

/// What a `Map` decision was made from, to check under the page-table lock that it still
/// holds (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapTicket(pub(crate) Ticket);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ticket {
    /// Served from an entry of cache set `set`, whose removal counter was `removals`.
    Entry { set: u16, removals: u64 },
    /// Decided without an entry, at engine epoch `epoch`.
    Epoch(u64),
    /// A kernel thread's: nothing can revoke it.
    Kernel,
}
