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
use twizzler_capsec::{KEY_ENCODED_LEN, ObjID, SigningKey, SigningScheme, VerifyingKey};
use zeroize::Zeroizing;

use crate::store::{ObjMeta, Object, ObjectStore, StoreError};

const VK_MAGIC: &[u8; 4] = b"TZVK";
const SK_MAGIC: &[u8; 4] = b"TZSK";
const VERSION: u16 = 1;
const PLAIN: u16 = 0;
const SEALED: u16 = 1;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Header of a signing-key object: magic, version, protection, verifying-key id.
const SK_HEADER: usize = 4 + 2 + 2 + 16;

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
        why: String,
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
    let mut data = Vec::with_capacity(8 + KEY_ENCODED_LEN);
    data.extend_from_slice(VK_MAGIC);
    data.extend_from_slice(&VERSION.to_le_bytes());
    data.extend_from_slice(&0u16.to_le_bytes());
    data.extend_from_slice(&key.encode());
    Object {
        id,
        meta: ObjMeta::plain(),
        data,
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
    let mut out = Zeroizing::new(Vec::with_capacity(128));
    out.extend_from_slice(SK_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    let encoded = key.encode();
    let Some(pass) = passphrase else {
        out.extend_from_slice(&PLAIN.to_le_bytes());
        out.extend_from_slice(&ids.verifying.to_le_bytes());
        out.extend_from_slice(&encoded[..]);
        return Ok(out);
    };
    out.extend_from_slice(&SEALED.to_le_bytes());
    out.extend_from_slice(&ids.verifying.to_le_bytes());
    for v in [kdf.memory_kib, kdf.passes, kdf.lanes] {
        out.extend_from_slice(&v.to_le_bytes());
    }
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

fn associated_data(header: &[u8], own_id: ObjID) -> Vec<u8> {
    let mut aad = header.to_vec();
    aad.extend_from_slice(&own_id.to_le_bytes());
    aad
}

fn malformed(id: ObjID, why: impl Into<String>) -> KeyError {
    KeyError::Malformed {
        id,
        why: why.into(),
    }
}

/// Reads the verifying key stored in object `id`.
pub fn load_verifying_key<S: ObjectStore>(store: &S, id: ObjID) -> Result<VerifyingKey, KeyError> {
    parse_verifying_key(&store.get(id)?)
}

/// Parses a verifying-key object.
pub fn parse_verifying_key(obj: &Object) -> Result<VerifyingKey, KeyError> {
    let id = obj.id;
    let d = &obj.data;
    if d.get(..4) != Some(&VK_MAGIC[..]) {
        return Err(malformed(id, "not a verifying-key object (bad magic)"));
    }
    match d.get(4..8) {
        Some([1, 0, 0, 0]) => {}
        Some(_) => {
            return Err(malformed(
                id,
                "unsupported version or non-zero reserved field",
            ));
        }
        None => return Err(malformed(id, "truncated header")),
    }
    let rest = d.get(8..).unwrap_or_default();
    VerifyingKey::decode(rest).map_err(|e| malformed(id, format!("verifying key: {e}")))
}

/// What a signing-key object says about itself without decrypting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigningKeyInfo {
    /// Its verifying-key object.
    pub verifying: ObjID,
    /// Whether it is passphrase-protected.
    pub protected: bool,
}

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// Reads a signing-key object's header.
pub fn signing_key_info(obj: &Object) -> Result<SigningKeyInfo, KeyError> {
    let id = obj.id;
    let d = &obj.data;
    if d.get(..4) != Some(&SK_MAGIC[..]) {
        return Err(malformed(id, "not a signing-key object (bad magic)"));
    }
    match u16_at(d, 4) {
        Some(VERSION) => {}
        Some(v) => return Err(malformed(id, format!("unsupported version {v}"))),
        None => return Err(malformed(id, "truncated header")),
    }
    let protected = match u16_at(d, 6) {
        Some(PLAIN) => false,
        Some(SEALED) => true,
        Some(p) => return Err(malformed(id, format!("unknown protection {p}"))),
        None => return Err(malformed(id, "truncated header")),
    };
    let vid = d
        .get(8..SK_HEADER)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .ok_or_else(|| malformed(id, "truncated header"))?;
    Ok(SigningKeyInfo {
        verifying: ObjID::from_le_bytes(vid),
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
    let info = signing_key_info(&obj)?;
    let d = &obj.data;
    let body = d.get(SK_HEADER..).unwrap_or_default();
    if !info.protected {
        return SigningKey::decode(body).map_err(|e| malformed(id, format!("signing key: {e}")));
    }
    let pass = passphrase.ok_or(KeyError::PassphraseRequired(id))?;
    let params_end = SK_HEADER + 12;
    let kdf = KdfParams {
        memory_kib: u32_at(d, SK_HEADER).ok_or_else(|| malformed(id, "truncated"))?,
        passes: u32_at(d, SK_HEADER + 4).ok_or_else(|| malformed(id, "truncated"))?,
        lanes: u32_at(d, SK_HEADER + 8).ok_or_else(|| malformed(id, "truncated"))?,
    };
    // Refuse absurd costs from a hostile file before allocating for them (4 GiB, 64 passes).
    if kdf.memory_kib > 4 * 1024 * 1024 || kdf.passes > 64 || kdf.lanes > 64 {
        return Err(malformed(id, "key-derivation parameters out of range"));
    }
    let salt = d
        .get(params_end..params_end + SALT_LEN)
        .ok_or_else(|| malformed(id, "truncated salt"))?;
    let nonce = d
        .get(params_end + SALT_LEN..params_end + SALT_LEN + NONCE_LEN)
        .ok_or_else(|| malformed(id, "truncated nonce"))?;
    let ct = d
        .get(params_end + SALT_LEN + NONCE_LEN..)
        .unwrap_or_default();
    if ct.len() != KEY_ENCODED_LEN + TAG_LEN {
        return Err(malformed(id, "ciphertext has the wrong length"));
    }
    let header = d.get(..params_end).unwrap_or_default();
    let aad = associated_data(header, id);
    let k = derive(pass, salt, kdf)?;
    let cipher = XChaCha20Poly1305::new(k.as_ref().into());
    let plain = Zeroizing::new(
        cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
            .map_err(|_| KeyError::WrongPassphrase(id))?,
    );
    SigningKey::decode(&plain).map_err(|e| malformed(id, format!("signing key: {e}")))
}
