//! What a guard or a token grants: [`Rights`] over a [`ByteRange`] of one object, for
//! operations ([`Op`]) checked at the owner.

use core::fmt;

use twizzler_capsec::{MAX_OBJECT_SIZE, Protections};

bitflags::bitflags! {
    /// The rights a guard or a guarded token carries.
    ///
    /// `READ` and `WRITE` are data rights and must be backed by the exported capability's
    /// protections. `DERIVE` and `REVOKE` are rights over the guard itself: `DERIVE` lets the
    /// holder ask the owner for a child guard ([`Owner::export_from`](crate::Owner::export_from)),
    /// `REVOKE` lets it revoke the guard and its descendants
    /// ([`Owner::revoke`](crate::Owner::revoke)). A holder drops them by attenuation before
    /// handing a token on, so that the receiver can use the token but not revoke it.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Rights: u16 {
        /// Read bytes of the object.
        const READ = 1;
        /// Write bytes of the object.
        const WRITE = 2;
        /// Ask the owner for a child guard (revocable sub-delegation).
        const DERIVE = 4;
        /// Revoke the guard and every guard derived from it.
        const REVOKE = 8;
    }
}

impl Rights {
    /// The data rights (`READ | WRITE`).
    pub const DATA: Rights = Rights::READ.union(Rights::WRITE);

    /// Decodes a `u16`, rejecting bits that name no right.
    pub fn from_raw(bits: u16) -> Option<Self> {
        Self::from_bits(bits)
    }

    /// The capability protections the data rights need (`READ` → read, `WRITE` → write).
    pub fn required_prots(self) -> Protections {
        let mut p = Protections::empty();
        if self.contains(Rights::READ) {
            p |= Protections::READ;
        }
        if self.contains(Rights::WRITE) {
            p |= Protections::WRITE;
        }
        p
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rights({self})")
    }
}

/// Shown as `rwdv` (read, write, derive, revoke), with `-` for a missing right.
impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bit = |r: Rights, c: char| if self.contains(r) { c } else { '-' };
        write!(
            f,
            "{}{}{}{}",
            bit(Self::READ, 'r'),
            bit(Self::WRITE, 'w'),
            bit(Self::DERIVE, 'd'),
            bit(Self::REVOKE, 'v')
        )
    }
}

/// An operation on an object's bytes, checked at the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read bytes: needs [`Rights::READ`].
    Read,
    /// Write bytes: needs [`Rights::WRITE`] (not `READ`: a remote write does not return data).
    Write,
}

impl Op {
    /// The right the operation needs.
    pub const fn required(self) -> Rights {
        match self {
            Op::Read => Rights::READ,
            Op::Write => Rights::WRITE,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
        })
    }
}

/// Why a byte range is impossible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeError {
    /// The length is zero.
    Empty,
    /// `offset + len` overflows or lies beyond the largest object ([`MAX_OBJECT_SIZE`]).
    OutOfBounds {
        /// The offset.
        offset: u64,
        /// The length.
        len: u64,
    },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("byte range is empty"),
            Self::OutOfBounds { offset, len } => write!(
                f,
                "byte range {offset:#x}+{len:#x} ends beyond the largest object ({MAX_OBJECT_SIZE:#x} bytes)"
            ),
        }
    }
}

impl std::error::Error for RangeError {}

/// A non-empty byte range `offset .. offset + len` of an object.
///
/// Invariant (checked by [`ByteRange::new`], the only constructor): `len > 0` and
/// `offset + len <= MAX_OBJECT_SIZE` without overflow. Code behind the constructor relies on
/// it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    offset: u64,
    len: u64,
}

impl ByteRange {
    /// The whole object: `0 .. MAX_OBJECT_SIZE`.
    pub const WHOLE: ByteRange = ByteRange {
        offset: 0,
        len: MAX_OBJECT_SIZE,
    };

    /// Makes a range, checking its arithmetic.
    ///
    /// # Example
    ///
    /// ```
    /// use dist_bridge::{ByteRange, RangeError};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let page = ByteRange::new(0x1000, 0x1000)?;
    /// assert!(page.covers(0x1800, 16));
    /// assert!(!page.covers(0x1ff8, 16)); // runs past the end
    ///
    /// let half = ByteRange::new(0x1800, 0x1000)?;
    /// assert_eq!(page.intersect(&half), Some(ByteRange::new(0x1800, 0x800)?));
    /// assert_eq!(ByteRange::new(0, 0), Err(RangeError::Empty));
    /// # Ok(())
    /// # }
    /// ```
    pub const fn new(offset: u64, len: u64) -> Result<Self, RangeError> {
        if len == 0 {
            return Err(RangeError::Empty);
        }
        match offset.checked_add(len) {
            Some(end) if end <= MAX_OBJECT_SIZE => Ok(Self { offset, len }),
            _ => Err(RangeError::OutOfBounds { offset, len }),
        }
    }

    /// First byte.
    pub const fn offset(&self) -> u64 {
        self.offset
    }

    /// Length in bytes.
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Always `false`: ranges are non-empty (for clippy's `len_without_is_empty`).
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// One past the last byte (cannot overflow, by the invariant).
    pub const fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// Whether `inner` lies inside this range.
    pub const fn contains(&self, inner: &ByteRange) -> bool {
        inner.offset >= self.offset && inner.end() <= self.end()
    }

    /// Whether the access `offset .. offset + len` lies inside this range. An empty access or
    /// one whose end overflows is never covered.
    pub const fn covers(&self, offset: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        match offset.checked_add(len) {
            Some(end) => offset >= self.offset && end <= self.end(),
            None => false,
        }
    }

    /// The overlap of two ranges, if any.
    pub fn intersect(&self, other: &ByteRange) -> Option<ByteRange> {
        let start = self.offset.max(other.offset);
        let end = self.end().min(other.end());
        if end > start {
            ByteRange::new(start, end - start).ok()
        } else {
            None
        }
    }
}

impl Default for ByteRange {
    fn default() -> Self {
        Self::WHOLE
    }
}

impl fmt::Debug for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ByteRange({:#x}..{:#x})", self.offset, self.end())
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.offset, self.end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_arithmetic_is_checked() {
        assert_eq!(ByteRange::new(0, 0), Err(RangeError::Empty));
        assert!(ByteRange::new(u64::MAX, 1).is_err());
        assert!(ByteRange::new(MAX_OBJECT_SIZE, 1).is_err());
        let r = ByteRange::new(4096, 8192).unwrap();
        assert!(r.covers(4096, 8192));
        assert!(r.covers(5000, 1));
        assert!(!r.covers(4095, 2));
        assert!(!r.covers(12288, 1));
        assert!(!r.covers(5000, 0));
        assert!(!r.covers(u64::MAX, 2));
        let s = ByteRange::new(8192, 8192).unwrap();
        assert_eq!(r.intersect(&s), Some(ByteRange::new(8192, 4096).unwrap()));
        assert_eq!(r.intersect(&ByteRange::new(12288, 1).unwrap()), None);
        assert!(ByteRange::WHOLE.contains(&r));
        assert!(!r.contains(&s));
    }

    #[test]
    fn rights_map_to_protections() {
        assert_eq!(
            Rights::all().required_prots(),
            Protections::READ | Protections::WRITE
        );
        assert_eq!(
            (Rights::DERIVE | Rights::REVOKE).required_prots(),
            Protections::empty()
        );
        assert_eq!(Rights::from_raw(16), None);
        assert_eq!(Rights::all().to_string(), "rwdv");
    }
}
