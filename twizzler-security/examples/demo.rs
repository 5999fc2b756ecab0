//! The twizzler-security demo: signed capabilities, gates, masks and delegations, evaluated for
//! real.
//!
//! Run it with `cargo xtask demo` (or `cargo run --release -p twizzler-capsec --example
//! demo`). Until the QEMU kernel exists, this is what the kernel would do at each page fault,
//! done in userspace: it
//!
//! 1. mints keys from the OS RNG (Ed25519 for the data objects and for context A, ECDSA P-256
//!    for the code objects);
//! 2. signs capabilities for context A (read-only, read-write behind a data gate, code with an
//!    entry gate, one expired, one revoked, one behind a per-object mask, one stripped by the
//!    global mask) and a delegation from A to context B;
//! 3. writes both contexts with [`SecCtxEditor`] and reads them back with [`SecCtx::parse`],
//!    the validating reader the kernel uses, plus a copy of A with one byte flipped;
//! 4. evaluates every access of a table with [`evaluate_explained`] and prints the decision,
//!    the rights provided and why, from the per-record verdicts.
//!
//! Nothing is hard-coded but the expectations: the program exits non-zero if any decision
//! differs from its expected column.

// An example: it stops at the first error, as a reader would expect.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use getrandom::SysRng;
use rand_core::{TryRng, UnwrapErr};
use twizzler_capsec::{
    Access, AccessKind, Authority, CAP_LEN, Cap, CapGrant, Del, DelGrant, Expiry, Gate, HashAlg,
    KeyLookupError, ObjID, PAGE_SIZE, PermsInfo, Protections, Record, RecordId, RecordReport,
    SecCtx, SecCtxEditor, SigningKey, SigningScheme, Verdict, VerifyingKey, evaluate_explained,
};

/// Offset of the protections field inside an encoded capability (see the layout in `cap.rs`).
const CAP_PROTS_OFFSET: usize = 40;

/// Where the reason lines under a table row start: under the `ctx` column.
const REASON_INDENT: &str = "                            ";

const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;
const X: Protections = Protections::EXEC;

// The objects of the demo. On Twizzler these would be random 128-bit ids; small ones read
// better in a table.

/// A document context A may only read.
const NOTES: ObjID = ObjID::new(0x10);
/// A table context A may write, but only bytes 0x2000..0x4800 (pages 2 and 3, half of 4).
const TABLE: ObjID = ObjID::new(0x11);
/// A log A holds a read-write capability for, masked down to read-only by A's per-object mask.
const LOG: ObjID = ObjID::new(0x12);
/// An archive whose capability expired a minute ago.
const ARCHIVE: ObjID = ObjID::new(0x13);
/// An object whose capability was revoked by its record id.
const RETIRED: ObjID = ObjID::new(0x14);
/// An object whose capability was minted for context B; A holds a copy.
const SECRET: ObjID = ObjID::new(0x15);
/// A code library with entry points every 0x40 bytes in 0x1040..0x1140.
const LIB: ObjID = ObjID::new(0x20);
/// A code plugin: the capability grants `r-x`, but A's global mask removes `x`.
const PLUGIN: ObjID = ObjID::new(0x21);
/// Security context A: the main one.
const CTX_A: ObjID = ObjID::new(0xa0);
/// Security context B: receives a delegation from A.
const CTX_B: ObjID = ObjID::new(0xb0);

/// A short name for an object, for the table.
fn name(obj: ObjID) -> String {
    let known = [
        (NOTES, "notes"),
        (TABLE, "table"),
        (LOG, "log"),
        (ARCHIVE, "archive"),
        (RETIRED, "retired"),
        (SECRET, "secret"),
        (LIB, "lib"),
        (PLUGIN, "plugin"),
        (CTX_A, "ctx A"),
        (CTX_B, "ctx B"),
    ];
    known
        .iter()
        .find(|(id, _)| *id == obj)
        .map_or_else(|| format!("{:#x}", obj.raw()), |(_, n)| (*n).to_owned())
}

/// What the permission rule asks of its host, for the demo: each object's verifying key (its
/// `kuid`), and the records revoked by id.
#[derive(Default)]
struct Keyring {
    keys: HashMap<ObjID, VerifyingKey>,
    revoked: HashSet<RecordId>,
}

impl Authority for Keyring {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        self.keys.get(&obj).ok_or(KeyLookupError::NoKuid(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked.contains(id)
    }
}

/// The decision the table expects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Granted,
    Denied,
}

