//! The thread's last hit: a memo, kept in its [`SecCtxMgr`], of the cache entry that served
//! its last fault, so that a fault on the same object (the next page, usually) is decided
//! from words the fault path reads anyway, without finding the entry again.
//!
//! The memo holds what a hit served from an entry's summary word knows (see
//! [`SummaryHit`]): the rights a data access and a code access get on every page but the
//! null page, the entry's expiry, and, when the entry denied, the context's flags and the
//! words that explain the denial. It is keyed by the engine, the active context (the memo is
//! published with it, and cleared whenever it changes), the object, and the stamp the entry
//! was matched against (the engine's epoch, the object's `kuid` and default protections), and
//! it carries the ticket of the hit (the cache set and its removal counter).
//!
//! A memo serves a fault only if its key is the fault's, the engine's epoch is still the
//! memo's, the set's removal counter still the memo's, and the expiry not reached. Why that is
//! the hit it records, made again: the epoch moves with every revocation and invalidation and
//! never goes back, so an unchanged epoch means none began since the hit (which itself counted
//! only under an unchanged epoch); an unchanged removal counter means the entry has not left
//! its set (every removal and eviction counts); an entry that stays only gains grants by
//! merging (and a complete entry, the only kind that denies, gains none). So every check of
//! the hit is kept, the ticket is the one the hit would give, and every page mapped from the
//! memo is found by every later expiry, revocation and invalidation, as one mapped from the
//! entry.

use core::sync::atomic::{AtomicU64, Ordering};

use twizzler_capsec::{AccessKind, CtxFlags, Expiry, ObjID, Protections};

use crate::cache::{Explained, Stamp, SummaryHit};
use crate::ticket::{MapTicket, Ticket};

/// Words of the memo (see the layout below).
pub(crate) const LAST_HIT_WORDS: usize = 14;

// The layout: the engine's id (0: no memo), the object (two words), the `kuid` (two words),
const M_ENGINE: usize = 0;
const M_TARGET: usize = 1;
const M_KUID: usize = 3;
/// Default protections (bits 0-15), whether there is a `kuid` (16), the data rights (32-47)
/// and the code rights (48-63).
const M_SMALL: usize = 5;
const M_EPOCH: usize = 6;
const M_SET: usize = 7;
const M_REMOVALS: usize = 8;
const M_VALID_UNTIL: usize = 9;
/// The context's flags (bits 0-15), [`DENIED`], [`CODE`].
const M_DENY: usize = 10;
/// The words that explain the denial ([`Explained`]).
const M_EXPLAINED: usize = 11;

const KUID_SOME: u64 = 1 << 16;
/// The stamp's bits of [`M_SMALL`].
const STAMP_BITS: u64 = 0x1_ffff;
/// The entry denied an access of the kind [`CODE`] says, explained by the words.
const DENIED: u64 = 1 << 16;
/// The denial was of an instruction fetch (else of a load or store).
const CODE: u64 = 1 << 17;

/// Ids of engines, so that a memo made by one engine is never taken by another (one dropped
/// and another made at the same address included).
static NEXT_ENGINE: AtomicU64 = AtomicU64::new(1);

/// An engine's id, given the first time it is asked for (engines are `const`-constructed).
pub(super) fn engine_id(slot: &AtomicU64) -> u64 {
    let id = slot.load(Ordering::Relaxed);
    if id != 0 {
        return id;
    }
    let new = NEXT_ENGINE.fetch_add(1, Ordering::Relaxed);
    match slot.compare_exchange(0, new, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => new,
        Err(won) => won,
    }
}

fn id_words(id: ObjID) -> [u64; 2] {
    [id.raw() as u64, (id.raw() >> 64) as u64]
}

fn stamp_small(stamp: &Stamp) -> u64 {
    u64::from(stamp.default_prots.bits()) | if stamp.kuid.is_some() { KUID_SOME } else { 0 }
}

/// A denial as the memo keeps it: the kind of access, the context's flags, and what explains
/// it.
pub(super) struct MemoDenial {
    pub(super) code: bool,
    pub(super) flags: CtxFlags,
    pub(super) explained: Explained,
}

