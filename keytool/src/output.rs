//! Printing: text for people, one JSON document for `--json`.

use std::fmt::Write as _;
use std::io::Write as _;

use kernel_hooks::{DenyCause, Violation};
use serde_json::{Value, json};
use twizzler_capsec::{
    Cap, CtxFlags, Del, Expiry, Gate, HashAlg, Link, ObjID, Protections, Record, RecordId,
    RecordKind, Verdict,
};

use crate::parse::fmt_expiry;

/// Where output goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    /// `--json`.
    pub json: bool,
}

impl Out {
    /// Prints `value` as JSON, or `text()` as text.
    pub(crate) fn emit(&self, value: Value, text: impl FnOnce() -> String) {
        let mut t = if self.json {
            // A Value always serializes.
            serde_json::to_string_pretty(&value).unwrap_or_default()
        } else {
            text()
        };
        if !t.ends_with('\n') {
            t.push('\n');
        }
        // A closed stdout (`keytool ... | head`) is not an error worth a panic.
        let _ = std::io::stdout().lock().write_all(t.as_bytes());
    }
}

/// An object id as JSON: its 32 hex digits.
pub(crate) fn id(o: ObjID) -> Value {
    Value::String(o.to_string())
}

/// An expiry as JSON: RFC 3339 or null, and the raw ns.
pub(crate) fn expiry_json(e: Expiry) -> Value {
    match e.at() {
        None => Value::Null,
        Some(_) => Value::String(fmt_expiry(e)),
    }
}

/// A gate as JSON.
pub(crate) fn gate_json(g: Gate) -> Value {
    json!({ "offset": g.offset(), "length": g.length(), "align": g.align() })
}

/// A gate as text: `whole` or `0x1000..0x3000 align 16`.
pub(crate) fn gate_text(g: Gate) -> String {
    if g == Gate::WHOLE {
        "whole object".into()
    } else if g.align() == 1 {
        format!("{:#x}..{:#x}", g.offset(), g.end())
    } else {
        format!("{:#x}..{:#x} align {}", g.offset(), g.end(), g.align())
    }
}

/// A hash algorithm's name.
pub(crate) fn hash_name(h: HashAlg) -> &'static str {
    match h {
        HashAlg::Blake3 => "blake3",
        HashAlg::Sha256 => "sha256",
    }
}

/// A record kind's name.
pub(crate) fn kind_name(k: RecordKind) -> &'static str {
    match k {
        RecordKind::Cap => "capability",
        RecordKind::Del => "delegation",
    }
}

/// Bytes as lower-case hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(2 * b.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Flags as a list of names.
pub(crate) fn flags_json(f: CtxFlags) -> Value {
    let mut v = Vec::new();
    if f.contains(CtxFlags::UNDETACHABLE) {
        v.push("undetachable");
    }
    json!(v)
}

/// Flags as text.
pub(crate) fn flags_text(f: CtxFlags) -> String {
    if f.contains(CtxFlags::UNDETACHABLE) {
        "undetachable".into()
    } else {
        "none".into()
    }
}

fn cap_json(c: &Cap) -> Value {
    json!({
        "kind": "capability",
        "id": c.id().to_string(),
        "target": id(c.target()),
        "accessor": id(c.accessor()),
        "prots": c.prots().to_string(),
        "gate": gate_json(c.gate()),
        "expires": expiry_json(c.expires()),
        "expires_ns": c.expires().raw(),
        "hash": hash_name(c.hash_alg()),
        "scheme": c.signature().scheme().name(),
        "signed_message": hex(&c.signed_message()),
    })
}

fn link_json(l: &Link) -> Value {
    let g = l.grant();
    json!({
        "provider": id(l.provider()),
        "receiver": id(g.receiver),
        "prots": g.prots.to_string(),
        "gate": gate_json(g.gate),
        "expires": expiry_json(g.expires),
        "expires_ns": g.expires.raw(),
        "hash": hash_name(g.hash),
        "scheme": l.signature().scheme().name(),
    })
}

fn del_json(d: &Del) -> Value {
    json!({
        "kind": "delegation",
        "id": d.id().to_string(),
        "target": id(d.target()),
        "receiver": id(d.receiver()),
        "provider": id(d.provider()),
        "prots": d.prots().to_string(),
        "gate": gate_json(d.gate()),
        "expires": expiry_json(d.expires()),
        "expires_ns": d.expires().raw(),
        "depth": d.depth(),
        "root": cap_json(d.root()),
        "links": d.links().map(link_json).collect::<Vec<_>>(),
    })
}

/// A record as JSON, every field.
pub(crate) fn record_json(r: &Record) -> Value {
    match r {
        Record::Cap(c) => cap_json(c),
        Record::Del(d) => del_json(d),
    }
}

/// A record as JSON, the fields a context listing needs.
pub(crate) fn record_summary_json(r: &Record) -> Value {
    json!({
        "kind": kind_name(r.kind()),
        "id": r.id().to_string(),
        "target": id(r.target()),
        "holder": id(r.holder()),
        "prots": r.prots().to_string(),
        "gate": gate_json(r.gate()),
        "expires": expiry_json(r.expires()),
        "expires_ns": r.expires().raw(),
    })
}

