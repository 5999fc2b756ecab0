//! Scheme-tagged signing keys, verifying keys and signatures.
//!
//! Keys and signatures are stored as fixed-size, scheme-tagged buffers (`scheme: u8`,
//! `len: u8`, then [`MAX_KEY_LEN`] or [`MAX_SIG_LEN`] bytes, zero-padded), so that a scheme with
//! larger keys can be added without changing the layout of stored objects. In memory,
//! keys are kept parsed: a [`VerifyingKey`] holds the curve point, so verifying never re-parses.
//!
//! Layout of an encoded key ([`KEY_ENCODED_LEN`] bytes) or signature ([`SIG_ENCODED_LEN`]
//! bytes); there is no magic or version, the enclosing format carries them:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | scheme tag: 1 Ed25519, 2 ECDSA P-256 |
//! | 1 | 1 | length of the meaningful bytes, exactly the scheme's |
//! | 2 | 128 | the bytes, then zeros (non-zero padding is refused) |
//!
//! The meaningful bytes: an Ed25519 verifying key is its 32-byte compressed point and a
//! signing key its 32-byte seed; a P-256 verifying key is the 65-byte uncompressed SEC1 point
//! and a signing key the 32-byte big-endian scalar; a signature is 64 bytes (Ed25519 `R || s`,
//! P-256 `r || s` big-endian, low-S) for both schemes.
//!
//! Signatures are non-malleable: Ed25519 uses strict verification, and ECDSA P-256 signatures
//! must have a low `s` (signing always produces one). Together with canonical encodings, this
//! makes a record's [`RecordId`](crate::RecordId) unique, so revoking a record by its id cannot
//! be dodged by re-encoding its signature.

use core::fmt;

use rand_core::CryptoRng;
use zeroize::Zeroizing;

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, SignError, VerifyError};

/// Largest key, in bytes, that the stored layout has room for.
pub const MAX_KEY_LEN: usize = 128;
/// Largest signature, in bytes, that the stored layout has room for.
pub const MAX_SIG_LEN: usize = 128;
/// Encoded size of a key: scheme tag, length, [`MAX_KEY_LEN`] bytes.
pub const KEY_ENCODED_LEN: usize = 2 + MAX_KEY_LEN;
/// Encoded size of a signature: scheme tag, length, [`MAX_SIG_LEN`] bytes.
pub const SIG_ENCODED_LEN: usize = 2 + MAX_SIG_LEN;

const ED25519_PUBLIC_LEN: usize = 32;
const ED25519_SECRET_LEN: usize = 32;
#[cfg(feature = "p256")]
const P256_PUBLIC_LEN: usize = 65; // SEC1 uncompressed point
#[cfg(feature = "p256")]
const P256_SECRET_LEN: usize = 32;
const SIGNATURE_LEN: usize = 64; // both schemes: R||s or r||s

/// A signature scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u8)]
pub enum SigningScheme {
    /// Ed25519 (RFC 8032), verified strictly. The default: about 8x faster to verify than P-256.
    #[default]
    Ed25519 = 1,
    /// ECDSA over NIST P-256 with SHA-256, low-S, compatible with upstream Twizzler.
    #[cfg(feature = "p256")]
    EcdsaP256 = 2,
}

impl SigningScheme {
    /// Parses the stored tag.
    pub const fn from_tag(tag: u8) -> Result<Self, DecodeError> {
        match tag {
            1 => Ok(Self::Ed25519),
            #[cfg(feature = "p256")]
            2 => Ok(Self::EcdsaP256),
            #[cfg(not(feature = "p256"))]
            2 => Err(DecodeError::NotBuiltIn("ECDSA P-256")),
            t => Err(DecodeError::UnknownScheme(t)),
        }
    }

    /// The stored tag.
    pub const fn tag(self) -> u8 {
        self as u8
    }

    /// Length of a verifying key of this scheme, in bytes.
    pub const fn public_key_len(self) -> usize {
        match self {
            Self::Ed25519 => ED25519_PUBLIC_LEN,
            #[cfg(feature = "p256")]
            Self::EcdsaP256 => P256_PUBLIC_LEN,
        }
    }

    /// Length of a signing key of this scheme, in bytes.
    pub const fn secret_key_len(self) -> usize {
        match self {
            Self::Ed25519 => ED25519_SECRET_LEN,
            #[cfg(feature = "p256")]
            Self::EcdsaP256 => P256_SECRET_LEN,
        }
    }

    /// Length of a signature of this scheme, in bytes.
    pub const fn signature_len(self) -> usize {
        SIGNATURE_LEN
    }

