//! Writes valid, deterministic seed inputs into `corpus/<target>/` for every fuzz target.
//!
//! Run from `fuzz/`: `cargo run --example seed` (or `cargo run --example seed -- <dir>` to write
//! under another corpus root). Re-running rewrites the same files (names are content hashes),
//! so it is idempotent and never removes what the fuzzer added.
//!
//! Every record is signed with the fixture keys of `twizzler_capsec_fuzz` (fixed raw bytes,
//! no RNG), for the fixture object ids, so that the fuzz targets' authority verifies them.

use std::fs;
use std::path::{Path, PathBuf};

use twizzler_capsec::{
    Cap, CapGrant, CtxFlags, Del, DelGrant, Expiry, Gate, HashAlg, ObjID, Protections,
    SecCtxEditor, Signature, SigningScheme,
};
use twizzler_capsec_fuzz::{
    CTX, CTX_P256, CheckRule, OBJ, OBJ_CODE, OBJ_NOKEY, OBJ_P256, ed25519_signing, p256_signing,
    signing_key_for,
};

const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;
const X: Protections = Protections::EXEC;

/// Expiry used by the expiring seeds: far in the future for `now = 1`, in the past for
/// `now = u64::MAX` (the targets evaluate at both).
const LATER: Expiry = Expiry::from_raw(1 << 61);
const SOONER: Expiry = Expiry::from_raw(1 << 60);

fn key(obj: ObjID) -> twizzler_capsec::SigningKey {
    // Objects without a fixture key (OBJ_NOKEY) are signed with the Ed25519 key anyway: the
    // records are well-formed but their keys cannot be found.
    signing_key_for(obj).unwrap_or_else(ed25519_signing)
}

fn cap(target: ObjID, accessor: ObjID, prots: Protections) -> CapGrant {
    CapGrant::new(target, accessor, prots)
}

fn mint(g: CapGrant) -> Cap {
    Cap::mint(g, &key(g.target)).expect("minting a seed capability")
}

#[allow(clippy::vec_init_then_push)] // one commented seed per push reads better
fn caps() -> Vec<Cap> {
    let mut out = Vec::new();
    out.push(mint(cap(OBJ, CTX[0], R)));
    out.push(mint(cap(OBJ, CTX[0], R | W)));
    out.push(mint(CapGrant {
        hash: HashAlg::Sha256,
        ..cap(OBJ, CTX[1], R | W | X)
    }));
    out.push(mint(CapGrant {
        gate: Gate::new(0x1000, 0x3000, 1).unwrap(),
        expires: LATER,
        ..cap(OBJ, CTX[0], R | W)
    }));
    // A code gate with 16-byte-aligned entry points.
    out.push(mint(CapGrant {
        gate: Gate::new(0x2000, 0x100, 16).unwrap(),
        ..cap(OBJ_CODE, CTX[0], R | X)
    }));
    // P-256-signed target.
    out.push(mint(cap(OBJ_P256, CTX[0], R)));
    out.push(mint(CapGrant {
        hash: HashAlg::Sha256,
        expires: SOONER,
        ..cap(OBJ_P256, CTX_P256, R | W)
    }));
    // No key for the target.
    out.push(mint(cap(OBJ_NOKEY, CTX[0], R)));
    // Signed by the wrong key (Ed25519 for a P-256 object and vice versa).
    out.push(Cap::mint(cap(OBJ_P256, CTX[0], R), &ed25519_signing()).unwrap());
    out.push(Cap::mint(cap(OBJ, CTX[0], W), &p256_signing()).unwrap());
    // Already expired at any now >= 2.
    out.push(mint(CapGrant {
        expires: Expiry::from_raw(2),
        ..cap(OBJ, CTX[0], R)
    }));
    // A bad signature (all-zero bytes).
    out.push(Cap::from_parts(
        cap(OBJ, CTX[0], R | W),
        Signature::from_raw(SigningScheme::Ed25519, &[0; 64]).unwrap(),
    ));
    out
}

