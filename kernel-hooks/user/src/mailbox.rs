//! A mailbox object two programs share: `u64` words past its null page, read and written
//! atomically (the programs run at the same time on different CPUs).

use core::sync::atomic::{AtomicU64, Ordering};

use twizzler_capsec::ObjID;

use crate::heap::PAGE;

/// A mapped mailbox.
#[derive(Clone, Copy)]
pub struct Mailbox {
    base: u64,
}

impl Mailbox {
    /// The mailbox whose object is mapped at `base` (its byte 0).
    ///
    /// # Safety
    ///
    /// The object must be mapped (readable and writable, on fault) for this task and used by
    /// nothing else of this program but this mailbox.
    pub unsafe fn at(base: u64) -> Self {
        Self { base }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `at`'s contract: the page past the null page is this mailbox's shared
        // memory; words are 8-byte aligned, and every access to them (here and in the other
        // program) is atomic. `i` is one of `abi::mailbox`'s indices, or one past `CAP` within the
        // capability's words: all below 512, inside the page.
        unsafe { AtomicU64::from_ptr((self.base + PAGE + 8 * i as u64) as *mut u64) }
    }

    /// Word `i`.
    pub fn get(&self, i: usize) -> u64 {
        self.word(i).load(Ordering::SeqCst)
    }

    /// Sets word `i`.
    pub fn set(&self, i: usize, v: u64) {
        self.word(i).store(v, Ordering::SeqCst);
    }

    /// Adds one to word `i`.
    pub fn bump(&self, i: usize) {
        self.word(i).fetch_add(1, Ordering::SeqCst);
    }

    /// The id in words `i`, `i + 1`.
    pub fn id(&self, i: usize) -> ObjID {
        crate::abi::id_from_words(self.get(i), self.get(i + 1))
    }

    /// Writes `bytes` into the words from `i` on (little-endian, the last word zero-padded).
    pub fn set_bytes(&self, i: usize, bytes: &[u8]) {
        for (k, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.set(i + k, u64::from_le_bytes(w));
        }
    }

    /// Reads `N` bytes from the words from `i` on (as [`Mailbox::set_bytes`] wrote them).
    pub fn bytes<const N: usize>(&self, i: usize) -> [u8; N] {
        let mut out = [0u8; N];
        for (k, chunk) in out.chunks_mut(8).enumerate() {
            let w = self.get(i + k).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        out
    }

    /// Sets words `i`, `i + 1` to `id`.
    pub fn set_id(&self, i: usize, id: ObjID) {
        let (lo, hi) = crate::abi::id_words(id);
        self.set(i, lo);
        self.set(i + 1, hi);
    }
}
