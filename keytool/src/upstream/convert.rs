//! Upstream's signed message, the check of its signature, and the mapping of its fields onto
//! our capability, which never widens: each field maps one to one, or the conversion is
//! refused.
//!
//! Upstream (`Cap::serialize` in `twizzler-security/src/capability.rs`) signs 78 bytes, all
//! little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..16 | accessor (`u128`) |
//! | 16..32 | target (`u128`) |
//! | 32..34 | protections (`u16`) |
//! | 34..36 | flags (`u16`) |
//! | 36..52 | revocation (`u128`) |
//! | 52..60, 60..68, 68..76 | gate offset, length, align (`u64` each) |
//! | 76..78 | zero (the buffer is two bytes longer than what is written into it) |
//!
//! It hashes them with BLAKE3 (flags 1) or SHA-256 (flags 2) and signs the 32-byte digest with
//! ECDSA P-256 (`p256`'s `Signer`, which hashes its message with SHA-256 once more). The
//! signature is `r` then `s`, 32 bytes each, big-endian; `p256` does not normalise `s`, so a
//! high-S signature is one upstream makes and accepts.

use std::fmt;

use twizzler_capsec::{
    CapGrant, Expiry, Gate, GateError, HashAlg, ObjID, Protections, Signature, SigningScheme,
    VerifyingKey,
};

use super::form::UpstreamCap;

/// The length of upstream's signed message.
pub(crate) const MESSAGE_LEN: usize = 78;

/// Upstream's `CapFlags::Blake3`.
pub(crate) const FLAG_BLAKE3: u16 = 1;
/// Upstream's `CapFlags::Sha256`.
pub(crate) const FLAG_SHA256: u16 = 2;

/// Upstream's default gate (`Gate::default()`): offset 0, length 10^9, align 1. Not the whole
/// object: objects reach 1 GiB (2^30 bytes).
pub(crate) const DEFAULT_GATE: (u64, u64, u64) = (0, 1_000_000_000, 1);

/// Why an upstream capability is not converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The flags name no hash, both hashes, or bits upstream does not define.
    Flags(u16),
    /// The key is not a P-256 key.
    NotP256,
    /// The signature bytes are not an ECDSA P-256 signature (`r` or `s` zero or too large).
    MalformedSignature,
    /// The signature does not verify: a field or the signature was changed, or another key
    /// signed it.
    BadSignature,
    /// Protection bits other than READ, WRITE and EXEC.
    Protections(u16),
    /// A gate our format cannot express exactly.
    Gate {
        /// The gate's offset, length and align.
        gate: (u64, u64, u64),
        /// Why.
        why: GateError,
    },
    /// A revocation time past what our 64-bit expiry holds.
    ExpiryTooLate(u128),
    /// The capability expired already.
    Expired {
        /// When it expired, ns since the epoch.
        at: u64,
        /// The time of the check.
        now: u64,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flags(0) => f.write_str("flags 0 name no hash (upstream: Blake3 = 1, Sha256 = 2)"),
            Self::Flags(b) if b & !(FLAG_BLAKE3 | FLAG_SHA256) != 0 => write!(
                f,
                "flags {b:#x} carry bits upstream does not define ({:#x}; only Blake3 = 1 and Sha256 = 2)",
                b & !(FLAG_BLAKE3 | FLAG_SHA256)
            ),
            Self::Flags(b) => write!(f, "flags {b:#x} name both hashes; upstream signs with one"),
            Self::NotP256 => f.write_str("the upstream key is not a P-256 key (upstream signs with ECDSA P-256 only)"),
            Self::MalformedSignature => f.write_str(
                "the signature is not an ECDSA P-256 signature (r or s is zero or not below the group order)",
            ),
            Self::BadSignature => f.write_str(
                "upstream's signature does not verify with the upstream key: a field or the signature was changed, or another key signed it",
            ),
            Self::Protections(b) => write!(
                f,
                "protections {b:#x} carry bits other than READ (1), WRITE (2) and EXEC (4): {:#x}",
                b & !Protections::all().bits()
            ),
            Self::Gate { gate: (o, l, a), why } => write!(
                f,
                "the gate offset {o:#x}, length {l:#x}, align {a} cannot be expressed exactly: {why}"
            ),
            Self::ExpiryTooLate(r) => write!(
                f,
                "revocation {r} ns is past what this format's 64-bit expiry holds (2554-07-21)"
            ),
            Self::Expired { at, now } => write!(
                f,
                "the capability expired at {} (now {})",
                crate::parse::fmt_time(*at),
                crate::parse::fmt_time(*now)
            ),
        }
    }
}

