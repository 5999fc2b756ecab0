//! [`RecordMemo`]: the signature checks that already succeeded.
//!
//! Keyed by the check's id: [`twizzler_capsec::cap_check_id`] for a capability (a hash of the
//! verifying key and the capability's record id, which hashes its body and signature), and
//! [`twizzler_capsec::signature_check_id`] for a delegation's signatures (a hash of the key,
//! the signed message and the signature), so a record that is still present after its context was edited
//! (or a cache entry was evicted, or a revocation swept it) skips signature verification, and
//! no earlier success can vouch for a check under another key (an object whose `kuid` now
//! names a different key object, or a key object rewritten). Expiry, binding, attenuation,
//! revocation and key lookups are still done on every use.

use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;
use twizzler_capsec::RecordId;

/// Number of sets.
const SETS: usize = 256;
/// Ids per set.
const WAYS: usize = 4;

struct Set {
    /// The memo's generation these ids belong to: the set holds none of the current
    /// generation's unless it equals [`RecordMemo::generation`].
    generation: u64,
    ids: [Option<RecordId>; WAYS],
    victim: u8,
}

impl Set {
    /// The ids of generation `now`: the set's, or none if they are of an earlier one.
    fn current(&mut self, now: u64) -> &mut [Option<RecordId>; WAYS] {
        if self.generation != now {
            self.generation = now;
            self.ids = [None; WAYS];
            self.victim = 0;
        }
        &mut self.ids
    }
}

/// A bounded, set-associative set of successful signature-check ids.
///
/// [`RecordMemo::clear`] moves a generation counter rather than visiting the sets (a flush
/// of the engine pays one atomic add, not 256 locks and 34 KB of writes); a set forgets its
/// ids the next time it is used under a later generation.
pub struct RecordMemo {
    generation: AtomicU64,
    sets: [Mutex<Set>; SETS],
}

impl Default for RecordMemo {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordMemo {
    /// An empty memo.
    pub const fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            sets: [const {
                Mutex::new(Set {
                    generation: 0,
                    ids: [None; WAYS],
                    victim: 0,
                })
            }; SETS],
        }
    }

    fn set(&self, id: &RecordId) -> &Mutex<Set> {
        // The id is a cryptographic hash: any of its bytes is a good index.
        &self.sets[usize::from(id.0[0])]
    }

    /// The current generation (read under a set's lock: a `clear` that returned before the
    /// lock was taken is seen).
    fn now(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether `id` was remembered (and not displaced or cleared since).
    pub fn contains(&self, id: &RecordId) -> bool {
        let mut set = self.set(id).lock();
        let now = self.now();
        set.current(now).contains(&Some(*id))
    }

    /// Forgets every id: none remembered before this call is found after it.
    pub fn clear(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Remembers `id`, displacing the oldest id of its set when it is full.
    pub fn insert(&self, id: &RecordId) {
        let mut set = self.set(id).lock();
        let now = self.now();
        let set = &mut *set;
        if set.current(now).contains(&Some(*id)) {
            return;
        }
        let slot = match set.ids.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                let i = usize::from(set.victim) % WAYS;
                set.victim = set.victim.wrapping_add(1);
                i
            }
        };
        set.ids[slot] = Some(*id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id whose first byte (the set's index) is `set`, told apart by `n`.
    fn id(set: u8, n: u8) -> RecordId {
        let mut b = [n; 32];
        b[0] = set;
        RecordId(b)
    }

    #[test]
    fn clear_forgets_every_id_and_later_inserts_are_kept() {
        let memo = RecordMemo::new();
        let (a, b, c) = (id(3, 1), id(3, 2), id(200, 1));
        memo.insert(&a);
        memo.insert(&c);
        assert!(memo.contains(&a) && memo.contains(&c) && !memo.contains(&b));
        memo.clear();
        assert!(!memo.contains(&a) && !memo.contains(&c));
        // Nothing of the old generation comes back when its set is written again.
        memo.insert(&b);
        assert!(memo.contains(&b) && !memo.contains(&a));
        // Twice, with nothing between: still empty, and usable.
        memo.clear();
        memo.clear();
        assert!(!memo.contains(&b));
        memo.insert(&a);
        assert!(memo.contains(&a));
    }

    #[test]
    fn a_full_set_displaces_its_oldest_id_in_every_generation() {
        let memo = RecordMemo::new();
        for round in 0..3u8 {
            let ids: [RecordId; WAYS + 1] = core::array::from_fn(|n| id(7, n as u8 + 10 * round));
            for i in &ids {
                memo.insert(i);
            }
            // WAYS + 1 inserts into one set: the first is gone, the others are there.
            assert!(!memo.contains(&ids[0]), "round {round}");
            assert!(ids[1..].iter().all(|i| memo.contains(i)), "round {round}");
            memo.clear();
            assert!(ids.iter().all(|i| !memo.contains(i)), "round {round}");
        }
    }
}
