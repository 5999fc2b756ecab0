//! The guard table: a model of `GuardTable` (`dist-bridge/src/table.rs`), method by method,
//! with versions, indices and generations as small integers. Each method names the function
//! it stands for; only what the protocol's safety depends on is kept (no statistics, no
//! upgrade notices: `Owner::renew` reads the upgrade records, which are modelled).

use std::collections::{BTreeMap, VecDeque};

use crate::Mutation;

/// `GuardTableConfig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// `capacity`: entries.
    pub capacity: u8,
    /// `batch_size`: freed entries per epoch increment.
    pub batch_size: u8,
    /// `max_version`: versions are `1..=max_version`.
    pub max_version: u8,
    /// `ranges`: version ranges (at least 2).
    pub ranges: u8,
    /// `max_derived`: derived guards per exported guard.
    pub max_derived: u8,
}

impl Shape {
    fn range_size(&self) -> u8 {
        self.max_version / self.ranges
    }

    /// `GuardTable::range_of`.
    pub fn range_of(&self, version: u8) -> Option<u8> {
        let r = version.checked_sub(1)? / self.range_size();
        (r < self.ranges).then_some(r)
    }

    fn range_start(&self, r: u8) -> u8 {
        r * self.range_size() + 1
    }

    fn range_end(&self, r: u8) -> u8 {
        (r + 1) * self.range_size()
    }
}

/// `GuardInfo`, plus a ghost serial number naming the guard (never reused), which the
/// properties use to tell guards apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GuardInfo {
    /// `object` (object `i` is the target of capability `i`, signed by key `i`).
    pub object: u8,
    /// `parent`.
    pub parent: Option<u8>,
    /// `source`: the capability it was exported from (root guards).
    pub source: Option<u8>,
    /// `key`: the key that verified that capability (root guards).
    pub key: Option<u8>,
    /// Ghost: which guard this is.
    pub serial: u8,
}

/// `Slot`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Ready for reuse.
    Free,
    /// Freed, waiting for its batch.
    Pending,
    /// A live guard and its children.
    Live {
        /// The guard.
        info: GuardInfo,
        /// Its children's indices.
        children: Vec<u8>,
    },
}

/// `Entry`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The version of its current (or last) life.
    pub version: u8,
    /// What it holds.
    pub slot: Slot,
}

/// `LookupError` (no `NoSuchGuard`: tokens only name indices the table has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// The entry is not live.
    Revoked,
    /// Live in a later life.
    Stale,
    /// Upgraded to this version.
    Upgraded(u8),
}

/// `InsertError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// Every entry is live.
    Full,
    /// The parent is not live.
    ParentNotLive,
}

/// `GuardTable`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Table {
    /// `entries`.
    pub entries: Vec<Entry>,
    free: VecDeque<u8>,
    pending: Vec<u8>,
    /// `epoch`: the version the next guard gets.
    pub epoch: u8,
    active: u8,
    /// Each range's generation (`RangeState::generation`).
    pub generations: Vec<u8>,
    live: Vec<u8>,
    upgrades: BTreeMap<(u8, u8), u8>,
    /// Ghost: a range was opened while a live guard's version lay in it.
    /// `GuardTable::advance_epoch` relies on that never happening (issue 25).
    pub opened_nonempty: bool,
}

impl Table {
    /// `GuardTable::new`: every entry free, epoch 1 in range 0, generation 1.
    pub fn new(shape: &Shape) -> Self {
        let mut generations = vec![0; usize::from(shape.ranges)];
        generations[0] = 1;
        Self {
            entries: (0..shape.capacity)
                .map(|_| Entry {
                    version: 0,
                    slot: Slot::Free,
                })
                .collect(),
            free: (0..shape.capacity).collect(),
            pending: Vec::new(),
            epoch: 1,
            active: 0,
            generations,
            live: vec![0; usize::from(shape.ranges)],
            upgrades: BTreeMap::new(),
            opened_nonempty: false,
        }
    }

    fn is_live(&self, index: u8) -> bool {
        matches!(self.entries[usize::from(index)].slot, Slot::Live { .. })
    }

    /// The live guard at `index`, if any.
    pub fn live_guard(&self, index: u8) -> Option<(u8, &GuardInfo)> {
        let e = &self.entries[usize::from(index)];
        match &e.slot {
            Slot::Live { info, .. } => Some((e.version, info)),
            _ => None,
        }
    }

    /// The live guards, with their indices.
    pub fn live_guards(&self) -> impl Iterator<Item = (u8, &GuardInfo)> {
        (0u8..)
            .zip(&self.entries)
            .filter_map(|(i, e)| match &e.slot {
                Slot::Live { info, .. } => Some((i, info)),
                _ => None,
            })
    }

    /// `GuardTable::insert`.
    pub fn insert(
        &mut self,
        shape: &Shape,
        m: Option<Mutation>,
        info: GuardInfo,
    ) -> Result<(u8, u8), InsertError> {
        if let Some(p) = info.parent
            && !self.is_live(p)
        {
            return Err(InsertError::ParentNotLive);
        }
        if self.free.is_empty() && !self.pending.is_empty() {
            self.flush(shape, m);
        }
        let index = self.free.pop_front().ok_or(InsertError::Full)?;
        let version = self.epoch;
        self.entries[usize::from(index)] = Entry {
            version,
            slot: Slot::Live {
                info,
                children: Vec::new(),
            },
        };
        if let Some(r) = shape.range_of(version) {
            self.live[usize::from(r)] += 1;
        }
        if let Some(p) = info.parent
            && let Slot::Live { children, .. } = &mut self.entries[usize::from(p)].slot
        {
            children.push(index);
        }
        Ok((index, version))
    }

