//! `check`: the kernel's decision, simulated over the store and explained.

use std::fmt::Write as _;

use kernel_hooks::{Decision, Violation};
use secctx::sim::ContextReport;
use secctx::{AccessSimulator, DbStore, ObjectStore, SimAccess, StoreError};
use serde_json::{Value, json};
use twizzler_capsec::{AccessKind, ObjID, PAGE_SIZE, Protections};

use crate::cli::AccessArg;
use crate::cmd::{difc, warn};
use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::output::{
    Out, denial_text, expiry_json, flags_json, flags_text, id, kind_name, short_kind, verdict_name,
    verdict_text,
};
use crate::parse::{fmt_expiry, fmt_time, now_ns};

fn kind_of(a: AccessArg) -> AccessKind {
    match a {
        AccessArg::Read => AccessKind::Read,
        AccessArg::Write => AccessKind::Write,
        AccessArg::Exec => AccessKind::Exec,
    }
}

fn access_name(a: AccessArg) -> &'static str {
    match a {
        AccessArg::Read => "read",
        AccessArg::Write => "write",
        AccessArg::Exec => "exec",
    }
}

/// `keytool check`.
pub(crate) fn check(
    store: &DbStore,
    out: Out,
    contexts: &[ObjID],
    target: ObjID,
    offset: u64,
    access: AccessArg,
    at: Option<u64>,
) -> Result<Status> {
    let now = at.unwrap_or_else(now_ns);
    // A name that is not in the store is almost always a typo: an error, not a denial. (A
    // damaged object is left to the simulator, which denies and warns, as the kernel would.)
    for (oid, what) in contexts
        .iter()
        .map(|&c| (c, "context"))
        .chain([(target, "target")])
    {
        if let Err(StoreError::NotFound(_)) = store.get(oid) {
            return Err(fail!(
                "{what} {oid} does not exist {}",
                env::in_store(store)
            ));
        }
    }
    let sim = AccessSimulator::load(store, contexts, &[target], now)?;
    if !out.json {
        for w in &sim.warnings {
            warn(w);
        }
    }
    let result = sim.check(
        contexts,
        SimAccess {
            target,
            offset,
            kind: kind_of(access),
        },
    );
    let granted = result.granted();
    // Objects are shown as the user named them, with their ids.
    let names = store.names().unwrap_or_default();
    let label = |o: ObjID| env::label_in(&names, o);
    let needed = kind_of(access).required();
    let what = format!(
        "{} at {offset:#x} of {}",
        access_name(access),
        label(target)
    );
    let flow = result
        .flow
        .as_ref()
        .map(|f| difc::explain_flow(store, f, access_name(access), target, result.prots()));
    let flow_denial = result.flow.as_ref().and_then(|f| f.denial);
    let decision_json = match &result.decision {
        Decision::Map { .. } if flow_denial.is_some() => json!({
            "granted": false,
            "violation": "flow",
            "reason": flow_denial.map(|d| d.to_string()),
        }),
        Decision::Map {
            pages,
            switch_to,
            valid_until,
            ..
        } => json!({
            "granted": true,
            "prots": result.prots().unwrap_or_default().to_string(),
            "bytes": { "start": pages.start.saturating_mul(PAGE_SIZE), "end": pages.end.saturating_mul(PAGE_SIZE) },
            "switch_to": switch_to.map(id),
            "valid_until": expiry_json(*valid_until),
        }),
        Decision::Violation(v) => json!({
            "granted": false,
            "violation": violation_name(v),
            "reason": denial_text(v, label),
        }),
    };
    let contexts_json: Vec<Value> = result
        .contexts
        .iter()
        .map(|c| context_json(c, needed))
        .collect();
    out.emit(
        json!({
            "granted": granted,
            "access": access_name(access),
            "target": id(target),
            "offset": offset,
            "at": fmt_time(now),
            "decision": decision_json,
            "active_after": id(result.active_after),
            "contexts": contexts_json,
            "flow": flow.as_ref().map(|(j, _)| j.clone()),
            "warnings": sim.warnings,
        }),
        || {
            let mut s = String::new();
            match &result.decision {
                Decision::Map { .. } if flow_denial.is_some() => {
                    if let Some((_, t)) = &flow {
                        s.push_str(t);
                    }
                }
                Decision::Map {
                    pages,
                    switch_to,
                    valid_until,
                    ..
                } => {
                    let _ = writeln!(s, "GRANTED {what}");
                    let prots = result.prots().unwrap_or_default();
                    if let Some((_, t)) = &flow {
                        s.push_str(t);
                    }
                    let _ = writeln!(
                        s,
                        "  maps {prots} on bytes {:#x}..{:#x}, valid until {}",
                        pages.start.saturating_mul(PAGE_SIZE),
                        pages.end.saturating_mul(PAGE_SIZE),
                        fmt_expiry(*valid_until)
                    );
                    if let Some(c) = switch_to {
                        let _ = writeln!(s, "  switches the thread to context {}", label(*c));
                    }
                }
                Decision::Violation(v) => {
                    let _ = writeln!(s, "DENIED {what}: {}", denial_text(v, label));
                }
            }
            for c in &result.contexts {
                context_text(&mut s, c, needed, &label);
            }
            s
        },
    );
    Ok(if granted { Status::Yes } else { Status::No })
}

