//! Typed errors. Every fallible operation in the crate returns one of these; none panics on
//! input.

use core::fmt;

use crate::ids::ObjID;

/// Why a byte string is not a valid encoded value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended early.
    Truncated {
        /// Offset at which more bytes were needed.
        at: usize,
        /// How many bytes were needed there.
        needed: usize,
        /// How many were left.
        available: usize,
    },
    /// Bytes were left over after a complete value.
    TrailingBytes {
        /// Offset of the first extra byte.
        at: usize,
        /// How many bytes were left over.
        extra: usize,
    },
    /// The value does not start with the magic number of its kind.
    BadMagic {
        /// The magic this kind of value has.
        expected: u32,
        /// What was found instead.
        found: u32,
    },
    /// A format version this build does not read.
    UnsupportedVersion {
        /// The version in the bytes.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// A signature-scheme tag that names no scheme.
    UnknownScheme(u8),
    /// An algorithm this build leaves out (the `p256` or `sha256` cargo feature is off): a
    /// record or key that uses it is refused, never verified.
    NotBuiltIn(&'static str),
    /// A key or signature length that does not fit its scheme.
    BadLength {
        /// Which field.
        what: &'static str,
        /// The length found.
        len: usize,
    },
    /// Padding bytes that must be zero are not (encodings are canonical).
    NonZeroPadding(&'static str),
    /// Key bytes of the right length that are not a valid key of the scheme.
    InvalidKey,
    /// A non-canonical encoding of a key or signature.
    NonCanonical(&'static str),
    /// A protections field with bits that name no right.
    UnknownProtections(u16),
    /// A flags field with unknown bits, or not exactly one hash algorithm.
    BadFlags(u16),
    /// A gate whose range is impossible.
    Gate(GateError),
    /// A delegation chain depth outside `1..=MAX_CHAIN_DEPTH`.
    ChainDepth(u16),
    /// A context entry whose kind is neither capability nor delegation.
    UnknownRecordKind(u32),
    /// A label half with more than [`crate::MAX_LABEL_TAGS`] tags (the count found).
    TooManyTags(usize),
    /// Label tags that are not strictly ascending: tag `index` of its half is not greater
    /// than the one before it (unsorted or repeated).
    TagsNotAscending {
        /// 0-based index of the offending tag within its half.
        index: usize,
    },
    /// [`crate::ALL_CONTEXTS`] used as a label tag.
    ReservedTag,
    /// [`crate::ALL_CONTEXTS`] where only an ownership root capability may name it: as the
    /// accessor of a data capability, or as a delegation's receiver.
    ReservedAccessor,
    /// A capability with the `TAG` flag whose fields an ownership record cannot have (the
    /// field named): protections outside `PLUS|MINUS`, or a gate other than the whole object.
    BadOwnership(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated {
                at,
                needed,
                available,
            } => write!(
                f,
                "truncated: {needed} bytes needed at offset {at}, only {available} left"
            ),
            Self::TrailingBytes { at, extra } => {
                write!(f, "{extra} unexpected trailing bytes at offset {at}")
            }
            Self::BadMagic { expected, found } => {
                write!(f, "bad magic {found:#010x} (expected {expected:#010x})")
            }
            Self::UnsupportedVersion { found, supported } => {
                write!(
                    f,
                    "format version {found} is not supported (this build reads {supported})"
                )
            }
            Self::UnknownScheme(t) => write!(f, "unknown signature scheme tag {t}"),
            Self::NotBuiltIn(what) => write!(
                f,
                "uses {what}, which this build leaves out (its cargo feature is off)"
            ),
            Self::BadLength { what, len } => write!(f, "{what} has invalid length {len}"),
            Self::NonZeroPadding(what) => write!(f, "non-zero padding in {what}"),
            Self::InvalidKey => f.write_str("key bytes are not a valid key for their scheme"),
            Self::NonCanonical(what) => write!(f, "{what} is not in canonical form"),
            Self::UnknownProtections(b) => write!(f, "protections {b:#x} contain unknown bits"),
            Self::BadFlags(b) => write!(
                f,
                "flags {b:#x} have unknown bits or do not select exactly one hash algorithm"
            ),
            Self::Gate(e) => write!(f, "invalid gate: {e}"),
            Self::ChainDepth(d) => write!(
                f,
                "delegation chain depth {d} is outside 1..={}",
                crate::del::MAX_CHAIN_DEPTH
            ),
            Self::UnknownRecordKind(k) => write!(f, "unknown record kind {k}"),
            Self::TooManyTags(n) => write!(
                f,
                "a label half has {n} tags (at most {} allowed)",
                crate::label::MAX_LABEL_TAGS
            ),
            Self::TagsNotAscending { index } => write!(
                f,
                "label tag {index} is not greater than the one before it (tags must be sorted and distinct)"
            ),
            Self::ReservedTag => f.write_str("ALL_CONTEXTS (u128::MAX) cannot be a label tag"),
            Self::ReservedAccessor => f.write_str(
                "ALL_CONTEXTS (u128::MAX) is a holder only in an ownership root capability",
            ),
            Self::BadOwnership(what) => {
                write!(f, "an ownership (TAG) capability cannot have this {what}")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

impl From<GateError> for DecodeError {
    fn from(e: GateError) -> Self {
        Self::Gate(e)
    }
}

/// Why a gate's numbers do not describe a range of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// `offset + length` overflows `u64`.
    Overflow,
    /// The range ends beyond the largest possible object (1 GiB).
    OutOfRange,
    /// The range is empty.
    ZeroLength,
    /// `align` is zero.
    ZeroAlign,
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Overflow => "offset + length overflows",
            Self::OutOfRange => "range ends beyond the 1 GiB object limit",
            Self::ZeroLength => "length is zero",
            Self::ZeroAlign => "align is zero",
        })
    }
}

impl core::error::Error for GateError {}

/// Why no verifying key is available for an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyLookupError {
    /// The object does not exist or has no `kuid`.
    NoKuid(ObjID),
    /// The object's `kuid` names no known verifying key.
    UnknownKey(ObjID),
    /// The object's verifying key has been revoked.
    KeyRevoked(ObjID),
}

impl fmt::Display for KeyLookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoKuid(o) => write!(f, "object {o} has no kuid"),
            Self::UnknownKey(o) => write!(f, "no verifying key found for object {o}"),
            Self::KeyRevoked(o) => write!(f, "the verifying key of object {o} is revoked"),
        }
    }
}

