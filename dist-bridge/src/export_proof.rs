//! Proof that the caller of `Export` runs in the security context it names.
//!
//! A capability names the context it was granted to (its accessor); whoever presents it must
//! show that it speaks for that context, wherever it connects from. It does so with a
//! signature by the **context object's `kuid` key**, the key the context signs delegations
//! with, over everything the export decides and when:
//!
//! ```text
//! message = "dist-bridge/export-proof/v1\0"
//!        || node (u64 LE)                      the owner node asked: not valid at another
//!        || time (u64 LE, ns since the epoch)   refused outside the node's skew window
//!        || nonce (16 bytes, random)            refused if seen within the window
//!        || context (16 bytes, LE)
//!        || rights (u32 LE) || offset (u64 LE) || len (u64 LE) || expires (u64 LE)
//!        || capability length (u32 LE) || capability (its canonical encoding)
//! ```
//!
//! The node finds the verifying key through the context object's `kuid` in its own store
//! (the same lookup as a capability's signer, key revocations included), checks the
//! signature, the time against its clock (± [`ReplayWindow`]'s skew), and that the nonce is
//! new. A captured request therefore cannot be replayed, redirected to another node, or
//! altered, and no address, proxy or TLS terminator is trusted for it.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;

use twizzler_capsec::{ObjID, SignError, Signature, SigningKey, VerifyingKey};

use crate::token::Scope;

/// Domain separation of the signed message.
pub const PROOF_DOMAIN: &[u8] = b"dist-bridge/export-proof/v1\0";
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;

/// A signed proof for one `Export` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportProof {
    /// When it was made (ns since the epoch).
    pub time: u64,
    /// A fresh random nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The context key's signature over [`proof_message`].
    pub signature: Signature,
}

/// What an export is: the part of the request the proof covers.
#[derive(Clone, Copy, Debug)]
pub struct ExportClaim<'a> {
    /// The owner node asked.
    pub node: u64,
    /// The capability's canonical encoding.
    pub cap: &'a [u8],
    /// The context the caller claims to run in.
    pub context: ObjID,
    /// The requested guard scope.
    pub scope: &'a Scope,
}

/// The signed message of a proof (see the [module docs](self)).
pub fn proof_message(claim: &ExportClaim<'_>, time: u64, nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut m = Vec::with_capacity(PROOF_DOMAIN.len() + 96 + claim.cap.len());
    m.extend_from_slice(PROOF_DOMAIN);
    m.extend_from_slice(&claim.node.to_le_bytes());
    m.extend_from_slice(&time.to_le_bytes());
    m.extend_from_slice(nonce);
    m.extend_from_slice(&claim.context.raw().to_le_bytes());
    m.extend_from_slice(&u32::from(claim.scope.rights.bits()).to_le_bytes());
    m.extend_from_slice(&claim.scope.range.offset().to_le_bytes());
    m.extend_from_slice(&claim.scope.range.len().to_le_bytes());
    m.extend_from_slice(&claim.scope.expires.raw().to_le_bytes());
    let cap_len = u32::try_from(claim.cap.len()).unwrap_or(u32::MAX);
    m.extend_from_slice(&cap_len.to_le_bytes());
    m.extend_from_slice(claim.cap);
    m
}

/// Why a proof could not be made.
#[derive(Debug)]
pub enum ProveError {
    /// No randomness for the nonce.
    Random(getrandom::Error),
    /// The key could not sign.
    Sign(SignError),
}

impl fmt::Display for ProveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Random(e) => write!(f, "no randomness for the export nonce: {e}"),
            Self::Sign(e) => write!(f, "cannot sign the export proof: {e}"),
        }
    }
}

impl std::error::Error for ProveError {}

impl ExportProof {
    /// Signs `claim` at `time` with the context's signing key and a fresh nonce.
    pub fn sign(
        key: &SigningKey,
        claim: &ExportClaim<'_>,
        time: u64,
    ) -> Result<ExportProof, ProveError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(ProveError::Random)?;
        let signature = key
            .sign(&proof_message(claim, time, &nonce))
            .map_err(ProveError::Sign)?;
        Ok(ExportProof {
            time,
            nonce,
            signature,
        })
    }

    /// Checks the signature with the context's verifying key.
    pub fn verify(&self, key: &VerifyingKey, claim: &ExportClaim<'_>) -> Result<(), ProofError> {
        key.verify(
            &proof_message(claim, self.time, &self.nonce),
            &self.signature,
        )
        .map_err(|_| ProofError::BadSignature)
    }
}

/// Why a proof was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProofError {
    /// The request carries no proof, or a malformed one.
    Missing(&'static str),
    /// The context has no usable key (no such object, no `kuid`, key revoked or missing).
    NoContextKey(String),
    /// The signature does not verify.
    BadSignature,
    /// The proof's time is outside the window around the node's clock.
    Skew {
        /// The proof's time.
        time: u64,
        /// The node's clock.
        now: u64,
    },
    /// The nonce was seen within the window: a replay.
    Replayed,
    /// The node remembers as many nonces as it may: try again shortly.
    Busy,
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(what) => write!(f, "no valid export proof: {what}"),
            Self::NoContextKey(why) => write!(f, "the context has no usable key: {why}"),
            Self::BadSignature => f.write_str("the export proof's signature does not verify"),
            Self::Skew { time, now } => write!(
                f,
                "the export proof's time {time} is too far from the node's clock {now}"
            ),
            Self::Replayed => f.write_str("the export proof was already used"),
            Self::Busy => f.write_str("too many recent exports; try again shortly"),
        }
    }
}

impl std::error::Error for ProofError {}

/// The node's memory of recent nonces: a proof is accepted once, and only within `skew` of
/// the node's clock, so a nonce need be kept only for `2 × skew`; at most `capacity` are.
#[derive(Debug)]
pub struct ReplayWindow {
    skew: u64,
    capacity: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Nonce → the proof time it came with.
    by_nonce: HashMap<[u8; NONCE_LEN], u64>,
    /// Nonces in arrival order, to forget the old ones.
    order: VecDeque<([u8; NONCE_LEN], u64)>,
}

impl ReplayWindow {
    /// Proofs within `skew_ns` of the clock; at most `capacity` nonces remembered.
    pub fn new(skew_ns: u64, capacity: usize) -> Self {
        Self {
            skew: skew_ns,
            capacity,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// How far a proof's time may be from the clock, in ns.
    pub fn skew_ns(&self) -> u64 {
        self.skew
    }

    /// Accepts `proof`'s time and nonce at `now`, once.
    pub fn admit(&self, proof: &ExportProof, now: u64) -> Result<(), ProofError> {
        if proof.time.abs_diff(now) > self.skew {
            return Err(ProofError::Skew {
                time: proof.time,
                now,
            });
        }
        let mut seen = self.seen.lock().map_err(|_| ProofError::Busy)?;
        // Forget nonces whose proofs can no longer pass the time check.
        let oldest = now.saturating_sub(self.skew);
        while let Some(&(nonce, time)) = seen.order.front() {
            if time >= oldest {
                break;
            }
            seen.order.pop_front();
            if seen.by_nonce.get(&nonce) == Some(&time) {
                seen.by_nonce.remove(&nonce);
            }
        }
        if seen.by_nonce.contains_key(&proof.nonce) {
            return Err(ProofError::Replayed);
        }
        if seen.by_nonce.len() >= self.capacity {
            return Err(ProofError::Busy);
        }
        seen.by_nonce.insert(proof.nonce, proof.time);
        seen.order.push_back((proof.nonce, proof.time));
        Ok(())
    }
}
