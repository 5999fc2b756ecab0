//! [`SeqSet`]: one set of the verification cache, whose lookups take no lock.
//!
//! A set keeps `W` entries twice:
//!
//! - the entries themselves, behind the writers' lock: inserts, and the sweeps of revocation,
//!   invalidation and expiry, take it, change the entries, and publish the change;
//! - a *mirror* of the words a lookup needs ([`Mirrored::hot`]), with a bit per way saying
//!   which are in use and the set's removal counter, published under a `Seq`: a lookup
//!   copies a way's words out and keeps them only if no write began meanwhile.
//!
//! A lookup therefore costs a few loads and compares, never a store to memory another CPU
//! reads (but the hit counter, see [`SeqSet::hits`]), and never waits for a writer: after a
//! few failed attempts it reports a miss, and the caller takes the slow path, which locks.
//!
//! # What a lookup's answer means
//!
//! A lookup returns a way's words together with the removal counter *of the same published
//! state*: the counter is bumped in the same write that takes an entry out of the mirror, and
//! before the writer releases its lock and unmaps anything (see [`crate::MapTicket`]). So a
//! ticket taken from a lookup is current exactly as long as no entry has left the set since
//! the state the lookup saw, which is what the ticket protocol needs. `loom/tests/loom_cache.rs`
//! checks it under loom: a fault, a revocation sweep, an eviction and an insert racing over a
//! two-way set, with the page-table lock and the unmap modelled, never leave a mapping behind
//! an entry that was removed.

use crate::seq::Seq;
use crate::sync::{AtomicU64, Mutex, Ordering, spin_wait};

/// Words of a mirror that are the key: the context's id, then the object's, low word first.
pub const KEY_WORDS: usize = 4;

/// How many times a lookup tries to read a consistent state before it reports a miss.
const READ_ATTEMPTS: usize = 4;

/// An entry a [`SeqSet`] holds, and the `H` words of it that lookups read.
pub trait Mirrored<const H: usize>: Copy {
    /// The value of a way not in use (all zero bytes for a cache in `.bss`).
    const UNUSED: Self;
    /// The words lookups read. The first [`KEY_WORDS`] are the entry's key.
    fn hot(&self) -> [u64; H];
    /// The entry's key: the first [`KEY_WORDS`] of [`Mirrored::hot`].
    fn key(&self) -> [u64; KEY_WORDS];
    /// Which word of [`Mirrored::hot`] holds the entry's stamp: the one word a sweep that
    /// re-stamps an entry ([`Retain::Restamped`]) changes.
    const STAMP_WORD: usize;
    /// Word [`Mirrored::STAMP_WORD`] of [`Mirrored::hot`], computed alone.
    fn stamp_word(&self) -> u64;
}

/// What [`SeqSet::upsert`] does when the set already holds an entry with the new one's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert<T> {
    /// The way holds this value (the old entry, changed, or the new one): nothing leaves the
    /// set, so nothing mapped from the old entry loses it.
    Put(T),
    /// The new entry takes the way and the old one leaves the set: its removal is counted and
    /// it is returned, so its mappings can go.
    Displace,
    /// The old entry stays; the new one is dropped.
    Keep,
}

/// What a sweep ([`SeqSet::retain`]) does with an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retain {
    /// Keep it as it is.
    Keep,
    /// Keep it; its stamp word ([`Mirrored::STAMP_WORD`]) changed, nothing else did.
    Restamped,
    /// Keep it; it changed beyond its stamp and now grants less (a label change took `W`
    /// away): all its words are published again, and the set's removal counter moves as for
    /// a removal, so every ticket taken from the set before is stale.
    Narrowed,
    /// Remove it.
    Remove,
}

/// One way of a set's mirror, as a lookup reads it: each word loaded on its own (`Relaxed`),
/// so two loads may come from two writes; [`SeqSet::lookup`] keeps only answers read from
/// one.
pub struct Way<'a, const H: usize>(&'a [AtomicU64; H]);

impl<'a, const H: usize> Way<'a, H> {
    /// A view of `words` (for tests of code that reads ways).
    #[cfg(test)]
    pub(crate) fn new(words: &'a [AtomicU64; H]) -> Self {
        Self(words)
    }