    /// A short lower-case name (`ed25519`, `p256`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ed25519 => "ed25519",
            #[cfg(feature = "p256")]
            Self::EcdsaP256 => "p256",
        }
    }
}

impl fmt::Display for SigningScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads a tagged, padded buffer: returns the scheme and the meaningful bytes.
fn read_tagged<'a, const MAX: usize>(
    r: &mut Reader<'a>,
    what: &'static str,
    expected_len: fn(SigningScheme) -> usize,
) -> Result<(SigningScheme, &'a [u8]), DecodeError> {
    let scheme = SigningScheme::from_tag(r.u8()?)?;
    let len = usize::from(r.u8()?);
    let buf = r.take(MAX)?;
    if len != expected_len(scheme) {
        return Err(DecodeError::BadLength { what, len });
    }
    let (data, pad) = buf
        .split_at_checked(len)
        .ok_or(DecodeError::BadLength { what, len })?;
    if pad.iter().any(|&b| b != 0) {
        return Err(DecodeError::NonZeroPadding(what));
    }
    Ok((scheme, data))
}

/// Writes a tagged, padded buffer.
fn write_tagged<const MAX: usize>(w: &mut Writer<'_>, scheme: SigningScheme, data: &[u8]) {
    debug_assert!(data.len() <= MAX);
    let mut padded = [0u8; MAX];
    if let Some(dst) = padded.get_mut(..data.len()) {
        dst.copy_from_slice(data);
    }
    // Lengths are at most MAX_KEY_LEN / MAX_SIG_LEN = 128, so they fit a u8.
    w.u8(scheme.tag()).u8(data.len() as u8).bytes(&padded);
}

/// A signature: scheme tag and the signature bytes (not parsed until verified).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature {
    scheme: SigningScheme,
    bytes: [u8; SIGNATURE_LEN],
}

impl Signature {
    /// The scheme that made it.
    pub const fn scheme(&self) -> SigningScheme {
        self.scheme
    }

    /// The raw signature bytes (Ed25519: `R || s`; P-256: `r || s`, big-endian).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Builds a signature from its raw bytes (length checked; validity is checked on verify).
    pub fn from_raw(scheme: SigningScheme, bytes: &[u8]) -> Result<Self, DecodeError> {
        let bytes: [u8; SIGNATURE_LEN] = bytes.try_into().map_err(|_| DecodeError::BadLength {
            what: "signature",
            len: bytes.len(),
        })?;
        Ok(Self { scheme, bytes })
    }

    /// The signature in DER (ECDSA) or raw (Ed25519) form, as OpenSSL expects it.
    #[cfg(feature = "alloc")]
    pub fn to_openssl(&self) -> Result<alloc::vec::Vec<u8>, VerifyError> {
        match self.scheme {
            SigningScheme::Ed25519 => Ok(self.bytes.to_vec()),
            #[cfg(feature = "p256")]
            SigningScheme::EcdsaP256 => {
                let sig = p256::ecdsa::Signature::from_slice(&self.bytes)
                    .map_err(|_| VerifyError::MalformedSignature)?;
                Ok(sig.to_der().as_bytes().to_vec())
            }
        }
    }

    pub(crate) fn encode_into(&self, w: &mut Writer<'_>) {
        write_tagged::<MAX_SIG_LEN>(w, self.scheme, &self.bytes);
    }

