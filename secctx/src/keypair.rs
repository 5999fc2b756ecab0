//! Key-pair objects: a public verifying-key object, which other objects name as their `kuid`,
//! and a secret signing-key object, stored readable by the owner only and, with a passphrase,
//! encrypted.
//!
//! Layouts (little-endian):
//!
//! - verifying key: magic `TZVK`, version `1` (u16), reserved `0` (u16), the scheme-tagged
//!   [`VerifyingKey`] encoding;
//! - signing key: magic `TZSK`, version `1` (u16), protection (u16: `0` none, `1` Argon2id +
//!   XChaCha20-Poly1305), the verifying-key object's id (16); then, unprotected, the
//!   [`SigningKey`] encoding; protected, Argon2id memory (KiB), passes and lanes (u32 each), a
//!   16-byte salt, a 24-byte nonce and the ciphertext of the encoding with its 16-byte tag. The
//!   AEAD's associated data is everything before the salt plus the object's own id, so a
//!   ciphertext moved to another object, or a downgraded header, does not decrypt.
//!
//! | offset | size | verifying key (`TZVK`, 138 bytes) |
//! |---|---|---|
//! | 0 | 4 | magic `TZVK` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 130 | [`VerifyingKey`] encoding: scheme (1), length (1), key zero-padded to 128 |
//!
//! | offset | size | signing key (`TZSK`; 154 bytes plain, 222 sealed) |
//! |---|---|---|
//! | 0 | 4 | magic `TZSK` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | protection: 0 plain, 1 sealed |
//! | 8 | 16 | the verifying-key object's id |
//! | 24 | 130 | plain: the [`SigningKey`] encoding (scheme, length, secret zero-padded to 128) |
//! | 24 | 12 | sealed: Argon2id memory (KiB), passes, lanes (u32 each) |
//! | 36 | 16 | sealed: salt |
//! | 52 | 24 | sealed: XChaCha20 nonce |
//! | 76 | 146 | sealed: ciphertext of the [`SigningKey`] encoding (130) and its tag (16) |

use std::fmt;

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand_core::CryptoRng;
use twizzler_capsec::codec::{Reader, VecWriter};
use twizzler_capsec::{
    DecodeError, KEY_ENCODED_LEN, ObjID, SigningKey, SigningScheme, VerifyingKey,
};
use zeroize::Zeroizing;

use crate::store::{ObjMeta, Object, ObjectStore, StoreError};

const VK_MAGIC: u32 = u32::from_le_bytes(*b"TZVK");
const SK_MAGIC: u32 = u32::from_le_bytes(*b"TZSK");
const VERSION: u16 = 1;
const PLAIN: u16 = 0;
const SEALED: u16 = 1;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Argon2id cost parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfParams {
    /// Memory, in KiB.
    pub memory_kib: u32,
    /// Passes over memory.
    pub passes: u32,
    /// Lanes.
    pub lanes: u32,
}

impl KdfParams {
    /// The default: 19 MiB, 2 passes, 1 lane (OWASP's Argon2id recommendation).
    pub const DEFAULT: KdfParams = KdfParams {
        memory_kib: 19 * 1024,
        passes: 2,
        lanes: 1,
    };
}

/// The ids of a key pair's two objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPairIds {
    /// The secret signing-key object.
    pub signing: ObjID,
    /// The public verifying-key object: the `kuid` of the objects this key signs for.
    pub verifying: ObjID,
}

/// Why a key object could not be created or read.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyError {
    /// The store failed.
    Store(StoreError),
    /// The object is not a key object of the expected kind, or its bytes are damaged.
    Malformed {
        /// The object.
        id: ObjID,
        /// What is wrong.
        why: KeyFormatError,
    },
    /// The signing key is passphrase-protected and no passphrase was given.
    PassphraseRequired(ObjID),
    /// The passphrase is wrong (or the object was tampered with).
    WrongPassphrase(ObjID),
    /// The key-derivation parameters are out of range.
    Kdf(String),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::Malformed { id, why } => write!(f, "key object {id}: {why}"),
            Self::PassphraseRequired(id) => {
                write!(
                    f,
                    "signing key {id} is passphrase-protected: a passphrase is required"
                )
            }
            Self::WrongPassphrase(id) => write!(
                f,
                "signing key {id}: wrong passphrase (or the object was tampered with)"
            ),
            Self::Kdf(why) => write!(f, "key derivation: {why}"),
        }
    }
}