/// The memo of a hit by engine `engine` on `target`, matched against `stamp`, served from a
/// summary word (`hit`) with `ticket`; with the denial when the entry denied.
pub(super) fn encode(
    engine: u64,
    target: ObjID,
    stamp: &Stamp,
    hit: &SummaryHit,
    ticket: &MapTicket,
    denial: Option<&MemoDenial>,
) -> Option<[u64; LAST_HIT_WORDS]> {
    let Ticket::Entry { set, removals } = ticket.0 else {
        return None;
    };
    let mut m = [0u64; LAST_HIT_WORDS];
    let [t0, t1] = id_words(target);
    let [k0, k1] = id_words(stamp.kuid.unwrap_or(ObjID::new(0)));
    m[M_ENGINE] = engine;
    m[M_TARGET] = t0;
    m[M_TARGET + 1] = t1;
    m[M_KUID] = k0;
    m[M_KUID + 1] = k1;
    m[M_SMALL] = stamp_small(stamp)
        | (u64::from(hit.data.bits()) << 32)
        | (u64::from(hit.code.bits()) << 48);
    m[M_EPOCH] = stamp.epoch;
    m[M_SET] = u64::from(set);
    m[M_REMOVALS] = removals;
    m[M_VALID_UNTIL] = hit.valid_until.raw();
    if let Some(d) = denial {
        m[M_DENY] = u64::from(d.flags.bits()) | DENIED | if d.code { CODE } else { 0 };
        let [a, b, c] = d.explained.to_words();
        m[M_EXPLAINED] = a;
        m[M_EXPLAINED + 1] = b;
        m[M_EXPLAINED + 2] = c;
    }
    Some(m)
}

/// What a memo says about a fault, when its key and stamp are the fault's and it has not
/// expired at `now` (the caller then checks the removal counter, [`Memo::set`] and
/// [`Memo::removals`]).
pub(super) struct Memo {
    /// The set the hit was served from.
    pub(super) set: u64,
    /// Its removal counter then.
    pub(super) removals: u64,
    /// The rights the access gets.
    pub(super) provide: Protections,
    /// Until when.
    pub(super) valid_until: Expiry,
    /// The denial, if the entry denied an access of this kind.
    pub(super) denial: Option<(CtxFlags, Explained)>,
}

/// Reads memo `m` for a fault on `target` of `kind`, matched against `stamp` at `now`, by
/// engine `engine`.
#[inline]
pub(super) fn read(
    m: &[u64; LAST_HIT_WORDS],
    engine: u64,
    target: ObjID,
    stamp: &Stamp,
    now: u64,
    kind: AccessKind,
) -> Option<Memo> {
    let [t0, t1] = id_words(target);
    let [k0, k1] = id_words(stamp.kuid.unwrap_or(ObjID::new(0)));
    let small = m[M_SMALL];
    // One compare for the whole key and stamp.
    let differs = (m[M_ENGINE] ^ engine)
        | (m[M_TARGET] ^ t0)
        | (m[M_TARGET + 1] ^ t1)
        | (m[M_KUID] ^ k0)
        | (m[M_KUID + 1] ^ k1)
        | ((small ^ stamp_small(stamp)) & STAMP_BITS)
        | (m[M_EPOCH] ^ stamp.epoch);
    let valid_until = Expiry::from_raw(m[M_VALID_UNTIL]);
    if engine == 0 || differs != 0 || valid_until.is_expired(now) {
        return None;
    }
    let code = kind == AccessKind::Exec;
    let provide = Protections::from_bits_retain((small >> if code { 48 } else { 32 }) as u16);
    let deny = m[M_DENY];
    let denial = (deny & DENIED != 0 && (deny & CODE != 0) == code).then(|| {
        (
            CtxFlags::from_bits_retain(deny as u16),
            Explained::from_words([m[M_EXPLAINED], m[M_EXPLAINED + 1], m[M_EXPLAINED + 2]]),
        )
    });
    Some(Memo {
        set: m[M_SET],
        removals: m[M_REMOVALS],
        provide,
        valid_until,
        denial,
    })
}
