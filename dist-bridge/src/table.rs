//! The guard table: a bounded array of versioned entries, the guard derivation tree, batched
//! reuse and version-range upgrade. Pure bookkeeping, no cryptography: [`Owner`](crate::Owner)
//! wraps it.
//!
//! # Versions and batches
//!
//! The table keeps one guard-version counter, the *epoch*. A new guard takes the entry's index
//! and the current epoch as its version. Revoking a guard frees its entry (and its
//! descendants') into a *pending batch*; pending entries cannot be allocated. When the batch
//! holds [`GuardTableConfig::batch_size`] entries (or when an allocation finds no free entry
//! while some are pending), the batch is *flushed*: the epoch is incremented once and the
//! entries go to the free list. So one counter increment pays for a whole batch of releases,
//! and every entry's next life has a strictly higher version than any life before: it was
//! live at a version ≤ the old epoch, and is reused at a version ≥ the new one.
//!
//! A token names `(index, version)`; it is accepted only while the entry is live at exactly
//! that version ([`GuardTable::lookup`]).
//!
//! # Version ranges and upgrade
//!
//! Versions live in `1..=max_version` ([`GuardTableConfig::max_version`]; `0` is never
//! issued), split into [`GuardTableConfig::ranges`] equal ranges used as a ring. The epoch
//! walks through the *active* range; when it passes the range's end it moves to the start of
//! the next range, which is *opened*: its **generation** is incremented, and
//! [`Owner`](crate::Owner) derives the key of the tokens whose versions lie in that range from
//! the range and its generation. A token minted in an earlier generation of a range therefore
//! never verifies again, even when its guard version comes round again on the same entry.
//!
//! Right after opening range `r`, the table makes sure that range `r + 1` (the oldest one, next
//! in line to be opened) holds no live guard: every live guard whose version lies in it is
//! **upgraded** to the current epoch, in range `r` (the youngest). Each upgrade is recorded as
//! a [`VersionChange`] `(index, old, new)`: the owner publishes them
//! ([`Owner::drain_upgrades`](crate::Owner::drain_upgrades)) and a holder of a token at the old
//! version exchanges it for one at the new version with
//! [`Owner::renew`](crate::Owner::renew). The records stay valid until range `r + 1` is opened
//! again, a whole range of epochs later (that is the renew window); then they are dropped
//! together with the range's old generation, and tokens that were not renewed are dead.
//! Upgrades therefore cost nothing on the invocation path and happen once per range of
//! epochs, as in the paper (which broadcasts the changes to the controllers instead).
//!
//! With a tiny version space (`max_version = 16`, 4 ranges, batches of 1) this cycles every
//! few revocations, which is how the tests exercise it.
//!
//! # Guard derivation tree
//!
//! A guard may have a parent ([`GuardInfo::parent`]); the table keeps each live guard's
//! children. [`GuardTable::revoke`] frees a guard and all of its descendants. A child is
//! always freed before or with its parent, so a live guard's parent is always live.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use twizzler_capsec::{ObjID, RecordId};

use crate::token::{GuardRef, Scope};

/// The shape of a guard table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardTableConfig {
    /// Number of entries: at most this many live guards at once.
    pub capacity: u32,
    /// Freed entries per batch: the epoch is bumped once per batch.
    pub batch_size: u32,
    /// The largest guard version (versions are `1..=max_version`).
    pub max_version: u64,
    /// Number of version ranges (at least 2).
    pub ranges: u32,
    /// Guards the holders of one exported guard may derive from it, in all generations
    /// together: no single token can fill the table (0 forbids deriving).
    pub max_derived: u32,
}

impl Default for GuardTableConfig {
    /// 8192 entries (as in the paper), batches of 64, the full `u64` version space in 16
    /// ranges, and 64 derived guards per exported guard.
    fn default() -> Self {
        Self {
            capacity: 8192,
            batch_size: 64,
            max_version: u64::MAX,
            ranges: 16,
            max_derived: 64,
        }
    }
}

