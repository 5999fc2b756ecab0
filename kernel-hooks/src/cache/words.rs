//! The words of a [`Snapshot`] in a set's mirror, and the hit served straight from them.

use twizzler_capsec::{
    AccessKind, CtxFlags, Expiry, FlowDenial, Gate, Grant, LabelId, ObjID, Protections,
};

use super::MAX_GRANTS;
use super::entry::{CachedPerms, Explanation, FlowState, Stamp};
use super::snapshot::{Evaluated, OBJECT_PAGES, Snapshot, full_pages_of, unexpired};
use super::verdict_words::{self, VERDICT_WORDS};
use crate::fault::{DenyCause, Fault};
use crate::host::ObjectInfo;
use crate::seqset::{KEY_WORDS, Way};
use core::ops::Range;
use twizzler_capsec::{Access, PAGE_SIZE};

/// Words of an entry in a set's mirror: its [`Snapshot`] (see [`Snapshot::encode`]), then
/// what explains a denial (see [`CachedPerms::encode`]).
pub const HOT_WORDS: usize = W_DENY_CODE + VERDICT_WORDS;

// The mirror's layout: the key (context, object: `KEY_WORDS`), then
pub(super) const W_EPOCH: usize = KEY_WORDS;
/// The `kuid`, two words (zero when there is none).
const W_KUID: usize = W_EPOCH + 1;
/// Small fields: default protections (bits 0-15), allowed (16-31), flags (32-47), and the
/// bits below.
const W_SMALL: usize = W_KUID + 2;
const W_VALID_UNTIL: usize = W_SMALL + 1;
/// The summary a hit is served from (see [`Snapshot::summary`]): the rights a data access
/// gets (bits 0-7), what the capabilities alone give it (8-15, [`Snapshot::summary_caps`]),
/// the same two for a code access (16-23, 24-30), [`UNIFORM`], and the object's label
/// (bits 32-63: part of the stamp, compared on every hit with a word the hit loads anyway).
const W_SUMMARY: usize = W_VALID_UNTIL + 1;
/// Each grant's rights, 16 bits each.
const W_PROTS: usize = W_SUMMARY + 1;
/// The flow mask (bits 0-15) and the flow's state (16-17, [`FlowState`]).
const W_FLOW: usize = W_PROTS + 1;
/// Each grant's gate: offset, length, align.
const W_GATES: usize = W_FLOW + 1;
/// What explains a denial, when the summary holds ([`Explanation`], for a data access and
/// for a code access by a thread in the context): the rights contributed before masks, data
/// (bits 0-15) and code (16-31), whether the context files a record for the object
/// ([`SEEN`]), and whether the words below are written ([`EXPLAINED`]).
const W_DENY: usize = W_GATES + 3 * MAX_GRANTS;
/// The most telling failure for a data access, then for a code access.
const W_DENY_DATA: usize = W_DENY + 1;
const W_DENY_CODE: usize = W_DENY_DATA + VERDICT_WORDS;

/// Bits of the small-fields word.
const KUID_SOME: u32 = 48;
const COMPLETE: u32 = 49;
const GRANT_PRESENT: u32 = 56;
/// Bit of the summary word: the summary holds (every data grant covers the whole object).
const UNIFORM: u64 = 1 << 31;
/// The flow word of an entry whose flow lets everything through for good.
const FLOW_ALL: u64 = Protections::all().bits() as u64 | ((FlowState::Resolved as u64) << 16);
/// Bits of the denial word.
const SEEN: u64 = 1 << 32;
const EXPLAINED: u64 = 1 << 33;
/// The denial words hold a flow denial (see [`flow_words`]) instead: the entry's flow
/// refuses something, so no capability denial is served from them.
const FLOW_EXPLAINED: u64 = 1 << 34;

/// The words of a flow denial, in the denial words' place (`W_DENY`: [`FLOW_EXPLAINED`] and
/// the kind; then the tag, two words). `None` for one they do not carry: a switch (never an
/// entry's) and an ownership denial (its verdict is read from the entry under the set's lock).
fn flow_words(d: &FlowDenial) -> Option<[u64; 3]> {
    let (kind, tag) = match *d {
        FlowDenial::SecrecyRead { tag } => (1, tag),
        FlowDenial::MustRaise { tag } => (2, tag),
        FlowDenial::IntegrityRead { tag } => (3, tag),
        FlowDenial::MustLower { tag } => (4, tag),
        FlowDenial::SecrecyWrite { tag } => (5, tag),
        FlowDenial::IntegrityWrite { tag } => (6, tag),
        FlowDenial::LabelUnknown => (8, ObjID::new(0)),
        FlowDenial::Ownership { .. } | FlowDenial::Switch { .. } => return None,
    };
    let [t0, t1] = id_words(tag);
    Some([FLOW_EXPLAINED | kind, t0, t1])
}

/// The mirror's words that explain a flow denial, copied out of a lock-free lookup as they
/// are (three words, as [`Explained`]); [`FlowExplained::denial`] decodes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowExplained([u64; 3]);

impl FlowExplained {
    /// Nothing explained: the entry explains it under its set's lock.
    pub const NONE: FlowExplained = FlowExplained([0; 3]);

    #[inline]
    fn of(w: &Way<'_, HOT_WORDS>) -> Self {
        let head = w.word(W_DENY);
        if head & FLOW_EXPLAINED == 0 {
            return Self::NONE;
        }
        Self([head, w.word(W_DENY_DATA), w.word(W_DENY_DATA + 1)])
    }

    /// The denial, if the words carry one.
    pub fn denial(&self) -> Option<FlowDenial> {
        let [head, t0, t1] = self.0;
        if head & FLOW_EXPLAINED == 0 {
            return None;
        }
        let tag = id_of(t0, t1);
        Some(match head & 0xff {
            1 => FlowDenial::SecrecyRead { tag },
            2 => FlowDenial::MustRaise { tag },
            3 => FlowDenial::IntegrityRead { tag },
            4 => FlowDenial::MustLower { tag },
            5 => FlowDenial::SecrecyWrite { tag },
            6 => FlowDenial::IntegrityWrite { tag },
            8 => FlowDenial::LabelUnknown,
            _ => return None,
        })
    }
}

