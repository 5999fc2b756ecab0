//! Every interleaving (up to a preemption bound) of a fault's lock-free cache lookup racing a
//! revocation sweep, an eviction and an insert, explored with loom on a two-way set of the
//! real [`SeqSet`] (the words a lookup reads, the removal counter and the writers' lock are
//! the engine's own code; only the entry type is smaller).
//!
//! The fault follows the engine's protocol: read the epoch, look the entry up, keep the hit
//! only if the epoch has not moved, then, under the page-table lock, install the mapping only
//! if the ticket (the set's removal counter) is still current. Whoever removes an entry
//! unmaps it afterwards, under the page-table lock. What must hold in every interleaving: a
//! lookup never returns a torn entry, and no mapping outlives the entry it was made from.
//!
//! Run by `cargo xtask test` as
//! `RUSTFLAGS="--cfg loom" cargo test -p kernel-hooks-loom --test loom_cache --profile loom`
//! (in its own target directory); built without `--cfg loom` it is empty.

// A test harness: a failed unwrap, expect or panic is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]
#![cfg(loom)]

use kernel_hooks::seqset::{KEY_WORDS, Mirrored, Retain, SeqSet, Upsert};
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// A cache entry: its key, the epoch it is stamped with, and a version (to tell writes apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    key: u64,
    epoch: u64,
    version: u64,
}

/// Words: the key (one word of the four used), then one word packing the stamp, the version
/// and the key again, so a lookup mixing two writes' words is detected.
const H: usize = KEY_WORDS + 1;

fn payload(e: &Entry) -> u64 {
    (e.epoch << 32) | (e.key << 16) | e.version
}

impl Mirrored<H> for Entry {
    const UNUSED: Self = Entry {
        key: 0,
        epoch: 0,
        version: 0,
    };

    fn hot(&self) -> [u64; H] {
        [self.key, 0, 0, 0, payload(self)]
    }

    fn key(&self) -> [u64; KEY_WORDS] {
        [self.key, 0, 0, 0]
    }

    const STAMP_WORD: usize = KEY_WORDS;

    fn stamp_word(&self) -> u64 {
        payload(self)
    }
}

type Set = SeqSet<Entry, 2, H>;

fn key(k: u64) -> [u64; KEY_WORDS] {
    [k, 0, 0, 0]
}

/// What the page tables hold: the key of the entry a mapping was made from, if any.
struct PageTables {
    mapped: Mutex<Option<u64>>,
}

impl PageTables {
    /// The host's unmap of a removed entry: takes the page-table lock.
    fn unmap(&self, k: u64) {
        let mut m = self.mapped.lock().unwrap();
        if *m == Some(k) {
            *m = None;
        }
    }
}

/// The fault path for key `k`: a lock-free hit under an unchanged epoch (`lookup_first`, as
/// the engine's hit), then the ticket check and the install under the page-table lock.
/// Returns whether it mapped.
fn fault(set: &Set, epoch: &AtomicU64, pt: &PageTables, k: u64) -> bool {
    let e = epoch.load(Ordering::Acquire);
    // The closure may see a write in progress (that is the design: its answer is dropped
    // then), so it only computes; what the lookup *returns* must be one write's words.
    let hit = set.lookup_first(&key(k), move |w| {
        let p = w.word(KEY_WORDS);
        (p >> 32 == e).then_some((p, w.word(0)))
    });
    let Some(((p, key_word), removals)) = hit else {
        return false;
    };
    // Not torn: the payload names the key the key words name.
    assert_eq!((p >> 16) & 0xffff, key_word, "a torn entry was served");
    if epoch.load(Ordering::Acquire) != e {
        return false;
    }
    let mut m = pt.mapped.lock().unwrap();
    if set.removals() != removals {
        return false;
    }
    *m = Some(k);
    true
}