/// Why a [`GuardTableConfig`] is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `capacity` is 0.
    ZeroCapacity,
    /// `batch_size` is 0.
    ZeroBatch,
    /// Fewer than two version ranges.
    TooFewRanges(u32),
    /// `max_version` is smaller than `ranges`: some range would be empty.
    VersionSpaceTooSmall {
        /// The configured largest version.
        max_version: u64,
        /// The configured number of ranges.
        ranges: u32,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCapacity => f.write_str("guard table capacity must be at least 1"),
            Self::ZeroBatch => f.write_str("guard table batch size must be at least 1"),
            Self::TooFewRanges(n) => {
                write!(f, "guard version space needs at least 2 ranges, not {n}")
            }
            Self::VersionSpaceTooSmall {
                max_version,
                ranges,
            } => write!(
                f,
                "guard version space 1..={max_version} cannot be split into {ranges} ranges"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What a live guard is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardInfo {
    /// The object it grants access to.
    pub object: ObjID,
    /// What it allows.
    pub scope: Scope,
    /// Its parent in the guard derivation tree (an index; the parent is live while this is).
    pub parent: Option<u32>,
    /// The capability it was exported from (root guards only).
    pub source: Option<RecordId>,
    /// The key object (`kuid`) whose key verified that capability, when the key source knew
    /// it (root guards only): revoking that key revokes the guard.
    pub key: Option<ObjID>,
    /// The security context it was exported for (a derived guard: its root's), so that the
    /// owner can decide the flow rule for it (`docs/DIFC.md` §5.9) whatever the token's
    /// format.
    pub context: Option<ObjID>,
}

/// One guard's version change in a range upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionChange {
    /// The entry.
    pub index: u32,
    /// Its version before.
    pub old: u64,
    /// Its version now.
    pub new: u64,
}

/// Why a `(index, version)` names no live guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupError {
    /// The index is outside the table.
    NoSuchGuard {
        /// The index.
        index: u32,
        /// The table's capacity.
        capacity: u32,
    },
    /// The entry is not live: its guard was revoked (or never existed).
    Revoked {
        /// The reference.
        guard: GuardRef,
    },
    /// The entry is live, but in a later life than the reference's.
    Stale {
        /// The reference.
        guard: GuardRef,
        /// The entry's current version.
        current: u64,
    },
    /// The guard is live but was upgraded to a new version; the reference can be renewed.
    Upgraded {
        /// The reference (old version).
        guard: GuardRef,
        /// The new version.
        new: u64,
    },
}

/// The table was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull {
    /// The table's capacity.
    pub capacity: u32,
}

/// Counters for monitoring and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Entries.
    pub capacity: u32,
    /// Live guards.
    pub live: u32,
    /// Freed entries waiting for their batch.
    pub pending: u32,
    /// Entries ready for reuse.
    pub free: u32,
    /// The current guard-version counter.
    pub epoch: u64,
    /// The range the epoch is in.
    pub active_range: u32,
    /// Batches flushed (epoch increments) so far.
    pub batches_flushed: u64,
    /// Times the epoch moved to the next range.
    pub range_advances: u64,
    /// Guards re-versioned by range upgrades so far.
    pub guards_upgraded: u64,
    /// Guards revoked so far (including descendants).
    pub guards_revoked: u64,
}

#[derive(Debug)]
enum Slot {
    Free,
    Pending,
    Live { info: GuardInfo, children: Vec<u32> },
}

#[derive(Debug)]
struct Entry {
    version: u64,
    slot: Slot,
}

#[derive(Clone, Copy, Debug, Default)]
struct RangeState {
    generation: u64,
    live: u64,
}

/// A bounded table of versioned guard entries (see the [module docs](self)).
#[derive(Debug)]
pub struct GuardTable {
    config: GuardTableConfig,
    range_size: u64,
    entries: Vec<Entry>,
    free: VecDeque<u32>,
    pending: Vec<u32>,
    epoch: u64,
    active: u32,
    ranges: Vec<RangeState>,
    upgrades: HashMap<(u32, u64), u64>,
    changes: Vec<VersionChange>,
    stats: TableStats,
}

