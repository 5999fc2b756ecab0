//! [`CtxMem`]: where the context reader's bytes come from.
//!
//! A context object is memory its writer (userspace) may change at any moment, including
//! while the kernel reads it. The reader therefore never holds a Rust reference into the
//! context: it copies each piece it needs (the header, one table row, one record) into a
//! buffer of its own with [`CtxMem::read`], and decodes the copy. A plain slice implements
//! the trait by `memcpy`; a kernel implements it over shared memory with volatile or atomic
//! loads (`kernel-hooks` provides one), so a concurrent writer can never cause undefined
//! behaviour, only a value (see [`crate::SecCtx`] for what a torn value can and cannot do).

/// Bytes the context reader copies from.
///
/// Contract: `read(at, dst)` fills `dst` with the bytes at `at .. at + dst.len()` and returns
/// `true`, or returns `false` (leaving `dst` unspecified) when that range is not inside
/// `0 .. len()`. It never panics.
pub trait CtxMem {
    /// The number of bytes readable (for an object, what the host knows is backed).
    fn len(&self) -> usize;

    /// Whether there are no bytes at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the bytes at `at .. at + dst.len()` into `dst`; `false` if they are not all
    /// inside.
    fn read(&self, at: usize, dst: &mut [u8]) -> bool;

    /// The bytes themselves, when no one else can write them while `self` lives (a plain
    /// slice): the reader then scans them in place instead of copying. Memory that others may
    /// write returns `None` (the default) and is only ever copied.
    fn direct(&self) -> Option<&[u8]> {
        None
    }
}

impl CtxMem for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn read(&self, at: usize, dst: &mut [u8]) -> bool {
        let Some(end) = at.checked_add(dst.len()) else {
            return false;
        };
        match self.get(at..end) {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    fn direct(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl<M: CtxMem + ?Sized> CtxMem for &M {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn read(&self, at: usize, dst: &mut [u8]) -> bool {
        (**self).read(at, dst)
    }

    fn direct(&self) -> Option<&[u8]> {
        (**self).direct()
    }
}