/// A revocation of what key `k`'s entry was derived from: bump the epoch, sweep (remove `k`,
/// re-stamp the others), then unmap what was removed.
fn revoke(set: &Set, epoch: &AtomicU64, pt: &PageTables, k: u64) {
    let old = epoch.fetch_add(1, Ordering::AcqRel);
    let mut removed = Vec::new();
    set.retain(
        |e| {
            if e.key == k {
                return Retain::Remove;
            }
            if e.epoch == old {
                e.epoch = old + 1;
                return Retain::Restamped;
            }
            Retain::Keep
        },
        |e| removed.push(e.key),
    );
    for r in removed {
        pt.unmap(r);
    }
}

/// An insert (by a fault that missed), unmapping what it evicted.
fn insert(set: &Set, pt: &PageTables, e: Entry) {
    let (evicted, _) = set.insert(e);
    if let Some(ev) = evicted {
        pt.unmap(ev.key);
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Every interleaving with up to two preemptions (`LOOM_MAX_PREEMPTIONS` overrides it):
    // enough to interrupt a lookup in the middle of a write and a write in the middle of a
    // lookup's ticket check. Three takes hours on two cores.
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

struct World {
    set: Set,
    epoch: AtomicU64,
    pt: PageTables,
}

fn world(entries: &[Entry]) -> Arc<World> {
    let w = World {
        set: Set::new(),
        epoch: AtomicU64::new(0),
        pt: PageTables {
            mapped: Mutex::new(None),
        },
    };
    for e in entries {
        w.set.insert(*e);
    }
    Arc::new(w)
}

fn entry(key: u64, epoch: u64, version: u64) -> Entry {
    Entry {
        key,
        epoch,
        version,
    }
}

/// A fault on key 1 races the revocation of key 1 and an insert that fills the set and evicts.
/// Whatever the order, key 1's entry is gone at the end, and so must be its mapping.
#[test]
fn fault_races_revocation_and_eviction() {
    model(|| {
        let w = world(&[entry(1, 0, 1), entry(4, 0, 1)]);
        let (w1, w2) = (w.clone(), w.clone());
        let faulting = thread::spawn(move || fault(&w1.set, &w1.epoch, &w1.pt, 1));
        let inserting = thread::spawn(move || insert(&w2.set, &w2.pt, entry(2, 0, 2)));
        revoke(&w.set, &w.epoch, &w.pt, 1);
        faulting.join().unwrap();
        inserting.join().unwrap();
        assert!(w.set.lookup(&key(1), |_| Some(())).is_none());
        assert_eq!(
            *w.pt.mapped.lock().unwrap(),
            None,
            "a mapping outlived its entry"
        );
    });
}

/// A fault on key 1 races its revocation and a slow miss that verified key 1's records before
/// the revocation and inserts its entry (stamped with the old epoch) whenever it finishes. No
/// entry for key 1 is legitimate after the revocation, so no mapping may remain.
#[test]
fn fault_races_revocation_and_a_stale_insert() {
    model(|| {
        let w = world(&[entry(1, 0, 1)]);
        let (w1, w2) = (w.clone(), w.clone());
        let faulting = thread::spawn(move || fault(&w1.set, &w1.epoch, &w1.pt, 1));
        let building = thread::spawn(move || {
            // Verified at epoch 0; the insert happens whenever the verification ends.
            let e0 = 0;
            insert(&w2.set, &w2.pt, entry(1, e0, 2));
        });
        revoke(&w.set, &w.epoch, &w.pt, 1);
        faulting.join().unwrap();
        building.join().unwrap();
        assert_eq!(
            *w.pt.mapped.lock().unwrap(),
            None,
            "a mapping outlived a revocation"
        );
    });
}

/// Lookups never return a torn entry while a writer replaces it again and again, and a hit's
/// version is one that was written.
#[test]
fn lookups_never_tear() {
    model(|| {
        let w = world(&[entry(1, 0, 1)]);
        let w1 = w.clone();
        let writer = thread::spawn(move || {
            for v in 2..4 {
                w1.set.insert(entry(1, 0, v));
            }
        });
        for _ in 0..2 {
            if let Some((p, _)) = w.set.lookup(&key(1), |w| Some(w.word(KEY_WORDS))) {
                assert!(
                    (1..4).contains(&(p & 0xffff)),
                    "version {p:#x} was never written"
                );
                assert_eq!((p >> 16) & 0xffff, 1);
            }
        }
        writer.join().unwrap();
    });
}

/// Two faults that each verified another record for the same (context, object) merge what
/// they verified into the cached entry (`SeqSet::upsert` under the set's lock), while a third
/// fault maps from the entry. In every interleaving neither merge's grant is lost (the entry
/// holds all three bits: the base's and both merges'), no lookup is torn, and the revocation
/// that follows finds the entry and unmaps what the fault mapped.
#[test]
fn merges_lose_no_grant() {
    model(|| {
        let w = world(&[entry(1, 0, 1)]);
        let merge = |w: &World, bit: u64| {
            let (gone, _) = w.set.upsert(entry(1, 0, bit), |old, new| {
                Upsert::Put(Entry {
                    version: old.version | new.version,
                    ..*old
                })
            });
            if let Some(g) = gone {
                w.pt.unmap(g.key);
            }
        };
        let (w2, w3) = (w.clone(), w.clone());
        let a = thread::spawn(move || merge(&w2, 2));
        let b = thread::spawn(move || {
            fault(&w3.set, &w3.epoch, &w3.pt, 1);
        });
        merge(&w, 4);
        a.join().unwrap();
        b.join().unwrap();
        let merged = w
            .set
            .lookup(&key(1), |wy| Some(wy.word(KEY_WORDS) & 0xffff));
        assert_eq!(merged.map(|(v, _)| v), Some(7), "a merge lost a grant");
        revoke(&w.set, &w.epoch, &w.pt, 1);
        assert_eq!(
            *w.pt.mapped.lock().unwrap(),
            None,
            "a mapping outlived its entry"
        );
    });
}

/// A write fault on key 1 races a principal-label change that takes `W` away from key 1's
/// entry (`Engine::relabel_ctx` when only writes become unsafe): the sweep narrows the entry in
/// place (`Retain::Narrowed`: all its words published again, the set's counter moved), then
/// write-protects. An entry whose version is 1 grants `W`; the narrowed one (version 2) does
/// not. Whatever the order, no writable mapping remains once both are done.
#[test]
fn write_fault_races_a_narrowing_relabel() {
    model(|| {
        let w = world(&[entry(1, 0, 1), entry(4, 0, 1)]);
        let w1 = w.clone();
        let faulting = thread::spawn(move || {
            let e = w1.epoch.load(Ordering::Acquire);
            let hit = w1.set.lookup(&key(1), |w| {
                let p = w.word(KEY_WORDS);
                (p >> 32 == e).then_some((p, w.word(0)))
            });
            let Some(((p, key_word), removals)) = hit else {
                return;
            };
            assert_eq!((p >> 16) & 0xffff, key_word, "a torn entry was served");
            if p & 0xffff != 1 || w1.epoch.load(Ordering::Acquire) != e {
                return; // not writable, or decided under a moved epoch
            }
            let mut m = w1.pt.mapped.lock().unwrap();
            if w1.set.removals() == removals {
                *m = Some(1);
            }
        });
        // The relabel: epoch, sweep (narrow key 1, re-stamp the rest), write-protect.
        let old = w.epoch.fetch_add(1, Ordering::AcqRel);
        w.set.retain(
            |e| {
                let was = e.epoch;
                if e.epoch == old {
                    e.epoch = old + 1;
                }
                if e.key == 1 {
                    e.version = 2;
                    return Retain::Narrowed;
                }
                if was == old {
                    Retain::Restamped
                } else {
                    Retain::Keep
                }
            },
            |_| {},
        );
        w.pt.unmap(1);
        faulting.join().unwrap();
        assert_eq!(
            *w.pt.mapped.lock().unwrap(),
            None,
            "a writable mapping survived the narrowing"
        );
    });
}
