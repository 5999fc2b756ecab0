//! Gates: the byte range (for data) or the set of entry points (for code) a record grants.

use crate::error::GateError;
use crate::ids::{MAX_OBJECT_SIZE, PAGE_SIZE};

/// A range of an object `offset .. offset + length`, with an entry alignment.
///
/// Invariant (checked by [`Gate::new`], the only constructor): `length > 0`, `align > 0`, and
/// `offset + length` neither overflows nor exceeds [`MAX_OBJECT_SIZE`]. Code behind the
/// constructor relies on it and never re-checks.
///
/// - For data (read, write) the gate is the range of bytes granted. The MMU maps whole pages, so
///   a page is granted only if it lies entirely inside the range ([`Gate::covers_page`]).
/// - For code (execute) the gate is the set of entry points: offsets inside the range that are
///   multiples of `align` ([`Gate::allows_entry`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Gate {
    offset: u64,
    length: u64,
    align: u64,
}

/// Encoded size of a gate: three little-endian `u64`s.
pub(crate) const GATE_LEN: usize = 24;

impl Gate {
    /// The whole object: offset 0, length 1 GiB, align 1.
    pub const WHOLE: Gate = Gate {
        offset: 0,
        length: MAX_OBJECT_SIZE,
        align: 1,
    };

    /// Makes a gate, checking its arithmetic.
    #[inline]
    ///
    /// # Example
    ///
    /// A data gate grants only the pages it covers whole; a code gate admits entry only at
    /// its aligned offsets:
    ///
    /// ```
    /// use twizzler_capsec::{Gate, GateError};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let data = Gate::new(0x2800, 0x2800, 1)?; // bytes 0x2800..0x5000
    /// assert!(data.covers_page(3)); // 0x3000..0x4000
    /// assert!(!data.covers_page(2)); // 0x2000..0x3000: only partly inside
    ///
    /// let code = Gate::new(0x2000, 0x100, 16)?; // an entry point every 16 bytes
    /// assert!(code.allows_entry(0x2010));
    /// assert!(!code.allows_entry(0x2008));
    /// assert!(Gate::WHOLE.contains(&code));
    ///
    /// assert_eq!(Gate::new(0, 0, 1), Err(GateError::ZeroLength));
    /// # Ok(())
    /// # }
    /// ```
    pub const fn new(offset: u64, length: u64, align: u64) -> Result<Self, GateError> {
        if length == 0 {
            return Err(GateError::ZeroLength);
        }
        if align == 0 {
            return Err(GateError::ZeroAlign);
        }
        let Some(end) = offset.checked_add(length) else {
            return Err(GateError::Overflow);
        };
        if end > MAX_OBJECT_SIZE {
            return Err(GateError::OutOfRange);
        }
        Ok(Self {
            offset,
            length,
            align,
        })
    }

    /// First byte of the range.
    pub const fn offset(&self) -> u64 {
        self.offset
    }

    /// Length of the range in bytes.
    pub const fn length(&self) -> u64 {
        self.length
    }

    /// Entry-point alignment.
    pub const fn align(&self) -> u64 {
        self.align
    }

    /// One past the last byte of the range (cannot overflow, by the invariant).
    #[inline]
    pub const fn end(&self) -> u64 {
        self.offset + self.length
    }

    /// Whether page `page` (bytes `page * 4096 .. (page + 1) * 4096`) lies entirely inside the
    /// range. A page the range covers only in part is not covered: enforcement never
    /// over-grants.
    #[inline]
    pub const fn covers_page(&self, page: u64) -> bool {
        let Some(start) = page.checked_mul(PAGE_SIZE) else {
            return false;
        };
        let Some(end) = start.checked_add(PAGE_SIZE) else {
            return false;
        };
        start >= self.offset && end <= self.end()
    }

    /// Whether `offset` is an allowed entry point: inside the range and a multiple of `align`.
    #[inline]
    pub const fn allows_entry(&self, offset: u64) -> bool {
        offset >= self.offset && offset < self.end() && offset.is_multiple_of(self.align)
    }

    /// Whether `inner` grants nothing this gate does not: its range lies inside this one, and
    /// its entry points are a subset of this gate's (its alignment is a multiple of ours).
    pub const fn contains(&self, inner: &Gate) -> bool {
        inner.offset >= self.offset
            && inner.end() <= self.end()
            && inner.align.is_multiple_of(self.align)
    }

    pub(crate) fn encode_into(&self, w: &mut crate::codec::Writer<'_>) {
        w.u64(self.offset).u64(self.length).u64(self.align);
    }

    pub(crate) fn decode_from(
        r: &mut crate::codec::Reader<'_>,
    ) -> Result<Self, crate::DecodeError> {
        let offset = r.u64()?;
        let length = r.u64()?;
        let align = r.u64()?;
        Ok(Self::new(offset, length, align)?)
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::WHOLE
    }
}

impl core::fmt::Debug for Gate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Gate({:#x}..{:#x}, align {})",
            self.offset,
            self.end(),
            self.align
        )
    }
}

impl core::fmt::Display for Gate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}:{:#x}:{}", self.offset, self.length, self.align)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Gate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Raw {
            offset: u64,
            length: u64,
            align: u64,
        }
        let raw = Raw::deserialize(d)?;
        Gate::new(raw.offset, raw.length, raw.align).map_err(serde::de::Error::custom)
    }
}
