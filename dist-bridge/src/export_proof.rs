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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;

use twizzler_capsec::codec::VecWriter;
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
    let mut w = VecWriter::with_capacity(PROOF_DOMAIN.len() + 96 + claim.cap.len());
    let cap_len = u32::try_from(claim.cap.len()).unwrap_or(u32::MAX);
    w.bytes(PROOF_DOMAIN)
        .u64(claim.node)
        .u64(time)
        .bytes(nonce)
        .u128(claim.context.raw())
        .u32(u32::from(claim.scope.rights.bits()))
        .u64(claim.scope.range.offset())
        .u64(claim.scope.range.len())
        .u64(claim.scope.expires.raw())
        .u32(cap_len)
        .bytes(claim.cap);
    w.into_vec()
}

/// Why a proof could not be made.
#[derive(Debug)]
#[non_exhaustive]
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
#[non_exhaustive]
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
/// the node's clock (and never below `skew` before the latest clock reading, should the clock
/// step back), so a nonce need be kept only until its proof's time falls below that floor.
/// At most `capacity` are kept, and at most `per_key` signed by any one key, whatever the
/// contexts it signs for, so the holder of one key cannot fill the memory and keep everyone
/// else from exporting.
#[derive(Debug)]
pub struct ReplayWindow {
    skew: u64,
    capacity: usize,
    per_key: usize,
    seen: Mutex<Seen>,
}

/// Which key signed a proof: a hash of its encoding, so that two key objects holding the
/// same key share one budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signer([u8; 32]);

impl Signer {
    /// The signer of proofs that `key` verifies.
    pub fn of(key: &VerifyingKey) -> Signer {
        Signer(*blake3::hash(&key.encode()).as_bytes())
    }
}

#[derive(Debug, Default)]
struct Seen {
    /// Nonce → the proof time it came with.
    by_nonce: HashMap<[u8; NONCE_LEN], u64>,
    /// (proof time, nonce) → its signer: what to forget once the floor passes its time.
    by_time: BTreeMap<(u64, [u8; NONCE_LEN]), Signer>,
    /// Nonces remembered per signer.
    per_key: HashMap<Signer, usize>,
    /// The latest clock reading seen.
    latest: u64,
}

impl ReplayWindow {
    /// Proofs within `skew_ns` of the clock; at most `capacity` nonces remembered, and at most
    /// `per_key` signed by one key.
    pub fn new(skew_ns: u64, capacity: usize, per_key: usize) -> Self {
        Self {
            skew: skew_ns,
            capacity,
            per_key,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// How far a proof's time may be from the clock, in ns.
    pub fn skew_ns(&self) -> u64 {
        self.skew
    }

    /// Accepts `proof`'s time and nonce, signed by `signer` (the proof must have been
    /// verified), at `now`, once.
    pub fn admit(&self, proof: &ExportProof, signer: Signer, now: u64) -> Result<(), ProofError> {
        if proof.time.abs_diff(now) > self.skew {
            return Err(ProofError::Skew {
                time: proof.time,
                now,
            });
        }
        let mut guard = self.seen.lock().map_err(|_| ProofError::Busy)?;
        let seen = &mut *guard;
        // The floor never moves back, even if the clock does: a nonce is forgotten only once
        // its proof's time is below the floor, and such a proof is never accepted again.
        seen.latest = seen.latest.max(now);
        let oldest = seen.latest.saturating_sub(self.skew);
        if proof.time < oldest {
            return Err(ProofError::Skew {
                time: proof.time,
                now,
            });
        }
        let keep = seen.by_time.split_off(&(oldest, [0; NONCE_LEN]));
        for ((_, nonce), by) in std::mem::replace(&mut seen.by_time, keep) {
            seen.by_nonce.remove(&nonce);
            if let Some(n) = seen.per_key.get_mut(&by) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    seen.per_key.remove(&by);
                }
            }
        }
        if seen.by_nonce.contains_key(&proof.nonce) {
            return Err(ProofError::Replayed);
        }
        let mine = seen.per_key.get(&signer).copied().unwrap_or(0);
        if seen.by_nonce.len() >= self.capacity || mine >= self.per_key {
            return Err(ProofError::Busy);
        }
        seen.by_nonce.insert(proof.nonce, proof.time);
        seen.by_time.insert((proof.time, proof.nonce), signer);
        *seen.per_key.entry(signer).or_default() += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn proof(time: u64, nonce: u8) -> ExportProof {
        use rand_core::SeedableRng;
        let key = SigningKey::generate(
            twizzler_capsec::SigningScheme::Ed25519,
            &mut rand_chacha::ChaCha20Rng::seed_from_u64(1),
        );
        ExportProof {
            time,
            nonce: [nonce; NONCE_LEN],
            signature: key.sign(b"not checked by the window").unwrap(),
        }
    }

    proptest! {
        /// Whatever the order of arrivals and however the clock jumps (back too), a proof is
        /// admitted at most once, a proof outside the window never is, and no more than
        /// `capacity` nonces are held, nor more than `per_key` of one key.
        #[test]
        fn a_nonce_is_admitted_once_and_memory_is_bounded(
            arrivals in proptest::collection::vec(
                (0u64..400, 0u8..12, 0u64..400, 0u8..3),
                1..200,
            ),
        ) {
            let (skew, capacity, per_key) = (50, 8, 4);
            let w = ReplayWindow::new(skew, capacity, per_key);
            let mut admitted: Vec<(u8, u64)> = Vec::new();
            for (time, nonce, now, by) in arrivals {
                let r = w.admit(&proof(time, nonce), Signer([by; 32]), now);
                if time.abs_diff(now) > skew {
                    prop_assert!(r.is_err());
                    continue;
                }
                if r.is_ok() {
                    // Never the same proof (nonce and time) twice, whatever the clock did.
                    prop_assert!(
                        !admitted.contains(&(nonce, time)),
                        "replayed {} at {}", nonce, time
                    );
                    admitted.push((nonce, time));
                }
                let seen = w.seen.lock().unwrap();
                prop_assert!(seen.by_nonce.len() <= capacity);
                prop_assert_eq!(seen.by_nonce.len(), seen.by_time.len());
                prop_assert!(seen.per_key.values().all(|&n| (1..=per_key).contains(&n)));
                prop_assert_eq!(seen.per_key.values().sum::<usize>(), seen.by_nonce.len());
            }
        }
    }

    /// One key at its share is refused as busy while another still exports; its share
    /// comes back once its proofs' times fall below the window.
    #[test]
    fn one_key_cannot_take_the_whole_memory() {
        let w = ReplayWindow::new(10, 8, 2);
        let (a, b) = (Signer([1; 32]), Signer([2; 32]));
        assert!(w.admit(&proof(100, 1), a, 100).is_ok());
        assert!(w.admit(&proof(100, 2), a, 100).is_ok());
        assert_eq!(w.admit(&proof(100, 3), a, 100), Err(ProofError::Busy));
        assert!(w.admit(&proof(100, 4), b, 100).is_ok());
        assert!(w.admit(&proof(111, 5), a, 111).is_ok());
    }

    /// Two key objects holding one key are one signer; different keys are not.
    #[test]
    fn a_signer_is_its_key() {
        use rand_core::SeedableRng;
        let key = |seed| {
            SigningKey::generate(
                twizzler_capsec::SigningScheme::Ed25519,
                &mut rand_chacha::ChaCha20Rng::seed_from_u64(seed),
            )
            .verifying_key()
        };
        assert_eq!(Signer::of(&key(1)), Signer::of(&key(1)));
        assert_ne!(Signer::of(&key(1)), Signer::of(&key(2)));
    }
}