    pub(crate) fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (scheme, data) =
            read_tagged::<MAX_SIG_LEN>(r, "signature", SigningScheme::signature_len)?;
        Self::from_raw(scheme, data)
    }

    /// The stored encoding ([`SIG_ENCODED_LEN`] bytes).
    pub fn encode(&self) -> [u8; SIG_ENCODED_LEN] {
        let mut out = [0u8; SIG_ENCODED_LEN];
        self.encode_into(&mut Writer::new(&mut out));
        out
    }

    /// Decodes the stored encoding (total: any input gives a value or an error).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let sig = Self::decode_from(&mut r)?;
        r.finish()?;
        Ok(sig)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({}, ", self.scheme)?;
        for b in &self.bytes[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// A parsed verifying (public) key.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifyingKey(VerifyingInner);

#[derive(Clone, PartialEq, Eq)]
enum VerifyingInner {
    Ed25519(ed25519_dalek::VerifyingKey),
    #[cfg(feature = "p256")]
    P256(p256::ecdsa::VerifyingKey),
}

/// Raw key bytes, as returned by [`VerifyingKey::to_raw`] and [`SigningKey::to_raw`].
pub type KeyBytes = heapless::Vec<u8, MAX_KEY_LEN>;

impl VerifyingKey {
    /// The key's scheme.
    pub fn scheme(&self) -> SigningScheme {
        match self.0 {
            VerifyingInner::Ed25519(_) => SigningScheme::Ed25519,
            #[cfg(feature = "p256")]
            VerifyingInner::P256(_) => SigningScheme::EcdsaP256,
        }
    }

    /// Parses raw key bytes: 32 bytes for Ed25519, a 65-byte uncompressed SEC1 point for P-256.
    /// Non-canonical encodings and, for Ed25519, small-order (weak) keys are rejected.
    pub fn from_raw(scheme: SigningScheme, bytes: &[u8]) -> Result<Self, DecodeError> {
        let bad_len = || DecodeError::BadLength {
            what: "verifying key",
            len: bytes.len(),
        };
        match scheme {
            SigningScheme::Ed25519 => {
                let arr: &[u8; ED25519_PUBLIC_LEN] = bytes.try_into().map_err(|_| bad_len())?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(arr)
                    .map_err(|_| DecodeError::InvalidKey)?;
                if key.to_edwards().compress().as_bytes() != arr {
                    return Err(DecodeError::NonCanonical("Ed25519 verifying key"));
                }
                if key.is_weak() {
                    return Err(DecodeError::InvalidKey);
                }
                Ok(Self(VerifyingInner::Ed25519(key)))
            }
            #[cfg(feature = "p256")]
            SigningScheme::EcdsaP256 => {
                if bytes.len() != P256_PUBLIC_LEN {
                    return Err(bad_len());
                }
                let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes)
                    .map_err(|_| DecodeError::InvalidKey)?;
                if key.to_sec1_point(false).as_bytes() != bytes {
                    return Err(DecodeError::NonCanonical("P-256 verifying key"));
                }
                Ok(Self(VerifyingInner::P256(key)))
            }
        }
    }

    /// The raw key bytes (see [`VerifyingKey::from_raw`]).
    pub fn to_raw(&self) -> KeyBytes {
        let mut out = KeyBytes::new();
        let res = match &self.0 {
            VerifyingInner::Ed25519(k) => out.extend_from_slice(k.as_bytes()),
            #[cfg(feature = "p256")]
            VerifyingInner::P256(k) => out.extend_from_slice(k.to_sec1_point(false).as_bytes()),
        };
        debug_assert!(res.is_ok(), "public keys fit MAX_KEY_LEN");
        out
    }

    /// The stored encoding ([`KEY_ENCODED_LEN`] bytes).
    pub fn encode(&self) -> [u8; KEY_ENCODED_LEN] {
        let mut out = [0u8; KEY_ENCODED_LEN];
        write_tagged::<MAX_KEY_LEN>(&mut Writer::new(&mut out), self.scheme(), &self.to_raw());
        out
    }

    /// Decodes the stored encoding (total: any input gives a value or an error).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let (scheme, data) =
            read_tagged::<MAX_KEY_LEN>(&mut r, "verifying key", SigningScheme::public_key_len)?;
        r.finish()?;
        Self::from_raw(scheme, data)
    }

    /// Verifies `sig` over `msg`.
    pub fn verify(&self, msg: &[u8], sig: &Signature) -> Result<(), VerifyError> {
        if sig.scheme() != self.scheme() {
            return Err(VerifyError::SchemeMismatch);
        }
        match &self.0 {
            VerifyingInner::Ed25519(k) => {
                let s = ed25519_dalek::Signature::from_bytes(&sig.bytes);
                k.verify_strict(msg, &s)
                    .map_err(|_| VerifyError::BadSignature)
            }
            #[cfg(feature = "p256")]
            VerifyingInner::P256(k) => {
                use p256::ecdsa::signature::Verifier;
                let s = p256::ecdsa::Signature::from_slice(&sig.bytes)
                    .map_err(|_| VerifyError::MalformedSignature)?;
                if s.normalize_s() != s {
                    // High-S: valid ECDSA, but a malleated copy of a low-S signature.
                    return Err(VerifyError::MalformedSignature);
                }
                k.verify(msg, &s).map_err(|_| VerifyError::BadSignature)
            }
        }
    }
}

