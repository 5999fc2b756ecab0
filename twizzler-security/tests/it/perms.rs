//! The permission rule, table-driven: every row builds a context, evaluates one access through
//! `evaluate_explained` (and `evaluate`, which must agree), and checks what is provided, whether
//! the access is granted, and the verdict of each record filed under the target.

use crate::fixture::*;
use twizzler_capsec::ctx::HEADER_LEN;
use twizzler_capsec::{
    Access, AccessKind, CAP_MAGIC, CapGrant, CtxFlags, DEL_MAGIC, DecodeError, Del, DelGrant,
    Expiry, Gate, HashAlg, KeyLookupError, ObjID, PermsInfo, Protections, SecCtx, SecCtxEditor,
    SigningKey, SigningScheme, Verdict, VerifyError, evaluate,
};
use twizzler_capsec::{Authority, Record, RecordId, Signature, cap_check_id, signature_check_id};

// Contexts.
const C: ObjID = ObjID::new(0xC0);
const C2: ObjID = ObjID::new(0xC1);
const P: ObjID = ObjID::new(0xB0);
const P2: ObjID = ObjID::new(0xB1);
// Objects.
const A: ObjID = ObjID::new(0xA1);
const B: ObjID = ObjID::new(0xA2);
/// An object without a `kuid`.
const N: ObjID = ObjID::new(0xA3);
/// An object whose key is revoked.
const RK: ObjID = ObjID::new(0xA4);
/// An object with a P-256 key.
const E: ObjID = ObjID::new(0xA5);

const NOW: u64 = 1_000;

struct World {
    ka: SigningKey,
    kb: SigningKey,
    kother: SigningKey,
    krk: SigningKey,
    kn: SigningKey,
    kp: SigningKey,
    kp2: SigningKey,
    kc: SigningKey,
    kp256: SigningKey,
    kp256_other: SigningKey,
    /// A capability for A whose record id the authority revokes.
    revoked_cap: twizzler_capsec::Cap,
    /// A capability for A held by P whose record id the authority revokes (a delegation root).
    revoked_root: twizzler_capsec::Cap,
}

impl World {
    fn new() -> Self {
        let ka = key(SigningScheme::Ed25519, 1);
        let revoked_cap = mint(grant(A, C, R, Gate::WHOLE, 999_999), &ka);
        let revoked_root = mint(grant(A, P, R | W, Gate::WHOLE, 888_888), &ka);
        Self {
            kb: key(SigningScheme::Ed25519, 2),
            kother: key(SigningScheme::Ed25519, 3),
            krk: key(SigningScheme::Ed25519, 4),
            kn: key(SigningScheme::Ed25519, 5),
            kp: key(SigningScheme::Ed25519, 6),
            kp2: key(SigningScheme::Ed25519, 7),
            kc: key(SigningScheme::Ed25519, 8),
            kp256: key(SigningScheme::EcdsaP256, 9),
            kp256_other: key(SigningScheme::EcdsaP256, 10),
            ka,
            revoked_cap,
            revoked_root,
        }
    }

    fn auth(&self) -> TestAuth {
        TestAuth::new()
            .with_key(A, &self.ka)
            .with_key(B, &self.kb)
            .with_key(RK, &self.krk)
            .with_key(P, &self.kp)
            .with_key(P2, &self.kp2)
            .with_key(C, &self.kc)
            .with_key(E, &self.kp256)
            .with_revoked_key(RK)
            .with_revoked_key(P2)
            .with_revoked_record(self.revoked_cap.id())
            .with_revoked_record(self.revoked_root.id())
    }
}

struct Row {
    name: String,
    ctx_id: ObjID,
    bytes: Vec<u8>,
    target: ObjID,
    default: Protections,
    access: Access,
    now: u64,
    provide: Protections,
    granted: bool,
    verdicts: Option<Vec<Verdict>>,
    restrict: Option<Protections>,
    valid_until: Option<Expiry>,
}

fn row(name: &str, bytes: Vec<u8>, access: Access) -> Row {
    Row {
        name: name.to_string(),
        ctx_id: C,
        bytes,
        target: A,
        default: NONE,
        access,
        now: NOW,
        provide: NONE,
        granted: false,
        verdicts: None,
        restrict: None,
        valid_until: None,
    }
}

impl Row {
    fn in_ctx(mut self, ctx: ObjID) -> Self {
        self.ctx_id = ctx;
        self
    }
    fn target(mut self, t: ObjID) -> Self {
        self.target = t;
        self
    }
    fn default(mut self, p: Protections) -> Self {
        self.default = p;
        self
    }
    fn now(mut self, now: u64) -> Self {
        self.now = now;
        self
    }
    /// Expected: provided rights and whether the access is granted.
    fn gives(mut self, provide: Protections, granted: bool) -> Self {
        self.provide = provide;
        self.granted = granted;
        self
    }
    fn verdicts(mut self, v: Vec<Verdict>) -> Self {
        self.verdicts = Some(v);
        self
    }
    fn restrict(mut self, r: Protections) -> Self {
        self.restrict = Some(r);
        self
    }
    fn valid_until(mut self, e: u64) -> Self {
        self.valid_until = Some(Expiry::from_raw(e));
        self
    }
}

fn ctx_edit(f: impl FnOnce(&mut SecCtxEditor)) -> Vec<u8> {
    let mut ed = SecCtxEditor::new();
    f(&mut ed);
    encode(&ed)
}

fn ctx_dels(dels: &[&Del]) -> Vec<u8> {
    ctx_edit(|ed| {
        for d in dels {
            ed.add_del(d);
        }
    })
}

/// Heap offset of an editor-written context.
fn heap_offset(bytes: &[u8]) -> usize {
    get_u32(bytes, 36) as usize
}