/// Which context bytes an access is evaluated in.
#[derive(Clone, Copy)]
enum Ctx {
    A,
    B,
    /// A copy of A's bytes with one byte of the `notes` capability flipped.
    TamperedA,
}

/// One row of the table.
struct Case {
    what: &'static str,
    ctx: Ctx,
    object: ObjID,
    access: Access,
    expect: Expect,
}

const fn case(what: &'static str, ctx: Ctx, object: ObjID, access: Access, expect: Expect) -> Case {
    Case {
        what,
        ctx,
        object,
        access,
        expect,
    }
}

/// The accesses the demo evaluates, and what each should give.
#[rustfmt::skip]
fn cases() -> Vec<Case> {
    use Ctx::{A, B, TamperedA as Tampered};
    use Expect::{Denied, Granted};
    vec![
        case("allowed read",            A,        NOTES,   Access::read(0x1000),  Granted),
        case("write, read-only cap",    A,        NOTES,   Access::write(0x1000), Denied),
        case("write inside gate",       A,        TABLE,   Access::write(0x2010), Granted),
        case("write, last whole page",  A,        TABLE,   Access::write(0x3ff8), Granted),
        case("write outside gate",      A,        TABLE,   Access::write(0x1ff8), Denied),
        case("write, partial page",     A,        TABLE,   Access::write(0x4100), Denied),
        case("read, masked object",     A,        LOG,     Access::read(0x1000),  Granted),
        case("write, masked object",    A,        LOG,     Access::write(0x1000), Denied),
        case("read, expired cap",       A,        ARCHIVE, Access::read(0x1000),  Denied),
        case("read, revoked cap",       A,        RETIRED, Access::read(0x1000),  Denied),
        case("read, cap for ctx B",     A,        SECRET,  Access::read(0x1000),  Denied),
        case("read, cap for ctx B",     B,        SECRET,  Access::read(0x1000),  Granted),
        case("enter, aligned entry",    A,        LIB,     Access::enter(0x1080), Granted),
        case("enter, misaligned",       A,        LIB,     Access::enter(0x1084), Denied),
        case("enter, outside gate",     A,        LIB,     Access::enter(0x2000), Denied),
        case("exec, already in ctx",    A,        LIB,     Access::exec(0x1084),  Granted),
        case("enter, global mask",      A,        PLUGIN,  Access::enter(0x1000), Denied),
        case("read via delegation",     B,        TABLE,   Access::read(0x2000),  Granted),
        case("write via delegation",    B,        TABLE,   Access::write(0x2000), Denied),
        case("read, outside del gate",  B,        TABLE,   Access::read(0x3000),  Denied),
        case("tampered: write",         Tampered, NOTES,   Access::write(0x1000), Denied),
        case("tampered: read",          Tampered, NOTES,   Access::read(0x1000),  Denied),
        case("read, the null page",     A,        NOTES,   Access::read(0x0),     Denied),
    ]
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo; `Ok(false)` if some decision was not the expected one.
fn run() -> Result<bool, Box<dyn Error>> {
    let now = now_ns()?;

    // --- Keys ------------------------------------------------------------------------------------
    // `SysRng` is fallible; `SigningKey::generate` takes an infallible `CryptoRng`. Probe the
    // OS RNG once so that an unavailable RNG is reported as an error, then adapt it with
    // `UnwrapErr` (which panics if the OS RNG fails later, a failure no caller could recover
    // from anyway).
    SysRng
        .try_fill_bytes(&mut [0u8; 32])
        .map_err(|e| format!("the OS random number generator is unavailable: {e}"))?;
    let mut rng = UnwrapErr(SysRng);
    let data_key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
    let code_key = SigningKey::generate(SigningScheme::EcdsaP256, &mut rng);
    let ctx_a_key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);

    println!("twizzler-security demo: every decision below is computed, none is hard-coded\n");
    println!("Keys (fresh from the OS RNG):");
    for (who, key) in [
        ("data objects", &data_key),
        ("code objects", &code_key),
        ("context A", &ctx_a_key),
    ] {
        let vk = key.verifying_key();
        println!(
            "  {who:<13} {:<8} verifying key {}..",
            vk.scheme().name(),
            hex(vk.to_raw().get(..8).unwrap_or(&[]))
        );
    }

    // --- Capabilities and the delegation ---------------------------------------------------------
    let rw = R | W;
    let notes = Cap::mint(CapGrant::new(NOTES, CTX_A, R), &data_key)?;
    let table = Cap::mint(
        CapGrant {
            gate: Gate::new(2 * PAGE_SIZE, 0x2800, 1)?,
            ..CapGrant::new(TABLE, CTX_A, rw)
        },
        &data_key,
    )?;
    let log = Cap::mint(CapGrant::new(LOG, CTX_A, rw), &data_key)?;
    let archive = Cap::mint(
        CapGrant {
            expires: Expiry::from_raw(now.saturating_sub(60_000_000_000).max(1)),
            ..CapGrant::new(ARCHIVE, CTX_A, R)
        },
        &data_key,
    )?;
    let retired = Cap::mint(CapGrant::new(RETIRED, CTX_A, R), &data_key)?;
    let secret_for_b = Cap::mint(CapGrant::new(SECRET, CTX_B, rw), &data_key)?;
    let lib = Cap::mint(
        CapGrant {
            gate: Gate::new(PAGE_SIZE + 0x40, 0x100, 0x40)?,
            hash: HashAlg::Sha256,
            ..CapGrant::new(LIB, CTX_A, R | X)
        },
        &code_key,
    )?;
    let plugin = Cap::mint(
        CapGrant {
            gate: Gate::new(PAGE_SIZE, PAGE_SIZE, 0x10)?,
            ..CapGrant::new(PLUGIN, CTX_A, R | X)
        },
        &code_key,
    )?;
    // A hands B read access to page 2 of the table, signing as context A.
    let table_for_b = Del::from_cap(
        &table,
        DelGrant {
            gate: Gate::new(2 * PAGE_SIZE, PAGE_SIZE, 1)?,
            ..DelGrant::new(CTX_B, R)
        },
        &ctx_a_key,
    )?;

    // --- The host: keys by object, revoked records -----------------------------------------------
    let mut auth = Keyring::default();
    for obj in [NOTES, TABLE, LOG, ARCHIVE, RETIRED, SECRET] {
        auth.keys.insert(obj, data_key.verifying_key());
    }
    for obj in [LIB, PLUGIN] {
        auth.keys.insert(obj, code_key.verifying_key());
    }
    auth.keys.insert(CTX_A, ctx_a_key.verifying_key());
    auth.revoked.insert(retired.id());

    // --- Contexts --------------------------------------------------------------------------------
    let mut a = SecCtxEditor::new();
    for cap in [&notes, &table, &log, &archive, &retired, &lib, &plugin] {
        a.add_cap(cap);
    }
    // A copy of B's capability: bytes anyone could paste into their own context.
    a.add_cap(&secret_for_b);
    // No execution anywhere, except what a per-object override lets through.
    a.set_global_mask(R | W);
    a.set_mask(LOG, R, Protections::empty());
    a.set_mask(LIB, R | X, X);
    let a_bytes = a.encode()?;

    let mut b = SecCtxEditor::new();
    b.add_cap(&secret_for_b);
    b.add_del(&table_for_b);
    let b_bytes = b.encode()?;

    // The attacker edits the bytes of A: the `notes` capability's rights go from r to rw.
    let mut tampered_bytes = a_bytes.clone();
    let at = tampered_bytes
        .windows(CAP_LEN)
        .position(|w| w == notes.encode())
        .ok_or("the notes capability is not in context A's bytes")?;
    let prots_byte = tampered_bytes
        .get_mut(at + CAP_PROTS_OFFSET)
        .ok_or("context A is shorter than its notes capability")?;
    *prots_byte ^= W.bits() as u8;
    let forged = tampered_bytes
        .get(at..at + CAP_LEN)
        .map(Cap::decode)
        .ok_or("context A is shorter than its notes capability")??;
    assert_eq!(
        forged.prots(),
        R | W,
        "the flipped byte is the rights field"
    );

    // Everything below reads the contexts as the kernel does: from untrusted bytes.
    let ctx_a = SecCtx::parse(&a_bytes)?;
    let ctx_b = SecCtx::parse(&b_bytes)?;
    let ctx_t = SecCtx::parse(&tampered_bytes)?;

    println!("\nContexts (written with SecCtxEditor, read back with SecCtx::parse):");
    for (label, id, ctx, len) in [
        ("A", CTX_A, &ctx_a, a_bytes.len()),
        ("B", CTX_B, &ctx_b, b_bytes.len()),
    ] {
        println!(
            "  {label:<2} {:<6} generation {}, {} entries, {} masks, global mask {}, {len} bytes",
            name(id),
            ctx.generation(),
            ctx.entry_count(),
            ctx.mask_count(),
            ctx.global_mask(),
        );
        print_records(ctx, id, &auth, now);
    }
    println!(
        "  A* {:<6} A's bytes with the rights byte of the notes cap flipped (r-- to rw-); \
         still parses: {} entries",
        name(CTX_A),
        ctx_t.entry_count()
    );
    println!(
        "  A's masks: {}",
        ctx_a
            .masks()
            .map(|m| format!(
                "{} permmask {} ovrmask {}",
                name(m.target),
                m.permmask,
                m.ovrmask
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );

    // --- The table -------------------------------------------------------------------------------
    println!();
    println!(
        "{}",
        row([
            "#", "case", "ctx", "object", "offset", "access", "expected", "decision", "ok",
        ])
    );
    println!("{}", "-".repeat(86));
    let mut mismatches = 0;
    let all = cases();
    for (i, c) in all.iter().enumerate() {
        let (ctx_id, ctx, ctx_label) = match c.ctx {
            Ctx::A => (CTX_A, &ctx_a, "A"),
            Ctx::B => (CTX_B, &ctx_b, "B"),
            Ctx::TamperedA => (CTX_A, &ctx_t, "A*"),
        };
        let mut reasons = Vec::new();
        let info = evaluate_explained(
            ctx_id,
            ctx,
            c.object,
            Protections::empty(),
            &auth,
            c.access,
            now,
            |report| reasons.push(explain(report, &c.access)),
        );
        let required = c.access.kind.required();
        let granted = info.grants(required);
        let ok = granted == (c.expect == Expect::Granted);
        if !ok {
            mismatches += 1;
        }
        let number = (i + 1).to_string();
        let offset = format!("{:#x}", c.access.offset);
        let expected = match c.expect {
            Expect::Granted => "granted",
            Expect::Denied => "denied",
        };
        let decision = format!(
            "{} {}",
            if granted { "granted" } else { "denied" },
            info.provide
        );
        let verdict = if ok { "ok" } else { "MISMATCH" };
        println!(
            "{}",
            row([
                &number,
                c.what,
                ctx_label,
                &name(c.object),
                &offset,
                access_name(&c.access),
                expected,
                &decision,
                verdict,
            ])
        );
        let lines = if c.access.page() == 0 {
            vec![format!(
                "bytes 0..{PAGE_SIZE:#x} are the null page: never granted, no record consulted"
            )]
        } else {
            summary(&info, required, granted, &reasons, ctx, c.object)
        };
        for line in lines {
            println!("{REASON_INDENT}-> {line}");
        }
    }
    println!("{}", "-".repeat(86));
    println!(
        "The decision column shows the rights provided for the page (after masks); an access \
         is granted iff it needs no more."
    );
    if mismatches == 0 {
        println!("{} of {} decisions as expected.", all.len(), all.len());
        Ok(true)
    } else {
        println!("{mismatches} of {} decisions NOT as expected.", all.len());
        Ok(false)
    }
}

/// The current time in ns since the Unix epoch, as records store it.
fn now_ns() -> Result<u64, Box<dyn Error>> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "the system clock is set before 1970")?;
    Ok(u64::try_from(since.as_nanos()).map_err(|_| "the system clock is past the year 2554")?)
}