impl std::error::Error for KeyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for KeyError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Why an object's bytes are not a key object of the expected kind (see the layouts in the
/// [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFormatError {
    /// The header does not frame as the layout says: magic, version, truncation, trailing
    /// bytes.
    Header(DecodeError),
    /// A verifying-key object's reserved field is not zero.
    Reserved(u16),
    /// A signing-key object's protection is neither plain nor sealed.
    UnknownProtection(u16),
    /// A sealed key's Argon2id costs are beyond what this build accepts.
    KdfOutOfRange(KdfParams),
    /// A sealed key's ciphertext is not an encoded key and its tag.
    CiphertextLength(usize),
    /// The verifying key's encoding.
    VerifyingKey(DecodeError),
    /// The signing key's encoding.
    SigningKey(DecodeError),
}

impl fmt::Display for KeyFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(e) => write!(f, "not a key object of this kind: {e}"),
            Self::Reserved(v) => write!(f, "reserved field is {v:#06x}, not 0"),
            Self::UnknownProtection(p) => write!(f, "unknown protection {p}"),
            Self::KdfOutOfRange(k) => write!(
                f,
                "key-derivation parameters out of range ({} KiB, {} passes, {} lanes)",
                k.memory_kib, k.passes, k.lanes
            ),
            Self::CiphertextLength(n) => write!(
                f,
                "ciphertext has the wrong length ({n}, expected {})",
                KEY_ENCODED_LEN + TAG_LEN
            ),
            Self::VerifyingKey(e) => write!(f, "verifying key: {e}"),
            Self::SigningKey(e) => write!(f, "signing key: {e}"),
        }
    }
}

