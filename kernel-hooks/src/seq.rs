//! [`Seq`]: the sequence counter of a seqlock, so that data can be read without a lock.
//!
//! Writers, serialized by a lock of their own, make the counter odd, store, and make it even
//! again. A reader notes an even counter, loads, and keeps what it loaded only if the counter
//! has not moved meanwhile. Every word read or written under a `Seq` is an atomic, loaded and
//! stored `Relaxed`: a reader racing a writer may load a mix of old and new words, which is
//! never undefined behaviour, and the counter tells it to drop the mix. The orderings are the
//! standard ones (H.-J. Boehm, "Can seqlocks get along with programming language memory
//! models?", MSPC 2012): the writer's `Release` fence after making the counter odd keeps its
//! data stores after that store; the reader's `Acquire` fence before re-reading the counter
//! keeps its data loads before that load. `loom/tests/loom_cache.rs` explores them under loom.

use crate::sync::{AtomicU64, Ordering, fence};

/// A seqlock's counter (see the module documentation).
pub(crate) struct Seq(AtomicU64);

impl Seq {
    /// A counter no write has begun on.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// A counter no write has begun on.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Begins a read: the counter to validate it with, or `None` while a write is under way.
    #[inline]
    pub(crate) fn read_begin(&self) -> Option<u64> {
        let s = self.0.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Ends a read begun at `s`: whether no write began since, so what was loaded in between
    /// is one writer's consistent state.
    #[inline]
    pub(crate) fn read_valid(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == s
    }

    /// Runs the stores of `f` as one write. The caller excludes other writers (it holds their
    /// lock): two writers at once would leave the counter even in the middle of a write.
    #[inline]
    pub(crate) fn write<R>(&self, f: impl FnOnce() -> R) -> R {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let r = f();
        self.0.store(s.wrapping_add(2), Ordering::Release);
        r
    }
}

/// `N` words published together under a [`Seq`]: readers take no lock, writers hold a lock of
/// their own. (Only the thread manager uses it, which is not built under loom.)
#[cfg(not(loom))]
pub(crate) struct SeqWords<const N: usize> {
    seq: Seq,
    words: [AtomicU64; N],
}

/// How many times [`SeqWords::read`] tries before it gives up.
#[cfg(not(loom))]
const READ_ATTEMPTS: usize = 4;

#[cfg(not(loom))]
impl<const N: usize> SeqWords<N> {
    /// Words holding `init`.
    pub(crate) const fn new(init: [u64; N]) -> Self {
        let mut words = [const { AtomicU64::new(0) }; N];
        let mut i = 0;
        while i < N {
            words[i] = AtomicU64::new(init[i]);
            i += 1;
        }
        Self {
            seq: Seq::new(),
            words,
        }
    }

    /// The words of one write, or `None` if writes kept racing with the read (the caller then
    /// asks the writers' lock).
    #[inline]
    pub(crate) fn read(&self) -> Option<[u64; N]> {
        for _ in 0..READ_ATTEMPTS {
            let Some(s) = self.seq.read_begin() else {
                crate::sync::spin_wait();
                continue;
            };
            let mut out = [0u64; N];
            for (dst, src) in out.iter_mut().zip(&self.words) {
                *dst = src.load(Ordering::Relaxed);
            }
            if self.seq.read_valid(s) {
                return Some(out);
            }
        }
        None
    }

    /// Publishes `words`. The caller holds the writers' lock.
    pub(crate) fn write(&self, words: [u64; N]) {
        self.seq.write(|| {
            for (dst, src) in self.words.iter().zip(words) {
                dst.store(src, Ordering::Relaxed);
            }
        });
    }
}
