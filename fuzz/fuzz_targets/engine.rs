//! The fault-decision engine (`kernel-hooks`) against the pure rule: contexts built from the
//! input (pool records chosen by the input, masks, flags, or raw hostile bytes), then a
//! program of faults and events: context edits (`invalidate_ctx`), record and key revocations,
//! key rotation (`invalidate_key`), clock moves, wall-clock offset changes, `expire`, thread
//! attach/detach/switch and changes of an object's default protections.
//!
//! Oracles, at every fault, with the rule (`twizzler_capsec::evaluate`) evaluated on the same
//! context bytes, object, offset and time, under an authority that looks keys and revocations
//! up as the engine does:
//! - the null page and offsets past 1 GiB are refused as such;
//! - a `Map` never grants more than the rule grants to the context it names, at the faulting
//!   offset and at the first, middle and last page of the run it offers, never offers page 0,
//!   grants the right the fault needs, and is valid no longer than the rule's result;
//! - the active context decides as the rule does (its budget cannot run out here): the rule
//!   grants ⇒ `Map` from the active context with protections within the rule's and holding
//!   what the fault needs (a miss verifies only the records the access needs); the rule
//!   denies ⇒ no `Map` from it; an `UNDETACHABLE`, missing or malformed active context
//!   never lets another context grant;
//! - the same fault decided again with nothing changed gives the same decision.
#![no_main]

use std::ops::Range;

use kernel_hooks::{Decision, Engine, Fault, SecCtxMgr, Violation};
use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{
    Access, AccessKind, CtxFlags, Expiry, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, Protections, Record,
    SecCtx, SecCtxEditor, evaluate,
};
use twizzler_capsec_fuzz::engine::{
    CONTEXTS, FuzzHost, KEY_ED, KEY_P256, MAX_RAW_ENTRIES, RefAuthority, pool,
};
use twizzler_capsec_fuzz::{CTX, CTX_P256, Cursor, OBJ, OBJ_CODE, OBJ_NOKEY, OBJ_P256};

const MAX_OPS: usize = 64;
const MAX_POOL_RECORDS: usize = 6;
const FAULT_TARGETS: [ObjID; 7] = [
    OBJ,
    OBJ,
    OBJ_CODE,
    OBJ_P256,
    OBJ_NOKEY,
    CTX[1],
    ObjID::new(0x1003),
];
const KINDS: [AccessKind; 3] = [AccessKind::Read, AccessKind::Write, AccessKind::Exec];

fn prots(c: &mut Cursor<'_>) -> Protections {
    Protections::from_bits_truncate(u16::from(c.u8()) & 7)
}

/// A context from the input: pool records with masks and flags, or (one time in 8) raw
/// bytes. `None` if raw bytes parse to more entries than the target allows.
fn build_ctx(c: &mut Cursor<'_>) -> Option<Vec<u8>> {
    let sel = c.u8();
    if sel % 8 == 7 {
        let len = usize::from(c.u16() % 2048);
        let bytes = c.bytes(len).to_vec();
        if SecCtx::parse(&bytes).is_ok_and(|x| x.entry_count() > MAX_RAW_ENTRIES) {
            return None;
        }
        return Some(bytes);
    }
    let mut ed = SecCtxEditor::new();
    for _ in 0..usize::from(sel >> 3) % (MAX_POOL_RECORDS + 1) {
        ed.add_record(&pool()[c.below(pool().len())]);
    }
    if sel & 0x40 != 0 {
        ed.set_flags(CtxFlags::UNDETACHABLE);
    }
    if sel & 0x80 != 0 {
        ed.set_global_mask(prots(c));
        let t = c.pick(&FAULT_TARGETS);
        let (p, o) = (prots(c), prots(c));
        ed.set_mask(t, p, o);
    }
    Some(ed.encode().expect("small contexts encode"))
}

/// Edits context `ctx` as the input says (starting over if its bytes do not parse).
fn edit(c: &mut Cursor<'_>, bytes: Option<&[u8]>) -> Vec<u8> {
    let mut ed = match bytes.map(SecCtx::parse) {
        Some(Ok(x)) => SecCtxEditor::from_ctx(&x),
        _ => SecCtxEditor::new(),
    };
    match c.u8() % 6 {
        0 if ed.len() < MAX_RAW_ENTRIES => ed.add_record(&pool()[c.below(pool().len())]),
        1 => {
            let r = &pool()[c.below(pool().len())];
            ed.remove(r.target(), &r.id());
        }
        2 => {
            let t = c.pick(&FAULT_TARGETS);
            let (p, o) = (prots(c), prots(c));
            ed.set_mask(t, p, o);
        }
        3 => ed.set_global_mask(prots(c)),
        4 => ed.set_flags(CtxFlags::from_bits_truncate(c.u16() & 1)),
        _ => {
            ed.remove_target(c.pick(&FAULT_TARGETS));
        }
    }
    ed.encode().expect("small contexts encode")
}

