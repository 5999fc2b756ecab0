//! The few `twizzler-abi` types this crate needs, with the same representation.
//!
//! `twizzler-abi` is not on the package registry, so these mirror it: a Twizzler build can swap
//! them for the real ones without changing any encoded byte.

use core::fmt;
use core::str::FromStr;

/// Size of a page, in bytes, as the MMU maps it.
pub const PAGE_SIZE: u64 = 4096;

/// The largest size an object can have, in bytes (1 GiB).
pub const MAX_OBJECT_SIZE: u64 = 1 << 30;

/// A 128-bit object identifier. Encoded little-endian in 16 bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(transparent)]
pub struct ObjID(u128);

impl ObjID {
    /// Wraps a raw 128-bit id.
    pub const fn new(raw: u128) -> Self {
        Self(raw)
    }

    /// The raw 128-bit value.
    pub const fn raw(self) -> u128 {
        self.0
    }

    /// Little-endian encoding, as stored in records and contexts.
    pub const fn to_le_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// Decodes the little-endian encoding.
    pub const fn from_le_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_le_bytes(bytes))
    }
}

impl From<u128> for ObjID {
    fn from(raw: u128) -> Self {
        Self(raw)
    }
}

impl fmt::Debug for ObjID {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjID({:#x})", self.0)
    }
}

/// Shown as 32 lower-case hex digits, the form object files are named by.
impl fmt::Display for ObjID {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Why a string is not an object id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseObjIdError {
    /// The string was empty (after an optional `0x`).
    Empty,
    /// More than 32 hex digits.
    TooLong,
    /// A character that is not a hex digit.
    NotHex,
}

impl fmt::Display for ParseObjIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "object id is empty",
            Self::TooLong => "object id has more than 32 hex digits",
            Self::NotHex => "object id contains a character that is not a hex digit",
        })
    }
}

impl core::error::Error for ParseObjIdError {}

/// Parses up to 32 hex digits, with or without a leading `0x`.
impl FromStr for ObjID {
    type Err = ParseObjIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        if digits.is_empty() {
            return Err(ParseObjIdError::Empty);
        }
        if digits.len() > 32 {
            return Err(ParseObjIdError::TooLong);
        }
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ParseObjIdError::NotHex);
        }
        u128::from_str_radix(digits, 16)
            .map(ObjID)
            .map_err(|_| ParseObjIdError::NotHex)
    }
}

bitflags::bitflags! {
    /// Access rights to an object, as `twizzler-abi` defines them.
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct Protections: u16 {
        /// Read the object's bytes.
        const READ = 1;
        /// Write the object's bytes.
        const WRITE = 2;
        /// Execute the object's bytes as code.
        const EXEC = 4;
    }
}

impl Protections {
    /// Decodes a `u16`, rejecting bits that name no right.
    pub fn from_raw(bits: u16) -> Option<Self> {
        Self::from_bits(bits)
    }
}

impl fmt::Debug for Protections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protections({self})")
    }
}

/// Shown as `rwx`, with `-` for a missing right.
impl fmt::Display for Protections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bit = |p: Protections, c: char| if self.contains(p) { c } else { '-' };
        write!(
            f,
            "{}{}{}",
            bit(Self::READ, 'r'),
            bit(Self::WRITE, 'w'),
            bit(Self::EXEC, 'x')
        )
    }
}

/// Why a string is not a set of protections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseProtectionsError {
    /// The first character that is not `r`, `w`, `x` or `-`.
    pub bad: char,
}

impl fmt::Display for ParseProtectionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "protections take the letters r, w, x (or - for none), not {:?}",
            self.bad
        )
    }
}

impl core::error::Error for ParseProtectionsError {}

/// Parses `rwx`-style strings: any of `r`, `w`, `x` in any order, `-` ignored; `""` and `"-"`
/// are the empty set.
impl FromStr for Protections {
    type Err = ParseProtectionsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = Protections::empty();
        for c in s.chars() {
            match c {
                'r' | 'R' => p |= Protections::READ,
                'w' | 'W' => p |= Protections::WRITE,
                'x' | 'X' => p |= Protections::EXEC,
                '-' => {}
                bad => return Err(ParseProtectionsError { bad }),
            }
        }
        Ok(p)
    }
}
