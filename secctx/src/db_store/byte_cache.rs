//! [`ByteCache`]: small objects' bytes as one snapshot of a [`super::SnapshotReader`] holds
//! them, so that a later read from the same snapshot is a hash lookup and a copy instead of
//! redb's lookups (the object's record, then its pages).
//!
//! # Why a cached read is exactly as fresh as a read of the snapshot
//!
//! Every entry is keyed by the object **and the serial of the snapshot it was read from**, and
//! is served only to a read whose snapshot has that serial. A snapshot's serial names it alone
//! (each snapshot a reader takes gets a larger one), and a snapshot's contents never change.
//! So a cached entry is byte for byte what reading that snapshot would give, and the
//! freshness of a read is the snapshot's: the header check of `snapshot.rs` (its points 1-6)
//! decides which snapshot a read uses, before the cache is asked. A commit (in any process)
//! makes the next read take a new snapshot with a new serial, for which every entry of an
//! older serial is a miss; those entries are only dropped when space is needed.
//!
//! # Bounds
//!
//! Only objects of at most [`CacheLimits::max_object_bytes`] are kept, and the entries kept
//! charge at most [`CacheLimits::max_total_bytes`] in all (each its length plus
//! [`ENTRY_OVERHEAD`], so that many empty objects are bounded too). To make room, entries of
//! older snapshots go first, then any.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use twizzler_capsec::ObjID;

/// What each entry is charged beyond its bytes (its key, serial, pointer and the map's slot).
pub const ENTRY_OVERHEAD: u64 = 64;

/// How much a [`super::SnapshotReader`] keeps of the objects it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// Objects longer than this are never kept (0 keeps none but empty objects).
    pub max_object_bytes: u64,
    /// What all entries together may charge (0 disables the cache).
    pub max_total_bytes: u64,
}

impl CacheLimits {
    /// No cache: every read asks redb.
    pub const NONE: CacheLimits = CacheLimits {
        max_object_bytes: 0,
        max_total_bytes: 0,
    };
}

impl Default for CacheLimits {
    /// Objects of up to one page (4 KiB), 1 MiB in all.
    fn default() -> Self {
        CacheLimits {
            max_object_bytes: 4096,
            max_total_bytes: 1 << 20,
        }
    }
}

/// One object's bytes, as the snapshot `serial` holds them.
struct Entry {
    serial: u64,
    data: Arc<[u8]>,
}

