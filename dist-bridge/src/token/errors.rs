//! The errors of guarded tokens: why bytes are not a token ([`TokenDecodeError`], and the
//! [`Part`] it is about), and why a holder cannot attenuate one ([`AttenuateError`],
//! [`Widening`]).

use core::fmt;

use twizzler_capsec::DecodeError;

use super::{MAX_CAVEATS, TOKEN_FORMAT, TOKEN_FORMAT_LABELS};
use crate::rights::RangeError;

/// Which property a scope would widen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Widening {
    /// Rights its parent does not have.
    Rights,
    /// A range not inside its parent's.
    Range,
    /// A later expiry than its parent's.
    Expiry,
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rights => "adds rights",
            Self::Range => "widens the byte range",
            Self::Expiry => "extends the expiry",
        })
    }
}

/// The part of a token an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The body (the scope the owner issued).
    Body,
    /// Caveat `n` (1-based).
    Caveat(u8),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Body => f.write_str("body"),
            Part::Caveat(n) => write!(f, "caveat {n}"),
        }
    }
}

/// Why bytes are not a well-formed token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenDecodeError {
    /// Fewer bytes than the header and body need, or than the caveat count says.
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// More bytes than the caveat count says.
    TrailingBytes {
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Not a token (bad magic).
    BadMagic([u8; 4]),
    /// A format version this build does not read.
    UnsupportedFormat(u16),
    /// The reserved byte is not zero.
    NonZeroReserved(u8),
    /// The bytes do not frame as the layout says in another way than by length (no read of
    /// the token's decoder produces it; kept so the codec's errors map totally).
    Framing(DecodeError),
    /// More caveats than [`MAX_CAVEATS`].
    TooManyCaveats(u8),
    /// Rights bits that name no right.
    UnknownRights {
        /// Where.
        which: Part,
        /// The bits.
        bits: u16,
    },
    /// An impossible byte range.
    BadRange {
        /// Where.
        which: Part,
        /// What is wrong.
        err: RangeError,
    },
    /// A version-2 token whose label is not canonical `TLBL`.
    BadLabel(DecodeError),
    /// A caveat that widens the scope before it (tokens only ever narrow).
    CaveatWidens {
        /// 1-based caveat index.
        caveat: u8,
        /// What it widens.
        what: Widening,
    },
}

impl fmt::Display for TokenDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, got } => {
                write!(f, "token truncated: {got} bytes, at least {needed} needed")
            }
            Self::TrailingBytes { expected, got } => write!(
                f,
                "token has {got} bytes but its caveat count says {expected}"
            ),
            Self::BadMagic(m) => write!(f, "not a guarded token (magic {m:02x?})"),
            Self::UnsupportedFormat(v) => write!(
                f,
                "token format version {v} is not supported (this build reads {TOKEN_FORMAT} and {TOKEN_FORMAT_LABELS})"
            ),
            Self::NonZeroReserved(b) => write!(f, "token reserved byte is {b:#x}, not 0"),
            Self::Framing(e) => write!(f, "token: {e}"),
            Self::TooManyCaveats(n) => {
                write!(f, "token has {n} caveats, at most {MAX_CAVEATS} allowed")
            }
            Self::UnknownRights { which, bits } => {
                write!(f, "token {which}: rights {bits:#x} contain unknown bits")
            }
            Self::BadRange { which, err } => write!(f, "token {which}: {err}"),
            Self::CaveatWidens { caveat, what } => {
                write!(f, "token caveat {caveat} {what} of the scope before it")
            }
            Self::BadLabel(e) => write!(f, "token label: {e}"),
        }
    }
}

impl std::error::Error for TokenDecodeError {}

impl From<DecodeError> for TokenDecodeError {
    fn from(e: DecodeError) -> Self {
        match e {
            // The codec names the offset and what was left there; a token error names the
            // whole: how many bytes were needed up to the end of the read, of how many.
            DecodeError::Truncated {
                at,
                needed,
                available,
            } => Self::Truncated {
                needed: at.saturating_add(needed),
                got: at.saturating_add(available),
            },
            other => Self::Framing(other),
        }
    }
}

/// Why a holder cannot attenuate a token as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttenuateError {
    /// The token already carries [`MAX_CAVEATS`] caveats.
    TooManyCaveats,
    /// The caveat would widen the token's scope.
    Widens(Widening),
}

impl fmt::Display for AttenuateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyCaveats => {
                write!(
                    f,
                    "token already carries the maximum of {MAX_CAVEATS} caveats"
                )
            }
            Self::Widens(w) => write!(f, "attenuation {w}: tokens can only be narrowed"),
        }
    }
}

impl std::error::Error for AttenuateError {}
