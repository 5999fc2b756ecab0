//! The oracles of the context targets (`ctx_parse`, `ctx_parse_fast`, `rule_fast`): the
//! reader, its lookups, the editor round trip and the permission rule on one context, under
//! either the real-signature authority or the cheap one.

use twizzler_capsec::{
    Access, Authority, CAP_LEN, Expiry, ObjID, PermsInfo, Protections, Record, RecordKind, SecCtx,
    SecCtxEditor, Verdict, evaluate, evaluate_explained,
};

use crate::{ALL_IDS, CTX, CheapAuthority, CheckRule, FuzzAuthority, OBJ_NOKEY, le_u64_at};

/// Bounds on the work per input, so that large contexts full of valid signatures do not
/// collapse the execution rate.
const MAX_TARGETS: usize = 3;
const MAX_HOLDERS: usize = 2;

/// What the rule is evaluated with, beyond the context.
#[derive(Clone, Copy, Debug)]
pub struct RuleParams {
    /// The time of the evaluation.
    pub now: u64,
    /// The object's default protections.
    pub default_prots: Protections,
    /// Records whose id starts with this byte are revoked.
    pub revoke: Option<u8>,
    /// Which access (mod 16) is also evaluated with a fresh authority.
    pub pick: usize,
    /// An offset evaluated besides 0 and the first record's gate ends.
    pub offset: u64,
    /// Only every `stride`-th (target, context, offset, access) of the grid is evaluated,
    /// starting at `phase` (`< stride`): 1 evaluates the whole grid (`ctx_parse`, whose
    /// inputs are dominated by signature work anyway); the fast targets sample it, so that
    /// the fuzzer tries more contexts per second rather than more accesses per context.
    pub stride: usize,
    /// See `stride`.
    pub phase: usize,
}

impl RuleParams {
    /// The parameters `ctx_parse` derives from the context bytes themselves (non-empty).
    pub fn from_ctx_bytes(data: &[u8]) -> Self {
        let tail = data.len().saturating_sub(8);
        Self {
            now: match le_u64_at(data, tail) % 4 {
                0 => 1,
                1 => le_u64_at(data, 16),
                2 => u64::MAX,
                _ => 1 << 62,
            },
            default_prots: Protections::from_bits_truncate(data[data.len() - 1] as u16 >> 5),
            revoke: data.get(data.len() / 2).copied().filter(|b| b % 5 == 0),
            pick: usize::from(data[0]) % 16,
            offset: le_u64_at(data, 8) % (1 << 30),
            stride: 1,
            phase: 0,
        }
    }

    /// Samples one access in [`RuleParams::SAMPLE_STRIDE`], starting where `selector` says.
    pub fn sampled(self, selector: u8) -> Self {
        Self {
            stride: Self::SAMPLE_STRIDE,
            phase: usize::from(selector) % Self::SAMPLE_STRIDE,
            ..self
        }
    }

    /// The stride of [`RuleParams::sampled`].
    pub const SAMPLE_STRIDE: usize = 8;
}

/// The two authorities the rule oracles use: one for the whole input (`memo`), and one made
/// afresh for the accesses that are evaluated a second time (`fresh`), which must agree.
pub trait Authorities {
    /// The authority of the whole input.
    type Memo: Authority;
    /// The authority of the re-evaluations.
    type Fresh: Authority;
    /// Makes the input's authority.
    fn memo(&self, revoke: Option<u8>) -> Self::Memo;
    /// Makes a re-evaluation's authority.
    fn fresh(&self, revoke: Option<u8>) -> Self::Fresh;
}

/// Real signatures: [`FuzzAuthority`] with a verification memo, re-evaluated without one (the
/// memo must never change a result).
pub struct RealSignatures;

impl Authorities for RealSignatures {
    type Memo = FuzzAuthority;
    type Fresh = FuzzAuthority;
    fn memo(&self, revoke: Option<u8>) -> FuzzAuthority {
        FuzzAuthority::with_memo(revoke)
    }
    fn fresh(&self, revoke: Option<u8>) -> FuzzAuthority {
        FuzzAuthority::without_memo(revoke)
    }
}

/// No signature work: [`CheapAuthority`] under one [`CheckRule`] for both (its answers are a
/// pure function of the check id, so the re-evaluation checks that `evaluate` and
/// `evaluate_explained` agree).
pub struct CheapSignatures(pub CheckRule);

impl Authorities for CheapSignatures {
    type Memo = CheapAuthority;
    type Fresh = CheapAuthority;
    fn memo(&self, revoke: Option<u8>) -> CheapAuthority {
        CheapAuthority::new(self.0, revoke)
    }
    fn fresh(&self, revoke: Option<u8>) -> CheapAuthority {
        CheapAuthority::new(self.0, revoke)
    }
}