impl core::error::Error for KeyLookupError {}

/// Which property a delegation would widen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amplification {
    /// Protections that the parent does not grant.
    Prots,
    /// A gate that is not inside the parent's gate.
    Gate,
    /// An expiry later than the parent's.
    Expiry,
}

impl fmt::Display for Amplification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prots => "grants protections its parent does not have",
            Self::Gate => "has a gate that is not inside its parent's gate",
            Self::Expiry => "expires later than its parent",
        })
    }
}

/// Why a signed record does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// The record (or a link of its chain) expired at `expires`; it is now `now`.
    Expired {
        /// When it expired, in ns since the Unix epoch.
        expires: u64,
        /// The time of the check.
        now: u64,
    },
    /// The signature was made with a different scheme from the verifying key's.
    SchemeMismatch,
    /// The signature bytes are not a well-formed signature of their scheme.
    MalformedSignature,
    /// The signature does not verify under the key.
    BadSignature,
    /// No usable key for an object the chain needs.
    Key(KeyLookupError),
    /// The record, or a record it derives from, is revoked by hash.
    Revoked,
    /// Link `link` of a delegation chain names a provider that does not hold its parent.
    BrokenChain {
        /// 1-based index of the link.
        link: usize,
    },
    /// The signature was not checked: the authority's budget of verifications for this
    /// decision was spent (see [`crate::Authority::may_verify`]). The record does not count.
    Unchecked,
    /// Link `link` of a delegation chain widens its parent.
    Amplifies {
        /// 1-based index of the link.
        link: usize,
        /// What it widens.
        what: Amplification,
    },
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired { expires, now } => {
                write!(f, "expired at {expires} ns (now {now} ns)")
            }
            Self::SchemeMismatch => f.write_str("signature scheme does not match the key's"),
            Self::MalformedSignature => f.write_str("signature bytes are malformed"),
            Self::BadSignature => f.write_str("signature does not verify"),
            Self::Key(e) => write!(f, "{e}"),
            Self::Revoked => f.write_str("record is revoked"),
            Self::Unchecked => f.write_str(
                "signature not checked: the budget of verifications for this fault is spent",
            ),
            Self::BrokenChain { link } => write!(
                f,
                "delegation link {link} is not provided by the holder of its parent"
            ),
            Self::Amplifies { link, what } => write!(f, "delegation link {link} {what}"),
        }
    }
}

impl core::error::Error for VerifyError {}

impl From<KeyLookupError> for VerifyError {
    fn from(e: KeyLookupError) -> Self {
        Self::Key(e)
    }
}

/// Why a delegation cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DelegateError {
    /// The new link would widen its parent.
    Amplifies(Amplification),
    /// The chain already has the maximum depth.
    TooDeep,
    /// The signer failed (see [`SignError`]).
    Sign,
    /// The receiver is [`crate::ALL_CONTEXTS`], or the parent is a public ownership root
    /// (held by [`crate::ALL_CONTEXTS`], whose key no context has).
    Reserved,
    /// A link of an ownership chain with a gate other than the whole object, or rights outside
    /// `PLUS|MINUS`.
    BadOwnership,
}

impl fmt::Display for DelegateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Amplifies(a) => write!(f, "the delegation {a}"),
            Self::TooDeep => write!(
                f,
                "delegation chains are at most {} links deep",
                crate::del::MAX_CHAIN_DEPTH
            ),
            Self::Sign => f.write_str("signing failed"),
            Self::Reserved => f.write_str(
                "ALL_CONTEXTS cannot receive a delegation, and a public ownership root cannot be delegated",
            ),
            Self::BadOwnership => f.write_str(
                "an ownership delegation keeps the whole gate and grants only PLUS and MINUS",
            ),
        }
    }
}

impl core::error::Error for DelegateError {}

/// The signature primitive failed. For ECDSA this has negligible probability (a nonce that
/// yields `r = 0`); it is reported rather than panicking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignError;

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the signature primitive failed")
    }
}

impl core::error::Error for SignError {}

impl From<SignError> for DelegateError {
    fn from(_: SignError) -> Self {
        Self::Sign
    }
}