fn violation_name(v: &Violation) -> &'static str {
    match v {
        Violation::NullPage { .. } => "null_page",
        Violation::OutOfBounds { .. } => "out_of_bounds",
        Violation::ContextChanging(_) => "context_changing",
        Violation::ContextMissing(_) => "context_missing",
        Violation::MalformedContext { .. } => "malformed_context",
        Violation::Undetachable { .. } => "undetachable",
        Violation::Denied { .. } => "denied",
        Violation::Flow { .. } => "flow",
    }
}

fn context_json(c: &ContextReport, needed: Protections) -> Value {
    json!({
        "ctx": id(c.ctx),
        "active": c.active,
        "error": c.error,
        "flags": flags_json(c.flags),
        "global_mask": c.global_mask.to_string(),
        "mask": c.mask.map(|m| json!({ "permmask": m.permmask.to_string(), "ovrmask": m.ovrmask.to_string() })),
        "provide": c.perms.map(|p| p.provide.to_string()),
        "restrict": c.perms.map(|p| p.restrict.to_string()),
        "records": c.records.iter().map(|r| json!({
            "index": r.index,
            "kind": r.kind.map(kind_name),
            "id": r.id.map(|i| i.to_string()),
            "prots": r.prots.map(|p| p.to_string()),
            "verdict": verdict_name(&r.verdict),
            "explanation": verdict_text(&r.verdict, needed, r.prots),
        })).collect::<Vec<_>>(),
    })
}

fn context_text(
    s: &mut String,
    c: &ContextReport,
    needed: Protections,
    label: &dyn Fn(ObjID) -> String,
) {
    let ctx = label(c.ctx);
    let role = if c.active { "active" } else { "inactive" };
    if let Some(e) = &c.error {
        let _ = writeln!(s, "context {ctx} ({role}): {e}");
        return;
    }
    let provide = c
        .perms
        .map_or("nothing".to_string(), |p| p.provide.to_string());
    let _ = writeln!(s, "context {ctx} ({role}): provides {provide}");
    let mask = c.mask.map_or("none".to_string(), |m| {
        format!("perm {} ovr {}", m.permmask, m.ovrmask)
    });
    let _ = writeln!(
        s,
        "  flags {}, global mask {}, mask for the object: {mask}",
        flags_text(c.flags),
        c.global_mask
    );
    if c.records.is_empty() {
        let _ = writeln!(s, "  no records for the object");
    }
    for r in &c.records {
        let kind = r.kind.map_or("???", short_kind);
        let rid = r.id.map_or("(undecodable)".to_string(), |i| i.to_string());
        let prots = r.prots.map_or("???".to_string(), |p| p.to_string());
        let _ = writeln!(
            s,
            "  [{}] {kind} {rid} {prots}: {}",
            r.index,
            verdict_text(&r.verdict, needed, r.prots)
        );
    }
}