impl GuardTable {
    /// An empty table: every entry free, the epoch at version 1 in range 0 (generation 1).
    pub fn new(config: GuardTableConfig) -> Result<Self, ConfigError> {
        if config.capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if config.batch_size == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if config.ranges < 2 {
            return Err(ConfigError::TooFewRanges(config.ranges));
        }
        let range_size = config.max_version / u64::from(config.ranges);
        if range_size == 0 {
            return Err(ConfigError::VersionSpaceTooSmall {
                max_version: config.max_version,
                ranges: config.ranges,
            });
        }
        let entries = (0..config.capacity)
            .map(|_| Entry {
                version: 0,
                slot: Slot::Free,
            })
            .collect();
        let mut ranges = vec![RangeState::default(); config.ranges as usize];
        if let Some(first) = ranges.first_mut() {
            first.generation = 1;
        }
        Ok(Self {
            config,
            range_size,
            entries,
            free: (0..config.capacity).collect(),
            pending: Vec::new(),
            epoch: 1,
            active: 0,
            ranges,
            upgrades: HashMap::new(),
            changes: Vec::new(),
            stats: TableStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GuardTableConfig {
        &self.config
    }

    /// The range `version` lies in, if it is a version this table can issue.
    pub fn range_of(&self, version: u64) -> Option<u32> {
        let r = version.checked_sub(1)? / self.range_size;
        u32::try_from(r).ok().filter(|&r| r < self.config.ranges)
    }

    /// The current generation of range `range` (0 if it was never opened).
    pub fn generation(&self, range: u32) -> u64 {
        self.ranges.get(range as usize).map_or(0, |r| r.generation)
    }

    /// Number of ranges.
    pub fn range_count(&self) -> u32 {
        self.config.ranges
    }

    fn range_start(&self, range: u32) -> u64 {
        u64::from(range) * self.range_size + 1
    }

    fn range_end(&self, range: u32) -> u64 {
        (u64::from(range) + 1) * self.range_size
    }

    fn range_mut(&mut self, version: u64) -> Option<&mut RangeState> {
        let r = self.range_of(version)?;
        self.ranges.get_mut(r as usize)
    }

    /// Creates a live guard, returns its reference. Fails when every entry is live or, with a
    /// parent, when the parent is not live.
    pub fn insert(&mut self, info: GuardInfo) -> Result<GuardRef, InsertError> {
        if let Some(p) = info.parent
            && !matches!(
                self.entries.get(p as usize),
                Some(Entry {
                    slot: Slot::Live { .. },
                    ..
                })
            )
        {
            return Err(InsertError::ParentNotLive(p));
        }
        if self.free.is_empty() && !self.pending.is_empty() {
            self.flush();
        }
        let Some(index) = self.free.pop_front() else {
            return Err(InsertError::Full(TableFull {
                capacity: self.config.capacity,
            }));
        };
        let version = self.epoch;
        if let Some(entry) = self.entries.get_mut(index as usize) {
            entry.version = version;
            entry.slot = Slot::Live {
                info,
                children: Vec::new(),
            };
        }
        if let Some(r) = self.range_mut(version) {
            r.live += 1;
        }
        if let Some(p) = info.parent
            && let Some(Entry {
                slot: Slot::Live { children, .. },
                ..
            }) = self.entries.get_mut(p as usize)
        {
            children.push(index);
        }
        self.stats.live += 1;
        Ok(GuardRef { index, version })
    }

    /// The live guard `guard` names, or why there is none.
    pub fn lookup(&self, guard: GuardRef) -> Result<&GuardInfo, LookupError> {
        let Some(entry) = self.entries.get(guard.index as usize) else {
            return Err(LookupError::NoSuchGuard {
                index: guard.index,
                capacity: self.config.capacity,
            });
        };
        match &entry.slot {
            Slot::Live { info, .. } if entry.version == guard.version => Ok(info),
            Slot::Live { .. } => match self.upgraded_to(guard) {
                Some(new) => Err(LookupError::Upgraded { guard, new }),
                None => Err(LookupError::Stale {
                    guard,
                    current: entry.version,
                }),
            },
            Slot::Free | Slot::Pending => Err(LookupError::Revoked { guard }),
        }
    }

    /// If `guard` was upgraded and the guard is still live at the new version: the new
    /// version.
    pub fn upgraded_to(&self, guard: GuardRef) -> Option<u64> {
        let new = *self.upgrades.get(&(guard.index, guard.version))?;
        match self.entries.get(guard.index as usize) {
            Some(Entry {
                version,
                slot: Slot::Live { .. },
            }) if *version == new => Some(new),
            _ => None,
        }
    }

    /// How many guards were derived, directly or not, from the exported guard at the root of
    /// live guard `index`'s derivation tree, counting at most `limit`. The walk is bounded by
    /// `limit` (and the table's capacity), whatever the tree.
    pub fn derived_in_tree(&self, index: u32, limit: u32) -> u32 {
        let parent = |i: u32| match self.entries.get(i as usize) {
            Some(Entry {
                slot: Slot::Live { info, .. },
                ..
            }) => info.parent,
            _ => None,
        };
        // Up to the root (a parent is live while its children are; the bound guards against
        // a cycle, which insert cannot make).
        let mut root = index;
        for _ in 0..self.config.capacity {
            match parent(root) {
                Some(p) => root = p,
                None => break,
            }
        }
        // Down, counting, until `limit`.
        let mut count = 0;
        let mut stack: Vec<u32> = self.children(root).to_vec();
        while let Some(i) = stack.pop() {
            count += 1;
            if count >= limit {
                return limit;
            }
            stack.extend_from_slice(self.children(i));
        }
        count
    }

    /// The children of a live guard.
    pub fn children(&self, index: u32) -> &[u32] {
        match self.entries.get(index as usize) {
            Some(Entry {
                slot: Slot::Live { children, .. },
                ..
            }) => children,
            _ => &[],
        }
    }

    /// The indices of the live guards that satisfy `pred`.
    pub fn live_matching(&self, mut pred: impl FnMut(&GuardInfo) -> bool) -> Vec<u32> {
        self.entries
            .iter()
            .zip(0u32..)
            .filter_map(|(e, i)| match &e.slot {
                Slot::Live { info, .. } if pred(info) => Some(i),
                _ => None,
            })
            .collect()
    }

    /// Revokes the live guard at `index` and all its descendants: their entries go to the
    /// pending batch (flushed when full). Returns how many guards were revoked (0 if the entry
    /// was not live).
    pub fn revoke(&mut self, index: u32) -> u32 {
        let parent = match self.entries.get(index as usize) {
            Some(Entry {
                slot: Slot::Live { info, .. },
                ..
            }) => info.parent,
            _ => return 0,
        };
        if let Some(p) = parent
            && let Some(Entry {
                slot: Slot::Live { children, .. },
                ..
            }) = self.entries.get_mut(p as usize)
        {
            children.retain(|&c| c != index);
        }
        let mut stack = vec![index];
        let mut count = 0u32;
        while let Some(i) = stack.pop() {
            let Some(entry) = self.entries.get_mut(i as usize) else {
                continue;
            };
            if !matches!(entry.slot, Slot::Live { .. }) {
                // Cannot happen in a consistent tree: children are freed with their parent.
                continue;
            }
            let Slot::Live { children, .. } = std::mem::replace(&mut entry.slot, Slot::Pending)
            else {
                continue;
            };
            let version = entry.version;
            stack.extend(children);
            if let Some(r) = self.range_mut(version) {
                r.live = r.live.saturating_sub(1);
            }
            self.pending.push(i);
            count += 1;
        }
        self.stats.live = self.stats.live.saturating_sub(count);
        self.stats.guards_revoked += u64::from(count);
        if self.pending.len() >= self.config.batch_size as usize {
            self.flush();
        }
        count
    }

    /// Flushes the pending batch now (bumps the epoch once, frees the entries), if any.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.advance_epoch();
        for i in self.pending.drain(..) {
            if let Some(e) = self.entries.get_mut(i as usize) {
                e.slot = Slot::Free;
            }
            self.free.push_back(i);
        }
        self.stats.batches_flushed += 1;
    }

    fn advance_epoch(&mut self) {
        if self.epoch < self.range_end(self.active) {
            self.epoch += 1;
            return;
        }
        let next = (self.active + 1) % self.config.ranges;
        // `next` holds no live guard, by construction: a guard's version only ever lies in the
        // active range (`insert` gives it the epoch, `upgrade_range` moves it to the epoch),
        // and `next` was emptied below when the range being left was opened (or, before its
        // first opening, never held a version). So its old generation's key, and the upgrade
        // records of versions in it, can go: no live guard's version needs them, and every
        // token still naming one is for a guard that was revoked, or upgraded and not renewed
        // in time. (The protocol model checks it: "a range is empty when it is opened".)
        debug_assert_eq!(self.ranges.get(next as usize).map(|r| r.live), Some(0));
        // Open `next`: a new generation (new token key), the old generation's upgrade records
        // die with it.
        if let Some(r) = self.ranges.get_mut(next as usize) {
            r.generation = r.generation.wrapping_add(1);
        }
        let (start, end) = (self.range_start(next), self.range_end(next));
        self.upgrades
            .retain(|&(_, old), _| !(start..=end).contains(&old));
        self.active = next;
        self.epoch = start;
        self.stats.range_advances += 1;
        // Empty the range that will be opened next, while it can still be renewed from.
        let after = (next + 1) % self.config.ranges;
        if after != next && self.ranges.get(after as usize).is_some_and(|r| r.live > 0) {
            self.upgrade_range(after);
        }
    }

    /// Moves every live guard of `range` to the current epoch and records the changes.
    fn upgrade_range(&mut self, range: u32) {
        let epoch = self.epoch;
        let mut moved = 0u64;
        for (entry, index) in self.entries.iter_mut().zip(0u32..) {
            if !matches!(entry.slot, Slot::Live { .. }) {
                continue;
            }
            let old = entry.version;
            let in_range = old
                .checked_sub(1)
                .map(|v| v / self.range_size)
                .is_some_and(|r| r == u64::from(range));
            if !in_range || old == epoch {
                continue;
            }
            entry.version = epoch;
            self.upgrades.insert((index, old), epoch);
            self.changes.push(VersionChange {
                index,
                old,
                new: epoch,
            });
            moved += 1;
        }
        if let Some(r) = self.ranges.get_mut(range as usize) {
            r.live = r.live.saturating_sub(moved);
        }
        if let Some(r) = self.range_mut(epoch) {
            r.live += moved;
        }
        self.stats.guards_upgraded += moved;
    }

    /// Takes the version changes recorded since the last call.
    pub fn drain_changes(&mut self) -> Vec<VersionChange> {
        std::mem::take(&mut self.changes)
    }

    /// Counters.
    pub fn stats(&self) -> TableStats {
        TableStats {
            capacity: self.config.capacity,
            pending: u32::try_from(self.pending.len()).unwrap_or(u32::MAX),
            free: u32::try_from(self.free.len()).unwrap_or(u32::MAX),
            epoch: self.epoch,
            active_range: self.active,
            ..self.stats
        }
    }
}

/// Why a guard could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InsertError {
    /// Every entry is live.
    Full(TableFull),
    /// The parent is not a live guard.
    ParentNotLive(u32),
}

#[cfg(test)]
mod tests {
    use twizzler_capsec::Expiry;