    /// `GuardTable::lookup`.
    pub fn lookup(&self, index: u8, version: u8) -> Result<GuardInfo, LookupError> {
        let e = &self.entries[usize::from(index)];
        match &e.slot {
            Slot::Live { info, .. } if e.version == version => Ok(*info),
            Slot::Live { .. } => match self.upgraded_to(index, version) {
                Some(new) => Err(LookupError::Upgraded(new)),
                None => Err(LookupError::Stale),
            },
            Slot::Free | Slot::Pending => Err(LookupError::Revoked),
        }
    }

    /// `GuardTable::upgraded_to`.
    fn upgraded_to(&self, index: u8, version: u8) -> Option<u8> {
        let new = *self.upgrades.get(&(index, version))?;
        let e = &self.entries[usize::from(index)];
        (matches!(e.slot, Slot::Live { .. }) && e.version == new).then_some(new)
    }

    /// `GuardTable::derived_in_tree`.
    pub fn derived_in_tree(&self, index: u8, limit: u8) -> u8 {
        let mut root = index;
        while let Some((_, info)) = self.live_guard(root)
            && let Some(p) = info.parent
        {
            root = p;
        }
        let mut count = 0;
        let mut stack = self.children(root);
        while let Some(i) = stack.pop() {
            count += 1;
            if count >= limit {
                return limit;
            }
            stack.extend(self.children(i));
        }
        count
    }

    /// Ghost: how many guards descend from `index` (uncapped, unlike `derived_in_tree`).
    pub fn descendants(&self, index: u8) -> usize {
        let mut stack = self.children(index);
        let mut count = 0;
        while let Some(i) = stack.pop() {
            count += 1;
            stack.extend(self.children(i));
        }
        count
    }

    fn children(&self, index: u8) -> Vec<u8> {
        match &self.entries[usize::from(index)].slot {
            Slot::Live { children, .. } => children.clone(),
            _ => Vec::new(),
        }
    }

    /// `GuardTable::revoke`: the guard and its descendants go to the pending batch. Returns
    /// the serials of the guards revoked.
    pub fn revoke(&mut self, shape: &Shape, m: Option<Mutation>, index: u8) -> Vec<u8> {
        let Some((_, info)) = self.live_guard(index) else {
            return Vec::new();
        };
        if let Some(p) = info.parent
            && let Slot::Live { children, .. } = &mut self.entries[usize::from(p)].slot
        {
            children.retain(|&c| c != index);
        }
        let mut stack = vec![index];
        let mut serials = Vec::new();
        while let Some(i) = stack.pop() {
            let e = &mut self.entries[usize::from(i)];
            let Slot::Live { info, children } = std::mem::replace(&mut e.slot, Slot::Pending)
            else {
                continue;
            };
            stack.extend(children);
            if let Some(r) = shape.range_of(e.version) {
                self.live[usize::from(r)] -= 1;
            }
            self.pending.push(i);
            serials.push(info.serial);
        }
        if self.pending.len() >= usize::from(shape.batch_size) {
            self.flush(shape, m);
        }
        serials
    }

    /// `GuardTable::flush`.
    fn flush(&mut self, shape: &Shape, m: Option<Mutation>) {
        if self.pending.is_empty() {
            return;
        }
        self.advance_epoch(shape, m);
        for i in std::mem::take(&mut self.pending) {
            self.entries[usize::from(i)].slot = Slot::Free;
            self.free.push_back(i);
        }
    }

    /// `GuardTable::advance_epoch`.
    fn advance_epoch(&mut self, shape: &Shape, m: Option<Mutation>) {
        if self.epoch < shape.range_end(self.active) {
            if m != Some(Mutation::NoEpochBump) {
                self.epoch += 1;
            }
            return;
        }
        let next = (self.active + 1) % shape.ranges;
        if self.live[usize::from(next)] > 0 {
            self.opened_nonempty = true;
        }
        if m != Some(Mutation::NoGenerationBump) {
            let g = &mut self.generations[usize::from(next)];
            *g = g.wrapping_add(1);
        }
        self.upgrades
            .retain(|&(_, old), _| shape.range_of(old) != Some(next));
        self.active = next;
        self.epoch = shape.range_start(next);
        let after = (next + 1) % shape.ranges;
        if after != next && self.live[usize::from(after)] > 0 {
            self.upgrade_range(shape, after);
        }
    }

    /// `GuardTable::upgrade_range`.
    fn upgrade_range(&mut self, shape: &Shape, range: u8) {
        let epoch = self.epoch;
        let mut moved = 0;
        for (index, e) in (0u8..).zip(self.entries.iter_mut()) {
            if !matches!(e.slot, Slot::Live { .. }) {
                continue;
            }
            let old = e.version;
            if shape.range_of(old) != Some(range) || old == epoch {
                continue;
            }
            e.version = epoch;
            self.upgrades.insert((index, old), epoch);
            moved += 1;
        }
        self.live[usize::from(range)] -= moved;
        if let Some(r) = shape.range_of(epoch) {
            self.live[usize::from(r)] += moved;
        }
    }
}