fn id_words(id: ObjID) -> [u64; 2] {
    [id.raw() as u64, (id.raw() >> 64) as u64]
}

fn id_of(lo: u64, hi: u64) -> ObjID {
    ObjID::new(u128::from(lo) | (u128::from(hi) << 64))
}

/// The key words of (`ctx`, `target`) in a mirror.
pub(crate) fn key_words(ctx: ObjID, target: ObjID) -> [u64; KEY_WORDS] {
    let [c0, c1] = id_words(ctx);
    let [t0, t1] = id_words(target);
    [c0, c1, t0, t1]
}

impl Snapshot {
    /// The words a set's mirror holds.
    pub fn encode(&self) -> [u64; HOT_WORDS] {
        let mut w = [0u64; HOT_WORDS];
        let [c0, c1] = id_words(self.ctx);
        let [t0, t1] = id_words(self.target);
        let [k0, k1] = id_words(self.stamp.kuid.unwrap_or(ObjID::new(0)));
        let mut small = u64::from(self.stamp.default_prots.bits())
            | (u64::from(self.allowed.bits()) << 16)
            | (u64::from(self.flags.bits()) << 32)
            | (u64::from(self.stamp.kuid.is_some()) << KUID_SOME)
            | (u64::from(self.complete) << COMPLETE);
        let summary = match (self.summary(), self.summary_caps()) {
            (Some((data, code)), Some((caps_data, caps_code))) => {
                u64::from(data.bits())
                    | (u64::from(caps_data.bits()) << 8)
                    | (u64::from(code.bits()) << 16)
                    | (u64::from(caps_code.bits()) << 24)
                    | UNIFORM
            }
            _ => 0,
        } | (u64::from(self.stamp.label.0) << 32);
        let mut prots = 0u64;
        let mut gates = [0u64; 3 * MAX_GRANTS];
        for (i, (g, gate)) in self
            .grants
            .iter()
            .zip(gates.chunks_exact_mut(3))
            .enumerate()
        {
            if let Some(g) = g {
                small |= 1 << (GRANT_PRESENT + i as u32);
                prots |= u64::from(g.prots.bits()) << (16 * i);
                gate.copy_from_slice(&[g.gate.offset(), g.gate.length(), g.gate.align()]);
            }
        }
        let head = [
            c0,
            c1,
            t0,
            t1,
            self.stamp.epoch,
            k0,
            k1,
            small,
            self.valid_until.raw(),
            summary,
            prots,
            u64::from(self.flow.bits()) | ((self.flow_state as u64) << 16),
        ];
        for (dst, src) in w.iter_mut().zip(head.iter().chain(&gates)) {
            *dst = *src;
        }
        w
    }

    /// The snapshot [`Snapshot::encode`] wrote into `w`; `None` if `w` is not such words (a
    /// gate that does not validate), which a lookup treats as a miss.
    pub fn decode(w: &[u64; HOT_WORDS]) -> Option<Self> {
        let [
            c0,
            c1,
            t0,
            t1,
            epoch,
            k0,
            k1,
            small,
            valid_until,
            summary,
            prots,
            flow,
            rest @ ..,
        ] = *w;
        let gates = rest.get(..3 * MAX_GRANTS)?;
        let mut grants = [None; MAX_GRANTS];
        for (i, (slot, gate)) in grants.iter_mut().zip(gates.chunks_exact(3)).enumerate() {
            if small & (1 << (GRANT_PRESENT + i as u32)) != 0 {
                let &[offset, length, align] = gate else {
                    return None;
                };
                *slot = Some(Grant {
                    prots: Protections::from_bits_retain((prots >> (16 * i)) as u16),
                    gate: Gate::new(offset, length, align).ok()?,
                });
            }
        }
        Some(Self {
            ctx: id_of(c0, c1),
            target: id_of(t0, t1),
            stamp: Stamp {
                epoch,
                kuid: (small & (1 << KUID_SOME) != 0).then(|| id_of(k0, k1)),
                default_prots: Protections::from_bits_retain(small as u16),
                label: LabelId((summary >> 32) as u32),
            },
            valid_until: Expiry::from_raw(valid_until),
            allowed: Protections::from_bits_retain((small >> 16) as u16),
            flags: CtxFlags::from_bits_retain((small >> 32) as u16),
            grants,
            complete: small & (1 << COMPLETE) != 0,
            flow: Protections::from_bits_retain(flow as u16),
            flow_state: FlowState::from_bits((flow >> 16) & 3),
        })
    }

    /// The words that explain a denial from the summary (see [`Snapshot::serve`]), as
    /// [`CachedPerms::encode`] wrote them for `access`'s kind; `None` when there are none.
    #[inline]
    fn explained(w: &Way<'_, HOT_WORDS>, small: u64, kind: AccessKind) -> Explained {
        let deny = w.word(W_DENY);
        if deny & EXPLAINED == 0 {
            return Explained::NONE;
        }
        let (unmasked, at) = match kind {
            AccessKind::Exec => (deny >> 16, W_DENY_CODE),
            _ => (deny, W_DENY_DATA),
        };
        // The verdict's first word uses its low 32 bits (see `verdict_words`).
        let head = (w.word(at) & 0xffff_ffff)
            | ((unmasked & 0xff) << X_UNMASKED)
            | (((small >> 16) & 0xff) << X_ALLOWED)
            | if deny & SEEN != 0 { X_SEEN } else { 0 }
            | X_PRESENT;
        Explained([head, w.word(at + 1), w.word(at + 2)])
    }