/// Delegation chains of every depth, plus variants.
fn dels() -> Vec<Del> {
    let mut out = Vec::new();
    // A chain CTX0 -> CTX1 -> CTX2 -> CTX3 -> CTX_P256 -> CTX0 -> ... up to the maximum depth,
    // attenuating rights, gates and expiry along the way.
    let root = mint(CapGrant {
        gate: Gate::new(0, 0x10000, 1).unwrap(),
        ..cap(OBJ, CTX[0], R | W | X)
    });
    let holders = [
        CTX[1], CTX[2], CTX[3], CTX_P256, CTX[0], CTX[1], CTX[2], CTX[3],
    ];
    let mut provider = CTX[0];
    let first_grant = DelGrant {
        gate: root.gate(),
        ..DelGrant::new(holders[0], R | W | X)
    };
    let first = Del::from_cap(&root, first_grant, &key(provider)).expect("first link");
    out.push(first.clone());
    let mut d = first;
    provider = holders[0];
    for (i, &recv) in holders.iter().enumerate().skip(1) {
        let prots = if i < 4 {
            R | W | X
        } else if i < 6 {
            R | W
        } else {
            R
        };
        let grant = DelGrant {
            gate: Gate::new(0x1000 * (i as u64 % 3), 0x8000, 1 << (i % 3)).unwrap(),
            expires: if i >= 5 { SOONER } else { Expiry::NEVER },
            hash: if i % 2 == 0 {
                HashAlg::Sha256
            } else {
                HashAlg::Blake3
            },
            ..DelGrant::new(recv, prots)
        };
        // Keep gates nested: only narrow when the parent allows it.
        let grant = if d.gate().contains(&grant.gate) {
            grant
        } else {
            DelGrant {
                gate: d.gate(),
                ..grant
            }
        };
        d = d
            .delegate(grant, &key(provider))
            .expect("delegating a seed link");
        out.push(d.clone());
        provider = recv;
    }

    // Depth-1 variants.
    let ro = mint(cap(OBJ, CTX[0], R | W));
    out.push(Del::from_cap(&ro, DelGrant::new(CTX[1], R), &key(CTX[0])).unwrap());
    out.push(
        Del::from_cap(
            &ro,
            DelGrant {
                hash: HashAlg::Sha256,
                expires: LATER,
                ..DelGrant::new(CTX[2], R | W)
            },
            &key(CTX[0]),
        )
        .unwrap(),
    );
    // P-256 root and provider.
    let p = mint(cap(OBJ_P256, CTX_P256, R | W));
    out.push(Del::from_cap(&p, DelGrant::new(CTX[0], R), &key(CTX_P256)).unwrap());
    // Code delegation with entry points.
    let code = mint(CapGrant {
        gate: Gate::new(0x2000, 0x1000, 8).unwrap(),
        ..cap(OBJ_CODE, CTX[1], R | X)
    });
    out.push(
        Del::from_cap(
            &code,
            DelGrant {
                gate: Gate::new(0x2000, 0x100, 16).unwrap(),
                ..DelGrant::new(CTX[0], R | X)
            },
            &key(CTX[1]),
        )
        .unwrap(),
    );
    // Signed by the wrong provider key (P-256 for an Ed25519 context).
    out.push(Del::from_cap(&ro, DelGrant::new(CTX[3], R), &p256_signing()).unwrap());
    out
}

fn contexts(caps: &[Cap], dels: &[Del]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // Empty context.
    out.push(SecCtxEditor::new().encode().unwrap());

    // One capability, no masks.
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&caps[0]);
    out.push(ed.encode().unwrap());

    // Every capability.
    let mut ed = SecCtxEditor::new();
    for c in caps {
        ed.add_cap(c);
    }
    out.push(ed.encode().unwrap());

    // Every delegation.
    let mut ed = SecCtxEditor::new();
    for d in dels {
        ed.add_del(d);
    }
    out.push(ed.encode().unwrap());

    // Mixed, with masks, flags and a restricted global mask.
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&caps[1]);
    ed.add_cap(&caps[3]);
    ed.add_cap(&caps[4]);
    ed.add_cap(&caps[5]);
    ed.add_del(&dels[0]);
    ed.add_del(&dels[2]);
    ed.set_global_mask(R | W);
    ed.set_mask(OBJ, R, Protections::empty());
    ed.set_mask(OBJ_CODE, R | X, X);
    ed.set_mask(OBJ_P256, R | W, W);
    ed.set_flags(CtxFlags::UNDETACHABLE);
    out.push(ed.encode().unwrap());

    // Several records for one target, of both kinds, for the context that holds them.
    let mut ed = SecCtxEditor::new();
    for c in caps.iter().filter(|c| c.target() == OBJ) {
        ed.add_cap(c);
    }
    for d in dels.iter().filter(|d| d.target() == OBJ).take(3) {
        ed.add_del(d);
    }
    ed.set_mask(OBJ, R | W | X, Protections::empty());
    out.push(ed.encode().unwrap());

    // A context whose single entry is garbage of each kind (reaches Verdict::Malformed).
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&caps[0]);
    let mut bytes = ed.encode().unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // corrupts the signature padding
    out.push(bytes);
    out
}