    use super::*;
    use crate::rights::{ByteRange, Rights};

    fn info(parent: Option<u32>) -> GuardInfo {
        GuardInfo {
            object: ObjID::new(1),
            scope: Scope::new(Rights::all(), ByteRange::WHOLE, Expiry::NEVER),
            parent,
            source: None,
            key: None,
            context: None,
        }
    }

    fn table(capacity: u32, batch: u32, max_version: u64, ranges: u32) -> GuardTable {
        GuardTable::new(GuardTableConfig {
            capacity,
            batch_size: batch,
            max_version,
            ranges,
            ..GuardTableConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn config_is_validated() {
        let ok = GuardTableConfig::default();
        assert!(GuardTable::new(ok).is_ok());
        let bad = |f: fn(&mut GuardTableConfig)| {
            let mut c = ok;
            f(&mut c);
            GuardTable::new(c).unwrap_err()
        };
        assert_eq!(bad(|c| c.capacity = 0), ConfigError::ZeroCapacity);
        assert_eq!(bad(|c| c.batch_size = 0), ConfigError::ZeroBatch);
        assert_eq!(bad(|c| c.ranges = 1), ConfigError::TooFewRanges(1));
        assert!(matches!(
            bad(|c| c.max_version = 3),
            ConfigError::VersionSpaceTooSmall { .. }
        ));
    }

    #[test]
    fn bounded_and_batched() {
        let mut t = table(4, 2, u64::MAX, 4);
        let refs: Vec<_> = (0..4).map(|_| t.insert(info(None)).unwrap()).collect();
        assert_eq!(
            t.insert(info(None)),
            Err(InsertError::Full(TableFull { capacity: 4 }))
        );
        assert_eq!(t.stats().epoch, 1);
        // One release: pending, not reusable yet, epoch unchanged...
        assert_eq!(t.revoke(refs[0].index), 1);
        assert_eq!(t.stats().pending, 1);
        assert_eq!(t.stats().epoch, 1);
        assert_eq!(
            t.lookup(refs[0]),
            Err(LookupError::Revoked { guard: refs[0] })
        );
        // ...the second fills the batch: one epoch increment for both.
        t.revoke(refs[1].index);
        let s = t.stats();
        assert_eq!(
            (s.pending, s.free, s.epoch, s.batches_flushed),
            (0, 2, 2, 1)
        );
        let again = t.insert(info(None)).unwrap();
        assert_eq!(
            again,
            GuardRef {
                index: refs[0].index,
                version: 2
            }
        );
        assert!(matches!(
            t.lookup(refs[0]),
            Err(LookupError::Stale { current: 2, .. })
        ));
        assert!(t.lookup(again).is_ok());
    }

    #[test]
    fn full_table_flushes_a_partial_batch() {
        let mut t = table(2, 8, u64::MAX, 4);
        let a = t.insert(info(None)).unwrap();
        t.insert(info(None)).unwrap();
        t.revoke(a.index);
        let b = t.insert(info(None)).unwrap();
        assert_eq!(b.index, a.index);
        assert!(b.version > a.version);
    }

    #[test]
    fn revoking_a_guard_revokes_its_subtree() {
        let mut t = table(8, 100, u64::MAX, 4);
        let root = t.insert(info(None)).unwrap();
        let c1 = t.insert(info(Some(root.index))).unwrap();
        let c2 = t.insert(info(Some(root.index))).unwrap();
        let g = t.insert(info(Some(c1.index))).unwrap();
        let other = t.insert(info(None)).unwrap();
        assert_eq!(t.children(root.index), &[c1.index, c2.index]);
        // Revoking a child detaches it from its parent only.
        assert_eq!(t.revoke(c2.index), 1);
        assert_eq!(t.children(root.index), &[c1.index]);
        assert!(t.lookup(root).is_ok());
        assert_eq!(t.revoke(root.index), 3);
        for r in [root, c1, c2, g] {
            assert!(matches!(t.lookup(r), Err(LookupError::Revoked { .. })));
        }
        assert!(t.lookup(other).is_ok());
        assert_eq!(t.stats().live, 1);
        assert_eq!(
            t.insert(info(Some(root.index))),
            Err(InsertError::ParentNotLive(root.index))
        );
    }

    /// The invariant `advance_epoch` relies on (issue 25): the range after the active one,
    /// the next to be opened, never holds a live guard, whatever mix of long-lived guards,
    /// derived guards, revocations and full-table flushes.
    #[test]
    fn the_range_opened_next_is_always_empty() {
        for (capacity, batch, max_version, ranges) in [(4, 1, 16, 4), (3, 2, 6, 2), (5, 1, 9, 3)] {
            let mut t = table(capacity, batch, max_version, ranges);
            let mut live: Vec<u32> = Vec::new();
            for step in 0u32..2000 {
                let next = (t.active + 1) % t.config.ranges;
                assert_eq!(t.ranges[next as usize].live, 0, "step {step}");
                let parent = live
                    .get(step as usize % 3)
                    .copied()
                    .filter(|_| step % 5 == 0);
                match t.insert(info(parent)) {
                    Ok(g) => live.push(g.index),
                    Err(_) => {
                        // Revoke one, keeping the oldest guard alive throughout.
                        if live.len() > 1 {
                            let victim = live.remove(1 + step as usize % (live.len() - 1));
                            t.revoke(victim);
                            live.retain(|&i| is_live(&t, i));
                        }
                    }
                }
            }
            assert!(t.stats().range_advances > 20);
        }
    }

    fn is_live(t: &GuardTable, i: u32) -> bool {
        matches!(t.entries[i as usize].slot, Slot::Live { .. })
    }

    #[test]
    fn ranges_cycle_and_upgrade() {
        // Versions 1..=16 in 4 ranges of 4; every revocation flushes.
        let mut t = table(4, 1, 16, 4);
        let keeper = t.insert(info(None)).unwrap();
        assert_eq!(keeper.version, 1);
        let mut current = keeper;
        let mut renewals = 0;
        for _ in 0..200 {
            let g = t.insert(info(None)).unwrap();
            assert!(t.range_of(g.version).is_some());
            t.revoke(g.index);
            for ch in t.drain_changes() {
                if ch.index == keeper.index {
                    assert_eq!(ch.old, current.version);
                    assert_eq!(t.upgraded_to(current), Some(ch.new));
                    assert!(matches!(
                        t.lookup(current),
                        Err(LookupError::Upgraded { .. })
                    ));
                    current.version = ch.new;
                    renewals += 1;
                }
            }
            assert!(t.lookup(current).is_ok(), "the kept guard stays reachable");
        }
        assert!(renewals > 5);
        assert!(t.stats().range_advances > 10);
        // Each range's generation grew as it was reopened.
        assert!((0..4).all(|r| t.generation(r) > 2));
    }
}