    /// Whether the words are an entry stamped for `epoch` and `object`'s metadata: then its
    /// small-fields word, its summary word and its expiry, which the caller checks with
    /// `unexpired` (after what it can decide without the time). `object` is read
    /// here, where it is compared.
    #[inline(always)]
    fn stamped(
        w: &Way<'_, HOT_WORDS>,
        epoch: u64,
        object: &ObjectInfo,
    ) -> Option<(u64, u64, Expiry)> {
        // Each word is loaded where it is compared, so few values are live at once.
        if w.word(W_EPOCH) != epoch {
            return None;
        }
        // The `kuid` as the words hold it (zero words when there is none, and a bit of the
        // small fields saying whether there is one): compared word by word.
        let [k0, k1] = id_words(object.kuid.unwrap_or(ObjID::new(0)));
        let stamp_small = u64::from(object.default_prots.bits())
            | (u64::from(object.kuid.is_some()) << KUID_SOME);
        let stamp_bits = 0xffff | (1 << KUID_SOME);
        let small = w.word(W_SMALL);
        if small & stamp_bits != stamp_small || w.word(W_KUID) != k0 || w.word(W_KUID + 1) != k1 {
            return None;
        }
        let summary = w.word(W_SUMMARY);
        let valid_until = Expiry::from_raw(w.word(W_VALID_UNTIL));
        ((summary >> 32) as u32 == object.label.0).then_some((small, summary, valid_until))
    }

    /// The common hit, from the summary word alone: what the summary says about `fault` by a
    /// thread already in the context, if the words are fresh for the stamp (`epoch` and the
    /// fault's object metadata) at the time `now` reads (asked only if the entry expires) and
    /// the summary holds (every data grant covers the whole object, so the rights are the
    /// object's): a grant, or a refusal that carries the words that explain it (see
    /// [`SummaryHit`]). `None` for anything else, which [`Snapshot::serve`] answers in full.
    /// The caller checked the fault's bounds.
    #[inline(always)]
    pub(crate) fn serve_summary(
        w: &Way<'_, HOT_WORDS>,
        epoch: u64,
        now: impl Fn() -> u64,
        fault: &Fault,
    ) -> Option<SummaryHit> {
        let (small, summary, valid_until) = Self::stamped(w, epoch, &fault.object)?;
        let kind = fault.kind;
        // The time last: an entry the summary does not answer is the full serve's, which
        // reads it then.
        if summary & UNIFORM == 0 || !unexpired(valid_until, now) {
            return None;
        }
        let half = match kind {
            AccessKind::Exec => summary >> 16,
            _ => summary,
        };
        let provide = half & 0xff;
        Some(
            if Protections::from_bits_retain(provide as u16).contains(kind.required()) {
                SummaryHit {
                    head: provide,
                    w1: valid_until.raw(),
                    w2: 0,
                }
            } else {
                // The head word and where the rest of the explanation lies, out of line (two
                // words, returned in registers); the rest read here.
                let (head, at) = Self::summary_refusal(w, half, small, kind);
                let explained = head & (H_SERVED | H_FLOW) != 0;
                SummaryHit {
                    head,
                    w1: if explained { w.word(at) } else { 0 },
                    w2: if explained { w.word(at + 1) } else { 0 },
                }
            },
        )
    }

    /// A refusal from the summary (`half`: the summary's half for the access's kind): the
    /// head word of its [`SummaryHit`], and the index of the two words that follow it.
    /// When the entry's own denial may be served (the flow lets everything through for good
    /// and the entry holds every record that counted), the head carries [`H_SERVED`] and the
    /// head of the words that explain it; when the capabilities grant and the flow, worked
    /// out in full, refuses, [`H_FLOW`] and the head of the flow denial's words. Out of line:
    /// a granted hit does not come here.
    #[cold]
    #[inline(never)]
    fn summary_refusal(
        w: &Way<'_, HOT_WORDS>,
        half: u64,
        small: u64,
        kind: AccessKind,
    ) -> (u64, usize) {
        let flags = CtxFlags::from_bits_retain((small >> 32) as u16);
        let mut head = REFUSED | ((half & 0xff) << H_PROVIDED);
        if flags.contains(CtxFlags::UNDETACHABLE) {
            head |= H_UNDETACHABLE;
        }
        let flow = w.word(W_FLOW);
        let caps = Protections::from_bits_retain(((half >> 8) & 0x7f) as u16);
        if flow == FLOW_ALL {
            if small & (1 << COMPLETE) != 0 {
                // The explanation's head leaves the bits from `H_PROVIDED` up free.
                let Explained([e0, ..]) = Self::explained(w, small, kind);
                let at = match kind {
                    AccessKind::Exec => W_DENY_CODE,
                    _ => W_DENY_DATA,
                };
                head |= H_SERVED | (e0 & H_EXPLAINED);
                return (head, at + 1);
            }
        } else if caps.contains(kind.required()) && flow >> 16 == FlowState::Resolved as u64 {
            let FlowExplained([f0, ..]) = FlowExplained::of(w);
            head |= H_FLOW | (f0 & H_EXPLAINED);
            return (head, W_DENY_DATA);
        }
        (head, 0)
    }

