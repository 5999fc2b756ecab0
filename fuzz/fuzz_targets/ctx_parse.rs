//! `SecCtx::parse` on arbitrary bytes, then every lookup, every record, the editor round trip
//! and the permission rule against a fixed authority.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{
    Access, Expiry, ObjID, PermsInfo, Protections, SecCtx, SecCtxEditor, Verdict, evaluate,
    evaluate_explained,
};
use twizzler_capsec_fuzz::{ALL_IDS, CTX, FuzzAuthority, OBJ_NOKEY, le_u64_at};

/// Bounds on the work per input, so that large contexts full of valid signatures do not
/// collapse the execution rate.
const MAX_TARGETS: usize = 3;
const MAX_HOLDERS: usize = 2;

fuzz_target!(|data: &[u8]| {
    let Ok(ctx) = SecCtx::parse(data) else { return };
    let _ = (ctx.flags(), ctx.generation(), ctx.global_mask());
    let _ = format!("{ctx:?}");

    // Entries: table order, sorted by target, indices in order, records decodable or not.
    let entries: Vec<_> = ctx.entries().collect();
    assert_eq!(entries.len(), ctx.entry_count());
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.index, i);
        if i > 0 {
            assert!(entries[i - 1].target <= e.target, "entries not sorted");
        }
        let _ = e.record();
    }
    let records: Vec<_> = entries.iter().map(|e| e.record()).collect();

    // Masks: strictly sorted, and `mask` finds each of them.
    let masks: Vec<_> = ctx.masks().collect();
    assert_eq!(masks.len(), ctx.mask_count());
    for w in masks.windows(2) {
        assert!(w[0].target < w[1].target, "masks not strictly sorted");
    }
    for m in &masks {
        assert_eq!(ctx.mask(m.target), Some(*m));
    }

    // Lookups by target for every entry's target and a few derived ids.
    let mut probe: Vec<ObjID> = ALL_IDS.to_vec();
    for e in &entries {
        let t = e.target.raw();
        probe.extend([
            e.target,
            ObjID::new(t.wrapping_add(1)),
            ObjID::new(t.wrapping_sub(1)),
        ]);
    }
    for m in &masks {
        probe.push(ObjID::new(m.target.raw().wrapping_add(1)));
    }
    probe.push(ObjID::new(0));
    probe.push(ObjID::new(u128::MAX));
    for &t in &probe {
        let got: Vec<usize> = ctx.entries_for(t).map(|e| e.index).collect();
        let want: Vec<usize> = entries
            .iter()
            .filter(|e| e.target == t)
            .map(|e| e.index)
            .collect();
        assert_eq!(got, want, "entries_for({t:?}) disagrees with a scan");
        assert_eq!(ctx.mask(t), masks.iter().find(|m| m.target == t).copied());
    }

    // Editor round trip: loading and re-encoding keeps everything, and is idempotent.
    let ed = SecCtxEditor::from_ctx(&ctx);
    let enc = ed.encode().expect("a parsed context re-encodes");
    let re = SecCtx::parse(&enc).expect("the editor's output parses");
    assert_eq!(re.flags(), ctx.flags());
    assert_eq!(re.generation(), ctx.generation());
    assert_eq!(re.global_mask(), ctx.global_mask());
    assert!(re.masks().eq(ctx.masks()));
    assert!(
        re.entries()
            .map(|e| (e.target, e.kind, e.bytes()))
            .eq(entries.iter().map(|e| (e.target, e.kind, e.bytes()))),
        "the editor changed the entries"
    );
    let enc2 = SecCtxEditor::from_ctx(&re).encode().unwrap();
    assert_eq!(enc, enc2, "editor encoding is not idempotent");

    // The permission rule.
    let mut targets: Vec<ObjID> = Vec::new();
    for e in &entries {
        if !targets.contains(&e.target) && targets.len() < MAX_TARGETS {
            targets.push(e.target);
        }
    }
    targets.push(OBJ_NOKEY);
    let mut holders: Vec<ObjID> = vec![CTX[0]];
    for r in records.iter().flatten() {
        if !holders.contains(&r.holder()) && holders.len() < MAX_HOLDERS + 1 {
            holders.push(r.holder());
        }
    }
    let tail = data.len().saturating_sub(8);
    let now = match le_u64_at(data, tail) % 4 {
        0 => 1,
        1 => le_u64_at(data, 16),
        2 => u64::MAX,
        _ => 1 << 62,
    };
    let default_prots = Protections::from_bits_truncate(data[data.len() - 1] as u16 >> 5);
    let revoke = data.get(data.len() / 2).copied().filter(|b| b % 5 == 0);

    // One memoising authority for the whole input (verification does not depend on the
    // context or target evaluated), and a few accesses re-evaluated with a fresh authority:
    // the memo must never change a result.
    let memo = FuzzAuthority::with_memo(revoke);
    let pick = usize::from(data[0]) % 16;
    let mut n = 0usize;
    for &target in &targets {
        let mut offsets = vec![0u64, le_u64_at(data, 8) % (1 << 30)];
        if let Some(Ok(r)) = entries
            .iter()
            .zip(&records)
            .find(|(e, _)| e.target == target)
            .map(|(_, r)| r)
        {
            let g = r.gate();
            offsets.extend([g.offset(), g.end() - 1]);
        }
        for &ctx_id in &holders {
            for &off in &offsets {
                for access in [
                    Access::read(off),
                    Access::write(off),
                    Access::exec(off),
                    Access::enter(off),
                ] {
                    let mut reports = Vec::new();
                    let info = evaluate_explained(
                        ctx_id,
                        &ctx,
                        target,
                        default_prots,
                        &memo,
                        access,
                        now,
                        |r| reports.push((r.index, r.verdict.clone(), r.record.cloned())),
                    );
                    check(
                        &ctx,
                        ctx_id,
                        target,
                        default_prots,
                        now,
                        &info,
                        &reports,
                        &memo,
                    );
                    if n % 16 == pick {
                        let fresh = FuzzAuthority::without_memo(revoke);
                        let plain =
                            evaluate(ctx_id, &ctx, target, default_prots, &fresh, access, now);
                        assert_eq!(plain, info, "the verification memo changed the result");
                    }
                    n += 1;
                }
            }
        }
    }
});