    /// Word `i` (0 past the end).
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        self.0.get(i).map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Every word.
    #[inline]
    pub fn words(&self) -> [u64; H] {
        let mut out = [0; H];
        for (dst, src) in out.iter_mut().zip(self.0) {
            *dst = src.load(Ordering::Relaxed);
        }
        out
    }

    #[inline]
    fn has_key(&self, key: &[u64; KEY_WORDS]) -> bool {
        key.iter().enumerate().all(|(i, k)| self.word(i) == *k)
    }
}

/// A value alone on its cache line.
#[repr(C, align(64))]
struct OwnLine<T>(T);

/// The writers' copy of the entries.
struct Ways<T, const W: usize> {
    ways: [T; W],
    live: [bool; W],
    /// The next way to evict when all are in use (round robin).
    victim: u8,
}

impl<T: Copy, const W: usize> Ways<T, W> {
    #[inline]
    fn find<const H: usize>(&self, key: &[u64; KEY_WORDS]) -> Option<usize>
    where
        T: Mirrored<H>,
    {
        (0..W).find(|&i| self.live[i] && self.ways[i].key() == *key)
    }
}

/// One set of `W` entries of type `T`, `H` words of each readable without a lock (see the
/// module documentation).
pub struct SeqSet<T, const W: usize, const H: usize> {
    seq: Seq,
    /// Bit `i`: way `i` is in use.
    live: AtomicU64,
    mirror: [[AtomicU64; H]; W],
    /// How many times an entry has left the set (removed or evicted).
    removals: AtomicU64,
    /// Lookups that found a fresh entry (see [`SeqSet::hits`]), on a cache line of its own so
    /// that counting a hit does not take the line lookups read from other CPUs.
    hits: OwnLine<AtomicU64>,
    writer: Mutex<Ways<T, W>>,
}

impl<T: Mirrored<H>, const W: usize, const H: usize> SeqSet<T, W, H> {
    const WAYS_FIT: () = assert!(W <= 64 && W > 0 && H >= KEY_WORDS);

