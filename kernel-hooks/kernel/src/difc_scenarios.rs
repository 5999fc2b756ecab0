//! Information flow control on real page faults (`docs/DIFC.md` §7.2, the reference kernel's
//! scenarios 1–7), and the label change's cost at `N` mapped pages (§7.3).
//!
//! Each scenario builds what it needs at run time, in objects the kernel creates: a tag object
//! per tag, data objects with their data labels (fixed at creation), and contexts holding
//! capabilities and ownership records (`TAG` capabilities) signed by a key generated at boot
//! for these scenarios ([`World`]). The tasks are ring-3 probes, as in the other tables; every
//! access is a fault the engine decides under the contexts' principal labels
//! ([`crate::labels`]); label changes go through [`difc::sctx_label`], the system call's
//! kernel side.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::{SecCtxMgr, Violation};
use twizzler_capsec::{
    ALL_CONTEXTS, Cap, CapGrant, FlowDenial, Gate, Label, LabelError, LabelId, ObjID, OwnRights,
    OwnershipGrant, Protections, RecordId, SecCtxEditor, SigningKey, SigningScheme,
};

use crate::difc::{self, RefusedLabel, RelabelCycles, Window};
use crate::objects::{self, table};
use crate::paging::PAGE;
use crate::program;
use crate::scenarios::Row;
use crate::task::{self, Denial, Outcome, Report, Start, addr_of, mapped_prots};
use crate::user::{EXIT_BLOCK, Probe, probe_bytes};
use crate::world::{CODE_GATE, ids::PROGRAM};
use crate::{clock, rng, smp};

/// The byte the secret objects are filled with: it appears in no other object.
const MARKER: u8 = 0xa7;
/// The byte written into public objects by the tasks.
const PUBLIC_BYTE: u8 = 0x5c;
/// Iterations each racing task makes before the boot CPU acts.
const PROGRESS: u64 = 20;
/// How long to wait for that progress, and for a task to end.
const WAIT_NS: u64 = 20_000_000_000;
/// Traps a racing task may take (a refused read per iteration of the window probe).
const RACE_TRAPS: usize = 200_000;
/// Runs of the label change at each `N` (the numbers are the minimum of each part).
const SCALE_RUNS: usize = 3;
/// Pages one task writes at most (its fault records stay within the heap).
const PAGES_PER_TASK: u64 = 2_000;

/// What the scenarios produced.
pub struct DifcResults {
    /// The table.
    pub rows: Vec<Row>,
    /// Label changes at `N` mapped pages: (N, raise, drop).
    pub scale: Scale,
    /// Why the largest `N` is what it is.
    pub scale_note: String,
    /// `Engine::decide` cycles in this kernel, interleaved: a hit on an unlabelled object
    /// under an unlabelled context, a hit with both at a label of 4 + 4 tags, and a repeated
    /// flow denial; (min, median) of each.
    pub decide: Option<[(u64, u64); 3]>,
}

/// The key, tags and helpers every scenario uses.
struct World {
    key: SigningKey,
    /// The key object of `key`: the `kuid` of every object and tag here.
    kuid: ObjID,
    medical: ObjID,
    vetted: ObjID,
}

type Built<T> = Result<T, String>;
/// Label changes at `N` mapped pages: (N, raise, drop).
type Scale = Vec<(u64, RelabelCycles, RelabelCycles)>;
/// A one-CPU scenario.
type Single = fn(&World, &mut Vec<Row>) -> Built<()>;
/// A several-CPU scenario, given the number of application processors it may use.
type Several = fn(&World, &mut Vec<Row>, usize) -> Built<()>;

fn err<E: core::fmt::Debug>(what: &'static str) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e:?}")
}

impl World {
    fn new() -> Built<Self> {
        let mut rng = rng::RdRand::new().ok_or("no rdrand")?;
        let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
        let kuid = program::new_key_object(key.verifying_key())
            .map_err(err("key object"))?
            .id;
        let tag = || {
            program::new_data_object(1, Protections::empty(), Some(kuid), LabelId::EMPTY)
                .map(|o| o.id)
                .map_err(err("tag object"))
        };
        Ok(Self {
            key,
            kuid,
            medical: tag()?,
            vetted: tag()?,
        })
    }

    fn secrecy(&self, tags: &[ObjID]) -> Built<Label> {
        Label::from_tags(tags, &[]).map_err(err("label"))
    }

    fn integrity(&self, tags: &[ObjID]) -> Built<Label> {
        Label::from_tags(&[], tags).map_err(err("label"))
    }

    fn intern(&self, l: &Label) -> Built<LabelId> {
        crate::labels::intern(l).map_err(err("label table"))
    }

    /// A data object of `pages` pages with data label `label`, every byte `fill`, keyed by
    /// the world's key, with no default protections.
    fn object(&self, pages: u64, label: &Label, fill: u8) -> Built<ObjID> {
        let o = program::new_data_object(
            pages,
            Protections::empty(),
            Some(self.kuid),
            self.intern(label)?,
        )
        .map_err(err("object"))?;
        for p in 1..=pages {
            if let Some(f) = o.frame_at(p * PAGE) {
                for b in 0..PAGE {
                    f.store_byte(b, fill);
                }
            }
        }
        Ok(o.id)
    }

