//! The permission rule on structured contexts, without signature work: the input chooses a
//! [`CheckRule`], the evaluation parameters (and which eighth of the access grid is
//! evaluated), flags, masks and up to 8 records (capabilities
//! and delegation chains of any depth, built unsigned from input-chosen fields), which the
//! editor encodes. The context then goes through `ctx_parse`'s oracles, plus one of its own:
//! a whole-object capability that is bound, verifies and grants a data right the masks allow
//! always provides it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{
    Access, CtxFlags, Gate, Protections, Record, SecCtx, SecCtxEditor, allowed_by_masks, evaluate,
};
use twizzler_capsec_fuzz::{
    CheapAuthority, CheapSignatures, CheckRule, Cursor, ID_POOL, RuleParams, cap_from,
    check_context, del_from,
};

const MAX_RECORDS: usize = 8;
const MAX_MASKS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor::new(data);
    let rule = CheckRule::from_byte(c.u8());
    let phase = c.u8();
    let now = match c.u8() % 6 {
        0 => 1,
        1 => (1 << 60) - 1,
        2 => 1 << 60,
        3 => u64::MAX,
        4 => c.u64(),
        _ => 1 << 59,
    };
    let default_prots = Protections::from_bits_truncate(u16::from(c.u8()) & 7);
    let revoke = match c.u8() {
        b if b & 1 == 1 => Some(c.u8()),
        _ => None,
    };
    let params = RuleParams {
        now,
        default_prots,
        revoke,
        pick: c.below(16),
        offset: u64::from(c.u32()) % (1 << 30),
        stride: 1,
        phase: 0,
    }
    .sampled(phase);

    let mut ed = SecCtxEditor::new();
    ed.set_flags(CtxFlags::from_bits_truncate(c.u16()));
    ed.set_global_mask(Protections::from_bits_truncate(u16::from(c.u8()) & 7));
    for _ in 0..c.below(MAX_MASKS + 1) {
        let target = c.pick(&ID_POOL);
        let perm = Protections::from_bits_truncate(u16::from(c.u8()) & 7);
        let ovr = Protections::from_bits_truncate(u16::from(c.u8()) & 7);
        ed.set_mask(target, perm, ovr);
    }
    let mut records = Vec::new();
    for _ in 0..c.below(MAX_RECORDS + 1) {
        if c.u8() & 3 == 3 {
            if let Some(d) = del_from(&mut c) {
                records.push(Record::Del(d));
            }
        } else {
            records.push(Record::Cap(cap_from(&mut c)));
        }
    }
    for r in &records {
        ed.add_record(r);
    }
    let Ok(bytes) = ed.encode() else { return };
    let ctx = SecCtx::parse(&bytes).expect("the editor's output parses");
    assert_eq!(ctx.entry_count(), records.len());

    let auths = CheapSignatures(rule);
    check_context(&bytes, |_| params, &auths);

    // Completeness: a verified whole-object capability is never ignored for a right it grants.
    let auth = CheapAuthority::new(rule, revoke);
    for r in &records {
        let Record::Cap(cap) = r else { continue };
        // A data capability for ALL_CONTEXTS (an id of the pool) is built but never decodes
        // (`DecodeError::ReservedAccessor`): it cannot grant.
        if cap.gate() != Gate::WHOLE
            || cap.accessor() == twizzler_capsec::ALL_CONTEXTS
            || Record::Cap(*cap).verify(&auth, now).is_err()
        {
            continue;
        }
        let allowed = allowed_by_masks(&ctx, cap.target());
        for access in [Access::read(0x1000), Access::write(0x1000)] {
            let needed = access.kind.required();
            if !cap.prots().contains(needed) || !allowed.contains(needed) {
                continue;
            }
            let info = evaluate(
                cap.accessor(),
                &ctx,
                cap.target(),
                default_prots,
                &auth,
                access,
                now,
            );
            assert!(
                info.grants(needed),
                "a verified whole-object capability for {needed:?} was ignored: {info:?}"
            );
        }
    }
});