impl std::error::Error for KeyFormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Header(e) | Self::VerifyingKey(e) | Self::SigningKey(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DecodeError> for KeyFormatError {
    fn from(e: DecodeError) -> Self {
        Self::Header(e)
    }
}

/// A fresh random object id.
pub fn random_id<R: CryptoRng + ?Sized>(rng: &mut R) -> ObjID {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    ObjID::from_le_bytes(b)
}

/// Generates a key pair of `scheme` and stores it as two new objects; with a passphrase the
/// signing key is encrypted under a key derived with `kdf`.
///
/// # Example
///
/// ```
/// use rand_core::SeedableRng;
/// use secctx::{MemStore, ObjectStore, keypair};
/// use twizzler_capsec::SigningScheme;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // the OS RNG in real use
/// let store = MemStore::new();
/// let kdf = keypair::KdfParams::DEFAULT;
/// let (ids, key) = keypair::create_keypair(&store, SigningScheme::Ed25519, None, kdf, &mut rng)?;
///
/// // The verifying-key object is public; the signing-key object is marked secret.
/// assert_eq!(keypair::load_verifying_key(&store, ids.verifying)?, key.verifying_key());
/// assert!(store.info(ids.signing)?.meta.secret);
/// # Ok(())
/// # }
/// ```
pub fn create_keypair<S: ObjectStore, R: CryptoRng + ?Sized>(
    store: &S,
    scheme: SigningScheme,
    passphrase: Option<&str>,
    kdf: KdfParams,
    rng: &mut R,
) -> Result<(KeyPairIds, SigningKey), KeyError> {
    let key = SigningKey::generate(scheme, rng);
    let ids = KeyPairIds {
        signing: random_id(rng),
        verifying: random_id(rng),
    };
    store_keypair(store, &key, ids, passphrase, kdf, rng)?;
    Ok((ids, key))
}

/// Stores an existing signing key as a key pair with the given object ids (for imports).
pub fn store_keypair<S: ObjectStore, R: CryptoRng + ?Sized>(
    store: &S,
    key: &SigningKey,
    ids: KeyPairIds,
    passphrase: Option<&str>,
    kdf: KdfParams,
    rng: &mut R,
) -> Result<(), KeyError> {
    store_keypair_named(store, key, ids, passphrase, kdf, rng, None)
}

/// [`store_keypair`], and, with a `name`, names the signing key `name` and the verifying key
/// `name.pub` in the same transaction (see [`crate::store::check_name`]).
pub fn store_keypair_named<S: ObjectStore, R: CryptoRng + ?Sized>(
    store: &S,
    key: &SigningKey,
    ids: KeyPairIds,
    passphrase: Option<&str>,
    kdf: KdfParams,
    rng: &mut R,
    name: Option<&str>,
) -> Result<(), KeyError> {
    // A bad name fails before the (slow) key derivation.
    let names = name.map(|n| (n.to_owned(), format!("{n}.pub")));
    if let Some((sk, vk)) = &names {
        crate::store::check_name(sk)?;
        crate::store::check_name(vk)?;
    }
    let sk_data = seal_signing_key(key, ids, passphrase, kdf, rng)?;
    // Both halves (and their names) in one transaction: a key pair is never half there.
    store.transact(|tx| {
        tx.create(&verifying_key_object(ids.verifying, &key.verifying_key()))?;
        tx.create(&Object {
            id: ids.signing,
            meta: ObjMeta {
                secret: true,
                ..ObjMeta::plain()
            },
            data: sk_data.to_vec(),
        })?;
        if let Some((sk, vk)) = &names {
            tx.set_name(sk, ids.signing)?;
            tx.set_name(vk, ids.verifying)?;
        }
        Ok::<(), KeyError>(())
    })
}

/// The object that holds verifying key `key` as object `id` (see [`store_verifying_key`]).
pub fn verifying_key_object(id: ObjID, key: &VerifyingKey) -> Object {
    let mut w = VecWriter::with_capacity(8 + KEY_ENCODED_LEN);
    w.u32(VK_MAGIC).u16(VERSION).u16(0).bytes(&key.encode());
    Object {
        id,
        meta: ObjMeta::plain(),
        data: w.into_vec(),
    }
}

/// Stores a verifying key alone as object `id` (a public key imported without its secret
/// half); it can then be the `kuid` of objects.
pub fn store_verifying_key<S: ObjectStore>(
    store: &S,
    id: ObjID,
    key: &VerifyingKey,
) -> Result<(), KeyError> {
    store.create(&verifying_key_object(id, key))?;
    Ok(())
}

fn argon2(kdf: KdfParams) -> Result<Argon2<'static>, KeyError> {
    let params = Params::new(kdf.memory_kib, kdf.passes, kdf.lanes, Some(32))
        .map_err(|e| KeyError::Kdf(e.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

fn derive(passphrase: &str, salt: &[u8], kdf: KdfParams) -> Result<Zeroizing<[u8; 32]>, KeyError> {
    let mut out = Zeroizing::new([0u8; 32]);
    argon2(kdf)?
        .hash_password_into(passphrase.as_bytes(), salt, &mut out[..])
        .map_err(|e| KeyError::Kdf(e.to_string()))?;
    Ok(out)
}

fn seal_signing_key<R: CryptoRng + ?Sized>(
    key: &SigningKey,
    ids: KeyPairIds,
    passphrase: Option<&str>,
    kdf: KdfParams,
    rng: &mut R,
) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    let encoded = key.encode();
    let Some(pass) = passphrase else {
        let mut w = VecWriter::with_capacity(24 + KEY_ENCODED_LEN);
        w.u32(SK_MAGIC)
            .u16(VERSION)
            .u16(PLAIN)
            .u128(ids.verifying.raw())
            .bytes(&encoded[..]);
        return Ok(Zeroizing::new(w.into_vec()));
    };
    let mut out = Zeroizing::new(sealed_header(ids.verifying, kdf));
    let aad = associated_data(&out, ids.signing);
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut salt);
    rng.fill_bytes(&mut nonce);
    let k = derive(pass, &salt, kdf)?;
    let cipher = XChaCha20Poly1305::new(k.as_ref().into());
    let ct = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: &encoded[..],
                aad: &aad,
            },
        )
        .map_err(|_| KeyError::Kdf("encryption failed".into()))?;
    out.extend_from_slice(&salt);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    Ok(out)
}

/// The header of a sealed signing-key object, up to the salt: what its AEAD authenticates.
fn sealed_header(verifying: ObjID, kdf: KdfParams) -> Vec<u8> {
    let mut w = VecWriter::with_capacity(128);
    w.u32(SK_MAGIC)
        .u16(VERSION)
        .u16(SEALED)
        .u128(verifying.raw())
        .u32(kdf.memory_kib)
        .u32(kdf.passes)
        .u32(kdf.lanes);
    w.into_vec()
}

