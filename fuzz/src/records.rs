//! Records built from fuzz input without signing (for the cheap authority, which never looks
//! at signature bytes): capabilities with [`Cap::from_parts`], delegations encoded by hand
//! from the published layout and decoded with [`Del::decode`].

use twizzler_capsec::{
    Cap, CapGrant, DEL_MAGIC, DEL_VERSION, Del, Expiry, Gate, HashAlg, MAX_CHAIN_DEPTH, ObjID,
    Protections, Signature, SigningScheme,
};

use crate::{ALL_IDS, CTX, Cursor};

/// The ids records are built for: the fixtures', plus edge ids and one more keyless object.
pub const ID_POOL: [ObjID; 12] = [
    ALL_IDS[0],
    ALL_IDS[1],
    ALL_IDS[2],
    ALL_IDS[3],
    ALL_IDS[4],
    ALL_IDS[5],
    ALL_IDS[6],
    ALL_IDS[7],
    ALL_IDS[8],
    ObjID::new(0),
    ObjID::new(0x1003),
    ObjID::new(u128::MAX),
];

/// A well-formed signature that signs nothing: its bytes only feed the check id.
pub fn dummy_signature(c: &mut Cursor<'_>) -> Signature {
    let scheme = c.pick(&[SigningScheme::Ed25519, SigningScheme::EcdsaP256]);
    let fill = c.u8();
    Signature::from_raw(scheme, &[fill; 64]).expect("64 bytes is every scheme's length")
}

/// A gate: the whole object most often, else page ranges, code gates and raw values.
pub fn gate_from(c: &mut Cursor<'_>) -> Gate {
    let page = 0x1000u64;
    let g = match c.u8() % 8 {
        4 => Gate::new(u64::from(c.u8()) * page, (u64::from(c.u8()) + 1) * page, 1),
        5 => Gate::new(
            u64::from(c.u16()),
            u64::from(c.u16()) + 1,
            1 << (c.u8() % 13),
        ),
        6 => Gate::new(c.u64(), c.u64(), c.u64()),
        7 => Gate::new(page, page, 1),
        _ => Ok(Gate::WHOLE),
    };
    g.unwrap_or(Gate::WHOLE)
}

/// An expiry: never most often, else fixed times on both sides of the targets' clocks, or
/// raw.
pub fn expiry_from(c: &mut Cursor<'_>) -> Expiry {
    match c.u8() % 6 {
        2 => Expiry::from_raw(2),
        3 => Expiry::from_raw(1 << 60),
        4 => Expiry::from_raw(1 << 61),
        5 => Expiry::from_raw(c.u64()),
        _ => Expiry::NEVER,
    }
}

fn hash_from(c: &mut Cursor<'_>) -> HashAlg {
    if c.u8() & 1 == 0 {
        HashAlg::Blake3
    } else {
        HashAlg::Sha256
    }
}

fn prots_from(c: &mut Cursor<'_>) -> Protections {
    Protections::from_bits_truncate(u16::from(c.u8()) & 7)
}

/// A capability for input-chosen fields (holders are contexts 7 times in 8), unsigned.
pub fn cap_from(c: &mut Cursor<'_>) -> Cap {
    let hash = hash_from(c);
    let target = c.pick(&ID_POOL);
    let holder = match c.u8() % 8 {
        0 => c.pick(&ID_POOL),
        i => CTX[usize::from(i) % CTX.len()],
    };
    let grant = CapGrant {
        hash,
        prots: prots_from(c),
        gate: gate_from(c),
        expires: expiry_from(c),
        ..CapGrant::new(target, holder, Protections::empty())
    };
    Cap::from_parts(grant, dummy_signature(c))
}

/// A delegation chain of 1..=[`MAX_CHAIN_DEPTH`] links over [`cap_from`]'s root, unsigned.
/// Links attenuate their parent unless a selector byte says otherwise (so both the
/// attenuation errors and valid chains are reached); each link is provided by the previous
/// holder 7 times in 8. `None` when the bytes do not decode (a gate the decoder refuses).
pub fn del_from(c: &mut Cursor<'_>) -> Option<Del> {
    let root = cap_from(c);
    let depth = 1 + c.below(MAX_CHAIN_DEPTH);
    let mut bytes = Vec::with_capacity(twizzler_capsec::del_len(depth));
    bytes.extend_from_slice(&DEL_MAGIC.to_le_bytes());
    bytes.extend_from_slice(&DEL_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(depth as u16).to_le_bytes());
    bytes.extend_from_slice(&root.encode());
    let (mut holder, mut prots, mut gate, mut expires) =
        (root.accessor(), root.prots(), root.gate(), root.expires());
    for _ in 0..depth {
        let sel = c.u8();
        let receiver = c.pick(&ID_POOL[4..9]);
        let provider = if sel & 7 == 0 {
            c.pick(&ID_POOL)
        } else {
            holder
        };
        prots = if sel & 8 == 0 {
            prots & prots_from(c)
        } else {
            prots_from(c)
        };
        if sel & 16 != 0 {
            gate = gate_from(c);
        }
        if sel & 32 != 0 {
            expires = expiry_from(c);
        }
        bytes.extend_from_slice(&hash_from(c).flags().to_le_bytes());
        bytes.extend_from_slice(&receiver.raw().to_le_bytes());
        bytes.extend_from_slice(&provider.raw().to_le_bytes());
        bytes.extend_from_slice(&prots.bits().to_le_bytes());
        for v in [gate.offset(), gate.length(), gate.align(), expires.raw()] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&dummy_signature(c).encode());
        holder = receiver;
    }
    Del::decode(&bytes).ok()
}
