//! [`RecordMemo`]: the signature checks that already succeeded.
//!
//! Keyed by [`twizzler_capsec::signature_check_id`], a hash of the verifying key, the signed
//! message and the signature, so a record that is still present after its context was edited
//! (or a cache entry was evicted, or a revocation swept it) skips signature verification, and
//! no earlier success can vouch for a check under another key (an object whose `kuid` now
//! names a different key object, or a key object rewritten). Expiry, binding, attenuation,
//! revocation and key lookups are still done on every use.

use spin::Mutex;
use twizzler_capsec::RecordId;

/// Number of sets.
const SETS: usize = 256;
/// Ids per set.
const WAYS: usize = 4;

struct Set {
    ids: [Option<RecordId>; WAYS],
    victim: u8,
}

/// A bounded, set-associative set of successful signature-check ids.
pub struct RecordMemo {
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
            sets: [const {
                Mutex::new(Set {
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

    /// Whether `id` was remembered (and not displaced since).
    pub fn contains(&self, id: &RecordId) -> bool {
        self.set(id).lock().ids.contains(&Some(*id))
    }

    /// Forgets every id.
    pub fn clear(&self) {
        for set in &self.sets {
            set.lock().ids = [None; WAYS];
        }
    }

    /// Remembers `id`, displacing the oldest id of its set when it is full.
    pub fn insert(&self, id: &RecordId) {
        let mut set = self.set(id).lock();
        if set.ids.contains(&Some(*id)) {
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