fn associated_data(header: &[u8], own_id: ObjID) -> Vec<u8> {
    let mut w = VecWriter::with_capacity(header.len() + 16);
    w.bytes(header).u128(own_id.raw());
    w.into_vec()
}

fn malformed(id: ObjID) -> impl FnOnce(KeyFormatError) -> KeyError {
    move |why| KeyError::Malformed { id, why }
}

/// Reads the verifying key stored in object `id`.
pub fn load_verifying_key<S: ObjectStore>(store: &S, id: ObjID) -> Result<VerifyingKey, KeyError> {
    parse_verifying_key(&store.get(id)?)
}

/// Parses a verifying-key object.
pub fn parse_verifying_key(obj: &Object) -> Result<VerifyingKey, KeyError> {
    decode_verifying_key(&obj.data).map_err(malformed(obj.id))
}

fn decode_verifying_key(d: &[u8]) -> Result<VerifyingKey, KeyFormatError> {
    let mut r = Reader::new(d);
    r.magic(VK_MAGIC)?;
    r.version(VERSION)?;
    let reserved = r.u16()?;
    if reserved != 0 {
        return Err(KeyFormatError::Reserved(reserved));
    }
    VerifyingKey::decode(r.rest()).map_err(KeyFormatError::VerifyingKey)
}

/// What a signing-key object says about itself without decrypting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigningKeyInfo {
    /// Its verifying-key object.
    pub verifying: ObjID,
    /// Whether it is passphrase-protected.
    pub protected: bool,
}

/// Reads a signing-key object's header.
pub fn signing_key_info(obj: &Object) -> Result<SigningKeyInfo, KeyError> {
    signing_key_header(&mut Reader::new(&obj.data)).map_err(malformed(obj.id))
}

/// Reads the header of a signing-key object: magic, version, protection, verifying-key id.
fn signing_key_header(r: &mut Reader<'_>) -> Result<SigningKeyInfo, KeyFormatError> {
    r.magic(SK_MAGIC)?;
    r.version(VERSION)?;
    let protected = match r.u16()? {
        PLAIN => false,
        SEALED => true,
        p => return Err(KeyFormatError::UnknownProtection(p)),
    };
    let verifying = ObjID::new(r.u128()?);
    Ok(SigningKeyInfo {
        verifying,
        protected,
    })
}

/// Reads (and with a passphrase, decrypts) the signing key stored in object `id`.
pub fn load_signing_key<S: ObjectStore>(
    store: &S,
    id: ObjID,
    passphrase: Option<&str>,
) -> Result<SigningKey, KeyError> {
    let obj = store.get(id)?;
    let bad = malformed(id);
    let mut r = Reader::new(&obj.data);
    let info = signing_key_header(&mut r).map_err(malformed(id))?;
    if !info.protected {
        return SigningKey::decode(r.rest()).map_err(|e| bad(KeyFormatError::SigningKey(e)));
    }
    let pass = passphrase.ok_or(KeyError::PassphraseRequired(id))?;
    let sealed = (|| {
        let kdf = KdfParams {
            memory_kib: r.u32()?,
            passes: r.u32()?,
            lanes: r.u32()?,
        };
        // Refuse absurd costs from a hostile file before allocating for them (4 GiB, 64
        // passes).
        if kdf.memory_kib > 4 * 1024 * 1024 || kdf.passes > 64 || kdf.lanes > 64 {
            return Err(KeyFormatError::KdfOutOfRange(kdf));
        }
        let salt: [u8; SALT_LEN] = r.array()?;
        let nonce: [u8; NONCE_LEN] = r.array()?;
        let ct = r.rest();
        if ct.len() != KEY_ENCODED_LEN + TAG_LEN {
            return Err(KeyFormatError::CiphertextLength(ct.len()));
        }
        Ok((kdf, salt, nonce, ct))
    })();
    let (kdf, salt, nonce, ct) = sealed.map_err(bad)?;
    let aad = associated_data(&sealed_header(info.verifying, kdf), id);
    let k = derive(pass, &salt, kdf)?;
    let cipher = XChaCha20Poly1305::new(k.as_ref().into());
    let plain = Zeroizing::new(
        cipher
            .decrypt(XNonce::from_slice(&nonce), Payload { msg: ct, aad: &aad })
            .map_err(|_| KeyError::WrongPassphrase(id))?,
    );
    SigningKey::decode(&plain).map_err(|e| malformed(id)(KeyFormatError::SigningKey(e)))
}