fn write_all(root: &Path, target: &str, inputs: impl IntoIterator<Item = Vec<u8>>) -> usize {
    let dir = root.join(target);
    fs::create_dir_all(&dir).expect("creating the corpus directory");
    let mut n = 0;
    for input in inputs {
        let name = format!("seed-{}", twizzler_capsec::RecordId::of(&input));
        fs::write(dir.join(&name[..21]), &input).expect("writing a seed");
        n += 1;
    }
    println!("{:>14}: {n} seeds in {}", target, dir.display());
    n
}

fn main() {
    let root: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"));

    let caps = caps();
    let dels = dels();
    let ctxs = contexts(&caps, &dels);

    // Sanity: everything the generator meant to be valid decodes and round-trips.
    for c in &caps {
        assert_eq!(Cap::decode(&c.encode()), Ok(*c));
    }
    for d in &dels {
        assert_eq!(Del::decode(&d.encode()).as_ref(), Ok(d));
    }
    for c in &ctxs {
        twizzler_capsec::SecCtx::parse(c).expect("seed context parses");
    }
    // Report how many records verify under the targets' authority (most should: the rest are
    // the deliberately broken variants).
    let auth = twizzler_capsec_fuzz::FuzzAuthority::plain();
    let verified = |r: twizzler_capsec::Record| r.verify(&auth, 1).is_ok();
    let ok_caps = caps
        .iter()
        .filter(|c| verified(twizzler_capsec::Record::Cap(**c)))
        .count();
    let ok_dels = dels
        .iter()
        .filter(|d| verified(twizzler_capsec::Record::Del((*d).clone())))
        .count();
    println!(
        "verify at now=1: {ok_caps}/{} caps, {ok_dels}/{} delegations",
        caps.len(),
        dels.len()
    );

    write_all(
        &root,
        "cap_decode",
        caps.iter().map(|c| c.encode().to_vec()),
    );
    write_all(
        &root,
        "del_decode",
        dels.iter().map(|d| d.encode().to_vec()),
    );
    write_all(
        &root,
        "record_decode",
        caps.iter()
            .map(|c| c.encode().to_vec())
            .chain(dels.iter().map(|d| d.encode().to_vec())),
    );
    write_all(&root, "ctx_parse", ctxs.clone());

    // ctx_parse_fast: the same contexts behind each kind of check rule (all pass, all fail,
    // half pass / half fail, half pass / half unchecked) and a sampling phase.
    let rules = [
        CheckRule::ALL_PASS,
        CheckRule::ALL_FAIL,
        CheckRule::from_byte(0x80 | 32),
        CheckRule::from_byte(0xc0 | 32),
    ];
    write_all(
        &root,
        "ctx_parse_fast",
        ctxs.iter().flat_map(|c| {
            rules.iter().enumerate().map(move |(i, r)| {
                let mut v = vec![r.byte(), i as u8];
                v.extend_from_slice(c);
                v
            })
        }),
    );

    // rule_fast and engine read their input as a program (every byte string is one), so
    // deterministic pseudo-random programs of a few lengths are good seeds, next to a few
    // written by hand.
    write_all(&root, "rule_fast", rule_programs());
    write_all(&root, "engine", engine_programs());

    // key_decode: selector byte (0 signature, 1 verifying key, 2 signing key) + encoding.
    let ed = ed25519_signing();
    let p = p256_signing();
    let with = |sel: u8, bytes: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(bytes);
        v
    };
    let keys = vec![
        with(0, &ed.sign(b"seed").unwrap().encode()),
        with(0, &p.sign(b"seed").unwrap().encode()),
        with(0, &caps[0].signature().encode()),
        with(1, &ed.verifying_key().encode()),
        with(1, &p.verifying_key().encode()),
        with(2, &ed.encode()[..]),
        with(2, &p.encode()[..]),
    ];
    write_all(&root, "key_decode", keys);

    // dist_formats and store_formats: the formats' golden files (the crates' frozen
    // fixtures), behind their selector bytes.
    let fixture = |krate: &str, file: &str| -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(krate)
            .join("tests/fixtures")
            .join(file);
        fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let dist = [
        (0, "token-v1.bin"),
        (0, "token-v2.bin"),
        (1, "version-file-v1.bin"),
        (2, "upgrade-notice-v1.bin"),
        (3, "broadcast-revoke-v1.bin"),
        (3, "broadcast-ack-v1.bin"),
        (4, "controller-id-v1.bin"),
    ];
    write_all(
        &root,
        "dist_formats",
        dist.iter()
            .map(|(sel, f)| with(*sel, &fixture("dist-bridge", f))),
    );
    let store = [
        (0, "revocations-v1.bin"),
        (1, "verifying-key-object-v1.bin"),
        (2, "label-table-v1.bin"),
        (3, "signing-key-object-v1.bin"),
        (3, "signing-key-object-sealed-v1.bin"),
    ];
    write_all(
        &root,
        "store_formats",
        store
            .iter()
            .map(|(sel, f)| with(*sel, &fixture("secctx", f))),
    );
    // The information-flow formats' golden files (`docs/DIFC.md`): a version-3 context with
    // its label section, and an ownership (`TAG`) capability. Signed with the library's
    // fixture keys, not these: they seed the parsers, not the signature paths.
    let difc = |f: &str| fixture("twizzler-security", f);
    write_all(&root, "ctx_parse", [difc("context-v3.bin")]);
    write_all(&root, "cap_decode", [difc("tag-cap-v1.bin")]);
    write_all(&root, "record_decode", [difc("tag-cap-v1.bin")]);
}