/// The 78 bytes upstream signs (see the module's table).
pub(crate) fn message(c: &UpstreamCap) -> [u8; MESSAGE_LEN] {
    let mut m = [0u8; MESSAGE_LEN];
    let fields: [&[u8]; 8] = [
        &c.accessor.to_le_bytes(),
        &c.target.to_le_bytes(),
        &c.protections.to_le_bytes(),
        &c.flags.to_le_bytes(),
        &c.revocation.to_le_bytes(),
        &c.gate.offset.to_le_bytes(),
        &c.gate.length.to_le_bytes(),
        &c.gate.align.to_le_bytes(),
    ];
    let mut at = 0;
    for f in fields {
        for (dst, src) in m.iter_mut().skip(at).zip(f) {
            *dst = *src;
        }
        at += f.len();
    }
    m
}

/// The hash the flags select: exactly one of upstream's two hash bits, and no other bit.
pub(crate) fn hash_of(flags: u16) -> Result<HashAlg, Refusal> {
    match flags {
        FLAG_BLAKE3 => Ok(HashAlg::Blake3),
        FLAG_SHA256 => Ok(HashAlg::Sha256),
        other => Err(Refusal::Flags(other)),
    }
}

/// Checks upstream's signature over `c` with `key` (the target's upstream verifying key), as
/// upstream's `Cap::verify_sig` would, and stricter on the flags.
pub(crate) fn verify(c: &UpstreamCap, key: &VerifyingKey) -> Result<(), Refusal> {
    if key.scheme() != SigningScheme::EcdsaP256 {
        return Err(Refusal::NotP256);
    }
    let digest = hash_of(c.flags)?.digest(&[&message(c)]);
    // Our verifier takes low-S signatures only; (r, s) verifies exactly when (r, n - s) does,
    // so a high-S signature is checked in its low-S form.
    let sig = p256::ecdsa::Signature::from_slice(&c.signature)
        .map_err(|_| Refusal::MalformedSignature)?
        .normalize_s();
    let sig = Signature::from_raw(SigningScheme::EcdsaP256, &sig.to_bytes())
        .map_err(|_| Refusal::MalformedSignature)?;
    // `verify` hashes the digest with SHA-256 before ECDSA, as `p256`'s `Verifier` does.
    key.verify(&digest, &sig).map_err(|_| Refusal::BadSignature)
}

