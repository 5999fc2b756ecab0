//! [`CtxBytes`]: a security context's bytes as the engine reads them.
//!
//! A context object is shared memory its writers may change while the kernel reads it. A Rust
//! `&[u8]` over such memory would be undefined behaviour, so the host hands the engine a
//! `CtxBytes` instead, made in one of two ways:
//!
//! - [`CtxBytes::private`]: bytes nobody else can write (a kernel-private snapshot, a test's
//!   buffer, a file read into memory);
//! - [`CtxBytes::shared`] / [`CtxBytes::atomic`]: memory others may write, read one byte at a
//!   time with relaxed atomic loads, so a concurrent write yields some value, never undefined
//!   behaviour.
//!
//! Either way the engine copies what it decodes (a header, a table row, a record) into its own
//! buffers through [`CtxMem::read`], and decides from the copies.

use core::sync::atomic::{AtomicU8, Ordering};

use twizzler_capsec::CtxMem;

/// The bytes of a context, readable only by copying.
#[derive(Clone, Copy, Debug)]
pub struct CtxBytes<'a>(Inner<'a>);

#[derive(Clone, Copy, Debug)]
enum Inner<'a> {
    Private(&'a [u8]),
    Atomic(&'a [AtomicU8]),
}

impl<'a> CtxBytes<'a> {
    /// Bytes no one else writes while the engine holds them.
    pub const fn private(bytes: &'a [u8]) -> Self {
        Self(Inner::Private(bytes))
    }

    /// Bytes others may write concurrently, as atomics.
    pub const fn atomic(bytes: &'a [AtomicU8]) -> Self {
        Self(Inner::Atomic(bytes))
    }

    /// `len` bytes of shared memory at `ptr`, which others may write concurrently.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must be mapped readable for all of `'a` (the kernel keeps the
    /// mapping alive for the duration of [`crate::Host::with_ctx`]'s closure), and nothing may
    /// access it other than through byte-sized reads and writes (user stores, DMA of whole
    /// bytes) during that time. It need not be unchanging: every read is an atomic load.
    #[allow(unsafe_code)]
    pub unsafe fn shared(ptr: *const u8, len: usize) -> Self {
        // SAFETY: `AtomicU8` has the size and alignment of `u8`, so `len` atomics exactly
        // cover the range, which the caller guarantees is mapped for `'a`. Atomics permit
        // concurrent mutation, so a slice of them is a sound view of memory another party
        // writes; the engine only ever loads from it.
        let atomics = unsafe { core::slice::from_raw_parts(ptr.cast::<AtomicU8>(), len) };
        Self::atomic(atomics)
    }
}

impl CtxMem for CtxBytes<'_> {
    fn len(&self) -> usize {
        match self.0 {
            Inner::Private(b) => b.len(),
            Inner::Atomic(b) => b.len(),
        }
    }

    fn read(&self, at: usize, dst: &mut [u8]) -> bool {
        match self.0 {
            Inner::Private(b) => b.read(at, dst),
            Inner::Atomic(b) => {
                let Some(src) = at.checked_add(dst.len()).and_then(|end| b.get(at..end)) else {
                    return false;
                };
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = s.load(Ordering::Relaxed);
                }
                true
            }
        }
    }

    fn direct(&self) -> Option<&[u8]> {
        match self.0 {
            Inner::Private(b) => Some(b),
            Inner::Atomic(_) => None,
        }
    }
}
