//! Denials and flows in words (`docs/DIFC.md` §7.1): the flow part of `check`'s explanation,
//! with the fix it suggests, and the words a creation refusal uses.

use std::fmt::Write as _;

use secctx::sim::FlowReport;
use secctx::{DbStore, ObjectStore};
use serde_json::{Value, json};
use twizzler_capsec::{FlowDenial, ObjID, Right, SecCtx, Verdict};

use super::{Names, label_json};
use crate::output::{expiry_json, id};
use crate::parse::fmt_expiry;

pub(super) fn verdict_words(v: &Verdict) -> String {
    match v {
        Verdict::Invalid(e) => e.to_string(),
        other => format!("{other:?}"),
    }
}

/// One line saying why, for a creation refusal.
pub(super) fn denial_words(n: &Names, d: &FlowDenial) -> String {
    match *d {
        FlowDenial::SecrecyWrite { tag } => format!(
            "it carries secrecy tag {} and does not own {}−",
            n.short(tag),
            n.arg(tag)
        ),
        FlowDenial::IntegrityWrite { tag } => format!(
            "the label carries integrity tag {}, the context does not, and does not own {}+",
            n.short(tag),
            n.arg(tag)
        ),
        FlowDenial::Ownership { tag, why } => format!(
            "its ownership record for {} did not count: {}",
            n.short(tag),
            verdict_words(&why)
        ),
        other => other.to_string(),
    }
}

/// A context in the store other than `not` that holds `tag`'s `right` by a record of its own
/// (for the fix a denial suggests).
fn owner_of(store: &DbStore, tag: ObjID, right: Right, not: ObjID) -> Option<ObjID> {
    for oid in store.list().ok()? {
        if oid == not {
            continue;
        }
        let Ok(o) = store.get(oid) else { continue };
        let Ok(ctx) = SecCtx::parse(&o.data) else {
            continue;
        };
        let held = ctx.entries_for(tag).any(|e| {
            e.record().is_ok_and(|r| {
                r.is_ownership() && r.holder() == oid && r.prots().contains(right.as_prots())
            })
        });
        if held {
            return Some(oid);
        }
    }
    None
}