/// Our capability's grant for `c`, field for field, at time `now` (ns since the epoch):
///
/// - target, accessor: the same ids;
/// - protections: the same bits, refused if any is not READ, WRITE or EXEC;
/// - hash: the one the flags select;
/// - gate: the same offset, length and align, refused if our format cannot hold them (length
///   or align zero, the end past 1 GiB). Upstream's own `check_gate` also admits the byte at
///   `offset + length`; ours ends before it, which narrows and never widens;
/// - expiry: the revocation time; `0`, upstream's default (`Revoc::default()`, which its kernel
///   never checks), is never; a time that has passed, or one past 2^64 - 1 ns, is refused.
///
/// It does not check the signature: [`verify`] does.
pub(crate) fn grant(c: &UpstreamCap, now: u64) -> Result<CapGrant, Refusal> {
    let hash = hash_of(c.flags)?;
    let prots = Protections::from_raw(c.protections).ok_or(Refusal::Protections(c.protections))?;
    let g = (c.gate.offset, c.gate.length, c.gate.align);
    let gate = Gate::new(g.0, g.1, g.2).map_err(|why| Refusal::Gate { gate: g, why })?;
    let expires = match c.revocation {
        0 => Expiry::NEVER,
        r => u64::try_from(r)
            .map(Expiry::from_raw)
            .map_err(|_| Refusal::ExpiryTooLate(r))?,
    };
    if let Some(at) = expires.at()
        && expires.is_expired(now)
    {
        return Err(Refusal::Expired { at, now });
    }
    Ok(CapGrant {
        target: ObjID::new(c.target),
        accessor: ObjID::new(c.accessor),
        prots,
        gate,
        expires,
        hash,
    })
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::signature::Signer;

    use super::*;
    use crate::upstream::form::{SIG_LEN, UpstreamGate};

    const NOW: u64 = 1_800_000_000_000_000_000;

    fn unsigned() -> UpstreamCap {
        UpstreamCap {
            target: 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
            accessor: 0x1112_1314_1516_1718_191a_1b1c_1d1e_1f20,
            protections: 0x0003,
            flags: FLAG_SHA256,
            revocation: 0x2122_2324_2526_2728_292a_2b2c_2d2e_2f30,
            gate: UpstreamGate {
                offset: 0x3132_3334_3536_3738,
                length: 0x4142_4344_4546_4748,
                align: 0x5152_5354_5556_5758,
            },
            signature: [0; SIG_LEN],
        }
    }

    #[test]
    fn the_message_is_upstreams_layout() {
        let m = message(&unsigned());
        let mut want = Vec::new();
        want.extend((0x11..=0x20u8).rev()); // accessor, little-endian
        want.extend((0x01..=0x10u8).rev()); // target
        want.extend([0x03, 0x00, 0x02, 0x00]); // protections, flags
        want.extend((0x21..=0x30u8).rev()); // revocation
        want.extend((0x31..=0x38u8).rev()); // gate offset
        want.extend((0x41..=0x48u8).rev()); // length
        want.extend((0x51..=0x58u8).rev()); // align
        want.extend([0, 0]); // the two bytes upstream never writes
        assert_eq!(m.as_slice(), want.as_slice());
    }

    /// Signs as upstream does: hash the message, then ECDSA P-256 (SHA-256) over the digest.
    fn sign(c: &mut UpstreamCap, scalar: &[u8; 32], high_s: bool) {
        let sk = p256::ecdsa::SigningKey::from_slice(scalar).unwrap();
        let digest = match c.flags {
            FLAG_BLAKE3 => *blake3::hash(&message(c)).as_bytes(),
            _ => <sha2::Sha256 as sha2::Digest>::digest(message(c)).into(),
        };
        let sig: p256::ecdsa::Signature = sk.sign(&digest);
        let low = sig.normalize_s();
        let sig = if high_s {
            p256::ecdsa::Signature::from_scalars(low.r().to_bytes(), (-*low.s()).to_bytes())
                .unwrap()
        } else {
            low
        };
        c.signature.copy_from_slice(&sig.to_bytes());
    }

    fn key(scalar: &[u8; 32]) -> VerifyingKey {
        let sk = twizzler_capsec::SigningKey::from_raw(SigningScheme::EcdsaP256, scalar).unwrap();
        sk.verifying_key()
    }

    #[test]
    fn upstream_signatures_verify_in_both_hashes_and_both_s_forms() {
        let scalar = [0x42; 32];
        for flags in [FLAG_BLAKE3, FLAG_SHA256] {
            for high_s in [false, true] {
                let mut c = unsigned();
                c.flags = flags;
                sign(&mut c, &scalar, high_s);
                assert_eq!(
                    verify(&c, &key(&scalar)),
                    Ok(()),
                    "flags {flags}, high-S {high_s}"
                );
                // Any changed field, another key: refused.
                let mut t = c.clone();
                t.protections ^= 4;
                assert_eq!(verify(&t, &key(&scalar)), Err(Refusal::BadSignature));
                assert_eq!(verify(&c, &key(&[0x43; 32])), Err(Refusal::BadSignature));
                let mut t = c.clone();
                t.signature[5] ^= 1;
                assert_eq!(verify(&t, &key(&scalar)), Err(Refusal::BadSignature));
            }
        }
        let mut c = unsigned();
        sign(&mut c, &scalar, false);
        c.signature = [0; SIG_LEN];
        assert_eq!(verify(&c, &key(&scalar)), Err(Refusal::MalformedSignature));
        c.signature = [0xff; SIG_LEN];
        assert_eq!(verify(&c, &key(&scalar)), Err(Refusal::MalformedSignature));
        let ed = twizzler_capsec::SigningKey::from_raw(SigningScheme::Ed25519, &scalar)
            .unwrap()
            .verifying_key();
        assert_eq!(verify(&c, &ed), Err(Refusal::NotP256));
    }

    #[test]
    fn fields_map_one_to_one_or_are_refused() {
        let mut c = unsigned();
        c.gate = UpstreamGate {
            offset: 0x1000,
            length: 0x2000,
            align: 16,
        };
        c.revocation = u128::from(NOW) + 1;
        let g = grant(&c, NOW).unwrap();
        assert_eq!(g.target, ObjID::new(c.target));
        assert_eq!(g.accessor, ObjID::new(c.accessor));
        assert_eq!(g.prots, Protections::READ | Protections::WRITE);
        assert_eq!(g.gate, Gate::new(0x1000, 0x2000, 16).unwrap());
        assert_eq!(g.expires, Expiry::from_raw(NOW + 1));
        assert_eq!(g.hash, HashAlg::Sha256);
        c.flags = FLAG_BLAKE3;
        c.revocation = 0;
        let g = grant(&c, NOW).unwrap();
        assert_eq!((g.hash, g.expires), (HashAlg::Blake3, Expiry::NEVER));
        // Upstream's default gate stays as it is: not the whole object.
        c.gate = UpstreamGate {
            offset: DEFAULT_GATE.0,
            length: DEFAULT_GATE.1,
            align: DEFAULT_GATE.2,
        };
        assert_eq!(
            grant(&c, NOW).unwrap().gate,
            Gate::new(0, 1_000_000_000, 1).unwrap()
        );
        assert_ne!(grant(&c, NOW).unwrap().gate, Gate::WHOLE);

        let refused = |edit: &dyn Fn(&mut UpstreamCap)| {
            let mut c = unsigned();
            c.gate = UpstreamGate {
                offset: 0,
                length: 4096,
                align: 1,
            };
            c.revocation = 0;
            edit(&mut c);
            grant(&c, NOW).unwrap_err()
        };
        for flags in [0, 3, 4, 0x8001] {
            assert_eq!(refused(&|c| c.flags = flags), Refusal::Flags(flags));
        }
        assert_eq!(refused(&|c| c.protections = 8), Refusal::Protections(8));
        assert_eq!(
            refused(&|c| c.protections = 0x8001),
            Refusal::Protections(0x8001)
        );
        assert!(matches!(
            refused(&|c| c.gate.length = 0),
            Refusal::Gate {
                why: GateError::ZeroLength,
                ..
            }
        ));
        assert!(matches!(
            refused(&|c| c.gate.align = 0),
            Refusal::Gate {
                why: GateError::ZeroAlign,
                ..
            }
        ));
        assert!(matches!(
            refused(&|c| c.gate.offset = 1 << 30),
            Refusal::Gate {
                why: GateError::OutOfRange,
                ..
            }
        ));
        assert!(matches!(
            refused(&|c| c.gate.offset = u64::MAX),
            Refusal::Gate {
                why: GateError::Overflow,
                ..
            }
        ));
        let past_u64 = u128::from(u64::MAX) + 1;
        assert_eq!(
            refused(&|c| c.revocation = past_u64),
            Refusal::ExpiryTooLate(past_u64)
        );
        assert_eq!(
            refused(&|c| c.revocation = 1),
            Refusal::Expired { at: 1, now: NOW }
        );
        assert_eq!(
            refused(&|c| c.revocation = u128::from(NOW)),
            Refusal::Expired { at: NOW, now: NOW }
        );
        for r in [
            Refusal::Flags(0),
            Refusal::Flags(3),
            Refusal::Flags(4),
            Refusal::Protections(8),
        ] {
            assert!(!r.to_string().contains('\n'));
        }
    }
}
