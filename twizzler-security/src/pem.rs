//! PEM import and export (PKCS#8 for signing keys, SubjectPublicKeyInfo for verifying keys),
//! in the forms OpenSSL reads and writes.

use alloc::string::String;
use core::fmt;

use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use zeroize::Zeroizing;

use crate::keys::{SigningKey, SigningScheme, VerifyingKey};

/// Why PEM could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PemError {
    /// The text is not a PKCS#8 / SubjectPublicKeyInfo PEM key of a supported scheme.
    Unsupported,
    /// The DER inside could not be encoded or decoded.
    Der(String),
}

impl fmt::Display for PemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str(
                "not a PEM-encoded Ed25519 or P-256 key (expected PKCS#8 \"PRIVATE KEY\" or \"PUBLIC KEY\")",
            ),
            Self::Der(e) => write!(f, "PEM/DER error: {e}"),
        }
    }
}

impl core::error::Error for PemError {}

fn der_err(e: impl fmt::Display) -> PemError {
    PemError::Der(alloc::format!("{e}"))
}

impl SigningKey {
    /// PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), zeroed when dropped.
    pub fn to_pkcs8_pem(&self) -> Result<Zeroizing<String>, PemError> {
        let raw = self.to_raw();
        match self.scheme() {
            SigningScheme::Ed25519 => {
                // A PKCS#8 v1 document (RFC 8410 without the optional public key), as
                // `openssl genpkey -algorithm ed25519` writes it. ed25519-dalek's own export
                // writes v2 with the public key, which OpenSSL reads only from 3.5 on.
                let secret_key: [u8; 32] = raw[..].try_into().map_err(der_err)?;
                let mut doc = ed25519_dalek::ed25519::pkcs8::KeypairBytes {
                    secret_key,
                    public_key: None,
                };
                let pem = doc.to_pkcs8_pem(LineEnding::LF).map_err(der_err);
                // KeypairBytes zeroes itself only with ed25519's own `zeroize` feature.
                zeroize::Zeroize::zeroize(&mut doc.secret_key);
                pem
            }
            SigningScheme::EcdsaP256 => {
                let k = p256::ecdsa::SigningKey::from_slice(&raw).map_err(der_err)?;
                k.to_pkcs8_pem(LineEnding::LF).map_err(der_err)
            }
        }
    }

    /// Reads PKCS#8 PEM of either scheme.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, PemError> {
        if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_pem(pem) {
            return Self::from_raw(SigningScheme::Ed25519, k.as_bytes()).map_err(der_err);
        }
        if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_pem(pem) {
            return Self::from_raw(SigningScheme::EcdsaP256, &k.to_bytes()).map_err(der_err);
        }
        Err(PemError::Unsupported)
    }
}

impl VerifyingKey {
    /// SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn to_public_key_pem(&self) -> Result<String, PemError> {
        let raw = self.to_raw();
        match self.scheme() {
            SigningScheme::Ed25519 => {
                let arr: [u8; 32] = raw[..].try_into().map_err(der_err)?;
                let k = ed25519_dalek::VerifyingKey::from_bytes(&arr).map_err(der_err)?;
                k.to_public_key_pem(LineEnding::LF).map_err(der_err)
            }
            SigningScheme::EcdsaP256 => {
                let k = p256::ecdsa::VerifyingKey::from_sec1_bytes(&raw).map_err(der_err)?;
                k.to_public_key_pem(LineEnding::LF).map_err(der_err)
            }
        }
    }

    /// Reads SubjectPublicKeyInfo PEM of either scheme.
    pub fn from_public_key_pem(pem: &str) -> Result<Self, PemError> {
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_pem(pem) {
            return Self::from_raw(SigningScheme::Ed25519, k.as_bytes()).map_err(der_err);
        }
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_pem(pem) {
            return Self::from_raw(SigningScheme::EcdsaP256, k.to_sec1_point(false).as_bytes())
                .map_err(der_err);
        }
        Err(PemError::Unsupported)
    }
}