    /// A hit, answered from a mirror's words, if the entry is fresh for `stamp` at the time
    /// `now` reads (asked only if the entry expires):
    /// what `access` (needing `needed`) is provided if it is granted, or what the entry
    /// provides and the context's flags if it is not and the entry is complete (the rule in
    /// full would say the same). `None` otherwise (stale, incomplete and not granting, or words
    /// that do not decode). Reads the summary word when it holds, and only then; else decodes
    /// the grants and evaluates.
    #[inline]
    pub(crate) fn serve(
        w: &Way<'_, HOT_WORDS>,
        epoch: u64,
        object: &ObjectInfo,
        now: impl Fn() -> u64,
        access: &Access,
        needed: Protections,
    ) -> Option<Served> {
        if access.page() == 0 {
            return None;
        }
        let (small, summary, valid_until) = Self::stamped(w, epoch, object)?;
        if !unexpired(valid_until, now) {
            return None;
        }
        if summary & UNIFORM != 0 && !access.entering {
            let bits = match access.kind {
                AccessKind::Exec => summary >> 16,
                _ => summary,
            };
            let provide = Protections::from_bits_retain((bits & 0xff) as u16);
            if provide.contains(needed) {
                return Some(Served::Grant(Granted {
                    provide,
                    valid_until,
                    pages: OBJECT_PAGES,
                }));
            }
            return Self::summary_denied(w, small, bits, *access, needed);
        }
        if access.kind != AccessKind::Exec
            && let Some(granted) = Self::data_grant(w, small, access.page(), needed, valid_until)
        {
            return Some(Served::Grant(granted));
        }
        Self::serve_decoded(w, small, *access, needed)
    }

    /// A page-gated hit for a data access, read from the grants' words in place: what
    /// [`Snapshot::evaluate`] gives a data access to `page` (the default rights and those of
    /// each grant with data rights whose gate covers the page, through the masks and the
    /// flow mask; the pages where that holds), when it grants `needed`. `None` otherwise:
    /// [`Snapshot::serve_decoded`] then decodes the snapshot and answers in full. Nothing is
    /// decoded or copied: a page-gated hit decoded all 31 words and every gate first.
    ///
    /// The words may be a mix of two states (see [`SeqSet::lookup`]): every step is checked
    /// arithmetic, and the answer is dropped unless the read was consistent, when the gates
    /// are the valid ones [`Snapshot::encode`] wrote.
    ///
    /// [`SeqSet::lookup`]: crate::seqset::SeqSet::lookup
    #[inline(always)]
    fn data_grant(
        w: &Way<'_, HOT_WORDS>,
        small: u64,
        page: u64,
        needed: Protections,
        valid_until: Expiry,
    ) -> Option<Granted> {
        let data = Protections::READ | Protections::WRITE;
        let start = page.checked_mul(PAGE_SIZE)?;
        let end = start.checked_add(PAGE_SIZE)?;
        let all_prots = w.word(W_PROTS);
        let mut unmasked = Protections::from_bits_retain(small as u16);
        let mut pages = OBJECT_PAGES;
        for i in 0..MAX_GRANTS {
            let prots = Protections::from_bits_retain((all_prots >> (16 * i)) as u16);
            if small & (1 << (GRANT_PRESENT + i as u32)) == 0 || !prots.intersects(data) {
                continue;
            }
            let offset = w.word(W_GATES + 3 * i);
            let gate_end = offset.checked_add(w.word(W_GATES + 3 * i + 1))?;
            // `Gate::covers_page` on the gate's words.
            if start < offset || end > gate_end {
                continue;
            }
            unmasked |= prots & data;
            let p = full_pages_of(offset, gate_end);
            pages = pages.start.max(p.start)..pages.end.min(p.end);
        }
        let allowed = Protections::from_bits_retain((small >> 16) as u16);
        let flow = Protections::from_bits_retain(w.word(W_FLOW) as u16);
        let provide = unmasked & allowed & flow;
        provide.contains(needed).then_some(Granted {
            provide,
            valid_until,
            pages,
        })
    }

    /// A hit that the summary does not answer (a page-gated entry, or a fetch that enters):
    /// the grants decoded from the words and evaluated. Out of line, so that the summary's
    /// hit keeps a small frame (the decoded words are 31 on the stack).
    #[inline(never)]
    fn serve_decoded(
        w: &Way<'_, HOT_WORDS>,
        small: u64,
        access: Access,
        needed: Protections,
    ) -> Option<Served> {
        let access = &access;
        let snap = Snapshot::decode(&w.words())?;
        let eval = snap.evaluate(access);
        if eval.perms.grants(needed) {
            Some(Served::Grant(Granted::from(eval)))
        } else if w.word(W_FLOW) == FLOW_ALL {
            // A denial is served only when the flow lets everything through for good: then
            // it is the capabilities' (a flow denial is served as one, below; a flow not yet
            // worked out takes the slow path).
            (small & (1 << COMPLETE) != 0).then(|| Served::Deny {
                provided: eval.perms.provide,
                flags: CtxFlags::from_bits_retain((small >> 32) as u16),
                explained: Explained::NONE,
            })
        } else {
            Self::flow_denied(w, &snap, access, needed, eval.perms.provide)
        }
    }

    /// A denial from the summary (`bits`: the access's kind's half of it): the capabilities'
    /// if the flow lets everything through for good and the entry is complete, else the
    /// flow's (see [`Snapshot::summary_flow_denied`]). Out of line: a granted hit's code stays
    /// small.
    #[inline(never)]
    fn summary_denied(
        w: &Way<'_, HOT_WORDS>,
        small: u64,
        bits: u64,
        access: Access,
        needed: Protections,
    ) -> Option<Served> {
        let access = &access;
        let provide = Protections::from_bits_retain((bits & 0xff) as u16);
        if w.word(W_FLOW) == FLOW_ALL {
            return (small & (1 << COMPLETE) != 0).then(|| Served::Deny {
                provided: provide,
                flags: CtxFlags::from_bits_retain((small >> 32) as u16),
                explained: Self::explained(w, small, access.kind),
            });
        }
        Self::summary_flow_denied(w, small, bits, provide, needed)
    }

    /// A flow denial from the summary (`bits`: the access's kind's half of it), if the
    /// capabilities grant `needed` and the flow (worked out in full) refuses it. Out of line:
    /// a hit never gets here.
    #[cold]
    #[inline(never)]
    fn summary_flow_denied(
        w: &Way<'_, HOT_WORDS>,
        small: u64,
        bits: u64,
        provided: Protections,
        needed: Protections,
    ) -> Option<Served> {
        let caps = Protections::from_bits_retain(((bits >> 8) & 0x7f) as u16);
        (caps.contains(needed) && w.word(W_FLOW) >> 16 == FlowState::Resolved as u64).then(|| {
            Served::FlowDeny {
                provided,
                flags: CtxFlags::from_bits_retain((small >> 32) as u16),
                explained: FlowExplained::of(w),
            }
        })
    }

