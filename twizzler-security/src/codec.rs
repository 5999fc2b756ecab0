//! Little-endian cursor over untrusted bytes, and writers into fixed buffers and (with
//! `alloc`) growing vectors.
//!
//! Every decoder in the crate, and every byte format of the crates built on it, reads through
//! [`Reader`], whose methods return [`DecodeError::Truncated`] instead of panicking, so
//! decoding is total by construction: no format computes an offset by hand. Formats write
//! through [`Writer`] (a caller-sized buffer, for `no_std` encoders) or [`VecWriter`] (a
//! `Vec<u8>` that grows). A format outside this crate maps [`DecodeError`] into its own typed
//! error.
//!
//! # Example
//!
//! ```
//! use twizzler_capsec::DecodeError;
//! use twizzler_capsec::codec::{Reader, VecWriter};
//!
//! // Encode: magic, version, a length-prefixed payload.
//! let mut w = VecWriter::new();
//! w.u32(u32::from_le_bytes(*b"DEMO")).u16(1).u32(3).bytes(b"abc");
//! let bytes = w.into_vec();
//! assert_eq!(bytes.len(), 4 + 2 + 4 + 3);
//!
//! // Decode: every read is checked, and nothing may be left over.
//! let mut r = Reader::new(&bytes);
//! r.magic(u32::from_le_bytes(*b"DEMO"))?;
//! r.version(1)?;
//! let n = r.u32()? as usize;
//! assert_eq!(r.take(n)?, b"abc");
//! r.finish()?;
//!
//! // Truncated input is an error, never a panic.
//! let mut short = Reader::new(&bytes[..5]);
//! assert!(matches!(short.u32(), Ok(_)));
//! assert!(matches!(short.u16(), Err(DecodeError::Truncated { at: 4, .. })));
//! # Ok::<(), DecodeError>(())
//! ```

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

/// The integer writers of [`Writer`] and [`VecWriter`], each over the writer's own `bytes`.
macro_rules! le_writers {
    () => {
        /// Writes `v`.
        pub fn u8(&mut self, v: u8) -> &mut Self {
            self.bytes(&[v])
        }

        /// Writes `v`, little-endian.
        pub fn u16(&mut self, v: u16) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }

        /// Writes `v`, little-endian.
        pub fn u32(&mut self, v: u32) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }

        /// Writes `v`, little-endian.
        pub fn u64(&mut self, v: u64) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }

        /// Writes `v`, little-endian.
        pub fn u128(&mut self, v: u128) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }
    };
}

use crate::error::DecodeError;

/// A forward-only cursor over untrusted bytes. Every read is checked: past the end it returns
/// [`DecodeError::Truncated`] naming the offset.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// How many bytes were consumed; used to name the offset of an error.
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// How many bytes were consumed.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// How many bytes are left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Whether every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Takes every byte that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf;
        self.pos += rest.len();
        self.buf = &[];
        rest
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated {
                at: self.pos,
                needed: n,
                available: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        self.pos += n;
        Ok(head)
    }

    /// Takes the next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads a little-endian `u8`.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u128`.
    pub fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    /// Checks that a magic number comes next.
    pub fn magic(&mut self, expected: u32) -> Result<(), DecodeError> {
        let found = self.u32()?;
        if found == expected {
            Ok(())
        } else {
            Err(DecodeError::BadMagic { expected, found })
        }
    }

    /// Checks that a supported format version comes next.
    pub fn version(&mut self, supported: u16) -> Result<(), DecodeError> {
        let found = self.u16()?;
        if found == supported {
            Ok(())
        } else {
            Err(DecodeError::UnsupportedVersion { found, supported })
        }
    }

    /// Succeeds only if every byte was consumed.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                at: self.pos,
                extra: self.buf.len(),
            })
        }
    }
}