/// The flow part of `check`'s explanation (§7.1's style): text lines and JSON.
pub(crate) fn explain_flow(
    store: &DbStore,
    f: &FlowReport,
    access: &str,
    target: ObjID,
    prots: Option<twizzler_capsec::Protections>,
) -> (Value, String) {
    let n = Names::load(store);
    let c = n.short(f.ctx);
    let o = n.short(target);
    let mut s = String::new();
    let principal = f.principal.unwrap_or_default();
    let relabel_cmd = |add: Option<ObjID>, drop: Option<ObjID>| {
        let mut sec: Vec<ObjID> = principal.secrecy.as_slice().to_vec();
        let mut int: Vec<ObjID> = principal.integrity.as_slice().to_vec();
        if let Some(a) = add {
            sec.push(a);
        }
        if let Some(d) = drop {
            int.retain(|t| *t != d);
        }
        let mut cmd = format!("keytool ctx relabel {}", n.arg(f.ctx));
        if !sec.is_empty() {
            let _ = write!(cmd, " --secrecy {}", n.tags(&sec));
        }
        if !int.is_empty() {
            let _ = write!(cmd, " --integrity {}", n.tags(&int));
        }
        cmd
    };
    let to_verb = if access == "write" { "to" } else { "of" };
    match &f.denial {
        None => {
            let p = prots.map_or(String::new(), |p| p.to_string());
            if f.used.is_empty() {
                let _ = writeln!(
                    s,
                    "  flow: allowed (context at {}, object at {})",
                    n.label(&principal),
                    n.label(&f.object)
                );
            }
            for u in &f.used {
                let act = match u.right {
                    Right::Minus => "declassified",
                    Right::Plus => "endorsed",
                };
                let _ = writeln!(
                    s,
                    "granted {p}: {act} by {}{} (record {}, expires {})",
                    n.arg(u.tag),
                    u.right,
                    u.record,
                    fmt_expiry(u.expires)
                );
            }
        }
        Some(d) => {
            // A refused switch happens in the thread's active context, not the one it would
            // have switched to.
            let under = match d {
                FlowDenial::Switch { .. } => n.short(f.from),
                _ => c.clone(),
            };
            let _ = writeln!(s, "denied: {access} {to_verb} {o} under context {under}");
            match *d {
                FlowDenial::SecrecyWrite { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries secrecy tag {}; the object does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}− (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let from = owner_of(store, tag, Right::Minus, f.ctx)
                        .map_or("OWNER".to_string(), |o| n.arg(o));
                    let _ = writeln!(
                        s,
                        "  to allow: delegate {t}− to {c} (keytool tag delegate {t} --from {from} --to {} --rights -),\n            or write to an object that carries {}",
                        n.arg(f.ctx),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::SecrecyRead { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries secrecy tag {}; the reading context does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}+ (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}+ to {c} (keytool tag grant {t} --to {} --rights +), then add it ({})",
                        n.arg(f.ctx),
                        relabel_cmd(Some(tag), None),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::MustRaise { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries secrecy tag {}; the reading context does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  it owns {}+, so it may add it first ({})",
                        n.arg(tag),
                        relabel_cmd(Some(tag), None)
                    );
                }
                FlowDenial::IntegrityRead { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries integrity tag {}; the object does not (low-integrity input)",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}− (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}− to {c} (keytool tag grant {t} --to {} --rights -) and drop it ({}),\n            or read an object that carries {}",
                        n.arg(f.ctx),
                        relabel_cmd(None, Some(tag)),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::MustLower { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries integrity tag {}; the object does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  it owns {}−, so it may drop it first ({})",
                        n.arg(tag),
                        relabel_cmd(None, Some(tag))
                    );
                }
                FlowDenial::IntegrityWrite { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries integrity tag {}; the writing context does not, and does not own {}+",
                        n.long(tag),
                        n.arg(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}+ to {c} to endorse (keytool tag grant {t} --to {} --rights +),\n            or write to an object without {}",
                        n.arg(f.ctx),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::Ownership { tag, why } => {
                    let _ = writeln!(
                        s,
                        "  an ownership record for {} in {c} did not count: {}",
                        n.long(tag),
                        verdict_words(&why)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: a valid record (keytool tag grant or tag delegate), or an object that needs none"
                    );
                }
                FlowDenial::LabelUnknown => {
                    let _ = writeln!(
                        s,
                        "  context {c} proposes a label in its section but is not registered: the kernel refuses it"
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: register it (keytool ctx register {} --as CTX, CTX owning + of the tags it adds)",
                        n.arg(f.ctx)
                    );
                }
                FlowDenial::Switch { to, tag } => {
                    let _ = writeln!(
                        s,
                        "  only context {} grants it, and switching there would shed secrecy tag {} (or gain it as integrity) without the ownership that needs",
                        n.short(to),
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: give the thread's active context {t}− for secrecy, {t}+ for integrity (keytool tag delegate {t} --from OWNER --to CTX ...),\n            or enter {} through a code gate of a context owning it",
                        n.short(to),
                        t = n.arg(tag)
                    );
                }
            }
        }
    }
    let j = json!({
        "ctx": id(f.ctx),
        "principal": f.principal.as_ref().map(label_json),
        "object": label_json(&f.object),
        "mask": f.mask.to_string(),
        "denial": f.denial.as_ref().map(denial_name),
        "tag": f.denial.as_ref().and_then(FlowDenial::tag).map(id),
        "used": f.used.iter().map(|u| json!({
            "tag": id(u.tag),
            "right": u.right.to_string(),
            "record": u.record.to_string(),
            "expires": expiry_json(u.expires),
        })).collect::<Vec<_>>(),
    });
    (j, s)
}

fn denial_name(d: &FlowDenial) -> &'static str {
    match d {
        FlowDenial::SecrecyRead { .. } => "secrecy_read",
        FlowDenial::MustRaise { .. } => "must_raise",
        FlowDenial::IntegrityRead { .. } => "integrity_read",
        FlowDenial::MustLower { .. } => "must_lower",
        FlowDenial::SecrecyWrite { .. } => "secrecy_write",
        FlowDenial::IntegrityWrite { .. } => "integrity_write",
        FlowDenial::Ownership { .. } => "ownership",
        FlowDenial::LabelUnknown => "label_unknown",
        FlowDenial::Switch { .. } => "switch",
    }
}