    /// A flow denial from a fresh entry's words, if the capabilities grant `access` and the
    /// flow (worked out in full) refuses it. Kept out of line: a hit never gets here.
    #[cold]
    #[inline(never)]
    fn flow_denied(
        w: &Way<'_, HOT_WORDS>,
        snap: &Snapshot,
        access: &Access,
        needed: Protections,
        provided: Protections,
    ) -> Option<Served> {
        (snap.flow_state == FlowState::Resolved && snap.evaluate_caps(access).perms.grants(needed))
            .then(|| Served::FlowDeny {
                provided,
                flags: snap.flags,
                explained: FlowExplained::of(w),
            })
    }
}

/// What a fresh entry's summary says about one kind of access
/// (`Snapshot::serve_summary`), in three plain words, so that the hit's answer stays in
/// registers (a larger answer is copied through memory, and a copy of a value just written
/// in narrower pieces stalls the processor):
///
/// - a grant: the rights provided (`head`, bits 0-7) and the expiry (`w1`);
/// - a refusal (`REFUSED` in `head`): the rights provided (bits 50-57), whether the context
///   is `UNDETACHABLE`, and the words that explain it, in bits 0-49 of `head`, then `w1`,
///   `w2`: an [`Explained`] when the entry's own denial may be served (`H_SERVED`), a
///   [`FlowExplained`] when the flow refuses what the capabilities grant (`H_FLOW`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryHit {
    head: u64,
    w1: u64,
    w2: u64,
}

/// Bits of [`SummaryHit`]'s head word.
const REFUSED: u64 = 1 << 63;
const H_SERVED: u64 = 1 << 62;
const H_UNDETACHABLE: u64 = 1 << 61;
const H_FLOW: u64 = 1 << 60;
const H_PROVIDED: u32 = 50;
/// The bits of an explanation's head word that are used (up to [`X_PRESENT`]; a flow
/// denial's head uses [`FLOW_EXPLAINED`] and its kind).
const H_EXPLAINED: u64 = (1 << H_PROVIDED) - 1;
const _: () = assert!(X_PRESENT < 1 << H_PROVIDED && FLOW_EXPLAINED < 1 << H_PROVIDED);

/// Why a fresh entry refuses an access, as far as its words say ([`SummaryHit::refusal`];
/// the engine reads a [`Served`] denial the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhyRefused {
    /// The entry's own denial, served: what explains it (as [`Served::Deny`]'s).
    Capabilities(Explained),
    /// The flow refuses what the capabilities grant (as [`Served::FlowDeny`]'s).
    Flow(FlowExplained),
    /// Neither: the full rule answers.
    Full,
}

impl SummaryHit {
    /// A grant: the rights provided and until when.
    #[inline(always)]
    pub fn grant(&self) -> Option<(Protections, Expiry)> {
        (self.head & REFUSED == 0).then(|| {
            (
                Protections::from_bits_retain((self.head & 0xff) as u16),
                Expiry::from_raw(self.w1),
            )
        })
    }

    /// A refusal: the rights provided, whether the context is `UNDETACHABLE`, and why.
    pub fn refusal(&self) -> Option<(Protections, bool, WhyRefused)> {
        if self.head & REFUSED == 0 {
            return None;
        }
        let provided = Protections::from_bits_retain(((self.head >> H_PROVIDED) & 0xff) as u16);
        // Words that explain nothing are the `NONE` of their kind, as the full serve gives.
        let words = [self.head & H_EXPLAINED, self.w1, self.w2];
        let why = if self.head & H_SERVED != 0 {
            WhyRefused::Capabilities(if words[0] & X_PRESENT != 0 {
                Explained(words)
            } else {
                Explained::NONE
            })
        } else if self.head & H_FLOW != 0 {
            WhyRefused::Flow(if words[0] & FLOW_EXPLAINED != 0 {
                FlowExplained(words)
            } else {
                FlowExplained::NONE
            })
        } else {
            WhyRefused::Full
        };
        Some((provided, self.head & H_UNDETACHABLE != 0, why))
    }
}

/// A grant served from a mirror: what a mapping needs, and nothing more (the caller knows
/// the context; the hit path builds its decision from these three).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The rights provided.
    pub provide: Protections,
    /// Until when.
    pub valid_until: Expiry,
    /// The pages the same decision holds for.
    pub pages: Range<u64>,
}

impl From<Evaluated> for Granted {
    fn from(e: Evaluated) -> Self {
        Self {
            provide: e.perms.provide,
            valid_until: e.perms.valid_until,
            pages: e.pages,
        }
    }
}

/// What a fresh cache entry says about an access (`Snapshot::serve`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// Granted.
    Grant(Granted),
    /// The capabilities grant, the flow rule (worked out in full) does not
    /// (`docs/DIFC.md` §3.3): the entry's [`CachedPerms::flow_why`] says why.
    FlowDeny {
        /// What the entry provides for the access, after the flow mask.
        provided: Protections,
        /// The context's flags (whether the thread may look further).
        flags: CtxFlags,
        /// Why, when the mirror carries it ([`FlowExplained::NONE`] otherwise: the entry
        /// says under its set's lock).
        explained: FlowExplained,
    },
    /// Not granted, by an entry that holds every record that counted.
    Deny {
        /// What the entry provides for the access.
        provided: Protections,
        /// The context's flags (whether the thread may look further).
        flags: CtxFlags,
        /// What explains it, when the mirror does (see [`CachedPerms::encode`]); else
        /// ([`Explained::NONE`]) the entry explains it under the set's lock
        /// ([`CachedPerms::deny_cause`]).
        explained: Explained,
    },
}