fn rows(w: &World) -> Vec<Row> {
    use Verdict::*;
    let empty = ctx_edit(|_| {});
    let cap_r = cap(A, C, R, &w.ka);
    let cap_w = cap(A, C, W, &w.ka);
    let cap_rw = cap(A, C, R | W, &w.ka);
    let mut v = Vec::new();

    // --- Default protections and masks, no records.
    v.push(
        row(
            "default prots alone grant a read",
            empty.clone(),
            Access::read(0x1000),
        )
        .default(R | W)
        .gives(R | W, true)
        .verdicts(vec![])
        .restrict(NONE)
        .valid_until(0),
    );
    v.push(
        row(
            "default prots alone: exec not granted",
            empty.clone(),
            Access::exec(0x1000),
        )
        .default(R | W)
        .gives(R | W, false)
        .verdicts(vec![]),
    );
    v.push(
        row(
            "default prots masked by the global mask",
            ctx_edit(|ed| ed.set_global_mask(R)),
            Access::write(0x1000),
        )
        .default(R | W)
        .gives(R, false)
        .restrict(W | X),
    );
    v.push(
        row(
            "default prots masked by the object's permmask",
            ctx_edit(|ed| ed.set_mask(A, R, NONE)),
            Access::write(0x1000),
        )
        .default(R | W)
        .gives(R, false)
        .restrict(W | X),
    );
    v.push(
        row(
            "empty global mask removes everything, even default prots",
            ctx_edit(|ed| {
                ed.set_global_mask(NONE);
                ed.add_cap(&cap_rw);
            }),
            Access::read(0x1000),
        )
        .default(R)
        .gives(NONE, false)
        .verdicts(vec![Redundant])
        .restrict(R | W | X),
    );

    // --- Single capabilities.
    v.push(
        row(
            "a cap granting R grants a read",
            ctx_with_caps(&[cap_r]),
            Access::read(0x1000),
        )
        .gives(R, true)
        .verdicts(vec![Counted(R)])
        .restrict(NONE)
        .valid_until(0),
    );
    v.push(
        row(
            "a read-only cap denies a write",
            ctx_with_caps(&[cap_r]),
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R)]),
    );
    v.push(
        row(
            "a cap for A grants nothing for B",
            ctx_with_caps(&[cap_r]),
            Access::read(0x1000),
        )
        .target(B)
        .gives(NONE, false)
        .verdicts(vec![]),
    );
    v.push(
        row(
            "per-object permmask removes W",
            ctx_edit(|ed| {
                ed.add_cap(&cap_rw);
                ed.set_mask(A, R, NONE);
            }),
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R | W)])
        .restrict(W | X),
    );
    v.push(
        row(
            "another object's permmask does not apply",
            ctx_edit(|ed| {
                ed.add_cap(&cap_rw);
                ed.set_mask(B, R, NONE);
            }),
            Access::write(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R | W)])
        .restrict(NONE),
    );
    v.push(
        row(
            "global mask alone removes W",
            ctx_edit(|ed| {
                ed.add_cap(&cap_rw);
                ed.set_global_mask(R);
            }),
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R | W)])
        .restrict(W | X),
    );
    v.push(
        row(
            "ovrmask lets W through a global mask that removes it",
            ctx_edit(|ed| {
                ed.add_cap(&cap_rw);
                ed.set_global_mask(R);
                ed.set_mask(A, Protections::all(), W);
            }),
            Access::write(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R | W)])
        .restrict(X),
    );
    v.push(
        row(
            "ovrmask does not let through what permmask removes",
            ctx_edit(|ed| {
                ed.add_cap(&cap_rw);
                ed.set_global_mask(R);
                ed.set_mask(A, R, W);
            }),
            Access::write(0x1000),
        )
        .gives(R, false)
        .restrict(W | X),
    );

    // --- Expiry.
    let exp1000 = mint(grant(A, C, R, Gate::WHOLE, 1_000), &w.ka);
    v.push(
        row(
            "expired cap: now == expires",
            ctx_with_caps(&[exp1000]),
            Access::read(0x1000),
        )
        .now(1_000)
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Expired {
            expires: 1_000,
            now: 1_000,
        })])
        .valid_until(0),
    );
    v.push(
        row(
            "cap valid at expires - 1",
            ctx_with_caps(&[exp1000]),
            Access::read(0x1000),
        )
        .now(999)
        .gives(R, true)
        .verdicts(vec![Counted(R)])
        .valid_until(1_000),
    );
    v.push(
        row(
            "valid_until is the earliest expiry among counted records",
            ctx_with_caps(&[
                mint(grant(A, C, R | W, Gate::WHOLE, 500), &w.ka),
                mint(grant(A, C, R, Gate::WHOLE, 3_000), &w.ka),
                mint(grant(A, C, W, Gate::WHOLE, 5_000), &w.ka),
                mint(grant(A, C, R | W, Gate::WHOLE, 2_000), &w.ka),
            ]),
            Access::write(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![
            Invalid(VerifyError::Expired {
                expires: 500,
                now: NOW,
            }),
            Counted(R),
            Counted(W),
            Redundant,
        ])
        .valid_until(3_000),
    );

    // --- Binding to target and holder.
    let for_c2 = cap(A, C2, R, &w.ka);
    v.push(
        row(
            "cap for another context copied in",
            ctx_with_caps(&[for_c2]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![WrongHolder(C2)]),
    );
    v.push(
        row(
            "the same cap in its own context",
            ctx_with_caps(&[for_c2]),
            Access::read(0x1000),
        )
        .in_ctx(C2)
        .gives(R, true)
        .verdicts(vec![Counted(R)]),
    );
    let mut misfiled = ctx_with_caps(&[cap(B, C, R | W, &w.kb)]);
    patch_entry_target(&mut misfiled, 0, A);
    v.push(
        row(
            "cap for B filed under A",
            misfiled.clone(),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![WrongTarget(B)]),
    );
    v.push(
        row(
            "cap for B filed under A is not found for B",
            misfiled,
            Access::read(0x1000),
        )
        .target(B)
        .gives(NONE, false)
        .verdicts(vec![]),
    );

    // --- Verification failures.
    v.push(
        row(
            "cap signed by another key",
            ctx_with_caps(&[cap(A, C, R, &w.kother)]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::BadSignature)]),
    );
    v.push(
        row(
            "cap signed by a revoked key",
            ctx_with_caps(&[cap(RK, C, R, &w.krk)]),
            Access::read(0x1000),
        )
        .target(RK)
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Key(KeyLookupError::KeyRevoked(
            RK,
        )))]),
    );
    v.push(
        row(
            "cap for an object with no kuid",
            ctx_with_caps(&[cap(N, C, R, &w.kn)]),
            Access::read(0x1000),
        )
        .target(N)
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Key(KeyLookupError::NoKuid(N)))]),
    );
    v.push(
        row(
            "revoked record",
            ctx_with_caps(&[w.revoked_cap]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Revoked)]),
    );
    v.push(
        row(
            "a revoked record does not stop another from counting",
            ctx_with_caps(&[w.revoked_cap, cap_r]),
            Access::read(0x1000),
        )
        .gives(R, true)
        .verdicts(vec![Invalid(VerifyError::Revoked), Counted(R)]),
    );

    // --- Data gates.
    let g2 = mint(grant(A, C, R | W, gate(0x1000, 0x2000, 1), 0), &w.ka);
    for (name, access, ok) in [
        ("page 1 fully inside", Access::read(0x1800), true),
        (
            "page 2 (last byte) fully inside",
            Access::read(0x2fff),
            true,
        ),
        ("write on page 1 inside", Access::write(0x1000), true),
        ("page 3 outside", Access::read(0x3000), false),
        ("page 5 outside", Access::write(0x5000), false),
    ] {
        let want = if ok { R | W } else { NONE };
        let verdict = if ok { Counted(R | W) } else { OutsideGate };
        v.push(
            row(
                &format!("data gate 0x1000+0x2000: {name}"),
                ctx_with_caps(&[g2]),
                access,
            )
            .gives(want, ok)
            .verdicts(vec![verdict]),
        );
    }
    // The null page: never granted, and no record is consulted for it.
    v.push(
        row(
            "data gate 0x1000+0x2000: the null page",
            ctx_with_caps(&[g2]),
            Access::read(0x0fff),
        )
        .gives(NONE, false)
        .verdicts(vec![]),
    );
    let half = mint(grant(A, C, R, gate(0x1800, 0x1000, 1), 0), &w.ka);
    for (name, access) in [
        ("page 1 only partly covered", Access::read(0x1800)),
        ("page 2 only partly covered", Access::read(0x2000)),
        ("page outside", Access::read(0x5000)),
    ] {
        v.push(
            row(
                &format!("data gate 0x1800+0x1000: {name}"),
                ctx_with_caps(&[half]),
                access,
            )
            .gives(NONE, false)
            .verdicts(vec![OutsideGate]),
        );
    }

    // --- Code gates: entry points.
    let code = mint(grant(A, C, R | X, gate(0x1000, 0x100, 0x10), 0), &w.ka);
    let code_ctx = ctx_with_caps(&[code]);
    for (name, access, provide, granted, verdict) in [
        (
            "enter at an entry",
            Access::enter(0x1010),
            R | X,
            true,
            Counted(R | X),
        ),
        (
            "enter at the first entry",
            Access::enter(0x1000),
            R | X,
            true,
            Counted(R | X),
        ),
        (
            "enter at the last entry",
            Access::enter(0x10f0),
            R | X,
            true,
            Counted(R | X),
        ),
        (
            "enter misaligned",
            Access::enter(0x1008),
            NONE,
            false,
            NotAnEntry,
        ),
        (
            "enter past the gate",
            Access::enter(0x1100),
            NONE,
            false,
            NotAnEntry,
        ),
        (
            "enter far past the gate",
            Access::enter(0x1000 + 0x2000),
            NONE,
            false,
            NotAnEntry,
        ),
        (
            "as_entering of a misaligned fetch",
            Access::exec(0x1008).as_entering(),
            NONE,
            false,
            NotAnEntry,
        ),
        (
            "exec already inside, far from the gate",
            Access::exec(0x5000),
            R | X,
            true,
            Counted(R | X),
        ),
        (
            "exec already inside, misaligned",
            Access::exec(0x1008),
            R | X,
            true,
            Counted(R | X),
        ),
        (
            "a data read outside the gate is not granted",
            Access::read(0x5000),
            NONE,
            false,
            OutsideGate,
        ),
        (
            "a data read on the gate's page is not granted",
            Access::read(0x1010),
            NONE,
            false,
            OutsideGate,
        ),
        (
            "as_entering of a read stays a read",
            Access::read(0x1010).as_entering(),
            NONE,
            false,
            OutsideGate,
        ),
        (
            "a write is not granted",
            Access::write(0x1010),
            NONE,
            false,
            OutsideGate,
        ),
    ] {
        v.push(
            row(&format!("code gate: {name}"), code_ctx.clone(), access)
                .gives(provide, granted)
                .verdicts(vec![verdict]),
        );
    }
    // Before the gate lies the null page, which no record is even consulted for.
    v.push(
        row(
            "code gate: enter in the null page",
            code_ctx.clone(),
            Access::enter(0x0ff0),
        )
        .gives(NONE, false)
        .verdicts(vec![]),
    );
    let x_only = mint(grant(A, C, X, gate(0x1000, 0x100, 0x10), 0), &w.ka);
    v.push(
        row(
            "an X-only cap alone does not grant a fetch",
            ctx_with_caps(&[x_only]),
            Access::enter(0x1010),
        )
        .gives(X, false)
        .verdicts(vec![Counted(X)]),
    );
    v.push(
        row(
            "an X-only cap with default R grants a fetch",
            ctx_with_caps(&[x_only]),
            Access::enter(0x1010),
        )
        .default(R)
        .gives(R | X, true)
        .verdicts(vec![Counted(X)]),
    );
    let rwx = mint(grant(A, C, R | W | X, gate(0, 0x10000, 0x10), 0), &w.ka);
    v.push(
        row(
            "entering at a non-entry gets the data rights but not X",
            ctx_with_caps(&[rwx]),
            Access::enter(0x1008),
        )
        .gives(R | W, false)
        .verdicts(vec![Counted(R | W)]),
    );
    v.push(
        row(
            "a data cap grants no exec",
            ctx_with_caps(&[cap_rw]),
            Access::exec(0x1000),
        )
        .gives(R | W, false)
        .verdicts(vec![Counted(R | W)]),
    );

    // --- Delegations.
    let cap_p_rw = cap(A, P, R | W, &w.ka);
    let cap_p_r = cap(A, P, R, &w.ka);
    let del_c = Del::from_cap(&cap_p_rw, DelGrant::new(C, R), &w.kp).expect("delegate");
    v.push(
        row(
            "delegation grants in the receiver",
            ctx_dels(&[&del_c]),
            Access::read(0x1000),
        )
        .gives(R, true)
        .verdicts(vec![Counted(R)]),
    );
    v.push(
        row(
            "delegation of R denies a write in the receiver",
            ctx_dels(&[&del_c]),
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R)]),
    );
    v.push(
        row(
            "delegation copied into the provider grants nothing",
            ctx_dels(&[&del_c]),
            Access::read(0x1000),
        )
        .in_ctx(P)
        .gives(NONE, false)
        .verdicts(vec![WrongHolder(C)]),
    );
    v.push(
        row(
            "provider gets no more than its own cap",
            ctx_edit(|ed| {
                ed.add_cap(&cap_p_r);
                ed.add_del(&del_c);
            }),
            Access::write(0x1000),
        )
        .in_ctx(P)
        .gives(R, false)
        .verdicts(vec![Counted(R), WrongHolder(C)]),
    );
    let del_c2 = del_c
        .delegate(DelGrant::new(C2, R), &w.kc)
        .expect("delegate");
    v.push(
        row(
            "depth-2 delegation grants in its receiver",
            ctx_dels(&[&del_c2]),
            Access::read(0x1000),
        )
        .in_ctx(C2)
        .gives(R, true)
        .verdicts(vec![Counted(R)]),
    );
    v.push(
        row(
            "depth-2 delegation grants nothing to the middle",
            ctx_dels(&[&del_c2]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![WrongHolder(C2)]),
    );
    let bad_link = Del::from_cap(&cap_p_rw, DelGrant::new(C, R), &w.kother).expect("delegate");
    v.push(
        row(
            "delegation signed by a key other than the provider's",
            ctx_dels(&[&bad_link]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::BadSignature)]),
    );
    let from_p2 =
        Del::from_cap(&cap(A, P2, R, &w.ka), DelGrant::new(C, R), &w.kp2).expect("delegate");
    v.push(
        row(
            "delegation by a provider whose key is revoked",
            ctx_dels(&[&from_p2]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Key(KeyLookupError::KeyRevoked(
            P2,
        )))]),
    );
    // The root expires, so the link must expire no later (a never-expiring link amplifies).
    let from_revoked = Del::from_cap(
        &w.revoked_root,
        DelGrant {
            expires: Expiry::from_raw(888_888),
            ..DelGrant::new(C, R)
        },
        &w.kp,
    )
    .expect("delegate");
    v.push(
        row(
            "delegation whose root cap is revoked",
            ctx_dels(&[&from_revoked]),
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Revoked)]),
    );
    let short = Del::from_cap(
        &cap_p_rw,
        DelGrant {
            expires: Expiry::from_raw(1_000),
            ..DelGrant::new(C, R)
        },
        &w.kp,
    )
    .expect("delegate");
    v.push(
        row(
            "expired delegation link",
            ctx_dels(&[&short]),
            Access::read(0x1000),
        )
        .now(1_000)
        .gives(NONE, false)
        .verdicts(vec![Invalid(VerifyError::Expired {
            expires: 1_000,
            now: 1_000,
        })]),
    );
    v.push(
        row(
            "delegation link valid at expires - 1",
            ctx_dels(&[&short]),
            Access::read(0x1000),
        )
        .now(999)
        .gives(R, true)
        .verdicts(vec![Counted(R)])
        .valid_until(1_000),
    );
    let gated = Del::from_cap(
        &cap_p_rw,
        DelGrant {
            gate: gate(0x1000, 0x1000, 1),
            ..DelGrant::new(C, R | W)
        },
        &w.kp,
    )
    .expect("delegate");
    v.push(
        row(
            "delegation gate: page inside",
            ctx_dels(&[&gated]),
            Access::write(0x1abc),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R | W)]),
    );
    v.push(
        row(
            "delegation gate: page outside",
            ctx_dels(&[&gated]),
            Access::read(0x2000),
        )
        .gives(NONE, false)
        .verdicts(vec![OutsideGate]),
    );

    // --- Malformed records in the heap.
    let mut bad_prots = ctx_with_caps(&[cap_rw, cap_r]);
    let h = heap_offset(&bad_prots);
    // Entry 0 is at heap offset 0; the cap's protections are at byte 40 of its encoding.
    put_u16(&mut bad_prots, h + 40, 0x0008);
    v.push(
        row(
            "malformed record (unknown prots) then a good one",
            bad_prots,
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![
            Malformed(DecodeError::UnknownProtections(8)),
            Counted(R),
        ]),
    );
    let mut bad_magic = ctx_with_caps(&[cap_rw]);
    let h = heap_offset(&bad_magic);
    put_u32(&mut bad_magic, h, 0xdead_beef);
    v.push(
        row(
            "malformed record (bad magic) grants nothing",
            bad_magic,
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Malformed(DecodeError::BadMagic {
            expected: CAP_MAGIC,
            found: 0xdead_beef,
        })]),
    );
    let mut wrong_kind = ctx_with_caps(&[cap_rw]);
    put_u32(&mut wrong_kind, HEADER_LEN + 16, 1); // entry 0 kind: delegation
    v.push(
        row(
            "cap bytes filed as a delegation",
            wrong_kind,
            Access::read(0x1000),
        )
        .gives(NONE, false)
        .verdicts(vec![Malformed(DecodeError::BadMagic {
            expected: DEL_MAGIC,
            found: CAP_MAGIC,
        })]),
    );

    // --- Union and redundancy.
    v.push(
        row(
            "union: R from one cap, W from another",
            ctx_with_caps(&[cap_r, cap_w]),
            Access::write(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R), Counted(W)]),
    );
    v.push(
        row(
            "union with a gated cap: inside the gate",
            ctx_with_caps(&[cap_r, g2]),
            Access::write(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R), Counted(R | W)]),
    );
    v.push(
        row(
            "union with a gated cap: outside the gate",
            ctx_with_caps(&[cap_r, g2]),
            Access::write(0x3000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R), OutsideGate]),
    );
    v.push(
        row(
            "second cap adding nothing is redundant",
            ctx_with_caps(&[cap_rw, cap_r]),
            Access::read(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R | W), Redundant]),
    );
    v.push(
        row(
            "cap adding nothing to default prots is redundant",
            ctx_with_caps(&[cap_r]),
            Access::read(0x1000),
        )
        .default(R)
        .gives(R, true)
        .verdicts(vec![Redundant])
        .valid_until(0),
    );
    v.push(
        row(
            "cap adding only masked-out rights is redundant",
            ctx_edit(|ed| {
                ed.add_cap(&cap_r);
                ed.add_cap(&cap_rw);
                ed.set_global_mask(R);
            }),
            Access::write(0x1000),
        )
        .gives(R, false)
        .verdicts(vec![Counted(R), Redundant]),
    );
    v.push(
        row(
            "a redundant cap is not verified (a forged one is not reported Invalid)",
            ctx_with_caps(&[cap_r, cap(A, C, R, &w.kother)]),
            Access::read(0x1000),
        )
        .gives(R, true)
        .verdicts(vec![Counted(R), Redundant]),
    );
    v.push(
        row(
            "a cap not counted leaves valid_until unchanged",
            ctx_with_caps(&[cap_rw, mint(grant(A, C, R, Gate::WHOLE, 2_000), &w.ka)]),
            Access::read(0x1000),
        )
        .gives(R | W, true)
        .verdicts(vec![Counted(R | W), Redundant])
        .valid_until(0),
    );
    v
}