impl fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VerifyingKey({}, ", self.scheme())?;
        for b in self.to_raw().iter().take(8) {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// Raw secret-key bytes, zeroed when dropped. Dereferences to the meaningful bytes.
pub struct SecretBytes {
    buf: [u8; MAX_KEY_LEN],
    len: usize,
}

impl SecretBytes {
    fn new(bytes: &[u8]) -> Self {
        let mut buf = [0u8; MAX_KEY_LEN];
        let len = bytes.len().min(MAX_KEY_LEN);
        if let (Some(dst), Some(src)) = (buf.get_mut(..len), bytes.get(..len)) {
            dst.copy_from_slice(src);
        }
        Self { buf, len }
    }
}

impl core::ops::Deref for SecretBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl Drop for SecretBytes {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.buf);
    }
}

/// A signing (private) key. Its secret is zeroed when dropped.
#[derive(Clone)]
pub struct SigningKey(SigningInner);

#[derive(Clone)]
enum SigningInner {
    Ed25519(ed25519_dalek::SigningKey),
    #[cfg(feature = "p256")]
    P256(p256::ecdsa::SigningKey),
}

impl SigningKey {
    /// Generates a fresh key from the caller's RNG (the kernel passes its own entropy source).
    ///
    /// # Example
    ///
    /// A key from the OS random number generator, and a signature its verifying key checks:
    ///
    /// ```
    /// use rand_core::UnwrapErr;
    /// use twizzler_capsec::{SigningKey, SigningScheme, VerifyingKey};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let key = SigningKey::generate(SigningScheme::Ed25519, &mut UnwrapErr(getrandom::SysRng));
    /// let public = key.verifying_key();
    ///
    /// let sig = key.sign(b"hello")?;
    /// public.verify(b"hello", &sig)?;
    /// assert!(public.verify(b"hullo", &sig).is_err());
    ///
    /// // The public half is what objects name by `kuid`; it round-trips through its encoding.
    /// assert_eq!(VerifyingKey::decode(&public.encode())?, public);
    /// # Ok(())
    /// # }
    /// ```
    pub fn generate<R: CryptoRng + ?Sized>(scheme: SigningScheme, rng: &mut R) -> Self {
        match scheme {
            SigningScheme::Ed25519 => {
                let mut seed = Zeroizing::new([0u8; ED25519_SECRET_LEN]);
                rng.fill_bytes(&mut seed[..]);
                Self(SigningInner::Ed25519(
                    ed25519_dalek::SigningKey::from_bytes(&seed),
                ))
            }
            #[cfg(feature = "p256")]
            SigningScheme::EcdsaP256 => {
                use p256::elliptic_curve::Generate;
                Self(SigningInner::P256(
                    p256::ecdsa::SigningKey::generate_from_rng(rng),
                ))
            }
        }
    }

    /// Least entropy [`SigningKey::from_entropy`] accepts, in bytes.
    pub const MIN_ENTROPY: usize = 32;