/// The mirror's words that explain a denial, copied out of a lock-free lookup as they are
/// (plain words: moving a decoded [`DenyCause`] out through the lookup's answer cost the
/// denial more than the decoding), three words so that a denial's answer is no larger than a
/// grant's. [`Explained::cause`] decodes them.
///
/// The failure's words (see `verdict_words`), with the rest packed into the first word's
/// upper half: the rights contributed before masks and those the masks allow (the low eight
/// bits of each, which hold every right: a cause only looks at the rights an access needs),
/// whether the context files a record for the object, and whether there is anything here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Explained([u64; VERDICT_WORDS]);

const X_UNMASKED: u32 = 32;
const X_ALLOWED: u32 = 40;
const X_SEEN: u64 = 1 << 48;
const X_PRESENT: u64 = 1 << 49;

impl Explained {
    /// Nothing explained: the entry explains it under its set's lock.
    pub const NONE: Explained = Explained([0; VERDICT_WORDS]);

    /// Why an access on `page` needing `needed` is denied, if the words say (they do not
    /// carry every failure: then only a cause that does not depend on it, the masks, is known
    /// here).
    #[inline(always)]
    pub fn cause(&self, page: u64, needed: Protections) -> Option<DenyCause> {
        let [head, p0, p1] = self.0;
        if head & X_PRESENT == 0 {
            return None;
        }
        let best = verdict_words::decode([head & 0xffff_ffff, p0, p1]);
        let rights = |shift: u32| Protections::from_bits_retain(((head >> shift) & 0xff) as u16);
        let explanation = Explanation {
            unmasked: rights(X_UNMASKED),
            best: best.flatten(),
        };
        let cause = explanation.cause(rights(X_ALLOWED), head & X_SEEN != 0, page, needed);
        (best.is_some() || matches!(cause, DenyCause::Masked { .. })).then_some(cause)
    }
}