fn offset(c: &mut Cursor<'_>) -> u64 {
    match c.u8() % 8 {
        0 => u64::from(c.u16()),
        1 | 2 => (1 + c.below(15) as u64) * PAGE_SIZE + u64::from(c.u16()) % PAGE_SIZE,
        3 => 0x2000 + 8 * c.below(64) as u64,
        4 => 0x1000 + 8 * c.below(64) as u64,
        5 => c.u64(),
        6 => MAX_OBJECT_SIZE - 1 - u64::from(c.u16()),
        _ => MAX_OBJECT_SIZE + u64::from(c.u8()),
    }
}

/// A decision without its ticket (which may legitimately differ between two decisions).
type Untick = Result<(Protections, Range<u64>, ObjID, Option<ObjID>, Expiry), Violation>;

fn untick(d: &Decision) -> Untick {
    match d {
        Decision::Map {
            prots,
            pages,
            ctx,
            switch_to,
            valid_until,
            ..
        } => Ok((*prots, pages.clone(), *ctx, *switch_to, *valid_until)),
        Decision::Violation(v) => Err(v.clone()),
    }
}

fn rule(
    host: &FuzzHost,
    ctx: ObjID,
    target: ObjID,
    access: Access,
    now: u64,
) -> Option<twizzler_capsec::PermsInfo> {
    let bytes = host.ctx_bytes(ctx)?;
    let parsed = SecCtx::parse(&bytes).ok()?;
    let default = host.info(target).default_prots;
    Some(evaluate(
        ctx,
        &parsed,
        target,
        default,
        &RefAuthority(host),
        access,
        now,
    ))
}