    /// An empty set.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        let () = Self::WAYS_FIT;
        Self {
            seq: Seq::new(),
            live: AtomicU64::new(0),
            mirror: [const { [const { AtomicU64::new(0) }; H] }; W],
            removals: AtomicU64::new(0),
            hits: OwnLine(AtomicU64::new(0)),
            writer: Mutex::new(Ways {
                ways: [T::UNUSED; W],
                live: [false; W],
                victim: 0,
            }),
        }
    }

    /// An empty set.
    #[cfg(loom)]
    pub fn new() -> Self {
        let () = Self::WAYS_FIT;
        Self {
            seq: Seq::new(),
            live: AtomicU64::new(0),
            mirror: core::array::from_fn(|_| core::array::from_fn(|_| AtomicU64::new(0))),
            removals: AtomicU64::new(0),
            hits: OwnLine(AtomicU64::new(0)),
            writer: Mutex::new(Ways {
                ways: [T::UNUSED; W],
                live: [false; W],
                victim: 0,
            }),
        }
    }

    /// Looks `key` up without a lock: `f` reads the entry's words ([`Way`]) and says whether
    /// it serves (`Some`). `f` runs while a writer may be changing the words, so it may see a
    /// mix of two states and must only compute (never panic or loop on what it reads); its
    /// answer is kept only if no write began meanwhile, else it runs again. Returns `f`'s
    /// answer and the set's removal counter in the state `f` read, or `None` when the key is
    /// absent, `f` declines, or writers kept the set busy.
    #[inline]
    pub fn lookup<R>(
        &self,
        key: &[u64; KEY_WORDS],
        f: impl Fn(&Way<'_, H>) -> Option<R>,
    ) -> Option<(R, u64)> {
        self.read_attempts(key, &f, READ_ATTEMPTS)
    }

    /// [`SeqSet::lookup`] for the fault path's common case, with the same answer: its first
    /// attempt in line, the others out of line. In a loop the compiler hoists `f`'s reads of
    /// its captures out of it, to be kept in registers (or spilled to the stack) across the
    /// whole read; here they are read where they are used. `f`'s captures and answer should
    /// be plain values (a `move` closure, an answer of a few words), so that nothing is kept
    /// in memory for the retries.
    #[inline(always)]
    pub fn lookup_first<R>(
        &self,
        key: &[u64; KEY_WORDS],
        f: impl Fn(&Way<'_, H>) -> Option<R>,
    ) -> Option<(R, u64)> {
        match self.seq.read_begin() {
            Some(s) => {
                let answer = self.read_way(key, &f);
                let removals = self.removals.load(Ordering::Relaxed);
                if self.seq.read_valid(s) {
                    return Some((answer?, removals));
                }
            }
            None => spin_wait(),
        }
        self.lookup_again(*key, f)
    }

    /// [`SeqSet::lookup_first`]'s other attempts, after its first raced a write.
    #[cold]
    #[inline(never)]
    fn lookup_again<R>(
        &self,
        key: [u64; KEY_WORDS],
        f: impl Fn(&Way<'_, H>) -> Option<R>,
    ) -> Option<(R, u64)> {
        self.read_attempts(&key, &f, READ_ATTEMPTS - 1)
    }

    /// Up to `attempts` reads of the set, as [`SeqSet::lookup`] describes.
    #[inline(always)]
    fn read_attempts<R>(
        &self,
        key: &[u64; KEY_WORDS],
        f: &impl Fn(&Way<'_, H>) -> Option<R>,
        attempts: usize,
    ) -> Option<(R, u64)> {
        for _ in 0..attempts {
            let Some(s) = self.seq.read_begin() else {
                spin_wait();
                continue;
            };
            let answer = self.read_way(key, f);
            let removals = self.removals.load(Ordering::Relaxed);
            if !self.seq.read_valid(s) {
                continue;
            }
            return Some((answer?, removals));
        }
        None
    }

    /// The way holding `key`, and `f`'s answer on it, inside a read.
    #[inline(always)]
    fn read_way<R>(
        &self,
        key: &[u64; KEY_WORDS],
        f: &impl Fn(&Way<'_, H>) -> Option<R>,
    ) -> Option<R> {
        let live = self.live.load(Ordering::Relaxed);
        // The way first, then `f` on it: `f` is inlined once, not into every step of the
        // (unrolled) scan, which cost the hit register spills.
        let (_, way) = self
            .mirror
            .iter()
            .enumerate()
            .find(|(i, w)| live & (1 << i) != 0 && Way(w).has_key(key))?;
        f(&Way(way))
    }

    /// Looks `key` up under the writers' lock, for what the mirror does not hold: `f` gets the
    /// whole entry and says whether it serves. Returns its answer and the removal counter.
    pub fn lookup_locked<R>(
        &self,
        key: &[u64; KEY_WORDS],
        f: impl FnOnce(&T) -> Option<R>,
    ) -> Option<(R, u64)> {
        let ways = self.writer.lock();
        let i = ways.find::<H>(key)?;
        let r = f(&ways.ways[i])?;
        Some((r, self.removals.load(Ordering::Acquire)))
    }

    /// Stores into way `i`'s mirror the words of `new` that differ from `old`, or all of them
    /// when `old` is `None` (the way was not in use: its words are stale). Call inside a
    /// write. Storing only what changed keeps a sweep that re-stamps an entry to one store.
    fn publish_way(&self, i: usize, old: Option<&[u64; H]>, new: &[u64; H]) {
        let Some(mirror) = self.mirror.get(i) else {
            return;
        };
        for (k, (dst, w)) in mirror.iter().zip(new).enumerate() {
            if old.is_none_or(|o| o.get(k) != Some(w)) {
                dst.store(*w, Ordering::Relaxed);
            }
        }
    }

    /// Publishes which ways are in use (call inside a write).
    fn publish_live(&self, ways: &Ways<T, W>) {
        let live = (0..W)
            .filter(|&i| ways.live[i])
            .fold(0u64, |m, i| m | (1 << i));
        self.live.store(live, Ordering::Relaxed);
    }

    /// Inserts `entry`, replacing the entry with its key if there is one, else taking a free
    /// way, else evicting one. Returns the entry evicted (whose mappings must go: its removal
    /// is already counted) and the removal counter after the insert.
    pub fn insert(&self, entry: T) -> (Option<T>, u64) {
        self.upsert(entry, |_, new| Upsert::Put(*new))
    }

    /// Inserts `entry`; when the set already holds an entry with its key, `decide(old, new)`
    /// says, under the writers' lock, what the way holds afterwards (see [`Upsert`]). Returns
    /// the entry that left the set (evicted, or displaced: its mappings must go, its removal
    /// is already counted) and the removal counter after the write.
    pub fn upsert(&self, entry: T, decide: impl FnOnce(&T, &T) -> Upsert<T>) -> (Option<T>, u64) {
        let key = entry.key();
        let mut ways = self.writer.lock();
        let (slot, value, gone) = match ways.find::<H>(&key) {
            Some(i) => match decide(&ways.ways[i], &entry) {
                Upsert::Put(v) => (i, v, None),
                Upsert::Displace => (i, entry, Some(ways.ways[i])),
                Upsert::Keep => return (None, self.removals.load(Ordering::Relaxed)),
            },
            None => match ways.live.iter().position(|l| !l) {
                Some(i) => (i, entry, None),
                None => {
                    let i = usize::from(ways.victim) % W;
                    ways.victim = ways.victim.wrapping_add(1);
                    (i, entry, Some(ways.ways[i]))
                }
            },
        };
        let new = value.hot();
        let was_live = ways.live[slot];
        let old = was_live.then(|| ways.ways[slot].hot());
        ways.ways[slot] = value;
        ways.live[slot] = true;
        self.seq.write(|| {
            if gone.is_some() {
                self.removals.fetch_add(1, Ordering::Relaxed);
            }
            self.publish_way(slot, old.as_ref(), &new);
            if !was_live {
                self.publish_live(&ways);
            }
        });
        (gone, self.removals.load(Ordering::Relaxed))
    }

    /// Visits every entry under the writers' lock: `sweep` says what to do with each (and
    /// may re-stamp it, saying so). Publishes the result in one write (storing only the stamp
    /// words that changed; no write at all when nothing did), releases the lock, and only then
    /// calls `removed` for each entry removed, so it may call out (unmap).
    pub fn retain(&self, mut sweep: impl FnMut(&mut T) -> Retain, mut removed: impl FnMut(T)) {
        let mut gone: [Option<T>; W] = [None; W];
        {
            let mut guard = self.writer.lock();
            let ways = &mut *guard;
            let mut what = [Retain::Keep; W];
            for (i, what) in what.iter_mut().enumerate() {
                if ways.live[i] {
                    *what = sweep(&mut ways.ways[i]);
                }
            }
            if what.iter().all(|w| *w == Retain::Keep) {
                return;
            }
            let mut any_removed = false;
            let mut any_narrowed = false;
            for (i, (what, gone)) in what.iter().zip(&mut gone).enumerate() {
                if *what == Retain::Remove {
                    ways.live[i] = false;
                    *gone = Some(ways.ways[i]);
                    any_removed = true;
                }
                any_narrowed |= *what == Retain::Narrowed;
            }
            self.seq.write(|| {
                for (i, what) in what.iter().enumerate() {
                    if *what == Retain::Restamped
                        && let Some(w) = self.mirror.get(i).and_then(|m| m.get(T::STAMP_WORD))
                    {
                        w.store(ways.ways[i].stamp_word(), Ordering::Relaxed);
                    }
                    if *what == Retain::Narrowed {
                        self.publish_way(i, None, &ways.ways[i].hot());
                    }
                }
                if any_narrowed && !any_removed {
                    self.removals.fetch_add(1, Ordering::Relaxed);
                }
                if any_removed {
                    self.removals.fetch_add(1, Ordering::Relaxed);
                    self.publish_live(ways);
                }
            });
        }
        for r in gone.into_iter().flatten() {
            removed(r);
        }
    }

    /// The removal counter now (a ticket is current while this equals the one it holds).
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Counts a lookup that served (the caller counts it once it is sure the answer is used).
    /// A statistic: a plain increment, which may lose counts when CPUs hit the same set at
    /// once, rather than a locked one on every hit.
    #[inline]
    pub fn count_hit(&self) {
        self.hits.0.store(
            self.hits.0.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }

    /// Hits counted so far ([`SeqSet::count_hit`]). When several
    /// CPUs hit the same set at the same moment a few counts may be lost.
    pub fn hits(&self) -> u64 {
        self.hits.0.load(Ordering::Relaxed)
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.writer.lock().live.iter().filter(|l| **l).count()
    }

    /// Whether no entry is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Mirrored<H>, const W: usize, const H: usize> Default for SeqSet<T, W, H> {
    fn default() -> Self {
        Self::new()
    }
}