impl CachedPerms {
    /// The words a set's mirror holds: the snapshot's, then, when the summary holds, what
    /// explains a denial to a data access and to a code access by a thread in the context
    /// (the same on every page but the null page there).
    pub fn encode(&self) -> [u64; HOT_WORDS] {
        let mut w = self.snap.encode();
        if self.snap.summary().is_some() {
            let data = self.explain(&Access::read(PAGE_SIZE));
            let code = self.explain(&Access::exec(PAGE_SIZE));
            let mut deny = u64::from(data.unmasked.bits())
                | (u64::from(code.unmasked.bits()) << 16)
                | EXPLAINED;
            if self.seen {
                deny |= SEEN;
            }
            let words = [deny]
                .into_iter()
                .chain(verdict_words::encode(data.best))
                .chain(verdict_words::encode(code.best));
            for (dst, src) in w.iter_mut().skip(W_DENY).zip(words) {
                *dst = src;
            }
        }
        // A capability denial is served from the words above only when the flow lets
        // everything through; otherwise they carry the flow's denial.
        if !self.snap.flow_is_all()
            && let Some(words) = self.flow_why.get().as_ref().and_then(flow_words)
        {
            for (dst, src) in w.iter_mut().skip(W_DENY).zip(words) {
                *dst = src;
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::AtomicU64;

    use proptest::prelude::*;
    use twizzler_capsec::{Access, AccessKind, Expiry, Gate, Grant, MAX_OBJECT_SIZE, ObjID};
    use twizzler_capsec::{PAGE_SIZE, Protections};

    use super::{Explained, Granted, HOT_WORDS, OBJECT_PAGES, Served, Snapshot, WhyRefused};
    use crate::cache::{CachedPerms, Stamp};
    use crate::fault::DenyCause;
    use crate::host::ObjectInfo;
    use crate::seqset::Way;
    use twizzler_capsec::{DecodeError, Verdict};

    fn prots() -> impl Strategy<Value = Protections> {
        (0u16..8).prop_map(Protections::from_bits_truncate)
    }

    /// Gates: the whole object, all but the null page, a page range, part of a page, and code
    /// entry points.
    fn gate() -> impl Strategy<Value = Gate> {
        let end = MAX_OBJECT_SIZE;
        prop_oneof![
            Just(Gate::new(0, end, 1).unwrap()),
            Just(Gate::new(PAGE_SIZE, end - PAGE_SIZE, 1).unwrap()),
            (1u64..64, 1u64..64)
                .prop_map(|(a, n)| Gate::new(a * PAGE_SIZE, n * PAGE_SIZE, 1).unwrap()),
            (1u64..64, 1u64..4000).prop_map(|(a, n)| Gate::new(a * PAGE_SIZE + 8, n, 1).unwrap()),
            (1u64..64).prop_map(|a| Gate::new(a * PAGE_SIZE, 4 * PAGE_SIZE, 64).unwrap()),
        ]
    }

    fn snapshot() -> impl Strategy<Value = Snapshot> {
        entry().prop_map(|e| e.snap)
    }

    /// Entries: a snapshot, whether the context files a record for the object, and the most
    /// telling failure (sometimes one the mirror does not carry).
    fn entry() -> impl Strategy<Value = CachedPerms> {
        let failure = prop_oneof![
            2 => prop::option::of(crate::cache::verdict_words::strategies::verdict()),
            1 => Just(Some(Verdict::Malformed(DecodeError::InvalidKey))),
        ];
        (
            any::<bool>(),
            failure,
            (
                any::<u128>(),
                any::<u128>(),
                any::<u64>(),
                prop::option::of(any::<u128>()),
                prots(),
                prots(),
                prop::collection::vec((prots(), gate(), any::<u64>()), 0..7),
            ),
            (prop_oneof![Just(0u32), any::<u32>()], prots(), 0u64..3),
        )
            .prop_map(
                |(
                    seen,
                    failure,
                    (ctx, target, epoch, kuid, default_prots, allowed, grants),
                    (label, flow, state),
                )| {
                    let stamp = Stamp {
                        epoch,
                        kuid: kuid.map(ObjID::new),
                        default_prots,
                        label: twizzler_capsec::LabelId(label),
                    };
                    let mut e = CachedPerms::new(
                        ObjID::new(ctx),
                        ObjID::new(target),
                        stamp,
                        allowed,
                        twizzler_capsec::CtxFlags::empty(),
                    );
                    for (prots, gate, exp) in grants {
                        e.add_grant(Grant { prots, gate }, Expiry::from_raw(exp));
                    }
                    e.snap.flow = flow;
                    e.snap.flow_state = crate::cache::FlowState::from_bits(state);
                    e.seen = seen;
                    if let Some(v) = failure {
                        e.add_failure(v);
                    }
                    e
                },
            )
    }

    /// A fault's stamp and object metadata: the entry's (`perturb` 5 and up), or one
    /// differing in one field (0: the epoch, 1 and 2: the `kuid`, 3: the default
    /// protections, 4: the label).
    fn fault_stamp(entry: &Stamp, perturb: u8, kuid: u128) -> (Stamp, ObjectInfo) {
        let stamp = match perturb {
            0 => Stamp {
                epoch: entry.epoch.wrapping_add(1),
                ..*entry
            },
            1 => Stamp {
                kuid: None,
                ..*entry
            },
            2 => Stamp {
                kuid: Some(ObjID::new(kuid)),
                ..*entry
            },
            3 => Stamp {
                default_prots: entry.default_prots ^ Protections::READ,
                ..*entry
            },
            4 => Stamp {
                label: twizzler_capsec::LabelId(entry.label.0 ^ 1),
                ..*entry
            },
            _ => *entry,
        };
        let object = ObjectInfo {
            kuid: stamp.kuid,
            default_prots: stamp.default_prots,
            label: stamp.label,
        };
        (stamp, object)
    }

    fn access() -> impl Strategy<Value = Access> {
        (
            prop_oneof![
                Just(AccessKind::Read),
                Just(AccessKind::Write),
                Just(AccessKind::Exec)
            ],
            prop_oneof![0u64..70 * PAGE_SIZE, 0..MAX_OBJECT_SIZE],
            any::<bool>(),
        )
            .prop_map(|(kind, offset, entering)| Access {
                kind,
                offset,
                entering,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// A flow denial written into a way's denial words reads back as itself, or not at
        /// all (then the entry explains it under its set's lock).
        #[test]
        fn flow_words_round_trip(
            kind in 0u8..9,
            tag in any::<u128>(),
            why in crate::cache::verdict_words::strategies::verdict(),
        ) {
            use twizzler_capsec::FlowDenial as D;
            let tag = ObjID::new(tag);
            let d = match kind {
                0 => D::SecrecyRead { tag },
                1 => D::MustRaise { tag },
                2 => D::IntegrityRead { tag },
                3 => D::MustLower { tag },
                4 => D::SecrecyWrite { tag },
                5 => D::IntegrityWrite { tag },
                6 => D::Ownership { tag, why },
                7 => D::LabelUnknown,
                _ => D::Switch { to: tag, tag },
            };
            let mut words = [0u64; HOT_WORDS];
            if let Some(f) = super::flow_words(&d) {
                words[super::W_DENY..super::W_DENY + f.len()].copy_from_slice(&f);
                let atomics = words.map(AtomicU64::new);
                let e = super::FlowExplained::of(&Way::<HOT_WORDS>::new(&atomics));
                prop_assert_eq!(e.denial(), Some(d));
            } else {
                let uncarried = matches!(d, D::Switch { .. } | D::Ownership { .. });
                prop_assert!(uncarried, "{:?} not carried", d);
            }
        }

        /// The mirror's words give back the snapshot.
        #[test]
        fn words_round_trip(s in snapshot()) {
            prop_assert_eq!(Snapshot::decode(&s.encode()), Some(s));
        }

        /// The summary a hit is served from agrees with the rule on every page but the null
        /// page, for accesses by a thread already in the context.
        #[test]
        fn summary_agrees_with_evaluate(s in snapshot(), a in access()) {
            if let Some((data, code)) = s.summary()
                && a.page() > 0
                && !a.entering
            {
                let eval = s.evaluate(&a);
                let want = if a.kind == AccessKind::Exec { code } else { data };
                prop_assert_eq!(eval.perms.provide, want);
                prop_assert_eq!(eval.pages, super::OBJECT_PAGES);
            }
        }

        /// The summary's hit (the fault path's common case) answers as the full serve does:
        /// present exactly when the entry is fresh and its summary holds; a grant is the full
        /// serve's grant on the whole object; a refusal that carries its explanation is the
        /// full serve's denial (the capabilities' or the flow's), with the same rights, the
        /// same `UNDETACHABLE` and the same words; any other refusal is one the full serve
        /// does not answer either.
        #[test]
        fn serve_summary_answers_as_serve(
            e in entry(),
            a in access(),
            undetachable in any::<bool>(),
            now in any::<u64>(),
            perturb in 0u8..7,
            kuid in any::<u128>(),
        ) {
            let mut e = e;
            if undetachable {
                e.snap.flags = twizzler_capsec::CtxFlags::UNDETACHABLE;
            }
            let s = e.snap;
            let words = e.encode().map(AtomicU64::new);
            let way = Way::<HOT_WORDS>::new(&words);
            let (stamp, object) = fault_stamp(&s.stamp, perturb, kuid);
            // A fault past the null page, by a thread already in the context.
            let offset = PAGE_SIZE + a.offset % (MAX_OBJECT_SIZE - PAGE_SIZE);
            let fault = crate::fault::Fault::new(s.target, object, offset, a.kind);
            let access = Access { kind: a.kind, offset, entering: false };
            let needed = a.kind.required();
            let summary = Snapshot::serve_summary(&way, stamp.epoch, || now, &fault);
            let full = Snapshot::serve(&way, stamp.epoch, &object, || now, &access, needed);
            prop_assert_eq!(summary.is_some(), s.is_fresh(&stamp, now) && s.summary().is_some());
            let Some(hit) = summary else {
                return Ok(());
            };
            match (hit.grant(), hit.refusal()) {
                (Some((provide, valid_until)), None) => {
                    let want = Served::Grant(Granted { provide, valid_until, pages: OBJECT_PAGES });
                    prop_assert_eq!(full, Some(want));
                }
                (None, Some((provided, undetachable, why))) => {
                    let (p, flags) = match full {
                        Some(Served::Deny { provided, flags, .. } | Served::FlowDeny { provided, flags, .. }) => (provided, flags),
                        _ => (provided, twizzler_capsec::CtxFlags::empty()),
                    };
                    match why {
                        WhyRefused::Capabilities(explained) => {
                            prop_assert!(matches!(full, Some(Served::Deny { explained: x, .. }) if x == explained), "{:?}", full);
                        }
                        WhyRefused::Flow(explained) => {
                            prop_assert!(matches!(full, Some(Served::FlowDeny { explained: x, .. }) if x == explained), "{:?}", full);
                        }
                        // Left to the full rule: the full serve does not answer either.
                        WhyRefused::Full => prop_assert_eq!(full, None),
                    }
                    prop_assert_eq!(p, provided);
                    if why != WhyRefused::Full {
                        prop_assert_eq!(flags.contains(twizzler_capsec::CtxFlags::UNDETACHABLE), undetachable);
                    }
                }
                other => prop_assert!(false, "neither a grant nor a refusal: {:?}", other),
            }
        }

        /// A hit asks for the time at most once, and only of an entry that expires: on grants
        /// that never expire it reads no clock (`engine::clock::DecisionClock`). Its answer is
        /// the one it gives with the time handed in.
        #[test]
        fn the_time_is_asked_only_of_an_entry_that_expires(
            e in entry(),
            a in access(),
            needed in prots(),
            now in any::<u64>(),
            perturb in 0u8..7,
            kuid in any::<u128>(),
            never in any::<bool>(),
        ) {
            let mut e = e;
            if never {
                e.snap.valid_until = Expiry::NEVER;
            }
            let expires = e.snap.valid_until != Expiry::NEVER;
            let words = e.encode().map(AtomicU64::new);
            let way = Way::<HOT_WORDS>::new(&words);
            let (stamp, object) = fault_stamp(&e.snap.stamp, perturb, kuid);
            let reads = core::cell::Cell::new(0u32);
            let clock = || {
                reads.set(reads.get() + 1);
                now
            };
            let served = Snapshot::serve(&way, stamp.epoch, &object, clock, &a, needed);
            prop_assert!(reads.get() <= u32::from(expires), "serve read the clock {} times", reads.get());
            prop_assert_eq!(served, Snapshot::serve(&way, stamp.epoch, &object, || now, &a, needed));
            reads.set(0);
            let offset = PAGE_SIZE + a.offset % (MAX_OBJECT_SIZE - PAGE_SIZE);
            let fault = crate::fault::Fault::new(e.snap.target, object, offset, a.kind);
            let summary = Snapshot::serve_summary(&way, stamp.epoch, clock, &fault);
            prop_assert!(reads.get() <= u32::from(expires), "the summary read the clock {} times", reads.get());
            prop_assert_eq!(summary, Snapshot::serve_summary(&way, stamp.epoch, || now, &fault));
            reads.set(0);
            let fresh = e.snap.is_fresh_when(&stamp, clock);
            prop_assert!(reads.get() <= u32::from(expires), "is_fresh_when read the clock {} times", reads.get());
            prop_assert_eq!(fresh, e.snap.is_fresh(&stamp, now));
        }

        /// A hit served from the words is exactly a fresh entry that grants, evaluated, or a
        /// complete one that denies, with the cause the entry gives under the lock whenever
        /// the mirror carries one (always, when the summary holds and the record that
        /// explains it is not malformed).
        #[test]
        fn serve_is_fresh_and_granting(
            e in entry(),
            a in access(),
            needed in prots(),
            now in any::<u64>(),
            perturb in 0u8..7,
            kuid in any::<u128>(),
        ) {
            let s = e.snap;
            let words = e.encode().map(AtomicU64::new);
            let way = Way::<HOT_WORDS>::new(&words);
            // The fault's stamp: the entry's, or one differing in one field.
            let (stamp, object) = fault_stamp(&s.stamp, perturb, kuid);
            // The cause, decoded, in place of the words that explain it.
            let served = Snapshot::serve(&way, stamp.epoch, &object, || now, &a, needed).map(|s| match s {
                Served::Deny { provided, flags, explained } => {
                    (Served::Deny { provided, flags, explained: Explained::NONE }, explained.cause(a.page(), needed))
                }
                s => (s, None),
            });
            let eval = s.evaluate(&a);
            let want = if !s.is_fresh(&stamp, now) || a.page() == 0 {
                None
            } else if eval.perms.grants(needed) {
                Some((Served::Grant(eval.into()), None))
            } else if !s.flow_is_all() {
                (s.flow_state == crate::cache::FlowState::Resolved
                    && s.evaluate_caps(&a).perms.grants(needed))
                    .then_some((Served::FlowDeny { provided: eval.perms.provide, flags: s.flags, explained: super::FlowExplained::NONE }, None))
            } else if s.complete {
                let explained = s.summary().is_some()
                    && !a.entering
                    && !matches!(e.deny_cause(&a, needed), DenyCause::Record(Verdict::Malformed(_)));
                let cause = explained.then(|| e.deny_cause(&a, needed));
                Some((Served::Deny { provided: eval.perms.provide, flags: s.flags, explained: Explained::NONE }, cause))
            } else {
                None
            };
            prop_assert_eq!(served, want);
        }
    }
}