/// Lists a context's records: target, kind, rights, gate, and what is special about each.
fn print_records(ctx: &SecCtx<'_>, owner: ObjID, auth: &Keyring, now: u64) {
    for entry in ctx.entries() {
        let rec = match entry.record() {
            Ok(rec) => rec,
            Err(e) => {
                println!("       {:<7} malformed: {e}", name(entry.target));
                continue;
            }
        };
        let mut notes = Vec::new();
        if let Record::Del(d) = &rec {
            notes.push(format!(
                "delegated by {} from its {} cap",
                name(d.provider()),
                d.root().prots()
            ));
        }
        if rec.holder() != owner {
            notes.push(format!("bound to {}: a copy", name(rec.holder())));
        }
        if rec.expires().is_expired(now) {
            notes.push("expired".to_owned());
        } else if let Some(t) = rec.expires().at() {
            notes.push(format!("expires at {t} ns"));
        }
        if rec.is_revoked(auth) {
            notes.push("revoked".to_owned());
        }
        let line = format!(
            "       {:<7} {} {} {:<24} {}",
            name(entry.target),
            kind_name(&rec),
            rec.prots(),
            gate_text(&rec.gate()),
            notes.join(", ")
        );
        println!("{}", line.trim_end());
    }
}

/// One record's verdict, in words.
fn explain(report: &RecordReport<'_>, access: &Access) -> String {
    let what = match report.record {
        Some(r) => format!("{} {}", kind_name(r), r.prots()),
        None => format!("entry {}", report.index),
    };
    let gate = report.record.map(|r| gate_text(&r.gate()));
    let gate = gate.as_deref().unwrap_or("?");
    let why = match &report.verdict {
        Verdict::Counted(p) => format!("counts, contributes {p}"),
        Verdict::Redundant => "adds nothing new (not verified)".to_owned(),
        Verdict::Malformed(e) => format!("does not decode: {e}"),
        Verdict::WrongTarget(t) => format!("grants {}, not this object", name(*t)),
        Verdict::WrongHolder(h) => format!("is bound to {}, not this context", name(*h)),
        Verdict::OutsideGate => format!(
            "gate {gate} does not cover all of page {:#x}..{:#x}",
            access.page() * PAGE_SIZE,
            (access.page() + 1) * PAGE_SIZE
        ),
        Verdict::NotAnEntry => format!("{:#x} is not an entry point of gate {gate}", access.offset),
        Verdict::NoUsefulRights => "grants nothing this access can use".to_owned(),
        Verdict::Invalid(e) => format!("rejected: {e}"),
        Verdict::Ownership => "is a tag-ownership record, never a data grant".to_owned(),
    };
    format!("{what}: {why}")
}

