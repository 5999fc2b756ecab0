//! Keys and authenticators, all keyed BLAKE3 with a distinct derivation context per purpose.
//!
//! - **Node secret** ([`NodeSecret`]): 32 random bytes drawn at every start of the controller
//!   and kept only in memory (zeroed on drop). Nothing secret is ever written to disk, so a
//!   copied disk cannot forge tokens, and a restart invalidates every earlier token
//!   cryptographically as well as by the controller-version check.
//! - **Range key**: the key that makes a token's first tag. One per guard-version range and
//!   range *generation* (how often the range has been opened; see [`crate::table`]):
//!   `derive_key(CTX_RANGE_KEY, secret || node || controller version || range || generation)`.
//!   Binding the generation is what makes reusing a small version space safe: a token minted
//!   before its range was recycled does not verify after, even if its guard version reappears.
//! - **Token tags** (macaroon-style chaining): `tag_0 = keyed_hash(range key, ROOT_LABEL ||
//!   body)` and `tag_i = keyed_hash(tag_{i-1}, CAVEAT_LABEL || i || caveat_i)`. Only the owner
//!   can make `tag_0`; anyone holding `tag_{i-1}` can append caveat `i`, nobody can remove one
//!   (that would need inverting the keyed hash).
//! - **Version-file checksum**: BLAKE3 in derive-key mode under its own context (an integrity
//!   check against torn writes, not an authenticator).
//!
//! Tags are compared in constant time ([`blake3::Hash`]'s `PartialEq`).

use twizzler_capsec::codec::Writer;
use zeroize::{Zeroize, Zeroizing};

use crate::controller::ControllerId;

/// Length of keys and tags.
pub const KEY_LEN: usize = 32;

const CTX_RANGE_KEY: &str = "twizzler dist-bridge v1 guarded-token range key";
const CTX_VERSION_FILE: &str = "twizzler dist-bridge v1 controller version file checksum";
const ROOT_LABEL: &[u8] = b"dist-bridge/token/v1/root\0";
const CAVEAT_LABEL: &[u8] = b"dist-bridge/token/v1/caveat\0";

/// Why the node secret could not be drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretError(pub getrandom::Error);

impl core::fmt::Display for SecretError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "cannot draw the node secret from the OS RNG: {}", self.0)
    }
}

impl std::error::Error for SecretError {}

/// The controller's secret: 32 random bytes, zeroed on drop, never persisted.
pub struct NodeSecret([u8; KEY_LEN]);

impl NodeSecret {
    /// Draws a fresh secret from the operating system's RNG.
    pub fn generate() -> Result<Self, SecretError> {
        let mut b = [0u8; KEY_LEN];
        getrandom::fill(&mut b).map_err(SecretError)?;
        Ok(Self(b))
    }

    /// Wraps given bytes (tests, or a caller with its own entropy source).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The key that makes the first tag of tokens whose guard version lies in `range`, while
    /// that range is in its `generation`.
    pub(crate) fn range_key(
        &self,
        id: ControllerId,
        range: u32,
        generation: u64,
    ) -> Zeroizing<[u8; KEY_LEN]> {
        let mut material = Zeroizing::new([0u8; KEY_LEN + 8 + 8 + 4 + 8]);
        Writer::new(&mut material[..])
            .bytes(&self.0)
            .bytes(&id.encode())
            .u32(range)
            .u64(generation);
        Zeroizing::new(blake3::derive_key(CTX_RANGE_KEY, &material[..]))
    }
}

impl Drop for NodeSecret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl core::fmt::Debug for NodeSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("NodeSecret(<secret>)")
    }
}

/// `tag_0` of a token with body encoding `body`.
pub(crate) fn root_tag(range_key: &[u8; KEY_LEN], body: &[u8]) -> [u8; KEY_LEN] {
    let mut h = blake3::Hasher::new_keyed(range_key);
    h.update(ROOT_LABEL);
    h.update(body);
    *h.finalize().as_bytes()
}

/// `tag_i` from `tag_{i-1}` and the encoding of caveat `i` (1-based).
pub(crate) fn caveat_tag(prev: &[u8; KEY_LEN], index: u8, caveat: &[u8]) -> [u8; KEY_LEN] {
    let mut h = blake3::Hasher::new_keyed(prev);
    h.update(CAVEAT_LABEL);
    h.update(&[index]);
    h.update(caveat);
    *h.finalize().as_bytes()
}

/// Constant-time tag comparison.
pub(crate) fn tags_equal(a: &[u8; KEY_LEN], b: &[u8; KEY_LEN]) -> bool {
    blake3::Hash::from_bytes(*a) == blake3::Hash::from_bytes(*b)
}

pub(crate) fn version_file_checksum(body: &[u8]) -> [u8; KEY_LEN] {
    let mut h = blake3::Hasher::new_derive_key(CTX_VERSION_FILE);
    h.update(body);
    *h.finalize().as_bytes()
}

pub(crate) fn version_file_checksum_matches(body: &[u8], sum: &[u8]) -> bool {
    match <[u8; KEY_LEN]>::try_from(sum) {
        Ok(sum) => tags_equal(&version_file_checksum(body), &sum),
        Err(_) => false,
    }
}