    /// A copy of the probe code at data label `label` (default `r-x`): the code a context at
    /// a high integrity may run.
    fn program_at(&self, label: &Label) -> Built<ObjID> {
        let rx = Protections::READ | Protections::EXEC;
        let o = program::new_data_object(1, rx, None, self.intern(label)?)
            .map_err(err("program copy"))?;
        let f = o.frame_at(PAGE).ok_or("program copy has no page")?;
        for (i, b) in probe_bytes().iter().enumerate() {
            f.store_byte(i as u64, *b);
        }
        Ok(o.id)
    }

    /// A code object of exit blocks (no default protections, label empty).
    fn code(&self) -> Built<ObjID> {
        let o = program::new_data_object(2, Protections::empty(), Some(self.kuid), LabelId::EMPTY)
            .map_err(err("code object"))?;
        for p in 1..=2 {
            if let Some(f) = o.frame_at(p * PAGE) {
                for b in 0..PAGE {
                    f.store_byte(b, EXIT_BLOCK[(b % 16) as usize]);
                }
            }
        }
        Ok(o.id)
    }

    /// The capability for `target` to `ctx` with `prots`.
    fn cap(&self, target: ObjID, ctx: ObjID, prots: Protections) -> Built<Cap> {
        Cap::mint(CapGrant::new(target, ctx, prots), &self.key).map_err(err("cap"))
    }

    /// The ownership record of `rights` of `tag` for `holder` (or [`ALL_CONTEXTS`]).
    fn owns(&self, tag: ObjID, holder: ObjID, rights: OwnRights) -> Built<Cap> {
        Cap::mint_ownership(OwnershipGrant::new(tag, holder, rights), &self.key)
            .map_err(err("ownership"))
    }

    /// A context at principal (and data) label `label` holding what `records` mints for its
    /// id.
    fn context(
        &self,
        label: &Label,
        records: impl FnOnce(ObjID) -> Built<Vec<Cap>>,
    ) -> Built<ObjID> {
        let label = self.intern(label)?;
        let mut failure = None;
        let made = program::new_context_object_with(8, Protections::empty(), None, label, |id| {
            let mut e = SecCtxEditor::new();
            match records(id) {
                Ok(caps) => {
                    for c in &caps {
                        e.add_cap(c);
                    }
                }
                Err(why) => failure = Some(why),
            }
            e.encode().map_err(|_| crate::user_abi::Error::NoSpace)
        });
        if let Some(why) = failure {
            return Err(why);
        }
        made.map(|o| o.id).map_err(err("context"))
    }
}

const R: Protections = Protections::READ;
const RW: Protections = Protections::READ.union(Protections::WRITE);
const RX: Protections = Protections::READ.union(Protections::EXEC);

/// Runs `probe` at byte `offset` of page 1 of `obj` under `thread`, in the current user space.
fn probe(thread: &SecCtxMgr, code: ObjID, probe: Probe, obj: ObjID, value: u8) -> Report {
    let start = Start {
        probe,
        addr: addr_of(obj, PAGE).unwrap_or(0),
        value,
        addr2: 0,
        arg: 0,
    };
    task::run_shared(thread, code, start, |_| {})
}

fn flow_denial(r: &Report) -> Option<FlowDenial> {
    match &r.outcome {
        Outcome::Denied {
            why: Denial::Engine(Violation::Flow { denial, .. }),
            ..
        } => Some(*denial),
        _ => None,
    }
}

fn show(r: &Report) -> (String, Option<String>) {
    match &r.outcome {
        Outcome::Exited(v) => (format!("allowed ({v:#04x})"), None),
        Outcome::Denied {
            kind, present, why, ..
        } => (
            format!(
                "denied ({kind:?} {})",
                if *present {
                    "protection fault"
                } else {
                    "fault"
                }
            ),
            Some(format!("{why}")),
        ),
        other => (format!("{other}"), None),
    }
}

fn row(
    name: &'static str,
    expected: &'static str,
    got: String,
    ok: bool,
    reason: Option<String>,
) -> Row {
    Row {
        name,
        expected,
        got,
        ok,
        reason,
    }
}

fn allowed_row(name: &'static str, r: &Report, value: u8) -> Row {
    let (got, reason) = show(r);
    let ok = matches!(r.outcome, Outcome::Exited(v) if v == u64::from(value));
    row(name, "allowed", got, ok, reason)
}

fn denied_row(
    name: &'static str,
    expected: &'static str,
    r: &Report,
    pred: impl Fn(FlowDenial) -> bool,
) -> Row {
    let (got, reason) = show(r);
    let ok = flow_denial(r).is_some_and(pred);
    row(name, expected, got, ok, reason)
}

fn relabel_row(
    name: &'static str,
    expected: &'static str,
    got: &Result<RelabelCycles, RefusedLabel>,
    ok: bool,
) -> Row {
    let text = match got {
        Ok(_) => String::from("ok"),
        Err(e) => format!("refused: {e:?}"),
    };
    row(name, expected, text, ok, None)
}