/// A record as text, every field.
pub(crate) fn record_text(r: &Record) -> String {
    let mut s = String::new();
    match r {
        Record::Cap(c) => {
            let _ = writeln!(s, "capability {}", c.id());
            cap_lines(&mut s, c, "  ");
        }
        Record::Del(d) => {
            let _ = writeln!(s, "delegation {} (depth {})", d.id(), d.depth());
            let _ = writeln!(s, "  target     {}", d.target());
            let _ = writeln!(s, "  receiver   {}", d.receiver());
            let _ = writeln!(s, "  provider   {}", d.provider());
            let _ = writeln!(s, "  prots      {}", d.prots());
            let _ = writeln!(s, "  gate       {}", gate_text(d.gate()));
            let _ = writeln!(s, "  expires    {}", fmt_expiry(d.expires()));
            let _ = writeln!(s, "  root capability {}", d.root().id());
            cap_lines(&mut s, d.root(), "    ");
            for (i, l) in d.links().enumerate() {
                let g = l.grant();
                let _ = writeln!(
                    s,
                    "  link {}: {} -> {}  {}  {}  expires {}  {} {}",
                    i + 1,
                    l.provider(),
                    g.receiver,
                    g.prots,
                    gate_text(g.gate),
                    fmt_expiry(g.expires),
                    l.signature().scheme(),
                    hash_name(g.hash),
                );
            }
        }
    }
    s
}

fn cap_lines(s: &mut String, c: &Cap, ind: &str) {
    let _ = writeln!(s, "{ind}target     {}", c.target());
    let _ = writeln!(s, "{ind}accessor   {}", c.accessor());
    let _ = writeln!(s, "{ind}prots      {}", c.prots());
    let _ = writeln!(s, "{ind}gate       {}", gate_text(c.gate()));
    let _ = writeln!(s, "{ind}expires    {}", fmt_expiry(c.expires()));
    let _ = writeln!(
        s,
        "{ind}signature  {} over {}(domain || body) = {}",
        c.signature().scheme(),
        hash_name(c.hash_alg()),
        hex(&c.signed_message())
    );
}

/// A one-line summary of a record.
pub(crate) fn record_line(rid: &RecordId, r: &Record) -> String {
    let who = match r {
        Record::Cap(c) => format!("for {}", c.accessor()),
        Record::Del(d) => format!("from {} to {}", d.provider(), d.receiver()),
    };
    format!(
        "{} {}  {}  {}  expires {}  {who}",
        short_kind(r.kind()),
        rid,
        r.prots(),
        gate_text(r.gate()),
        fmt_expiry(r.expires()),
    )
}

/// `cap` or `del`.
pub(crate) fn short_kind(k: RecordKind) -> &'static str {
    match k {
        RecordKind::Cap => "cap",
        RecordKind::Del => "del",
    }
}

/// A record's verdict, as words. `needed` is what the access needs and `prots` what the record
/// grants (when it decodes), so a record that grants none of it says `needs r--, provided ---`,
/// the words every denial uses.
pub(crate) fn verdict_text(v: &Verdict, needed: Protections, prots: Option<Protections>) -> String {
    match v {
        Verdict::Counted(p) => format!("counts: contributes {p}"),
        Verdict::Redundant => "not needed: adds nothing to rights already provided".into(),
        Verdict::Malformed(e) => format!("malformed: {e}"),
        Verdict::WrongTarget(t) => format!("grants another object ({t})"),
        Verdict::WrongHolder(h) => format!("is for another context ({h})"),
        Verdict::OutsideGate => "the page is not wholly inside its gate".into(),
        Verdict::NotAnEntry => "the fetch is not at an entry point of its gate".into(),
        Verdict::NoUsefulRights => {
            let useful = prots.unwrap_or_else(Protections::empty) & needed;
            format!("needs {needed}, provided {useful}")
        }
        Verdict::Invalid(e) => format!("invalid: {e}"),
        Verdict::Ownership => "is a tag-ownership record, never a data grant".into(),
    }
}

/// A verdict's short name, for JSON.
pub(crate) fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::Counted(_) => "counted",
        Verdict::Redundant => "redundant",
        Verdict::Malformed(_) => "malformed",
        Verdict::WrongTarget(_) => "wrong_target",
        Verdict::WrongHolder(_) => "wrong_holder",
        Verdict::OutsideGate => "outside_gate",
        Verdict::NotAnEntry => "not_an_entry",
        Verdict::NoUsefulRights => "no_useful_rights",
        Verdict::Invalid(_) => "invalid",
        Verdict::Ownership => "ownership",
    }
}

/// Why an access is denied, as words: `needs rw-, provided r-- by context NAME (ID)`, then
/// the cause when it says more than that (a mask, a record that does not verify, no record).
/// `label` shows an object as the user knows it ([`crate::env::label`]).
pub(crate) fn denial_text(v: &Violation, label: impl Fn(ObjID) -> String) -> String {
    match v {
        Violation::Denied {
            ctx,
            needed,
            provided,
            cause,
        } => {
            let head = format!(
                "needs {needed}, provided {provided} by context {}",
                label(*ctx)
            );
            match cause {
                // The rights are all there is to say: the records grant less than needed.
                DenyCause::Record(
                    Verdict::Counted(_) | Verdict::Redundant | Verdict::NoUsefulRights,
                ) => head,
                DenyCause::NoRecord => {
                    format!("{head}, which holds no capability or delegation for the object")
                }
                DenyCause::Masked { removed } => format!("{head}: its masks remove {removed}"),
                DenyCause::Record(_) => format!("{head}: {cause}"),
            }
        }
        Violation::Undetachable {
            ctx,
            needed,
            provided,
        } => format!(
            "needs {needed}, provided {provided} by context {}, which is undetachable",
            label(*ctx)
        ),
        other => other.to_string(),
    }
}