    /// Derives a fresh key from raw entropy bytes, for a caller whose random source is not a
    /// `rand_core` 0.10 RNG (Twizzler's kernel fills a buffer from its own entropy pool).
    ///
    /// `entropy` must hold at least [`SigningKey::MIN_ENTROPY`] bytes of full entropy; it is
    /// condensed with BLAKE3's key derivation (domain-separated per scheme), so any length
    /// above the minimum is fine. The same bytes give the same key.
    ///
    /// # Example
    ///
    /// ```
    /// use twizzler_capsec::{SigningKey, SigningScheme};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = [0x5a_u8; 32]; // in a kernel: bytes from its entropy pool
    /// let a = SigningKey::from_entropy(SigningScheme::EcdsaP256, &pool)?;
    /// let b = SigningKey::from_entropy(SigningScheme::EcdsaP256, &pool)?;
    /// assert_eq!(a.verifying_key(), b.verifying_key()); // same bytes, same key
    ///
    /// // Too little entropy is refused.
    /// assert!(SigningKey::from_entropy(SigningScheme::Ed25519, &pool[..16]).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_entropy(scheme: SigningScheme, entropy: &[u8]) -> Result<Self, DecodeError> {
        if entropy.len() < Self::MIN_ENTROPY {
            return Err(DecodeError::BadLength {
                what: "key-generation entropy",
                len: entropy.len(),
            });
        }
        let derive = |context: &str, counter: u8| {
            let mut h = blake3::Hasher::new_derive_key(context);
            h.update(entropy);
            h.update(&[counter]);
            Zeroizing::new(*h.finalize().as_bytes())
        };
        match scheme {
            SigningScheme::Ed25519 => {
                let seed = derive("twizzler-security 2026-11 keygen ed25519 v1", 0);
                Ok(Self(SigningInner::Ed25519(
                    ed25519_dalek::SigningKey::from_bytes(&seed),
                )))
            }
            #[cfg(feature = "p256")]
            SigningScheme::EcdsaP256 => {
                // A 256-bit string is a valid scalar (in 1..n) except with probability about
                // 2^-32; draw again with the next counter in that case.
                for counter in 0..=u8::MAX {
                    let candidate = derive("twizzler-security 2026-11 keygen p256 v1", counter);
                    if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&candidate[..]) {
                        return Ok(Self(SigningInner::P256(k)));
                    }
                }
                Err(DecodeError::BadLength {
                    what: "key-generation entropy (no valid scalar)",
                    len: entropy.len(),
                })
            }
        }
    }

    /// The key's scheme.
    pub fn scheme(&self) -> SigningScheme {
        match self.0 {
            SigningInner::Ed25519(_) => SigningScheme::Ed25519,
            #[cfg(feature = "p256")]
            SigningInner::P256(_) => SigningScheme::EcdsaP256,
        }
    }

    /// The matching verifying key.
    pub fn verifying_key(&self) -> VerifyingKey {
        match &self.0 {
            SigningInner::Ed25519(k) => VerifyingKey(VerifyingInner::Ed25519(k.verifying_key())),
            #[cfg(feature = "p256")]
            SigningInner::P256(k) => VerifyingKey(VerifyingInner::P256(*k.verifying_key())),
        }
    }

    /// Parses raw secret bytes: the 32-byte Ed25519 seed, or the 32-byte big-endian P-256
    /// scalar (which must be in `1..n`).
    pub fn from_raw(scheme: SigningScheme, bytes: &[u8]) -> Result<Self, DecodeError> {
        let bad_len = || DecodeError::BadLength {
            what: "signing key",
            len: bytes.len(),
        };
        match scheme {
            SigningScheme::Ed25519 => {
                let arr: &[u8; ED25519_SECRET_LEN] = bytes.try_into().map_err(|_| bad_len())?;
                Ok(Self(SigningInner::Ed25519(
                    ed25519_dalek::SigningKey::from_bytes(arr),
                )))
            }
            #[cfg(feature = "p256")]
            SigningScheme::EcdsaP256 => {
                if bytes.len() != P256_SECRET_LEN {
                    return Err(bad_len());
                }
                let key = p256::ecdsa::SigningKey::from_slice(bytes)
                    .map_err(|_| DecodeError::InvalidKey)?;
                Ok(Self(SigningInner::P256(key)))
            }
        }
    }

    /// The raw secret bytes, zeroed when dropped.
    pub fn to_raw(&self) -> SecretBytes {
        match &self.0 {
            SigningInner::Ed25519(k) => SecretBytes::new(k.as_bytes()),
            #[cfg(feature = "p256")]
            SigningInner::P256(k) => SecretBytes::new(&k.to_bytes()),
        }
    }

    /// The stored encoding ([`KEY_ENCODED_LEN`] bytes), zeroed when dropped.
    pub fn encode(&self) -> Zeroizing<[u8; KEY_ENCODED_LEN]> {
        let mut out = Zeroizing::new([0u8; KEY_ENCODED_LEN]);
        write_tagged::<MAX_KEY_LEN>(
            &mut Writer::new(&mut out[..]),
            self.scheme(),
            &self.to_raw(),
        );
        out
    }

    /// Decodes the stored encoding (total: any input gives a value or an error).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let (scheme, data) =
            read_tagged::<MAX_KEY_LEN>(&mut r, "signing key", SigningScheme::secret_key_len)?;
        r.finish()?;
        Self::from_raw(scheme, data)
    }

    /// Signs `msg`. ECDSA signatures are deterministic (RFC 6979) and low-S.
    pub fn sign(&self, msg: &[u8]) -> Result<Signature, SignError> {
        match &self.0 {
            SigningInner::Ed25519(k) => {
                use ed25519_dalek::Signer;
                let s = k.try_sign(msg).map_err(|_| SignError::Primitive)?;
                Ok(Signature {
                    scheme: SigningScheme::Ed25519,
                    bytes: s.to_bytes(),
                })
            }
            #[cfg(feature = "p256")]
            SigningInner::P256(k) => {
                use p256::ecdsa::signature::Signer;
                let s: p256::ecdsa::Signature =
                    k.try_sign(msg).map_err(|_| SignError::Primitive)?;
                let s = s.normalize_s();
                let mut bytes = [0u8; SIGNATURE_LEN];
                bytes.copy_from_slice(&s.to_bytes());
                Ok(Signature {
                    scheme: SigningScheme::EcdsaP256,
                    bytes,
                })
            }
        }
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({}, <secret>)", self.scheme())
    }
}