fn check_fault(engine: &Engine<FuzzHost>, thread: &SecCtxMgr, fault: &Fault, d: &Decision) {
    let host = engine.host();
    let now = engine.now();
    if fault.offset < PAGE_SIZE {
        assert!(
            matches!(d, Decision::Violation(Violation::NullPage { .. })),
            "null page: {d:?}"
        );
        return;
    }
    if fault.offset >= MAX_OBJECT_SIZE {
        assert!(
            matches!(d, Decision::Violation(Violation::OutOfBounds { .. })),
            "out of bounds: {d:?}"
        );
        return;
    }
    let needed = fault.kind.required();
    let access = Access {
        kind: fault.kind,
        offset: fault.offset,
        entering: false,
    };
    let active = thread.active_id();
    let active_rule = rule(host, active, fault.target, access, now);
    let active_flags = host
        .ctx_bytes(active)
        .and_then(|b| SecCtx::parse(&b).ok().map(|x| x.flags()));
    match (&active_rule, d) {
        (Some(r), _) if r.grants(needed) => match d {
            Decision::Map {
                prots,
                ctx,
                switch_to,
                ..
            } => {
                assert_eq!(
                    *switch_to, None,
                    "switched although the active context grants"
                );
                assert_eq!(*ctx, active);
                // A miss verifies only the records the access needs, so a mapping carries
                // what the rule grants and never more, but not necessarily all of it at once
                // (`docs/DESIGN.md`, the cache): at least what the fault needs.
                assert!(
                    r.provide.contains(*prots) && prots.contains(needed),
                    "the engine and the rule disagree: mapped {prots:?}, the rule grants {:?}",
                    r.provide
                );
            }
            Decision::Violation(v) => panic!("the rule grants {:?}, the engine denied: {v}", r),
        },
        (
            _,
            Decision::Map {
                switch_to: None, ..
            },
        ) => {
            panic!("the active context does not grant ({active_rule:?}), the engine mapped: {d:?}")
        }
        _ => {}
    }
    let Decision::Map {
        prots,
        pages,
        ctx,
        switch_to,
        valid_until,
        ..
    } = d
    else {
        return;
    };
    assert!(
        prots.contains(needed),
        "mapped without the needed right: {d:?}"
    );
    if let Some(s) = switch_to {
        assert_ne!(*s, active);
        assert_eq!(ctx, s);
        assert!(
            active_rule.is_some(),
            "switched from a missing or malformed context"
        );
        assert!(
            !active_flags
                .unwrap_or_default()
                .contains(CtxFlags::UNDETACHABLE),
            "switched out of an UNDETACHABLE context"
        );
    }
    let here = if switch_to.is_some() {
        access.as_entering()
    } else {
        access
    };
    let r = rule(host, *ctx, fault.target, here, now).expect("the granting context parses");
    assert!(
        r.provide.contains(*prots),
        "engine grants {prots:?}, rule {r:?}"
    );
    assert!(r.grants(needed));
    // The mapping holds until `valid_until`: the rule still grants `prots` just before then
    // (grants only expire, so it does at every time between). Not `valid_until <=
    // r.valid_until`: the rule's expiry is that of everything it grants, and a mapping of
    // less (a miss verifies only what the access needs) may come from records that last longer.
    let last = valid_until
        .at()
        .map_or(u64::MAX - 1, |t| t.saturating_sub(1))
        .max(now);
    let later = rule(host, *ctx, fault.target, here, last).expect("parsed above");
    assert!(
        later.provide.contains(*prots),
        "valid until {valid_until:?}, but just before then the rule grants {later:?}"
    );
    if let Some(t) = valid_until.at() {
        assert!(now < t, "mapped under an expired grant");
    }
    let page = fault.offset / PAGE_SIZE;
    assert!(pages.contains(&page), "{pages:?} lacks page {page}");
    assert!(pages.start >= 1, "offered the null page: {pages:?}");
    assert!(pages.end <= MAX_OBJECT_SIZE / PAGE_SIZE);
    if switch_to.is_none() {
        for p in [pages.start, pages.end - 1, (pages.start + pages.end) / 2] {
            let there = Access {
                offset: p * PAGE_SIZE,
                ..access
            };
            let r = rule(host, *ctx, fault.target, there, now).expect("parsed above");
            assert!(
                r.provide.contains(*prots),
                "page {p} of {pages:?}: rule gives {:?}, mapped {prots:?}",
                r.provide
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor::new(data);
    let host = FuzzHost::new();
    {
        let mut objects = host.objects.borrow_mut();
        for obj in [OBJ, OBJ_CODE] {
            if let Some(o) = objects.get_mut(&obj) {
                o.default_prots = prots(&mut c);
            }
        }
    }
    for ctx in CONTEXTS {
        let Some(bytes) = build_ctx(&mut c) else {
            return;
        };
        host.contexts.borrow_mut().insert(ctx, bytes);
    }
    let thread = SecCtxMgr::new(CTX[0]);
    let attach = c.u8();
    for (i, ctx) in [CTX[1], CTX[2], CTX_P256, CTX[3]].into_iter().enumerate() {
        if attach & (1 << i) != 0 {
            let _ = thread.attach(ctx);
        }
    }
    let engine = Engine::new(host);

    for _ in 0..MAX_OPS {
        if c.is_empty() {
            break;
        }
        match c.u8() % 16 {
            op @ 0..=6 => {
                let target = c.pick(&FAULT_TARGETS);
                let fault = Fault::new(
                    target,
                    engine.host().info(target),
                    offset(&mut c),
                    c.pick(&KINDS),
                );
                let d = engine.decide(&thread, &fault);
                check_fault(&engine, &thread, &fault, &d);
                if op >= 4 {
                    let again = engine.decide(&thread, &fault);
                    assert_eq!(
                        untick(&again),
                        untick(&d),
                        "a repeated fault changed its decision"
                    );
                }
            }
            7 => {
                let ctx = c.pick(&CONTEXTS);
                let old = engine.host().ctx_bytes(ctx);
                let new = edit(&mut c, old.as_deref());
                engine.host().contexts.borrow_mut().insert(ctx, new);
                engine.invalidate_ctx(ctx);
            }
            8 => {
                let r = &pool()[c.below(pool().len())];
                let id = match (r, c.u8() % 4) {
                    (Record::Del(d), 0) => d.root().id(),
                    _ => r.id(),
                };
                engine.host().revoked_records.borrow_mut().insert(id);
                engine.revoke_record(id);
            }
            9 => {
                let kuid = c.pick(&[KEY_ED, KEY_P256]);
                engine.host().revoked_keys.borrow_mut().insert(kuid);
                engine.revoke_key(kuid);
            }
            10 => {
                let delta = match c.u8() % 6 {
                    0 => 1,
                    1 => 1_000_000,
                    2 => 999_999_999,
                    3 => 1_000_000_000,
                    4 => 1 << 40,
                    _ => u64::from(c.u32()),
                };
                let h = engine.host();
                h.clock.set(h.clock.get().saturating_add(delta));
                if c.u8() & 1 == 1 {
                    engine.expire();
                }
            }
            11 => {
                let off = match c.u8() % 4 {
                    0 => 0,
                    1 => 1_000_000_000,
                    2 => 1 << 40,
                    _ => c.u64() % (1 << 61),
                };
                engine.set_wall_clock_offset(off);
                engine.expire();
            }
            12 => {
                engine.expire();
            }
            13 => {
                let ctx = c.pick(&[CTX[0], CTX[1], CTX[2], CTX_P256, CTX[3]]);
                match c.u8() % 3 {
                    0 => {
                        let _ = thread.attach(ctx);
                    }
                    1 => {
                        let _ = thread.detach(ctx);
                    }
                    _ => {
                        let _ = thread.switch_context(ctx);
                    }
                }
            }
            14 => {
                let h = engine.host();
                h.rotated.set(!h.rotated.get());
                engine.invalidate_key(KEY_ED);
            }
            _ => {
                let obj = c.pick(&[OBJ, OBJ_CODE]);
                let p = prots(&mut c);
                if let Some(o) = engine.host().objects.borrow_mut().get_mut(&obj) {
                    o.default_prots = p;
                }
            }
        }
    }
});