#[allow(clippy::too_many_arguments)]
fn check(
    ctx: &SecCtx<'_>,
    ctx_id: ObjID,
    target: ObjID,
    default_prots: Protections,
    now: u64,
    info: &PermsInfo,
    reports: &[(usize, Verdict, Option<twizzler_capsec::Record>)],
    auth: &FuzzAuthority,
) {
    let allowed = match ctx.mask(target) {
        Some(m) => m.permmask & (ctx.global_mask() | m.ovrmask),
        None => ctx.global_mask(),
    };
    assert_eq!(info.ctx, ctx_id);
    assert_eq!(info.restrict, Protections::all() & !allowed);
    assert!(
        allowed.contains(info.provide),
        "provides more than the masks allow"
    );
    assert!(
        info.provide.contains(default_prots & allowed),
        "lost the default protections"
    );
    assert!((info.provide & info.restrict).is_empty());

    // One report per entry filed under the target, in order.
    let idx: Vec<usize> = reports.iter().map(|r| r.0).collect();
    let want: Vec<usize> = ctx.entries_for(target).map(|e| e.index).collect();
    assert_eq!(idx, want);

    let mut provide = default_prots;
    let mut valid_until = Expiry::NEVER;
    for (_, verdict, record) in reports {
        match verdict {
            Verdict::Malformed(_) => assert!(record.is_none()),
            Verdict::Counted(c) => {
                let r = record.as_ref().expect("a counted record decoded");
                assert_eq!(r.target(), target);
                assert_eq!(r.holder(), ctx_id);
                assert!(
                    r.prots().contains(*c),
                    "counted rights the record does not grant"
                );
                assert_eq!(
                    r.verify(auth, now),
                    Ok(()),
                    "counted a record that does not verify"
                );
                provide |= *c;
                valid_until = valid_until.min(r.expires());
            }
            Verdict::WrongTarget(t) => assert_ne!(*t, target),
            Verdict::WrongHolder(h) => assert_ne!(*h, ctx_id),
            Verdict::Invalid(_) => {
                let r = record.as_ref().expect("an invalid record decoded");
                assert!(r.verify(auth, now).is_err());
            }
            _ => assert!(record.is_some()),
        }
    }
    assert_eq!(info.provide, provide & allowed);
    assert_eq!(info.valid_until, valid_until);
    // Every counted record is still valid until `valid_until`.
    if let Some(t) = valid_until.at() {
        assert!(now < t);
    }
}