fn failed_row(name: &'static str, expected: &'static str, why: String) -> Row {
    row(name, expected, format!("could not run: {why}"), false, None)
}

/// The rights of the page at byte `offset` of `obj`, as this CPU's tables map it now.
fn prots_at(obj: ObjID, offset: u64) -> Option<Protections> {
    addr_of(obj, offset).and_then(mapped_prots)
}

fn show_prots(p: Option<Protections>) -> String {
    p.map_or_else(|| String::from("not mapped"), |p| format!("mapped {p}"))
}

/// Scenario 1: secret then public.
fn secret_then_public(w: &World, rows: &mut Vec<Row>) -> Built<()> {
    let medical = w.secrecy(&[w.medical])?;
    let public = w.object(1, &Label::EMPTY, 0)?;
    let secret = w.object(1, &medical, MARKER)?;
    let ctx = w.context(&Label::EMPTY, |c| {
        Ok(alloc::vec![
            w.cap(public, c, RW)?,
            w.cap(secret, c, R)?,
            w.owns(w.medical, c, OwnRights::PLUS)?,
        ])
    })?;
    let no_plus = w.context(&Label::EMPTY, |c| Ok(alloc::vec![w.cap(secret, c, R)?]))?;
    let t = SecCtxMgr::new(ctx);
    task::clear_user_space();
    let before = probe(&t, PROGRAM, Probe::Read, secret, 0);
    rows.push(denied_row(
        "1 secret: read {medical} before raising",
        "denied (MustRaise)",
        &before,
        |d| matches!(d, FlowDenial::MustRaise { tag } if tag == w.medical),
    ));
    let wrote = probe(&t, PROGRAM, Probe::Write, public, PUBLIC_BYTE);
    let mapped_before = prots_at(public, PAGE);
    rows.push(allowed_row(
        "1 secret: write public at {}",
        &wrote,
        PUBLIC_BYTE,
    ));
    let refused = difc::sctx_label(no_plus, &medical);
    rows.push(relabel_row(
        "1 secret: raise without medical+",
        "refused (NotOwned)",
        &refused,
        matches!(refused, Err(RefusedLabel::Rule(LabelError::NotOwned { tag, .. })) if tag == w.medical),
    ));
    let raised = difc::sctx_label(ctx, &medical);
    rows.push(relabel_row(
        "1 secret: raise {} -> {medical}",
        "ok",
        &raised,
        raised.is_ok(),
    ));
    let after = prots_at(public, PAGE);
    rows.push(row(
        "1 secret: public page after the raise",
        "mapped r-- (was rw-)",
        format!("{} (was {})", show_prots(after), show_prots(mapped_before)),
        after.is_some_and(|p| !p.contains(Protections::WRITE))
            && mapped_before.is_some_and(|p| p.contains(Protections::WRITE)),
        None,
    ));
    let read = probe(&t, PROGRAM, Probe::Read, secret, 0);
    rows.push(allowed_row(
        "1 secret: read {medical} after raising",
        &read,
        MARKER,
    ));
    let revoke = difc::check_public_write(ctx);
    rows.push(row(
        "1 secret: revoke at {medical} (4.4)",
        "refused (WouldLeak)",
        format!("{revoke:?}"),
        matches!(revoke, Err(RefusedLabel::Rule(LabelError::WouldLeak { tag })) if tag == w.medical),
        None,
    ));
    let write = probe(&t, PROGRAM, Probe::Write, public, PUBLIC_BYTE);
    rows.push(denied_row(
        "1 secret: write public after raising",
        "denied (SecrecyWrite)",
        &write,
        |d| matches!(d, FlowDenial::SecrecyWrite { tag } if tag == w.medical),
    ));
    Ok(())
}

/// Scenario 2: a declassifier (owning medical−) reads the secret and writes the public object.
fn declassifier(w: &World, rows: &mut Vec<Row>) -> Built<()> {
    let medical = w.secrecy(&[w.medical])?;
    let public = w.object(1, &Label::EMPTY, 0)?;
    let secret = w.object(1, &medical, MARKER)?;
    let ctx = w.context(&medical, |c| {
        Ok(alloc::vec![
            w.cap(public, c, RW)?,
            w.cap(secret, c, R)?,
            w.owns(w.medical, c, OwnRights::MINUS)?,
        ])
    })?;
    let t = SecCtxMgr::new(ctx);
    task::clear_user_space();
    let read = probe(&t, PROGRAM, Probe::Read, secret, 0);
    rows.push(allowed_row("2 declassifier: read {medical}", &read, MARKER));
    let write = probe(&t, PROGRAM, Probe::Write, public, PUBLIC_BYTE);
    rows.push(allowed_row(
        "2 declassifier: write public (medical-)",
        &write,
        PUBLIC_BYTE,
    ));
    let revoke = difc::check_public_write(ctx);
    rows.push(row(
        "2 declassifier: revoke (4.4)",
        "allowed (owns medical-)",
        format!("{revoke:?}"),
        revoke.is_ok(),
        None,
    ));
    Ok(())
}