impl Entry {
    fn charge(&self) -> u64 {
        self.data.len() as u64 + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Entries {
    map: HashMap<ObjID, Entry>,
    charged: u64,
    /// Entries of snapshots before this one were dropped when space was last needed: a
    /// snapshot's first insert past the bound drops older entries, later ones need not look.
    purged_below: u64,
}

/// The cache (see the module documentation).
pub(super) struct ByteCache {
    limits: CacheLimits,
    entries: Mutex<Entries>,
    hits: AtomicU64,
}

impl ByteCache {
    pub(super) fn new(limits: CacheLimits) -> Self {
        ByteCache {
            limits,
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
        }
    }

    /// Whether an object of `len` bytes would be kept.
    pub(super) fn keeps(&self, len: u64) -> bool {
        len <= self.limits.max_object_bytes
            && len.saturating_add(ENTRY_OVERHEAD) <= self.limits.max_total_bytes
    }

    /// Object `id`'s bytes as snapshot `serial` holds them, if kept.
    pub(super) fn get(&self, serial: u64, id: ObjID) -> Option<Arc<[u8]>> {
        if self.limits.max_total_bytes == 0 {
            return None;
        }
        let found = match self.entries.lock() {
            Ok(e) => e
                .map
                .get(&id)
                .filter(|e| e.serial == serial)
                .map(|e| e.data.clone()),
            Err(_) => None,
        };
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Keeps `data`, object `id`'s whole bytes as snapshot `serial` holds them (unless it is
    /// too large, or an entry of a later snapshot is kept for it).
    pub(super) fn insert(&self, serial: u64, id: ObjID, data: Arc<[u8]>) {
        if !self.keeps(data.len() as u64) {
            return;
        }
        let Ok(mut e) = self.entries.lock() else {
            return;
        };
        let e = &mut *e;
        if e.map.get(&id).is_some_and(|old| old.serial > serial) {
            return;
        }
        let entry = Entry { serial, data };
        let charge = entry.charge();
        if let Some(old) = e.map.remove(&id) {
            e.charged -= old.charge();
        }
        if e.charged.saturating_add(charge) > self.limits.max_total_bytes && e.purged_below < serial
        {
            // Older snapshots' entries first: no read of a later snapshot can use them. Once
            // per snapshot: a full cache of the current snapshot's entries is not walked on
            // every insert.
            e.map.retain(|_, old| old.serial >= serial);
            e.charged = e.map.values().map(Entry::charge).sum();
            e.purged_below = serial;
        }
        while e.charged.saturating_add(charge) > self.limits.max_total_bytes {
            let Some(victim) = e.map.keys().next().copied() else {
                break;
            };
            if let Some(old) = e.map.remove(&victim) {
                e.charged -= old.charge();
            }
        }
        e.charged += charge;
        e.map.insert(id, entry);
    }

    /// Reads answered from the cache.
    pub(super) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// What the entries kept charge now (at most [`CacheLimits::max_total_bytes`]).
    pub(super) fn charged(&self) -> u64 {
        self.entries.lock().map_or(0, |e| e.charged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, v: u8) -> Arc<[u8]> {
        vec![v; n].into()
    }

    #[test]
    fn an_entry_serves_only_its_own_snapshot() {
        let c = ByteCache::new(CacheLimits::default());
        let id = ObjID::new(1);
        c.insert(3, id, bytes(8, 1));
        assert_eq!(c.get(3, id).as_deref(), Some(&[1u8; 8][..]));
        assert!(c.get(4, id).is_none(), "a later snapshot misses");
        assert!(c.get(2, id).is_none(), "an earlier one too");
        // An earlier snapshot's bytes never replace a later one's.
        c.insert(2, id, bytes(8, 2));
        assert_eq!(c.get(3, id).as_deref(), Some(&[1u8; 8][..]));
        c.insert(4, id, bytes(8, 4));
        assert_eq!(c.get(4, id).as_deref(), Some(&[4u8; 8][..]));
        assert!(c.get(3, id).is_none());
        assert_eq!(c.hits(), 3);
        assert_eq!(c.charged(), 8 + ENTRY_OVERHEAD);
    }

    #[test]
    fn entries_stay_within_the_bound_and_old_snapshots_go_first() {
        let per = 100 + ENTRY_OVERHEAD;
        let c = ByteCache::new(CacheLimits {
            max_object_bytes: 100,
            max_total_bytes: 3 * per,
        });
        c.insert(1, ObjID::new(9), bytes(100, 9));
        for i in 0..3 {
            c.insert(2, ObjID::new(i), bytes(100, 0));
        }
        assert_eq!(c.charged(), 3 * per);
        assert!(
            c.get(1, ObjID::new(9)).is_none(),
            "the old snapshot's went first"
        );
        assert!((0..3).all(|i| c.get(2, ObjID::new(i)).is_some()));
        for i in 3..10 {
            c.insert(2, ObjID::new(i), bytes(100, 0));
            assert!(c.charged() <= 3 * per);
            assert!(c.get(2, ObjID::new(i)).is_some(), "the newest is kept");
        }
        let kept = (0..10)
            .filter(|&i| c.get(2, ObjID::new(i)).is_some())
            .count();
        assert_eq!(kept, 3);
        // Too large, or a cache of nothing: not kept.
        c.insert(2, ObjID::new(20), bytes(101, 0));
        assert!(c.get(2, ObjID::new(20)).is_none());
        let none = ByteCache::new(CacheLimits::NONE);
        none.insert(1, ObjID::new(1), bytes(0, 0));
        assert!(none.get(1, ObjID::new(1)).is_none());
        assert_eq!(none.charged(), 0);
    }
}
