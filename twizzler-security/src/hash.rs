//! The two message hashes and the domain-separated signed message.

use crate::error::DecodeError;

/// Digest length of both hash algorithms.
pub const DIGEST_LEN: usize = 32;

/// Which hash forms the signed message of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HashAlg {
    /// BLAKE3 (flag bit 0). The default: faster in software, and no SIMD needed.
    #[default]
    Blake3,
    /// SHA-256 (flag bit 1).
    #[cfg(feature = "sha256")]
    Sha256,
}

/// Record flag selecting BLAKE3.
pub(crate) const FLAG_HASH_BLAKE3: u16 = 1 << 0;
/// Record flag selecting SHA-256.
pub(crate) const FLAG_HASH_SHA256: u16 = 1 << 1;

impl HashAlg {
    /// The record flags that select this algorithm.
    pub const fn flags(self) -> u16 {
        match self {
            Self::Blake3 => FLAG_HASH_BLAKE3,
            #[cfg(feature = "sha256")]
            Self::Sha256 => FLAG_HASH_SHA256,
        }
    }

    /// Parses record flags: exactly one hash bit, and no unknown bits.
    pub const fn from_flags(flags: u16) -> Result<Self, DecodeError> {
        match flags {
            FLAG_HASH_BLAKE3 => Ok(Self::Blake3),
            #[cfg(feature = "sha256")]
            FLAG_HASH_SHA256 => Ok(Self::Sha256),
            #[cfg(not(feature = "sha256"))]
            FLAG_HASH_SHA256 => Err(DecodeError::NotBuiltIn("SHA-256")),
            other => Err(DecodeError::BadFlags(other)),
        }
    }

    /// Hashes the concatenation of `parts`.
    pub fn digest(self, parts: &[&[u8]]) -> [u8; DIGEST_LEN] {
        let mut h = self.hasher();
        for p in parts {
            h.update(p);
        }
        h.finalize()
    }

    /// A streaming hasher of this algorithm.
    pub fn hasher(self) -> MessageHasher {
        match self {
            Self::Blake3 => MessageHasher::Blake3(blake3::Hasher::new()),
            #[cfg(feature = "sha256")]
            Self::Sha256 => MessageHasher::Sha256(<sha2::Sha256 as sha2::Digest>::new()),
        }
    }
}

/// A streaming hasher for either algorithm.
// Boxing the BLAKE3 state would need a heap, which the kernel's fault path does not have; the
// hasher lives on the stack for the length of one signed message.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum MessageHasher {
    /// BLAKE3 state.
    Blake3(blake3::Hasher),
    /// SHA-256 state.
    #[cfg(feature = "sha256")]
    Sha256(sha2::Sha256),
}

impl MessageHasher {
    /// Appends bytes to the message.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        match self {
            Self::Blake3(h) => {
                h.update(bytes);
            }
            #[cfg(feature = "sha256")]
            Self::Sha256(h) => sha2::Digest::update(h, bytes),
        }
        self
    }

    /// The digest of everything appended.
    pub fn finalize(self) -> [u8; DIGEST_LEN] {
        match self {
            Self::Blake3(h) => *h.finalize().as_bytes(),
            #[cfg(feature = "sha256")]
            Self::Sha256(h) => sha2::Digest::finalize(h).into(),
        }
    }
}

/// The identity of an encoded record: the BLAKE3 hash of its canonical bytes.
///
/// Used to revoke a single record and to remember records already verified. Because encodings
/// are canonical and signatures non-malleable (strict Ed25519, low-S ECDSA), one record has
/// exactly one id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecordId(pub [u8; DIGEST_LEN]);

impl RecordId {
    /// The id of the record encoded as `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }
}

impl core::fmt::Debug for RecordId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RecordId({self})")
    }
}

impl core::fmt::Display for RecordId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