/// Scenario 4: integrity.
fn integrity(w: &World, rows: &mut Vec<Row>) -> Built<()> {
    let vetted = w.integrity(&[w.vetted])?;
    let input = w.object(1, &Label::EMPTY, 0x33)?;
    let firmware = w.object(1, &vetted, 0x44)?;
    let code = w.program_at(&vetted)?;
    let ctx = w.context(&vetted, |c| {
        Ok(alloc::vec![
            w.cap(input, c, R)?,
            w.cap(firmware, c, RW)?,
            w.owns(w.vetted, ALL_CONTEXTS, OwnRights::MINUS)?,
        ])
    })?;
    let t = SecCtxMgr::new(ctx);
    task::clear_user_space();
    let read = probe(&t, code, Probe::Read, input, 0);
    rows.push(denied_row(
        "4 integrity: I={vetted} reads unvetted",
        "denied (MustLower)",
        &read,
        |d| matches!(d, FlowDenial::MustLower { tag } | FlowDenial::IntegrityRead { tag } if tag == w.vetted),
    ));
    let dropped = difc::sctx_label(ctx, &Label::EMPTY);
    rows.push(relabel_row(
        "4 integrity: drop vetted (public vetted-)",
        "ok",
        &dropped,
        dropped.is_ok(),
    ));
    let read = probe(&t, code, Probe::Read, input, 0);
    rows.push(allowed_row(
        "4 integrity: read unvetted after drop",
        &read,
        0x33,
    ));
    let write = probe(&t, code, Probe::Write, firmware, 0x45);
    rows.push(denied_row(
        "4 integrity: write {vetted} after drop",
        "denied (IntegrityWrite)",
        &write,
        |d| matches!(d, FlowDenial::IntegrityWrite { tag } if tag == w.vetted),
    ));
    Ok(())
}

/// Scenario 5: a switch is a label change.
fn switch(w: &World, rows: &mut Vec<Row>) -> Built<()> {
    let medical = w.secrecy(&[w.medical])?;
    let public = w.object(1, &Label::EMPTY, 0x21)?;
    let code = w.code()?;
    let secret_ctx = w.context(&medical, |_| Ok(Vec::new()))?;
    let public_ctx = w.context(&Label::EMPTY, |c| Ok(alloc::vec![w.cap(public, c, R)?]))?;
    let gate_ctx = w.context(&Label::EMPTY, |c| {
        let mut g = CapGrant::new(code, c, RX);
        g.gate = Gate::new(CODE_GATE.0, CODE_GATE.1, CODE_GATE.2).map_err(err("gate"))?;
        Ok(alloc::vec![
            Cap::mint(g, &w.key).map_err(err("gate cap"))?,
            w.owns(w.medical, c, OwnRights::MINUS)?,
        ])
    })?;
    task::clear_user_space();
    let t = SecCtxMgr::new(secret_ctx);
    let _ = t.attach(public_ctx);
    let r = probe(&t, PROGRAM, Probe::Read, public, 0);
    let (got, reason) = show(&r);
    let switched = t.active_id() != secret_ctx;
    let ok = matches!(
        &r.outcome,
        Outcome::Denied {
            why: Denial::Engine(_),
            ..
        }
    ) && !switched;
    rows.push(row(
        "5 switch: {medical} data access -> {}",
        "denied, not switched",
        format!("{got}{}", if switched { ", switched" } else { "" }),
        ok,
        reason,
    ));
    let t = SecCtxMgr::new(secret_ctx);
    let _ = t.attach(gate_ctx);
    let entry = addr_of(code, CODE_GATE.0 + CODE_GATE.2).unwrap_or(0);
    let start = Start {
        probe: Probe::Exec,
        addr: entry,
        value: 0,
        addr2: 0,
        arg: 0,
    };
    let r = task::run_shared(&t, PROGRAM, start, |_| {});
    let (got, reason) = show(&r);
    let ok = matches!(r.outcome, Outcome::Exited(_)) && t.active_id() == gate_ctx;
    rows.push(row(
        "5 switch: code gate of a medical- owner",
        "allowed, switched",
        format!(
            "{}{}",
            if matches!(r.outcome, Outcome::Exited(_)) {
                "allowed"
            } else {
                got.as_str()
            },
            if t.active_id() == gate_ctx {
                ", switched"
            } else {
                ", not switched"
            }
        ),
        ok,
        reason,
    ));
    Ok(())
}

/// Writes one byte of each of the first `n` pages of `obj` (from page 1) under `t`, in
/// tasks of at most [`PAGES_PER_TASK`] pages each; `true` if every task wrote its pages.
fn write_pages(t: &SecCtxMgr, obj: ObjID, first: u64, n: u64) -> bool {
    let mut done = 0;
    while done < n {
        let k = (n - done).min(PAGES_PER_TASK);
        let start = Start {
            probe: Probe::WritePages,
            addr: addr_of(obj, (first + done) * PAGE).unwrap_or(0),
            value: PUBLIC_BYTE,
            addr2: 0,
            arg: k,
        };
        let r = task::run_shared_with_traps(t, PROGRAM, start, k as usize + 8, |_| {});
        if !matches!(r.outcome, Outcome::Exited(v) if v == k) {
            return false;
        }
        done += k;
    }
    true
}