/// `SecCtx::parse` on `data`, then every lookup, every record, the editor round trip and the
/// permission rule under `auths`, with the parameters `params` makes from the (parsed, so
/// non-empty) bytes. Panics when an oracle fails; returns quietly when `data` does not parse.
pub fn check_context(
    data: &[u8],
    params: impl FnOnce(&[u8]) -> RuleParams,
    auths: &impl Authorities,
) {
    let Ok(ctx) = SecCtx::parse(data) else { return };
    let _ = (ctx.flags(), ctx.generation(), ctx.global_mask());
    let _ = format!("{ctx:?}");

    // Entries: the sorted sequence, every table row exactly once and in row order, records
    // decodable or not.
    let entries: Vec<_> = ctx.entries().collect();
    assert_eq!(entries.len(), ctx.entry_count());
    let mut seen = vec![false; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.index, i, "entries not in row order");
        assert!(
            !std::mem::replace(&mut seen[e.index], true),
            "row {} visited twice",
            e.index
        );
        if i > 0 {
            assert!(entries[i - 1].target <= e.target, "entries not sorted");
        }
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
    // The same entries, in the order the editor writes them: by target, then within a
    // target capabilities by their gate's offset (a body's bytes 42..50), then the other
    // records, ties in the order read.
    let mut written: Vec<_> = entries
        .iter()
        .map(|e| (e.target, e.kind, e.bytes()))
        .collect();
    written.sort_by_key(|(target, kind, b)| {
        let gate = (*kind == RecordKind::Cap && b.len() == CAP_LEN)
            .then(|| {
                b.get(42..50)
                    .and_then(|g| g.try_into().ok())
                    .map(u64::from_le_bytes)
            })
            .flatten();
        (*target, gate.is_none(), gate.unwrap_or(0))
    });
    assert!(
        re.entries()
            .map(|e| (e.target, e.kind, e.bytes()))
            .eq(written),
        "the editor changed the entries"
    );
    let enc2 = SecCtxEditor::from_ctx(&re).encode().unwrap();
    assert_eq!(enc, enc2, "editor encoding is not idempotent");

    // The permission rule.
    let p = params(data);
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

    // One authority for the whole input (verification does not depend on the context or
    // target evaluated), and a few accesses re-evaluated with a fresh one: they must agree.
    let auth = auths.memo(p.revoke);
    let mut n = 0usize;
    for &target in &targets {
        let mut offsets = vec![0u64, p.offset];
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
                    let this = n;
                    n += 1;
                    if this % p.stride != p.phase % p.stride {
                        continue;
                    }
                    let mut reports = Vec::new();
                    let info = evaluate_explained(
                        ctx_id,
                        &ctx,
                        target,
                        p.default_prots,
                        &auth,
                        access,
                        p.now,
                        |r| reports.push((r.index, r.verdict, r.record.cloned())),
                    );
                    let eval = Evaluation {
                        ctx_id,
                        target,
                        default_prots: p.default_prots,
                        now: p.now,
                    };
                    eval.check(&ctx, access, &info, &reports, &auth);
                    // One evaluated access in 16 (or every other one when sampling).
                    let every = (16 / p.stride).max(1);
                    if (this / p.stride) % every == p.pick % every {
                        let fresh = auths.fresh(p.revoke);
                        let again =
                            evaluate(ctx_id, &ctx, target, p.default_prots, &fresh, access, p.now);
                        assert_eq!(again, info, "a fresh authority changed the result");
                    }
                }
            }
        }
    }
}

/// One evaluation's inputs besides the context and the access.
struct Evaluation {
    ctx_id: ObjID,
    target: ObjID,
    default_prots: Protections,
    now: u64,
}

impl Evaluation {
    /// The rule's result against its own report: masks, one report per entry in order,
    /// `provide` and `valid_until` recomputed from the counted records, which verify and are
    /// bound to the target and the context; invalid records do not verify.
    fn check(
        &self,
        ctx: &SecCtx<'_>,
        access: Access,
        info: &PermsInfo,
        reports: &[(usize, Verdict, Option<Record>)],
        auth: &impl Authority,
    ) {
        let (ctx_id, target, now) = (self.ctx_id, self.target, self.now);
        if access.page() == 0 {
            // The null page is never granted, and no record is consulted for it.
            let nothing = PermsInfo {
                ctx: ctx_id,
                provide: Protections::empty(),
                restrict: Protections::all(),
                valid_until: Expiry::NEVER,
            };
            assert_eq!(*info, nothing, "the rule granted the null page");
            assert!(reports.is_empty(), "records consulted for the null page");
            return;
        }
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
            info.provide.contains(self.default_prots & allowed),
            "lost the default protections"
        );
        assert!((info.provide & info.restrict).is_empty());

        // One report per entry filed under the target, in order.
        let idx: Vec<usize> = reports.iter().map(|r| r.0).collect();
        let want: Vec<usize> = ctx.entries_for(target).map(|e| e.index).collect();
        assert_eq!(idx, want);

        let mut provide = self.default_prots;
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
}