/// The reason lines under a row: why the decision came out as it did.
fn summary(
    info: &PermsInfo,
    required: Protections,
    granted: bool,
    reasons: &[String],
    ctx: &SecCtx<'_>,
    object: ObjID,
) -> Vec<String> {
    let mut lines = Vec::new();
    if reasons.is_empty() {
        lines.push("no record for this object in the context".to_owned());
    }
    lines.extend(reasons.iter().cloned());
    if let Some(m) = ctx.mask(object) {
        let through = m.ovrmask & required & info.provide & !ctx.global_mask();
        if !through.is_empty() {
            lines.push(format!(
                "the global mask {} lacks {through}, but this object's ovrmask {} lets it through",
                ctx.global_mask(),
                m.ovrmask
            ));
        }
    }
    if required.intersects(info.restrict) {
        let by = match ctx.mask(object) {
            Some(m) => format!(
                "the mask for this object (permmask {}, ovrmask {}) with the global mask {}",
                m.permmask,
                m.ovrmask,
                ctx.global_mask()
            ),
            None => format!("the global mask {}", ctx.global_mask()),
        };
        lines.push(format!("{by} removes {}", info.restrict));
    }
    if !granted {
        lines.push(format!(
            "needs {required}, provided {}: denied",
            info.provide
        ));
    }
    lines
}

/// One line of the table, in fixed-width columns.
fn row(cols: [&str; 9]) -> String {
    let [
        number,
        what,
        ctx,
        object,
        offset,
        access,
        expected,
        decision,
        ok,
    ] = cols;
    format!(
        "{number:>2}  {what:<23} {ctx:<3} {object:<7} {offset:>7} {access:<6} {expected:<8} \
         {decision:<15} {ok}"
    )
}

fn access_name(access: &Access) -> &'static str {
    match (access.kind, access.entering) {
        (AccessKind::Read, _) => "read",
        (AccessKind::Write, _) => "write",
        (AccessKind::Exec, false) => "exec",
        (AccessKind::Exec, true) => "enter",
    }
}

fn kind_name(record: &Record) -> &'static str {
    match record {
        Record::Cap(_) => "cap",
        Record::Del(_) => "del",
    }
}

fn gate_text(gate: &Gate) -> String {
    if *gate == Gate::WHOLE {
        "whole object".to_owned()
    } else if gate.align() == 1 {
        format!("{:#x}..{:#x}", gate.offset(), gate.end())
    } else {
        format!(
            "{:#x}..{:#x} align {:#x}",
            gate.offset(),
            gate.end(),
            gate.align()
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