/// (mapped, writable) pages among the first `n` of `obj` from page `first`.
fn count_mapped(obj: ObjID, first: u64, n: u64) -> (u64, u64) {
    let mut mapped = 0;
    let mut writable = 0;
    for p in first..first + n {
        if let Some(prots) = prots_at(obj, p * PAGE) {
            mapped += 1;
            if prots.contains(Protections::WRITE) {
                writable += 1;
            }
        }
    }
    (mapped, writable)
}

/// Scenario 6 on one CPU, and the numbers of §7.3: for each `N`, `N` pages mapped writable
/// under a context, then a raise (write-protection) and a drop (unmap).
fn scale(w: &World, rows: &mut Vec<Row>) -> Built<(Scale, String)> {
    let medical = w.secrecy(&[w.medical])?;
    let free = crate::objects::PAGING
        .lock()
        .as_ref()
        .map_or(0, |pt| pt.frames_remaining());
    // Leave room for the other scenarios and page tables: at most half of what is free.
    let mut max = 1;
    while max * 10 <= 100_000 && max * 10 <= free / 2 {
        max *= 10;
    }
    let note = format!(
        "N up to {max}: {free} frames ({} MiB) free under QEMU's 256 MiB, N pages need N frames",
        free * PAGE / (1024 * 1024)
    );
    let obj = w.object(max, &Label::EMPTY, 0)?;
    let ctx = w.context(&Label::EMPTY, |c| {
        Ok(alloc::vec![
            w.cap(obj, c, RW)?,
            w.owns(w.medical, c, OwnRights::PLUS | OwnRights::MINUS)?,
        ])
    })?;
    let t = SecCtxMgr::new(ctx);
    let mut out: Scale = Vec::new();
    let mut ok = true;
    let mut got = String::new();
    for _ in 0..SCALE_RUNS {
        let mut n = 1;
        let mut i = 0;
        while n <= max {
            task::clear_user_space();
            if !write_pages(&t, obj, 1, n) {
                return Err(format!("writing {n} pages failed"));
            }
            let (mapped, writable) = count_mapped(obj, 1, n);
            let raise = difc::sctx_label(ctx, &medical).map_err(err("raise"))?;
            let (m_after, w_after) = count_mapped(obj, 1, n);
            let drop = difc::sctx_label(ctx, &Label::EMPTY).map_err(err("drop"))?;
            let (m_dropped, _) = count_mapped(obj, 1, n);
            ok &= mapped == n && writable == n && m_after == n && w_after == 0 && m_dropped == 0;
            if n == max {
                got = format!(
                    "N={n}: {writable} rw- -> {m_after} mapped, {w_after} writable; drop: {m_dropped}"
                );
            }
            match out.get_mut(i) {
                Some((_, r, d)) => {
                    *r = r.min_each(&raise);
                    *d = d.min_each(&drop);
                }
                None => out.push((n, raise, drop)),
            }
            n *= 10;
            i += 1;
        }
    }
    rows.push(row(
        "6 scale (1 CPU): N pages rw-, raise",
        "none writable, all mapped",
        got,
        ok,
        None,
    ));
    Ok((out, note))
}

