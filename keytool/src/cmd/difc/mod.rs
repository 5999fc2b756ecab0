//! Information flow control (`docs/DIFC.md` §7.1): `tag create|grant|delegate`, labels on
//! `obj new` and `ctx new`, `ctx relabel`, `label show`, and the flow part of `check`'s
//! explanation. One module per job:
//!
//! - this module: naming tags and labels in output ([`Names`], [`label_json`]), resolving them
//!   from arguments ([`resolve_label`]), and a [`DifcError`] in words ([`difc_error`]);
//! - [`tag`]: the tag objects and `tag create|grant|delegate`;
//! - [`label`]: creation at a label (`obj new`, `ctx new`), `ctx relabel`, `ctx register` and
//!   `label show`;
//! - [`explain`]: denials and flows in words, for `check`'s explanation and refusals.

mod explain;
mod label;
mod tag;

use secctx::labels::DifcError;
use secctx::{DbStore, ObjectStore, StoreError};
use serde_json::{Value, json};
use twizzler_capsec::{ALL_CONTEXTS, Label, LabelError, MAX_LABEL_TAGS, ObjID, Right};

use crate::cli::LabelArgs;
use crate::cmd::warn;
use crate::env;
use crate::error::{Error, Result};
use crate::fail;
use crate::output::id;
use crate::parse::IdRef;
use explain::{denial_words, verdict_words};

pub(crate) use explain::explain_flow;
pub(crate) use label::{context_object, create_context, create_labelled, register, relabel, show};
pub(crate) use tag::{tag_create, tag_delegate, tag_grant, tag_use};

/// Tags named `'NAME' (ID)`, or by id alone.
pub(crate) struct Names(Vec<(String, ObjID)>);

impl Names {
    pub(crate) fn load(store: &DbStore) -> Self {
        Self(store.names().unwrap_or_default())
    }

    /// `'name'`, or the id.
    pub(crate) fn short(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => format!("'{n}'"),
            None => o.to_string(),
        }
    }

    /// The bare name for a command line, or the id.
    pub(crate) fn arg(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => n.clone(),
            None => o.to_string(),
        }
    }

    /// `'name' (id)`.
    pub(crate) fn long(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => format!("'{n}' ({o})"),
            None => o.to_string(),
        }
    }

    fn tags(&self, tags: &[ObjID]) -> String {
        tags.iter()
            .map(|t| self.arg(*t))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A label as text: `secrecy {a, b} integrity {}`.
    pub(crate) fn label(&self, l: &Label) -> String {
        let set = |t: &[ObjID]| {
            t.iter()
                .map(|t| self.short(*t))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "secrecy {{{}}} integrity {{{}}}",
            set(l.secrecy.as_slice()),
            set(l.integrity.as_slice())
        )
    }
}

/// A label as JSON.
pub(crate) fn label_json(l: &Label) -> Value {
    json!({
        "secrecy": l.secrecy.as_slice().iter().map(|t| id(*t)).collect::<Vec<_>>(),
        "integrity": l.integrity.as_slice().iter().map(|t| id(*t)).collect::<Vec<_>>(),
    })
}

/// Resolves one tag: it must be an object of the store.
fn resolve_tag(store: &DbStore, r: &IdRef) -> Result<ObjID> {
    let t = match r {
        IdRef::Id(t) => *t,
        IdRef::Name(n) => store.name(n)?.ok_or_else(|| {
            fail!(
                "unknown tag {n:?}: no object has that name {} (`keytool tag create {n} --key KEY` makes one)",
                env::in_store(store)
            )
        })?,
    };
    if t == ALL_CONTEXTS {
        return Err(fail!(
            "malformed label: {t} is ALL_CONTEXTS, reserved, and never a tag"
        ));
    }
    match store.info(t) {
        Ok(_) => Ok(t),
        Err(StoreError::NotFound(_)) => Err(fail!(
            "unknown tag {t}: no such object {}",
            env::in_store(store)
        )),
        Err(e) => Err(e.into()),
    }
}

/// The label the arguments name.
pub(crate) fn resolve_label(store: &DbStore, a: &LabelArgs) -> Result<Label> {
    let half = |refs: &[IdRef], what: &str| -> Result<Vec<ObjID>> {
        if refs.len() > MAX_LABEL_TAGS {
            return Err(fail!(
                "malformed label: {} {what} tags, at most {MAX_LABEL_TAGS}",
                refs.len()
            ));
        }
        refs.iter().map(|r| resolve_tag(store, r)).collect()
    };
    let s = half(&a.secrecy, "secrecy")?;
    let i = half(&a.integrity, "integrity")?;
    let names = Names::load(store);
    for (tags, want_integrity) in [(&s, false), (&i, true)] {
        for t in tags.iter() {
            if let Ok(o) = store.get(*t)
                && let Some(integrity) = tag_use(&o)
                && integrity != want_integrity
            {
                warn(format!(
                    "tag {} was created for {} labels",
                    names.short(*t),
                    if integrity { "integrity" } else { "secrecy" }
                ));
            }
        }
    }
    Label::from_tags(&s, &i).map_err(|e| fail!("malformed label: {e}"))
}

/// A [`DifcError`] in words, with tag and context names.
pub(crate) fn difc_error(store: &DbStore, e: DifcError) -> Error {
    let n = Names::load(store);
    match e {
        DifcError::Create { creator, denial } => fail!(
            "context {} may not create an object at that label: {}",
            n.long(creator),
            denial_words(&n, &denial)
        ),
        DifcError::Label { ctx, error } => {
            let c = n.short(ctx);
            match error {
                LabelError::NotOwned { tag, right } => fail!(
                    "context {c} does not own {}{right}: {} (keytool tag grant {} --to {} --rights {})",
                    n.arg(tag),
                    match right {
                        Right::Plus => "adding the tag needs it",
                        Right::Minus => "dropping the tag needs it",
                    },
                    n.arg(tag),
                    n.arg(ctx),
                    match right {
                        Right::Plus => "+",
                        Right::Minus => "-",
                    }
                ),
                LabelError::Ownership { tag, right, why } => fail!(
                    "context {c}: its ownership record for {}{right} did not count: {}",
                    n.arg(tag),
                    verdict_words(&why)
                ),
                LabelError::ContextUnreadable { tag } => fail!(
                    "context {c}: its own bytes carry {} and would no longer flow to it",
                    n.short(tag)
                ),
                LabelError::RegistrarUnreadable { tag } => fail!(
                    "context {c}: its bytes carry {}, which the registering context does not",
                    n.short(tag)
                ),
                other => fail!("context {c}: {other}"),
            }
        }
        DifcError::Unregistered(c) => fail!(
            "context {} proposes a label but is not registered",
            n.long(c)
        ),
        DifcError::Store(e) => e.into(),
        other => fail!("{other}"),
    }
}