/// Writes little-endian values into a caller-sized buffer.
///
/// Callers size the buffer from the same layout constants the writes follow; a write past
/// the end is a bug in the encoder, so it is caught by `debug_assert` (debug builds panic)
/// and otherwise dropped (the resulting encoding would then fail to decode rather than
/// corrupt memory). Encoders whose length is not fixed use [`VecWriter`].
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Writes `bytes` as they are.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let end = self.pos.saturating_add(bytes.len());
        debug_assert!(end <= self.buf.len(), "encoding overruns its buffer");
        if let Some(dst) = self.buf.get_mut(self.pos..end) {
            dst.copy_from_slice(bytes);
        }
        self.pos = end;
        self
    }

    le_writers!();

    /// Leaves `n` bytes as they are (zero in a fresh buffer). Only the context editor (with
    /// `alloc`) writes a gap.
    #[cfg(feature = "alloc")]
    pub(crate) fn skip(&mut self, n: usize) -> &mut Self {
        let end = self.pos.saturating_add(n);
        debug_assert!(end <= self.buf.len(), "encoding overruns its buffer");
        self.pos = end;
        self
    }

    /// How many bytes were written (or skipped).
    pub fn position(&self) -> usize {
        self.pos
    }
}

/// Writes little-endian values to the end of a growing `Vec<u8>`; never fails.
#[cfg(feature = "alloc")]
#[derive(Debug, Default, Clone)]
pub struct VecWriter {
    buf: Vec<u8>,
}

#[cfg(feature = "alloc")]
impl VecWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }

    /// Writes `bytes` as they are.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    le_writers!();

    /// How many bytes were written.
    pub fn position(&self) -> usize {
        self.buf.len()
    }

    /// The bytes written.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of reads over any bytes: never a panic, a read succeeds exactly when
        /// enough bytes are left, and the cursor only moves on success.
        #[test]
        fn reads_are_total(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            reads in proptest::collection::vec(0u8..7, 0..24),
        ) {
            let mut r = Reader::new(&bytes);
            for op in reads {
                let (before, left) = (r.position(), r.remaining());
                let need = match op {
                    0 => r.u8().map(|_| 1),
                    1 => r.u16().map(|_| 2),
                    2 => r.u32().map(|_| 4),
                    3 => r.u64().map(|_| 8),
                    4 => r.u128().map(|_| 16),
                    5 => r.array::<3>().map(|_| 3),
                    _ => r.take(5).map(|_| 5),
                };
                let size = [1, 2, 4, 8, 16, 3, 5][usize::from(op)];
                match need {
                    Ok(n) => {
                        prop_assert!(n <= left);
                        prop_assert_eq!(r.position(), before + n);
                    }
                    Err(e) => {
                        prop_assert!(size > left);
                        prop_assert_eq!(
                            e,
                            DecodeError::Truncated { at: before, needed: size, available: left }
                        );
                        prop_assert_eq!(r.position(), before);
                    }
                }
                prop_assert_eq!(r.position() + r.remaining(), bytes.len());
            }
            let done = r.is_empty();
            prop_assert_eq!(r.finish().is_ok(), done);
        }

        /// What the writers write, the reader reads back, in the same order.
        #[test]
        fn writers_and_reader_agree(a: u8, b: u16, c: u32, d: u64, e: u128, tail: [u8; 3]) {
            let mut fixed = [0u8; 1 + 2 + 4 + 8 + 16 + 3];
            Writer::new(&mut fixed).u8(a).u16(b).u32(c).u64(d).u128(e).bytes(&tail);
            let mut grown = VecWriter::new();
            grown.u8(a).u16(b).u32(c).u64(d).u128(e).bytes(&tail);
            prop_assert_eq!(&grown.into_vec()[..], &fixed[..]);
            let mut r = Reader::new(&fixed);
            prop_assert_eq!(r.u8()?, a);
            prop_assert_eq!(r.u16()?, b);
            prop_assert_eq!(r.u32()?, c);
            prop_assert_eq!(r.u64()?, d);
            prop_assert_eq!(r.u128()?, e);
            prop_assert_eq!(r.rest(), &tail[..]);
            r.finish()?;
        }
    }
}