/// Runs the scenarios; `None` only if the world could not be built.
pub fn run_all() -> DifcResults {
    let mut rows = Vec::new();
    let mut scale_out = Vec::new();
    let mut scale_note = String::new();
    let w = match World::new() {
        Ok(w) => w,
        Err(why) => {
            rows.push(failed_row("DIFC world", "built", why));
            return DifcResults {
                rows,
                scale: scale_out,
                scale_note,
                decide: None,
            };
        }
    };
    let single: [(&'static str, Single); 4] = [
        ("1 secret then public", secret_then_public),
        ("2 declassifier", declassifier),
        ("4 integrity", integrity),
        ("5 switch", switch),
    ];
    for (name, f) in single {
        if let Err(why) = f(&w, &mut rows) {
            rows.push(failed_row(name, "runs", why));
        }
    }
    match scale(&w, &mut rows) {
        Ok((s, note)) => {
            scale_out = s;
            scale_note = note;
        }
        Err(why) => rows.push(failed_row("6 scale (1 CPU)", "runs", why)),
    }
    let aps = smp::online().saturating_sub(1).min(3);
    if aps >= 3 {
        let several: [(&'static str, Several); 3] = [
            ("3 revoked mid-run", revoked_mid_run),
            ("6 scale (4 CPUs)", scale_smp),
            ("7 raise window", raise_window),
        ];
        for (name, f) in several {
            if let Err(why) = f(&w, &mut rows, aps) {
                rows.push(failed_row(name, "runs", why));
            }
        }
    }
    let decide = match decide_costs(&w) {
        Ok(d) => Some(d),
        Err(why) => {
            rows.push(failed_row("decide cycles, labelled", "measured", why));
            None
        }
    };
    task::clear_user_space();
    DifcResults {
        rows,
        scale: scale_out,
        scale_note,
        decide,
    }
}

/// What a race of [`Probe::SeqLoop`] / [`Probe::Window`] tasks saw.
struct Raced {
    /// The counter when the boot CPU's action returned.
    at_return: u64,
    /// Each task's report (`None`: it did not end in time).
    reports: Vec<Option<Report>>,
}

/// Runs `probe` tasks on CPUs `1..=aps` under `ctx` (`rdi` = page 1 of `counter_obj`, the
/// numbered store; `rdx` = page 1 of `read_obj`), waits until each made [`PROGRESS`]
/// iterations, runs `action` on this CPU, reads the counter, and waits for the tasks to end.
fn race(
    probe: Probe,
    ctx: ObjID,
    counter_obj: ObjID,
    read_obj: ObjID,
    aps: usize,
    action: impl FnOnce() -> Built<()>,
) -> Built<Raced> {
    let o = table()
        .and_then(|t| t.get(counter_obj))
        .ok_or("no counter object")?;
    let frame = o.frame_at(PAGE).ok_or("counter object has no page")?;
    let counter: &'static AtomicU64 = frame.atomic_u64(0);
    counter.store(0, Ordering::SeqCst);
    let rdi = addr_of(counter_obj, PAGE).ok_or("counter object has no slot")?;
    let rdx = addr_of(read_obj, PAGE).ok_or("read object has no slot")?;
    task::clear_user_space();
    let mut pending = Vec::new();
    for cpu in 1..=aps {
        let own = 64 * cpu as u64;
        frame.atomic_u64(own).store(0, Ordering::SeqCst);
        let start = Start {
            probe,
            addr: rdi,
            value: MARKER,
            addr2: rdx,
            arg: own,
        };
        let job = smp::run_on(cpu, move || {
            task::run_shared_with_traps(&SecCtxMgr::new(ctx), PROGRAM, start, RACE_TRAPS, |_| {})
        });
        pending.push(job.ok_or_else(|| format!("CPU {cpu} is not idle"))?);
    }
    let deadline = clock::monotonic_ns() + WAIT_NS;
    while !(1..=aps).all(|cpu| frame.atomic_u64(64 * cpu as u64).load(Ordering::SeqCst) >= PROGRESS)
    {
        if clock::monotonic_ns() > deadline {
            break;
        }
        core::hint::spin_loop();
    }
    let acted = action();
    let at_return = counter.load(Ordering::SeqCst);
    let reports = pending.into_iter().map(|p| p.wait(WAIT_NS)).collect();
    acted?;
    Ok(Raced { at_return, reports })
}

/// Every task ended refused by the flow rule, its last numbered store below the counter at
/// the action's return; returns (ok, the last numbers, marker reads, iterations, a reason).
fn judge(r: &Raced) -> (bool, String, u64, u64, Option<String>) {
    let mut ok = true;
    let mut lasts = Vec::new();
    let mut markers = 0;
    let mut iterations = 0;
    let mut reason = None;
    for (i, rep) in r.reports.iter().enumerate() {
        let Some(rep) = rep else {
            ok = false;
            lasts.push(format!("CPU {} did not end", i + 1));
            continue;
        };
        match &rep.outcome {
            Outcome::Denied {
                why: Denial::Engine(v @ Violation::Flow { .. }),
                ..
            } => {
                reason.get_or_insert_with(|| format!("{v}"));
            }
            other => {
                ok = false;
                lasts.push(format!("CPU {}: {other}", i + 1));
            }
        }
        let last = rep.regs.rbx;
        ok &= last != u64::MAX && last < r.at_return;
        markers += rep.regs.r13;
        iterations += rep.regs.r12;
        lasts.push(format!("{last}"));
    }
    (ok, lasts.join("/"), markers, iterations, reason)
}

/// Scenario 3: the declassifier's medical− record is revoked while tasks on three CPUs copy.
fn revoked_mid_run(w: &World, rows: &mut Vec<Row>, aps: usize) -> Built<()> {
    let medical = w.secrecy(&[w.medical])?;
    let public = w.object(1, &Label::EMPTY, 0)?;
    let secret = w.object(1, &medical, MARKER)?;
    let mut record: Option<RecordId> = None;
    let ctx = w.context(&medical, |c| {
        let own = w.owns(w.medical, c, OwnRights::MINUS)?;
        record = Some(own.id());
        Ok(alloc::vec![
            w.cap(public, c, RW)?,
            w.cap(secret, c, R)?,
            own
        ])
    })?;
    let record = record.ok_or("no record")?;
    let raced = race(Probe::SeqLoop, ctx, public, secret, aps, || {
        objects::revoke_record(record);
        Ok(())
    })?;
    let (mut ok, lasts, markers, iterations, reason) = judge(&raced);
    let writable = prots_at(public, PAGE).is_some_and(|p| p.contains(Protections::WRITE));
    ok &= !writable && markers > 0;
    rows.push(row(
        "3 revoked mid-run (3 CPUs copy)",
        "later stores refused",
        format!(
            "{iterations} copies; last seq {lasts} < R={}; public {}",
            raced.at_return,
            if writable { "WRITABLE" } else { "not writable" }
        ),
        ok,
        reason,
    ));
    Ok(())
}

/// Scenario 6 on four CPUs: each CPU maps its share of `N` pages writable, the boot CPU
/// raises; no page is writable afterwards, and a write on every CPU faults and is refused.
fn scale_smp(w: &World, rows: &mut Vec<Row>, aps: usize) -> Built<()> {
    const N: u64 = 1_000;
    let medical = w.secrecy(&[w.medical])?;
    let obj = w.object(N, &Label::EMPTY, 0)?;
    let ctx = w.context(&Label::EMPTY, |c| {
        Ok(alloc::vec![
            w.cap(obj, c, RW)?,
            w.owns(w.medical, c, OwnRights::PLUS)?
        ])
    })?;
    task::clear_user_space();
    let cpus = aps as u64 + 1;
    let share = N / cpus;
    let run = |cpu: usize, first: u64, n: u64, probe: Probe| -> Built<Option<Report>> {
        let start = Start {
            probe,
            addr: addr_of(obj, first * PAGE).unwrap_or(0),
            value: PUBLIC_BYTE,
            addr2: 0,
            arg: n,
        };
        if cpu == 0 {
            return Ok(Some(task::run_shared_with_traps(
                &SecCtxMgr::new(ctx),
                PROGRAM,
                start,
                n as usize + 8,
                |_| {},
            )));
        }
        let job = smp::run_on(cpu, move || {
            task::run_shared_with_traps(
                &SecCtxMgr::new(ctx),
                PROGRAM,
                start,
                n as usize + 8,
                |_| {},
            )
        })
        .ok_or_else(|| format!("CPU {cpu} is not idle"))?;
        Ok(job.wait(WAIT_NS))
    };
    let mut ok = true;
    for cpu in 0..=aps {
        let first = 1 + cpu as u64 * share;
        let n = if cpu == aps {
            N - cpu as u64 * share
        } else {
            share
        };
        let r = run(cpu, first, n, Probe::WritePages)?;
        ok &= matches!(r.map(|r| r.outcome), Some(Outcome::Exited(v)) if v == n);
    }
    let (mapped, writable) = count_mapped(obj, 1, N);
    let raised = difc::sctx_label(ctx, &medical).map_err(err("raise"))?;
    let (m_after, w_after) = count_mapped(obj, 1, N);
    let mut refused = 0;
    for cpu in 0..=aps {
        let first = 1 + cpu as u64 * share;
        let r = run(cpu, first, 1, Probe::Write)?;
        if let Some(r) = r
            && matches!(
                &r.outcome,
                Outcome::Denied {
                    present: true,
                    why: Denial::Engine(Violation::Flow { .. }),
                    ..
                }
            )
        {
            refused += 1;
        }
    }
    ok &= mapped == N && writable == N && m_after == N && w_after == 0 && refused == cpus;
    rows.push(row(
        "6 scale (4 CPUs): N=1000 rw-, raise",
        "none writable, writes refused",
        format!(
            "{writable} rw- -> {w_after} writable of {m_after}; {refused}/{cpus} CPUs' writes refused; {} pages in {} cycles",
            raised.pages, raised.total
        ),
        ok,
        None,
    ));
    Ok(())
}

/// Scenario 7: the raise window. Tasks of a public context on three CPUs loop: a numbered
/// store into a public object, a read of a {T} object (refused until the raise), and a store
/// of what they read into the public object; the boot CPU raises the context to {T}.
/// Afterwards the public object holds no marker byte, and every store after the raise
/// returned was refused.
fn raise_window(w: &World, rows: &mut Vec<Row>, aps: usize) -> Built<()> {
    let (raced, leaked, cycles) = window_race(w, aps, Window::Transitional)?;
    let (mut ok, lasts, markers, iterations, reason) = judge(&raced);
    ok &= leaked == 0;
    rows.push(row(
        "7 raise window (3 CPUs)",
        "no marker in public",
        format!(
            "{iterations} iterations, {markers} secret reads; last seq {lasts} < R={}; {leaked} marker bytes in public; raise (window widened) {} cycles, walk {}, shootdown {}",
            raced.at_return, cycles.total, cycles.walk, cycles.shootdown
        ),
        ok,
        reason,
    ));
    // The mutation check: the same race with the new label published before the sweep.
    let (_, leaked, _) = window_race(w, aps, Window::NewFirst)?;
    rows.push(row(
        "7 mutation: no transitional row",
        "marker reaches public",
        format!("{leaked} marker bytes in public"),
        leaked > 0,
        None,
    ));
    Ok(())
}

/// Iterations every racing task makes inside the widened window.
const IN_WINDOW: u64 = 10;

/// One raise-window race with `window`: (what the tasks did, marker bytes in the public
/// object afterwards, the raise's cycles).
///
/// The window is widened, the same way for both rows: right after the row is published and
/// before the engine's sweep, the boot CPU moves the engine's epoch as an unrelated change
/// would (`invalidate_object` of the secret object: every task's next read of it misses and
/// reads the row), then waits until every task has made [`IN_WINDOW`] more iterations, each a
/// read of the secret object and a store into the public one, still mapped writable. Under the
/// transitional row those reads are refused (`read` = S ∩ S' = ∅); with the new label
/// published first they are granted, and the marker reaches the public object: §4.2's hazard,
/// every time rather than when a task happens to miss inside the sweep.
fn window_race(w: &World, aps: usize, window: Window) -> Built<(Raced, usize, RelabelCycles)> {
    let medical = w.secrecy(&[w.medical])?;
    let public = w.object(1, &Label::EMPTY, 0)?;
    let secret = w.object(1, &medical, MARKER)?;
    let ctx = w.context(&Label::EMPTY, |c| {
        Ok(alloc::vec![
            w.cap(public, c, RW)?,
            w.cap(secret, c, R)?,
            w.owns(w.medical, c, OwnRights::PLUS)?,
        ])
    })?;
    let frame = table()
        .and_then(|t| t.get(public))
        .and_then(|o| o.frame_at(PAGE))
        .ok_or("public object has no page")?;
    let own = |cpu: usize| frame.atomic_u64(64 * cpu as u64).load(Ordering::SeqCst);
    let mut widened = true;
    let mut in_window = || {
        let start: Vec<u64> = (1..=aps).map(own).collect();
        crate::objects::ENGINE.invalidate_object(secret);
        let deadline = clock::monotonic_ns() + WAIT_NS;
        while !(1..=aps).all(|cpu| own(cpu) >= start.get(cpu - 1).copied().unwrap_or(0) + IN_WINDOW)
        {
            if clock::monotonic_ns() > deadline {
                widened = false;
                break;
            }
            core::hint::spin_loop();
        }
    };
    let mut cycles = RelabelCycles::default();
    let raced = race(Probe::Window, ctx, public, secret, aps, || {
        cycles = difc::change(ctx, &medical, window, &mut in_window).map_err(err("raise"))?;
        Ok(())
    })?;
    if !widened {
        return Err("the tasks made no progress inside the widened window".into());
    }
    // Only the bytes the tasks copy into (64·cpu + 8): the counters beside them are numbers,
    // and a byte of a number may equal the marker (a counter at 1,191 = 0x4a7 ends in 0xa7,
    // which made the clean run at 51428e1 count two "leaked" bytes no task had read).
    let leaked = (1..=aps)
        .filter(|&cpu| frame.read_byte(64 * cpu as u64 + 8) == MARKER)
        .count();
    Ok((raced, leaked, cycles))
}

/// Rounds of the interleaved decision measurement.
const DECIDE_ROUNDS: usize = 301;

/// `Engine::decide` on this CPU, interleaved round by round so load hits all three alike:
/// a hit unlabelled, a hit labelled (context and object at `S` and `I` of 4 tags each, the
/// §7.3 case), a repeated flow denial (an unlabelled context reading the labelled object).
/// Each is decided once first (the miss), then timed `DECIDE_ROUNDS` times.
fn decide_costs(w: &World) -> Built<[(u64, u64); 3]> {
    let tags: Vec<ObjID> = (0..8).map(|i| ObjID::new(0x7a65_0000 + i)).collect();
    let (s_tags, i_tags) = tags.split_at(4);
    let label = Label::from_tags(s_tags, i_tags).map_err(err("label"))?;
    let plain = w.object(1, &Label::EMPTY, 1)?;
    let labelled = w.object(1, &label, 2)?;
    let plain_ctx = w.context(&Label::EMPTY, |c| {
        Ok(alloc::vec![w.cap(plain, c, R)?, w.cap(labelled, c, R)?])
    })?;
    let labelled_ctx = w.context(&label, |c| Ok(alloc::vec![w.cap(labelled, c, R)?]))?;
    let fault = |id: ObjID| -> Built<kernel_hooks::Fault> {
        let o = table().and_then(|t| t.get(id)).ok_or("no object")?;
        Ok(kernel_hooks::Fault::new(
            id,
            o.info(),
            PAGE,
            twizzler_capsec::AccessKind::Read,
        ))
    };
    let cases = [
        (SecCtxMgr::new(plain_ctx), fault(plain)?, true),
        (SecCtxMgr::new(labelled_ctx), fault(labelled)?, true),
        (SecCtxMgr::new(plain_ctx), fault(labelled)?, false),
    ];
    for (t, f, grants) in &cases {
        let d = crate::objects::ENGINE.decide(t, f);
        if matches!(d, kernel_hooks::Decision::Map { .. }) != *grants {
            return Err(format!("unexpected decision {d:?}"));
        }
    }
    let mut samples: [Vec<u64>; 3] = Default::default();
    for _ in 0..DECIDE_ROUNDS {
        for ((t, f, _), out) in cases.iter().zip(samples.iter_mut()) {
            let t0 = crate::cpu::rdtsc();
            let _ = crate::objects::ENGINE.decide(t, f);
            out.push(crate::cpu::rdtsc().wrapping_sub(t0));
        }
    }
    let stat = |v: &mut Vec<u64>| {
        v.sort_unstable();
        (
            v.first().copied().unwrap_or(0),
            v.get(v.len() / 2).copied().unwrap_or(0),
        )
    };
    let [a, b, c] = &mut samples;
    Ok([stat(a), stat(b), stat(c)])
}