/// `n` deterministic pseudo-random bytes (BLAKE3-derived record ids of a counter).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 32);
    let mut i = 0u64;
    while out.len() < n {
        let mut block = seed.to_le_bytes().to_vec();
        block.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&twizzler_capsec::RecordId::of(&block).0);
        i += 1;
    }
    out.truncate(n);
    out
}

/// Programs for `rule_fast`: header (check rule, sampling phase, time, default rights,
/// revocation, pick, offset, flags, global mask), masks, then records.
fn rule_programs() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, rule) in [0x00u8, 0x00, 0x00, 0x40, 0xa0, 0xe0]
        .into_iter()
        .enumerate()
    {
        for len in [48usize, 160, 600] {
            let mut p = noise(i as u64 * 1000 + len as u64, len);
            p[0] = rule;
            p[1] = len as u8;
            out.push(p);
        }
    }
    // By hand: all checks pass, sampling phase 0, now = 1, no default rights, nothing
    // revoked, all rights allowed, no masks, 4 capabilities on OBJ for CTX0, whole object,
    // never expiring.
    let mut p = vec![0x00, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0, 0, 0, 0, 7, 0, 4];
    for prots in [1u8, 3, 7, 5] {
        // kind (cap), hash, target OBJ, holder CTX0 (i = 4 -> CTX[0]), prots, whole gate,
        // never, Ed25519, fill byte.
        p.extend_from_slice(&[0, 0, 0, 4, prots, 0, 0, 0, prots]);
    }
    out.push(p);
    out
}

/// Programs for `engine`: default rights of OBJ and OBJ_CODE, four context selectors, the
/// attach mask, then operations.
fn engine_programs() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..12u64 {
        out.push(noise(7000 + i, 64 + 48 * i as usize));
    }
    // By hand: CTX0 with pool records 0..=5, CTX1 with 12..=14, CTX2 empty, CTX_P256 with the
    // P-256 capability; every context attached; then faults with repeats on OBJ and
    // OBJ_CODE, an edit, revocations, clock moves, expiry and a key rotation.
    let mut p = vec![0, 0];
    p.extend_from_slice(&[6 << 3, 0, 1, 2, 3, 4, 5]);
    p.extend_from_slice(&[3 << 3, 12, 13, 14]);
    p.push(0);
    p.extend_from_slice(&[1 << 3, 7]);
    p.push(0x0f);
    let fault = |target: u8, off: &[u8], kind: u8| {
        let mut f = vec![4, target];
        f.extend_from_slice(off);
        f.push(kind);
        f
    };
    for kind in 0..3u8 {
        p.extend(fault(0, &[1, 0, 0x10, 0], kind)); // OBJ, page 1
        p.extend(fault(0, &[1, 1, 0x20, 0], kind)); // OBJ, page 2
        p.extend(fault(2, &[3, 0], kind)); // OBJ_CODE 0x2000
        p.extend(fault(3, &[1, 0, 0, 0], kind)); // OBJ_P256
        p.extend(fault(0, &[0, 0x10, 0], kind)); // the null page
    }
    p.extend_from_slice(&[7, 0, 0, 6]); // CTX0: add pool record 6
    p.extend(fault(3, &[1, 0, 0, 0], 0));
    p.extend_from_slice(&[8, 1, 1]); // revoke pool record 1
    p.extend(fault(0, &[1, 0, 0, 0], 1));
    p.extend_from_slice(&[10, 3, 1]); // one second later, expire
    p.extend(fault(0, &[1, 0, 0, 0], 0));
    p.extend_from_slice(&[14]); // rotate the Ed25519 key
    p.extend(fault(0, &[1, 0, 0, 0], 0));
    p.extend_from_slice(&[9, 1]); // revoke the P-256 key
    p.extend(fault(3, &[1, 0, 0, 0], 0));
    out.push(p);
    out
}
