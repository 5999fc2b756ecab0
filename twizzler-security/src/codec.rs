//! Little-endian cursor over untrusted bytes, and a writer into fixed buffers.
//!
//! Every decoder in the crate reads through [`Reader`], whose methods return
//! [`DecodeError::Truncated`] instead of panicking, so decoding is total by construction.

use crate::error::DecodeError;

/// A forward-only cursor over untrusted bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// How many bytes were consumed; used to name the offset of an error.
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
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

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    /// Checks that a magic number comes next.
    pub(crate) fn magic(&mut self, expected: u32) -> Result<(), DecodeError> {
        let found = self.u32()?;
        if found == expected {
            Ok(())
        } else {
            Err(DecodeError::BadMagic { expected, found })
        }
    }

    /// Checks that a supported format version comes next.
    pub(crate) fn version(&mut self, supported: u16) -> Result<(), DecodeError> {
        let found = self.u16()?;
        if found == supported {
            Ok(())
        } else {
            Err(DecodeError::UnsupportedVersion { found, supported })
        }
    }

    /// Succeeds only if every byte was consumed.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
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
/// the end is a bug in this crate, so it is caught by `debug_assert` and otherwise dropped
/// (the resulting encoding would then fail to decode rather than corrupt memory).
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let end = self.pos.saturating_add(bytes.len());
        debug_assert!(end <= self.buf.len(), "encoding overruns its buffer");
        if let Some(dst) = self.buf.get_mut(self.pos..end) {
            dst.copy_from_slice(bytes);
        }
        self.pos = end;
        self
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u128(&mut self, v: u128) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Leaves `n` bytes as they are (zero in a fresh buffer). Only the context editor (with
    /// `alloc`) writes a gap.
    #[cfg(feature = "alloc")]
    pub(crate) fn skip(&mut self, n: usize) -> &mut Self {
        let end = self.pos.saturating_add(n);
        debug_assert!(end <= self.buf.len(), "encoding overruns its buffer");
        self.pos = end;
        self
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}