#[test]
fn permission_rule_table() {
    let w = World::new();
    let auth = w.auth();
    let rows = rows(&w);
    assert!(rows.len() > 60, "table has {} rows", rows.len());
    let mut failures = Vec::new();
    for r in &rows {
        let (info, verdicts) = explain(
            r.ctx_id, &r.bytes, r.target, r.default, &auth, r.access, r.now,
        );
        let ctx = SecCtx::parse(&r.bytes).unwrap();
        let plain = evaluate(r.ctx_id, &ctx, r.target, r.default, &auth, r.access, r.now);
        let granted = info.grants(r.access.kind.required());
        let mut errs = Vec::new();
        if plain != info {
            errs.push(format!("evaluate {plain:?} != evaluate_explained {info:?}"));
        }
        if info.ctx != r.ctx_id {
            errs.push(format!("ctx {:?}, expected {:?}", info.ctx, r.ctx_id));
        }
        if info.provide != r.provide {
            errs.push(format!(
                "provide {:?}, expected {:?}",
                info.provide, r.provide
            ));
        }
        if granted != r.granted {
            errs.push(format!("granted {granted}, expected {}", r.granted));
        }
        if let Some(v) = &r.verdicts
            && &verdicts != v
        {
            errs.push(format!("verdicts {verdicts:?}, expected {v:?}"));
        }
        if let Some(x) = r.restrict
            && info.restrict != x
        {
            errs.push(format!("restrict {:?}, expected {x:?}", info.restrict));
        }
        if let Some(x) = r.valid_until
            && info.valid_until != x
        {
            errs.push(format!(
                "valid_until {:?}, expected {x:?}",
                info.valid_until
            ));
        }
        if !errs.is_empty() {
            failures.push(format!("row {:?}:\n    {}", r.name, errs.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn report_indices_and_records_match_the_context() {
    let w = World::new();
    let auth = w.auth();
    // A = 0xA1 < B = 0xA2: A's entries are 0 and 1 (insertion order), B's is 2.
    let bytes = ctx_with_caps(&[
        cap(B, C, R, &w.kb),
        cap(A, C, R, &w.ka),
        cap(A, C, W, &w.ka),
    ]);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let mut seen = Vec::new();
    twizzler_capsec::evaluate_explained(C, &ctx, B, NONE, &auth, Access::read(0x1000), NOW, |r| {
        seen.push((r.index, r.record.map(|x| x.target()), r.verdict));
    });
    assert_eq!(seen, vec![(2, Some(B), Verdict::Counted(R))]);
    let mut seen = Vec::new();
    twizzler_capsec::evaluate_explained(C, &ctx, A, NONE, &auth, Access::write(0x1000), NOW, |r| {
        seen.push((r.index, r.record.map(|x| x.prots()), r.verdict));
    });
    assert_eq!(
        seen,
        vec![
            (0, Some(R), Verdict::Counted(R)),
            (1, Some(W), Verdict::Counted(W))
        ]
    );
    // A malformed record is reported without a record.
    let mut bad = bytes.clone();
    let h = heap_offset(&bad);
    bad[h] ^= 0xff;
    let ctx = SecCtx::parse(&bad).unwrap();
    let mut seen = Vec::new();
    twizzler_capsec::evaluate_explained(C, &ctx, A, NONE, &auth, Access::read(0x1000), NOW, |r| {
        seen.push((r.index, r.record.map(|x| x.prots()), r.verdict));
    });
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, 0);
    assert_eq!(seen[0].1, None);
    assert!(
        matches!(seen[0].2, Verdict::Malformed(DecodeError::BadMagic { .. })),
        "{:?}",
        seen[0]
    );
    assert_eq!(seen[1], (1, Some(W), Verdict::Counted(W)));
}

#[test]
fn truncated_record_is_malformed() {
    let w = World::new();
    let auth = w.auth();
    let mut bytes = ctx_with_caps(&[cap(A, C, R, &w.ka)]);
    // Shrink entry 0's item length by one: the record no longer decodes.
    let len_at = HEADER_LEN + 24;
    let len = get_u32(&bytes, len_at);
    put_u32(&mut bytes, len_at, len - 1);
    let (info, verdicts) = explain(C, &bytes, A, NONE, &auth, Access::read(0x1000), NOW);
    assert!(!info.grants(R));
    assert_eq!(verdicts.len(), 1);
    assert!(
        matches!(
            verdicts[0],
            Verdict::Malformed(DecodeError::Truncated { .. })
        ),
        "{verdicts:?}"
    );
}

#[test]
fn permsinfo_grants_uses_restrict() {
    let info = PermsInfo {
        ctx: C,
        provide: R | W | X,
        restrict: W,
        valid_until: Expiry::NEVER,
    };
    assert!(info.grants(R));
    assert!(info.grants(R | X));
    assert!(info.grants(NONE));
    assert!(!info.grants(W));
    assert!(!info.grants(R | W));
    assert!(!info.grants(AccessKind::Write.required()));
    assert!(info.grants(AccessKind::Exec.required()));

    let info = PermsInfo {
        ctx: C,
        provide: R,
        restrict: NONE,
        valid_until: Expiry::NEVER,
    };
    assert!(info.grants(R));
    assert!(
        !info.grants(R | X),
        "provide without X must not grant a fetch"
    );

    // From an evaluation: a global mask of R restricts W and X.
    let w = World::new();
    let auth = w.auth();
    let bytes = ctx_edit(|ed| {
        ed.add_cap(&cap(A, C, R | W | X, &w.ka));
        ed.set_global_mask(R);
    });
    let (info, _) = explain(C, &bytes, A, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!(info.restrict, W | X);
    assert_eq!(info.provide, R);
    assert!(info.grants(R));
    assert!(!info.grants(AccessKind::Write.required()));
    assert!(!info.grants(AccessKind::Exec.required()));
    assert_eq!(AccessKind::Read.required(), R);
    assert_eq!(AccessKind::Write.required(), R | W);
    assert_eq!(AccessKind::Exec.required(), R | X);
}

#[test]
fn ed25519_and_p256_caps_both_grant() {
    let w = World::new();
    let auth = w.auth();
    for (name, target, key, hash) in [
        ("ed25519/blake3", A, &w.ka, HashAlg::Blake3),
        ("ed25519/sha256", A, &w.ka, HashAlg::Sha256),
        ("p256/blake3", E, &w.kp256, HashAlg::Blake3),
        ("p256/sha256", E, &w.kp256, HashAlg::Sha256),
    ] {
        let c = mint(
            CapGrant {
                hash,
                ..CapGrant::new(target, C, R | W)
            },
            key,
        );
        assert_eq!(c.signature().scheme(), key.scheme(), "{name}");
        let bytes = ctx_with_caps(&[c]);
        let (info, verdicts) = explain(C, &bytes, target, NONE, &auth, Access::write(0x1000), NOW);
        assert_eq!(verdicts, vec![Verdict::Counted(R | W)], "{name}");
        assert!(info.grants(AccessKind::Write.required()), "{name}");
    }
    // Delegation links signed with P-256 work too.
    let auth = w.auth().with_key(P, &w.kp256);
    let del = Del::from_cap(&cap(A, P, R, &w.ka), DelGrant::new(C, R), &w.kp256).unwrap();
    let (info, verdicts) = explain(
        C,
        &ctx_dels(&[&del]),
        A,
        NONE,
        &auth,
        Access::read(0x1000),
        NOW,
    );
    assert_eq!(verdicts, vec![Verdict::Counted(R)]);
    assert!(info.grants(R));

    let auth = w.auth();
    // A P-256 cap for an object whose key is Ed25519: scheme mismatch.
    let (info, verdicts) = explain(
        C,
        &ctx_with_caps(&[cap(A, C, R, &w.kp256)]),
        A,
        NONE,
        &auth,
        Access::read(0x1000),
        NOW,
    );
    assert_eq!(
        verdicts,
        vec![Verdict::Invalid(VerifyError::SchemeMismatch)]
    );
    assert!(!info.grants(R));
    // A P-256 cap signed by another P-256 key.
    let (info, verdicts) = explain(
        C,
        &ctx_with_caps(&[cap(E, C, R, &w.kp256_other)]),
        E,
        NONE,
        &auth,
        Access::read(0x1000),
        NOW,
    );
    assert_eq!(verdicts, vec![Verdict::Invalid(VerifyError::BadSignature)]);
    assert!(!info.grants(R));
}

#[test]
fn memo_is_used_and_still_checks_expiry_revocation_and_keys() {
    let w = World::new();
    let c_r = mint(grant(A, C, R, Gate::WHOLE, 5_000), &w.ka);
    let c_w = cap(A, C, W, &w.ka);
    let c_redundant = cap(A, C, R | W, &w.ka);
    let c_other = cap(A, C2, R, &w.ka);
    let del = Del::from_cap(&cap(B, P, R | W, &w.kb), DelGrant::new(C, R | W), &w.kp).unwrap();
    let bytes = ctx_edit(|ed| {
        ed.add_cap(&c_r);
        ed.add_cap(&c_w);
        ed.add_cap(&c_redundant);
        ed.add_cap(&c_other);
        ed.add_del(&del);
    });
    let mut auth = w.auth().with_memo();

    // First evaluation: every counted record is verified and remembered exactly once.
    let (info1, v1) = explain(C, &bytes, A, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!(
        v1,
        vec![
            Verdict::Counted(R),
            Verdict::Counted(W),
            Verdict::Redundant,
            Verdict::WrongHolder(C2)
        ]
    );
    assert_eq!(
        auth.remembered(),
        checks(&auth, &[Record::Cap(c_r), Record::Cap(c_w)])
    );
    assert_eq!(auth.memo_hits.get(), 0);
    let (_, vd) = explain(C, &bytes, B, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!(vd, vec![Verdict::Counted(R | W)]);
    assert_eq!(
        auth.remembered(),
        checks(
            &auth,
            &[Record::Cap(c_r), Record::Cap(c_w), Record::Del(del.clone())]
        )
    );

    // Second evaluation: same result, answered from the memo, nothing remembered again.
    auth.clear_log();
    let (info2, v2) = explain(C, &bytes, A, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!((info2, &v2), (info1, &v1));
    assert_eq!(
        auth.memo_hits.get(),
        2,
        "both counted caps should hit the memo"
    );
    assert!(
        auth.remembered().is_empty(),
        "remembered again: {:?}",
        auth.remembered()
    );
    let (_, vd) = explain(C, &bytes, B, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!(vd, vec![Verdict::Counted(R | W)]);
    // A delegation is two signature checks (the root's and the link's), both remembered.
    assert_eq!(auth.memo_hits.get(), 4);
    assert!(auth.remembered().is_empty());

    // Memoized, but expired now.
    auth.clear_log();
    let (info, v) = explain(C, &bytes, A, NONE, &auth, Access::read(0x1000), 5_000);
    assert_eq!(
        v,
        vec![
            Verdict::Invalid(VerifyError::Expired {
                expires: 5_000,
                now: 5_000
            }),
            // A data record contributes its data rights (W) to any access on a covered page.
            Verdict::Counted(W),
            Verdict::Counted(R | W),
            Verdict::WrongHolder(C2),
        ],
        "an expired record must not count even if memoized"
    );
    assert_eq!(info.provide, R | W);
    assert_eq!(info.valid_until, Expiry::NEVER);
    assert_eq!(
        auth.memo_hits.get(),
        1,
        "c_w hits the memo; c_r is found expired before any key or memo is consulted"
    );
    assert_eq!(
        auth.remembered(),
        checks(&auth, &[Record::Cap(c_redundant)])
    );

    // Memoized, but the record is revoked now.
    let mut revoking = w
        .auth()
        .with_revoked_record(c_r.id())
        .with_revoked_record(c_w.id());
    revoking.memo = auth.memo.take();
    let (info, v) = explain(C, &bytes, A, NONE, &revoking, Access::write(0x1000), NOW);
    assert_eq!(
        v,
        vec![
            Verdict::Invalid(VerifyError::Revoked),
            Verdict::Invalid(VerifyError::Revoked),
            Verdict::Counted(R | W),
            Verdict::WrongHolder(C2),
        ]
    );
    assert_eq!(info.provide, R | W);
    assert!(revoking.remembered().is_empty());

    // Memoized, but the object's key (or a provider's) is revoked now.
    let mut key_revoked = w.auth().with_revoked_key(A).with_revoked_key(P);
    key_revoked.memo = revoking.memo.take();
    {
        let memo = key_revoked.memo.as_ref().unwrap().borrow();
        let all = [c_r, c_w, c_redundant].map(Record::Cap);
        for id in checks(&w.auth(), &all)
            .into_iter()
            .chain(checks(&w.auth(), &[Record::Del(del.clone())]))
        {
            assert!(memo.contains(&id), "{id:?} should be memoized by now");
        }
    }
    let (info, v) = explain(C, &bytes, A, NONE, &key_revoked, Access::write(0x1000), NOW);
    let revoked_a = Verdict::Invalid(VerifyError::Key(KeyLookupError::KeyRevoked(A)));
    assert_eq!(
        v,
        vec![revoked_a, revoked_a, revoked_a, Verdict::WrongHolder(C2)]
    );
    assert_eq!(info.provide, NONE);
    let (info, v) = explain(C, &bytes, B, NONE, &key_revoked, Access::write(0x1000), NOW);
    assert_eq!(
        v,
        vec![Verdict::Invalid(VerifyError::Key(
            KeyLookupError::KeyRevoked(P)
        ))]
    );
    assert_eq!(info.provide, NONE);
    assert!(key_revoked.remembered().is_empty());
}

/// The signature-check ids (what a memo remembers) of `records`, in verification order.
fn checks(auth: &impl Authority, records: &[Record]) -> Vec<RecordId> {
    let mut ids = Vec::new();
    for r in records {
        match r {
            Record::Cap(c) => auth
                .with_key(c.target(), |k| ids.push(cap_check_id(k, &c.id())))
                .unwrap(),
            Record::Del(d) => d
                .each_signature(|signer: ObjID, msg: &[u8], sig: &Signature| {
                    auth.with_key(signer, |k| ids.push(signature_check_id(k, msg, sig)))
                        .map_err(VerifyError::from)
                })
                .unwrap(),
        }
    }
    ids
}

/// A capability's remembered check ([`cap_check_id`]) is bound to the key and to the whole
/// capability: another key, another body (another right, another holder), or another
/// signature over the same body each get another id, and none is the id the same check would
/// have as a delegation's signature ([`signature_check_id`]), so neither memory can vouch for
/// the other's check. The same capability re-encoded keeps its id.
#[test]
fn a_capability_check_id_binds_the_key_the_body_and_the_signature() {
    let w = World::new();
    let (ka, kb) = (w.ka.verifying_key(), w.kb.verifying_key());
    let c = cap(A, C, R, &w.ka);
    let id = |k: &twizzler_capsec::VerifyingKey, c: &twizzler_capsec::Cap| cap_check_id(k, &c.id());
    let base = id(&ka, &c);
    assert_eq!(
        base,
        id(&ka, &twizzler_capsec::Cap::decode(&c.encode()).unwrap())
    );
    assert_ne!(base, id(&kb, &c), "another key");
    assert_ne!(base, id(&ka, &cap(A, C, R | W, &w.ka)), "another right");
    assert_ne!(base, id(&ka, &cap(A, B, R, &w.ka)), "another holder");
    // The same body signed by another key: its own signature, so its own id under `ka`.
    let resigned = cap(A, C, R, &w.kb);
    assert_eq!(c.signed_message(), resigned.signed_message());
    assert_ne!(
        base,
        id(&ka, &resigned),
        "another signature over the same body"
    );
    assert_ne!(
        base,
        signature_check_id(&ka, &c.signed_message(), c.signature()),
        "the delegation form of the same check"
    );
}

#[test]
fn vouched_for_records_skip_signature_checks_only() {
    // A memo that vouches for everything shows that signatures are skipped: a cap signed by
    // the wrong key counts. Everything else is still checked.
    let w = World::new();
    let mut auth = w.auth();
    auth.vouch_all = true;
    let forged = cap(A, C, R, &w.kother);
    let (info, v) = explain(
        C,
        &ctx_with_caps(&[forged]),
        A,
        NONE,
        &auth,
        Access::read(0x1000),
        NOW,
    );
    assert_eq!(v, vec![Verdict::Counted(R)]);
    assert!(info.grants(R));
    assert!(
        auth.remembered().is_empty(),
        "a vouched-for record is not remembered again"
    );
    assert_eq!(auth.memo_hits.get(), 1);

    let cases: Vec<(&str, Vec<u8>, ObjID, Verdict)> = vec![
        (
            "expired",
            ctx_with_caps(&[mint(grant(A, C, R, Gate::WHOLE, NOW), &w.kother)]),
            A,
            Verdict::Invalid(VerifyError::Expired {
                expires: NOW,
                now: NOW,
            }),
        ),
        (
            "revoked record",
            ctx_with_caps(&[w.revoked_cap]),
            A,
            Verdict::Invalid(VerifyError::Revoked),
        ),
        (
            "revoked key",
            ctx_with_caps(&[cap(RK, C, R, &w.kother)]),
            RK,
            Verdict::Invalid(VerifyError::Key(KeyLookupError::KeyRevoked(RK))),
        ),
        (
            "no kuid",
            ctx_with_caps(&[cap(N, C, R, &w.kother)]),
            N,
            Verdict::Invalid(VerifyError::Key(KeyLookupError::NoKuid(N))),
        ),
        (
            "wrong holder",
            ctx_with_caps(&[cap(A, C2, R, &w.kother)]),
            A,
            Verdict::WrongHolder(C2),
        ),
        (
            "delegation with a revoked provider key",
            ctx_dels(&[
                &Del::from_cap(&cap(A, P2, R, &w.ka), DelGrant::new(C, R), &w.kp2).unwrap(),
            ]),
            A,
            Verdict::Invalid(VerifyError::Key(KeyLookupError::KeyRevoked(P2))),
        ),
    ];
    for (name, bytes, target, want) in cases {
        let (info, v) = explain(C, &bytes, target, NONE, &auth, Access::read(0x1000), NOW);
        assert_eq!(v, vec![want], "{name}");
        assert!(!info.grants(R), "{name}");
    }
}

#[test]
fn undetachable_flag_does_not_change_evaluation() {
    let w = World::new();
    let auth = w.auth();
    let bytes = ctx_edit(|ed| {
        ed.add_cap(&cap(A, C, R, &w.ka));
        ed.set_flags(CtxFlags::UNDETACHABLE);
    });
    let (info, v) = explain(C, &bytes, A, NONE, &auth, Access::read(0x1000), NOW);
    assert_eq!(v, vec![Verdict::Counted(R)]);
    assert!(info.grants(R));
}

#[test]
fn the_null_page_is_never_granted_by_the_rule_itself() {
    // Every way the rule could grant (default protections, a whole-object capability for
    // every right, an entry gate starting at byte 0) and no mask: still nothing on bytes
    // 0..4096, for every kind of access, entering or not.
    let w = World::new();
    let mut code = CapGrant::new(A, C, R | X);
    code.gate = Gate::new(0, 0x2000, 0x10).unwrap();
    let bytes = ctx_with_caps(&[cap(A, C, R | W | X, &w.ka), mint(code, &w.ka)]);
    let auth = w.auth();
    let all = Protections::all();
    for offset in [0, 0x10, 0x800, 0xfff] {
        for access in [
            Access::read(offset),
            Access::write(offset),
            Access::exec(offset),
            Access::enter(offset),
        ] {
            let (info, _) = explain(C, &bytes, A, all, &auth, access, NOW);
            assert_eq!(info.provide, NONE, "{access:?}");
            assert!(!info.grants(access.kind.required()), "{access:?}");
        }
    }
    // The first byte past it is granted as usual.
    let (info, _) = explain(C, &bytes, A, NONE, &auth, Access::write(0x1000), NOW);
    assert_eq!(info.provide, R | W);
}
