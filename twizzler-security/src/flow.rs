//! The information-flow rule as pure functions (`docs/DIFC.md` §3.1, §3.3, §4, §5.4).
//!
//! For a principal (the threads of context `C`) at label `(S_C, I_C)` and an object `o` at
//! `(S_o, I_o)`:
//!
//! ```text
//! readable(C, o) ⇔ S_o ⊆ S_C ∧ I_C ⊆ I_o
//! writable(C, o) ⇔ readable(C, o) ∧ S_C − own⁻(C) ⊆ S_o ∧ I_o ⊆ I_C ∪ own⁺(C)
//! flow(C, o)     = (readable ? R|X : ∅) | (writable ? W : ∅)
//! ```
//!
//! `readable` uses the principal's `read` label, the two write clauses its `write` label
//! ([`PrincipalLabels`]; the two differ only while a label change is in progress, §4.2).
//! Ownership (`own⁺`, `own⁻`) is asked of an [`Ownership`] only when it can change the answer:
//! for the write clauses when the access needs `W`, and for the first offending tag of a refused
//! read (to report [`FlowDenial::MustRaise`] / [`FlowDenial::MustLower`]). With every label
//! empty, `flow` is `R|W|X` and nothing is asked.
//!
//! Every denial names the **smallest** offending tag of the first clause that fails, in the
//! order secrecy read, integrity read, secrecy write, integrity write.
//!
//! # Example
//!
//! ```
//! use twizzler_capsec::{
//!     flow, FlowDenial, Label, LabelRef, NoOwnership, ObjID, Ownership, PrincipalLabels,
//!     Protections, Right, Verdict,
//! };
//! # fn main() -> Result<(), twizzler_capsec::DecodeError> {
//! let medical = ObjID::new(0x3fa1);
//! let secret = Label::from_tags(&[medical], &[])?;
//! let public = Label::EMPTY;
//! let reader = PrincipalLabels::steady(secret.as_ref());
//!
//! // A context at {medical} reads the secret object, read-write.
//! let r = flow(&reader, &secret.as_ref(), true, &mut NoOwnership);
//! assert_eq!(r.mask, Protections::all());
//! // It may read the public object but not write it: that would leak `medical`.
//! let w = flow(&reader, &public.as_ref(), true, &mut NoOwnership);
//! assert_eq!(w.mask, Protections::READ | Protections::EXEC);
//! assert_eq!(w.denial, Some(FlowDenial::SecrecyWrite { tag: medical }));
//!
//! // A declassifier owns medical−: its write to the public object is allowed.
//! struct Declassifier(ObjID);
//! impl Ownership for Declassifier {
//!     fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
//!         Ok(tag == self.0 && right == Right::Minus)
//!     }
//! }
//! let d = flow(&reader, &public.as_ref(), true, &mut Declassifier(medical));
//! assert_eq!((d.mask, d.denial), (Protections::all(), None));
//! # Ok(())
//! # }
//! ```

use core::fmt;

use crate::ids::{ObjID, Protections};
use crate::label::{Label, LabelRef, Tags, tags_difference, tags_subset};
use crate::perms::Verdict;

/// An ownership right over a tag (`docs/DIFC.md` §2.2). Stored in an ownership capability's
/// protections field: `PLUS` is bit 0 (`1`), `MINUS` bit 1 (`2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Right {
    /// `T+`: add a secrecy tag (a read right), add an integrity tag, or endorse.
    Plus,
    /// `T−`: drop a secrecy tag, or declassify; drop an integrity tag.
    Minus,
}

impl Right {
    /// The bit of the right in an ownership record's protections field.
    pub const fn bits(self) -> u16 {
        match self {
            Self::Plus => 1,
            Self::Minus => 2,
        }
    }

    /// The right as the [`Protections`] value a record carries (`PLUS` shares `READ`'s bit,
    /// `MINUS` `WRITE`'s).
    pub const fn as_prots(self) -> Protections {
        match self {
            Self::Plus => Protections::READ,
            Self::Minus => Protections::WRITE,
        }
    }
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Plus => "+",
            Self::Minus => "−",
        })
    }
}

/// The ownership a principal holds, asked lazily by the rule.
///
/// `owns(tag, right)` answers `Ok(true)` when a record counts, `Ok(false)` when there is no
/// record for `tag` that could (none filed, none naming the principal, none with `right`), and
/// `Err(verdict)` when a record that would have counted did not (expired, revoked, a bad
/// signature, or [`crate::VerifyError::Unchecked`] once a verification budget is spent): the
/// rule then reports [`FlowDenial::Ownership`]. An engine implements it over its context,
/// counting verifications, collecting the records' ids, keys and expiry for its cache.
pub trait Ownership {
    /// Whether the principal holds `right` of `tag`.
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict>;
}

impl<O: Ownership + ?Sized> Ownership for &mut O {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        (**self).owns(tag, right)
    }
}

/// Owns nothing: for a principal without ownership, or the entry side of a switch made by a
/// data access (§5.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoOwnership;

impl Ownership for NoOwnership {
    fn owns(&mut self, _tag: ObjID, _right: Right) -> Result<bool, Verdict> {
        Ok(false)
    }
}

/// A principal's two labels (§4.2): `read` decides `readable`, `write` the write clauses. In the
/// steady state they are equal; during a label change they are the transitional pair.
///
/// Generic over how a label is held: `PrincipalLabels<LabelRef<'_>>` for the rule,
/// `PrincipalLabels<LabelId>` for a kernel's table row, `PrincipalLabels<Label>` by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PrincipalLabels<L> {
    /// The label reads are decided under.
    pub read: L,
    /// The label writes are decided under.
    pub write: L,
}

impl<L: Copy> PrincipalLabels<L> {
    /// The steady state: one label for both.
    pub const fn steady(label: L) -> Self {
        Self {
            read: label,
            write: label,
        }
    }
}

impl<L: PartialEq> PrincipalLabels<L> {
    /// Whether `read == write` (no change in progress).
    pub fn is_steady(&self) -> bool {
        self.read == self.write
    }
}

impl PrincipalLabels<Label> {
    /// Borrowed views of both labels.
    pub fn as_ref(&self) -> PrincipalLabels<LabelRef<'_>> {
        PrincipalLabels {
            read: self.read.as_ref(),
            write: self.write.as_ref(),
        }
    }
}

/// Why the rule refuses a flow (§3.3). The tag named is the smallest offending one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowDenial {
    /// The object has secrecy tag `tag`, the context does not.
    SecrecyRead {
        /// The tag.
        tag: ObjID,
    },
    /// As [`FlowDenial::SecrecyRead`], but the context owns `tag+`: it may raise first.
    MustRaise {
        /// The tag.
        tag: ObjID,
    },
    /// The context has integrity tag `tag`, the object does not.
    IntegrityRead {
        /// The tag.
        tag: ObjID,
    },
    /// As [`FlowDenial::IntegrityRead`], but the context owns `tag−`: it may drop it first.
    MustLower {
        /// The tag.
        tag: ObjID,
    },
    /// The context has secrecy tag `tag`, the object does not, and the context does not own
    /// `tag−`.
    SecrecyWrite {
        /// The tag.
        tag: ObjID,
    },
    /// The object has integrity tag `tag`, the context does not, and does not own `tag+`.
    IntegrityWrite {
        /// The tag.
        tag: ObjID,
    },
    /// An ownership record for `tag` was found but did not count.
    Ownership {
        /// The tag.
        tag: ObjID,
        /// Why the record did not count.
        why: Verdict,
    },
    /// A label could not be resolved (refused, never decided as unlabelled).
    LabelUnknown,
    /// An inactive context `to` granted, but switching to it would carry `tag` where it may
    /// not go (§5.4).
    Switch {
        /// The context switching to was refused.
        to: ObjID,
        /// The tag.
        tag: ObjID,
    },
}

impl FlowDenial {
    /// The tag the denial names, if any.
    pub fn tag(&self) -> Option<ObjID> {
        match *self {
            Self::SecrecyRead { tag }
            | Self::MustRaise { tag }
            | Self::IntegrityRead { tag }
            | Self::MustLower { tag }
            | Self::SecrecyWrite { tag }
            | Self::IntegrityWrite { tag }
            | Self::Ownership { tag, .. }
            | Self::Switch { tag, .. } => Some(tag),
            Self::LabelUnknown => None,
        }
    }
}

impl fmt::Display for FlowDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SecrecyRead { tag } => write!(
                f,
                "the object carries secrecy tag {tag}, the context does not"
            ),
            Self::MustRaise { tag } => write!(
                f,
                "the object carries secrecy tag {tag}, the context does not; it owns {tag}+, so it may add it first"
            ),
            Self::IntegrityRead { tag } => write!(
                f,
                "the context carries integrity tag {tag}, the object does not"
            ),
            Self::MustLower { tag } => write!(
                f,
                "the context carries integrity tag {tag}, the object does not; it owns {tag}−, so it may drop it first"
            ),
            Self::SecrecyWrite { tag } => write!(
                f,
                "the context carries secrecy tag {tag}, the object does not, and the context does not own {tag}−"
            ),
            Self::IntegrityWrite { tag } => write!(
                f,
                "the object carries integrity tag {tag}, the context does not, and does not own {tag}+"
            ),
            Self::Ownership { tag, why } => {
                write!(f, "an ownership record for {tag} did not count: {why:?}")
            }
            Self::LabelUnknown => f.write_str("a label could not be resolved"),
            Self::Switch { to, tag } => write!(
                f,
                "switching to context {to} would carry tag {tag} where it may not go"
            ),
        }
    }
}

impl core::error::Error for FlowDenial {}

/// What the rule allows for one principal and one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowResult {
    /// The flow mask: `R|X` if readable, and `W` if writable (as far as resolved).
    pub mask: Protections,
    /// `W` is not in `mask` only because the write clauses need ownership that was not asked
    /// (the access did not need `W`): a later write must evaluate again.
    pub write_unresolved: bool,
    /// Why the access asked about is refused, if it is: a read reason when the object is not
    /// readable; a write reason when `W` was needed and is refused.
    pub denial: Option<FlowDenial>,
}

impl FlowResult {
    /// No restriction: `R|W|X` (every label empty).
    pub const ALL: FlowResult = FlowResult {
        mask: Protections::all(),
        write_unresolved: false,
        denial: None,
    };

    /// Whether the flow mask covers `needed`.
    pub fn allows(&self, needed: Protections) -> bool {
        self.mask.contains(needed)
    }
}

/// Ownership asked of one or two owners: `Ok(true)` if either counts, else the first
/// did-not-count verdict, else `Ok(false)`.
fn owned_by_either(
    tag: ObjID,
    right: Right,
    first: &mut impl Ownership,
    second: Option<&mut dyn Ownership>,
) -> Result<bool, Verdict> {
    let a = first.owns(tag, right);
    if a == Ok(true) {
        return a;
    }
    let b = match second {
        Some(o) => o.owns(tag, right),
        None => Ok(false),
    };
    match (a, b) {
        (_, Ok(true)) => Ok(true),
        (Err(v), _) | (_, Err(v)) => Err(v),
        _ => Ok(false),
    }
}

/// The first tag the `readable` clauses refuse, as a read denial without the ownership probe:
/// `S_o ⊆ S_C` (secrecy first), then `I_C ⊆ I_o`.
pub fn readable(principal_read: &LabelRef<'_>, object: &LabelRef<'_>) -> Result<(), FlowDenial> {
    if let Some(tag) = tags_difference(object.secrecy(), principal_read.secrecy()).next() {
        return Err(FlowDenial::SecrecyRead { tag });
    }
    if let Some(tag) = tags_difference(principal_read.integrity(), object.integrity()).next() {
        return Err(FlowDenial::IntegrityRead { tag });
    }
    Ok(())
}

/// Whether the two write clauses hold with no ownership at all: `S_C ⊆ S_o ∧ I_o ⊆ I_C`.
fn writable_without_ownership(principal_write: &LabelRef<'_>, object: &LabelRef<'_>) -> bool {
    tags_subset(principal_write.secrecy(), object.secrecy())
        && tags_subset(object.integrity(), principal_write.integrity())
}

/// The two write clauses of `writable`, asking ownership tag by tag (ascending) and stopping at
/// the first that fails: `S_C − own⁻ ⊆ S_o`, then `I_o ⊆ I_C ∪ own⁺`, with `S_C, I_C` the
/// principal's `write` label. This is the whole check for a write that shows the writer nothing
/// of the destination: object creation (§4.1) and kernel copies (§6); against the empty label it
/// is §4.4's check for a write to public state.
pub fn check_write_clauses(
    principal: &PrincipalLabels<LabelRef<'_>>,
    object: &LabelRef<'_>,
    owner: &mut impl Ownership,
) -> Result<(), FlowDenial> {
    let w = &principal.write;
    for tag in tags_difference(w.secrecy(), object.secrecy()) {
        match owner.owns(tag, Right::Minus) {
            Ok(true) => {}
            Ok(false) => return Err(FlowDenial::SecrecyWrite { tag }),
            Err(why) => return Err(FlowDenial::Ownership { tag, why }),
        }
    }
    for tag in tags_difference(object.integrity(), w.integrity()) {
        match owner.owns(tag, Right::Plus) {
            Ok(true) => {}
            Ok(false) => return Err(FlowDenial::IntegrityWrite { tag }),
            Err(why) => return Err(FlowDenial::Ownership { tag, why }),
        }
    }
    Ok(())
}

/// The flow rule for `principal` and an object at `object` (§3.1).
///
/// `needs_write` says whether the access being decided needs `W`. If it does not, ownership is
/// not asked for the write clauses: `W` is in the mask if the clauses hold without ownership,
/// else [`FlowResult::write_unresolved`] is set. A refused read asks ownership for its first
/// offending tag only (to report `MustRaise` / `MustLower`).
pub fn flow(
    principal: &PrincipalLabels<LabelRef<'_>>,
    object: &LabelRef<'_>,
    needs_write: bool,
    owner: &mut impl Ownership,
) -> FlowResult {
    if object.is_empty() && principal.read.is_empty() && principal.write.is_empty() {
        return FlowResult::ALL;
    }
    if let Err(denial) = readable(&principal.read, object) {
        let denial = match denial {
            FlowDenial::SecrecyRead { tag } if owner.owns(tag, Right::Plus) == Ok(true) => {
                FlowDenial::MustRaise { tag }
            }
            FlowDenial::IntegrityRead { tag } if owner.owns(tag, Right::Minus) == Ok(true) => {
                FlowDenial::MustLower { tag }
            }
            other => other,
        };
        return FlowResult {
            mask: Protections::empty(),
            write_unresolved: false,
            denial: Some(denial),
        };
    }
    let read = Protections::READ | Protections::EXEC;
    if writable_without_ownership(&principal.write, object) {
        return FlowResult::ALL;
    }
    if !needs_write {
        return FlowResult {
            mask: read,
            write_unresolved: true,
            denial: None,
        };
    }
    match check_write_clauses(principal, object, owner) {
        Ok(()) => FlowResult::ALL,
        Err(denial) => FlowResult {
            mask: read,
            write_unresolved: false,
            denial: Some(denial),
        },
    }
}

/// Why a label change or a registration is refused (§1.4, §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelError {
    /// The new label's bytes do not decode.
    Malformed(crate::error::DecodeError),
    /// The change needs `tag`'s `right`, and the principal does not own it.
    NotOwned {
        /// The tag.
        tag: ObjID,
        /// The right needed.
        right: Right,
    },
    /// An ownership record for `tag`'s `right` was found but did not count.
    Ownership {
        /// The tag.
        tag: ObjID,
        /// The right needed.
        right: Right,
        /// Why the record did not count.
        why: Verdict,
    },
    /// The context's own bytes (its data label) would not flow to its principal at the new
    /// label: `tag` is the first offending tag.
    ContextUnreadable {
        /// The tag.
        tag: ObjID,
    },
    /// At registration, the context's bytes would not flow to the registering principal.
    RegistrarUnreadable {
        /// The tag.
        tag: ObjID,
    },
    /// The transitional label (`S ∪ S'` or `I ∪ I'`) would have more than
    /// [`crate::MAX_LABEL_TAGS`] tags: change in two steps.
    TooManyTags,
    /// A write to public state (§4.4) by a principal carrying secrecy `tag` it does not own
    /// `tag−` of.
    WouldLeak {
        /// The tag.
        tag: ObjID,
    },
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed label: {e}"),
            Self::NotOwned { tag, right } => {
                write!(f, "the change needs {tag}{right}, which the context does not own")
            }
            Self::Ownership { tag, right, why } => write!(
                f,
                "the ownership record for {tag}{right} did not count: {why:?}"
            ),
            Self::ContextUnreadable { tag } => write!(
                f,
                "the context's own bytes would not flow to it (tag {tag})"
            ),
            Self::RegistrarUnreadable { tag } => write!(
                f,
                "the context's bytes would not flow to the registering context (tag {tag})"
            ),
            Self::TooManyTags => f.write_str(
                "old and new label together have more than 32 tags in one half: change in two steps",
            ),
            Self::WouldLeak { tag } => write!(
                f,
                "the context carries secrecy tag {tag} and does not own {tag}−: a change to shared state would leak it"
            ),
        }
    }
}

impl core::error::Error for LabelError {}

fn need(
    tag: ObjID,
    right: Right,
    first: &mut impl Ownership,
    second: Option<&mut dyn Ownership>,
) -> Result<(), LabelError> {
    match owned_by_either(tag, right, first, second) {
        Ok(true) => Ok(()),
        Ok(false) => Err(LabelError::NotOwned { tag, right }),
        Err(why) => Err(LabelError::Ownership { tag, right, why }),
    }
}

fn flow_tag(d: FlowDenial) -> ObjID {
    d.tag().unwrap_or_default()
}

/// §4.1 step 2: whether principal `old` may change its label to `new`, with `ctx_data` the
/// label of the context object itself.
///
/// Checks, cheapest first: that the context's bytes still flow to the new principal
/// (`ContextUnreadable`), that the transitional label fits (`TooManyTags`), then ownership tag
/// by tag, ascending: `S' − S ⊆ own⁺`, `S − S' ⊆ own⁻`, `I' − I ⊆ own⁺`, `I − I' ⊆ own⁻`. Each
/// uses the restrictive side of `old` (its `write` label for the secrecy it sheds and the
/// integrity it gains, its `read` label otherwise).
pub fn check_relabel(
    old: &PrincipalLabels<LabelRef<'_>>,
    new: &LabelRef<'_>,
    ctx_data: &LabelRef<'_>,
    owner: &mut impl Ownership,
) -> Result<(), LabelError> {
    readable(new, ctx_data).map_err(|d| LabelError::ContextUnreadable { tag: flow_tag(d) })?;
    transitional(&old.write, new)?;
    transitional(&old.read, new)?;
    for tag in tags_difference(new.secrecy(), old.read.secrecy()) {
        need(tag, Right::Plus, owner, None)?;
    }
    for tag in tags_difference(old.write.secrecy(), new.secrecy()) {
        need(tag, Right::Minus, owner, None)?;
    }
    for tag in tags_difference(new.integrity(), old.write.integrity()) {
        need(tag, Right::Plus, owner, None)?;
    }
    for tag in tags_difference(old.read.integrity(), new.integrity()) {
        need(tag, Right::Minus, owner, None)?;
    }
    Ok(())
}

/// §4.2: the transitional row of a change from `old = (S, I)` to `new = (S', I')`:
/// `read = (S ∩ S', I ∪ I')`, `write = (S ∪ S', I ∩ I')`, at least as restrictive as both.
/// A union over 32 tags is [`LabelError::TooManyTags`].
pub fn transitional(
    old: &LabelRef<'_>,
    new: &LabelRef<'_>,
) -> Result<PrincipalLabels<Label>, LabelError> {
    let union = |a, b| Tags::union(a, b).map_err(|_| LabelError::TooManyTags);
    Ok(PrincipalLabels {
        read: Label::new(
            Tags::intersection(old.secrecy(), new.secrecy()),
            union(old.integrity(), new.integrity())?,
        ),
        write: Label::new(
            union(old.secrecy(), new.secrecy())?,
            Tags::intersection(old.integrity(), new.integrity()),
        ),
    })
}

/// Which decisions a label change from `old` to `new` may make unsafe (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RelabelClass {
    /// `S ⊄ S'` or `I' ⊄ I`: readable mappings must go.
    pub reads_unsafe: bool,
    /// `S' ⊄ S` or `I ⊄ I'`: writable mappings must be write-protected.
    pub writes_unsafe: bool,
}

/// Classifies a change from `old` to `new` (§4.2).
pub fn classify(old: &LabelRef<'_>, new: &LabelRef<'_>) -> RelabelClass {
    RelabelClass {
        reads_unsafe: !old.secrecy_subset_of(new) || !new.integrity_subset_of(old),
        writes_unsafe: !new.secrecy_subset_of(old) || !old.integrity_subset_of(new),
    }
}

/// §5.4: whether a thread may move from active context `a` to context `to` at `b`.
///
/// `(S_A − S_B) ⊆ own⁻(A) ∪ E⁻` and `(I_B − I_A) ⊆ own⁺(A) ∪ E⁺`, with `A`'s `write` label and
/// `B`'s `read` label (the restrictive side of each). `entry` is `B`'s ownership for an entry
/// through a code gate of `B`, [`NoOwnership`] for a switch by data access.
pub fn check_switch(
    to: ObjID,
    a: &PrincipalLabels<LabelRef<'_>>,
    b: &PrincipalLabels<LabelRef<'_>>,
    own_a: &mut impl Ownership,
    entry: &mut impl Ownership,
) -> Result<(), FlowDenial> {
    let deny = |tag: ObjID, r: Result<bool, Verdict>| match r {
        Ok(true) => Ok(()),
        Ok(false) => Err(FlowDenial::Switch { to, tag }),
        Err(why) => Err(FlowDenial::Ownership { tag, why }),
    };
    for tag in tags_difference(a.write.secrecy(), b.read.secrecy()) {
        deny(
            tag,
            owned_by_either(
                tag,
                Right::Minus,
                own_a,
                Some(&mut *entry as &mut dyn Ownership),
            ),
        )?;
    }
    for tag in tags_difference(b.read.integrity(), a.write.integrity()) {
        deny(
            tag,
            owned_by_either(
                tag,
                Right::Plus,
                own_a,
                Some(&mut *entry as &mut dyn Ownership),
            ),
        )?;
    }
    Ok(())
}

/// §1.4: whether registrar `r` may register a context whose section proposes `initial`, with
/// `ctx_data` the label of the context object.
///
/// Checks, cheapest first: the context's bytes flow to its principal (`ContextUnreadable`) and
/// to the registrar (`RegistrarUnreadable`, under `r`'s `read` label); then every new secrecy
/// tag (`S_C − S_R`) and new integrity tag (`I_C − I_R`) needs `+` owned by `r` (`own_r`) or by
/// the context (`own_c`).
pub fn check_registration(
    r: &PrincipalLabels<LabelRef<'_>>,
    initial: &LabelRef<'_>,
    ctx_data: &LabelRef<'_>,
    own_r: &mut impl Ownership,
    own_c: &mut impl Ownership,
) -> Result<(), LabelError> {
    readable(initial, ctx_data).map_err(|d| LabelError::ContextUnreadable { tag: flow_tag(d) })?;
    readable(&r.read, ctx_data)
        .map_err(|d| LabelError::RegistrarUnreadable { tag: flow_tag(d) })?;
    for tag in tags_difference(initial.secrecy(), r.read.secrecy()) {
        need(
            tag,
            Right::Plus,
            own_r,
            Some(&mut *own_c as &mut dyn Ownership),
        )?;
    }
    for tag in tags_difference(initial.integrity(), r.write.integrity()) {
        need(
            tag,
            Right::Plus,
            own_r,
            Some(&mut *own_c as &mut dyn Ownership),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::VerifyError;

    const T: ObjID = ObjID::new(0x10);
    const U: ObjID = ObjID::new(0x20);
    const E: ObjID = ObjID::new(0x30);

    fn l(s: &[ObjID], i: &[ObjID]) -> Label {
        Label::from_tags(s, i).unwrap()
    }

    /// Owns exactly the listed rights and counts every question.
    #[derive(Default)]
    struct Owns {
        rights: std::vec::Vec<(ObjID, Right)>,
        bad: Option<(ObjID, Verdict)>,
        asked: usize,
    }

    impl Ownership for Owns {
        fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
            self.asked += 1;
            if let Some((t, v)) = self.bad
                && t == tag
            {
                return Err(v);
            }
            Ok(self.rights.contains(&(tag, right)))
        }
    }

    #[test]
    fn empty_labels_allow_everything_and_ask_nothing() {
        let mut o = Owns::default();
        let p = PrincipalLabels::steady(LabelRef::EMPTY);
        assert_eq!(flow(&p, &LabelRef::EMPTY, true, &mut o), FlowResult::ALL);
        assert_eq!(o.asked, 0);
    }

    #[test]
    fn read_denials_name_the_smallest_tag_and_probe_once() {
        let obj = l(&[U, T], &[]);
        let p = PrincipalLabels::steady(LabelRef::EMPTY);
        let mut o = Owns::default();
        let r = flow(&p, &obj.as_ref(), false, &mut o);
        assert_eq!(r.denial, Some(FlowDenial::SecrecyRead { tag: T }));
        assert_eq!((r.mask, o.asked), (Protections::empty(), 1));
        let mut o = Owns {
            rights: [(T, Right::Plus)].into(),
            ..Default::default()
        };
        let r = flow(&p, &obj.as_ref(), false, &mut o);
        assert_eq!(r.denial, Some(FlowDenial::MustRaise { tag: T }));
        // Relaxed nothing: owning T+ does not make the object readable.
        assert!(!r.allows(Protections::READ));

        let high = l(&[], &[E]);
        let p = PrincipalLabels::steady(high.as_ref());
        let r = flow(&p, &LabelRef::EMPTY, false, &mut Owns::default());
        assert_eq!(r.denial, Some(FlowDenial::IntegrityRead { tag: E }));
        let mut o = Owns {
            rights: [(E, Right::Minus)].into(),
            ..Default::default()
        };
        let r = flow(&p, &LabelRef::EMPTY, false, &mut o);
        assert_eq!(r.denial, Some(FlowDenial::MustLower { tag: E }));
    }

    #[test]
    fn write_clauses_are_lazy_and_use_ownership() {
        let secret = l(&[T], &[]);
        let p = PrincipalLabels::steady(secret.as_ref());
        let mut o = Owns::default();
        let r = flow(&p, &LabelRef::EMPTY, false, &mut o);
        assert_eq!(r.mask, Protections::READ | Protections::EXEC);
        assert!(r.write_unresolved && r.denial.is_none());
        assert_eq!(o.asked, 0);
        let r = flow(&p, &LabelRef::EMPTY, true, &mut o);
        assert_eq!(r.denial, Some(FlowDenial::SecrecyWrite { tag: T }));
        assert!(!r.write_unresolved);
        let mut o = Owns {
            rights: [(T, Right::Minus)].into(),
            ..Default::default()
        };
        assert_eq!(flow(&p, &LabelRef::EMPTY, true, &mut o), FlowResult::ALL);
        let why = Verdict::Invalid(VerifyError::Revoked);
        let mut o = Owns {
            bad: Some((T, why)),
            ..Default::default()
        };
        let r = flow(&p, &LabelRef::EMPTY, true, &mut o);
        assert_eq!(r.denial, Some(FlowDenial::Ownership { tag: T, why }));

        // Endorsement: writing a {E} object from a context without E needs E+ (and reading it
        // is allowed: I_C = ∅ ⊆ I_o).
        let vetted = l(&[], &[E]);
        let p = PrincipalLabels::steady(LabelRef::EMPTY);
        let r = flow(&p, &vetted.as_ref(), true, &mut Owns::default());
        assert_eq!(r.denial, Some(FlowDenial::IntegrityWrite { tag: E }));
        let mut o = Owns {
            rights: [(E, Right::Plus)].into(),
            ..Default::default()
        };
        assert_eq!(flow(&p, &vetted.as_ref(), true, &mut o), FlowResult::ALL);
    }

    #[test]
    fn transitional_is_restrictive_and_classify_matches() {
        let old = l(&[T], &[E]);
        let new = l(&[U], &[]);
        let tr = transitional(&old.as_ref(), &new.as_ref()).unwrap();
        assert_eq!(tr.read, l(&[], &[E]));
        assert_eq!(tr.write, l(&[T, U], &[]));
        let c = classify(&old.as_ref(), &new.as_ref());
        assert!(c.reads_unsafe && c.writes_unsafe);
        let raise = classify(&LabelRef::EMPTY, &l(&[T], &[]).as_ref());
        assert_eq!(
            raise,
            RelabelClass {
                reads_unsafe: false,
                writes_unsafe: true
            }
        );
        assert_eq!(
            classify(&old.as_ref(), &old.as_ref()),
            RelabelClass::default()
        );
    }

    #[test]
    fn relabel_needs_ownership_and_a_readable_context() {
        let old = PrincipalLabels::steady(LabelRef::EMPTY);
        let raised = l(&[T], &[]);
        assert_eq!(
            check_relabel(
                &old,
                &raised.as_ref(),
                &LabelRef::EMPTY,
                &mut Owns::default()
            ),
            Err(LabelError::NotOwned {
                tag: T,
                right: Right::Plus
            })
        );
        let mut o = Owns {
            rights: [(T, Right::Plus)].into(),
            ..Default::default()
        };
        assert_eq!(
            check_relabel(&old, &raised.as_ref(), &LabelRef::EMPTY, &mut o),
            Ok(())
        );
        // The context object carries U: its bytes would not flow to a principal without U.
        let data = l(&[U], &[]);
        assert_eq!(
            check_relabel(&old, &raised.as_ref(), &data.as_ref(), &mut o),
            Err(LabelError::ContextUnreadable { tag: U })
        );
        let back = PrincipalLabels::steady(raised.as_ref());
        assert_eq!(
            check_relabel(&back, &LabelRef::EMPTY, &LabelRef::EMPTY, &mut o),
            Err(LabelError::NotOwned {
                tag: T,
                right: Right::Minus
            })
        );
    }

    #[test]
    fn switch_needs_declassification_by_a_or_the_gate() {
        let a_label = l(&[T], &[]);
        let a = PrincipalLabels::steady(a_label.as_ref());
        let b = PrincipalLabels::steady(LabelRef::EMPTY);
        let to = ObjID::new(0xb);
        assert_eq!(
            check_switch(to, &a, &b, &mut NoOwnership, &mut NoOwnership),
            Err(FlowDenial::Switch { to, tag: T })
        );
        let mut gate = Owns {
            rights: [(T, Right::Minus)].into(),
            ..Default::default()
        };
        assert_eq!(
            check_switch(to, &a, &b, &mut NoOwnership, &mut gate),
            Ok(())
        );
        // Raising by switching needs nothing.
        assert_eq!(
            check_switch(to, &b, &a, &mut NoOwnership, &mut NoOwnership),
            Ok(())
        );
    }

    #[test]
    fn registration_needs_plus_from_either_side() {
        let r = PrincipalLabels::steady(LabelRef::EMPTY);
        let init = l(&[T], &[E]);
        let mut by_c = Owns {
            rights: [(T, Right::Plus)].into(),
            ..Default::default()
        };
        let mut by_r = Owns {
            rights: [(E, Right::Plus)].into(),
            ..Default::default()
        };
        // A high-integrity principal's own bytes must have that integrity.
        assert_eq!(
            check_registration(&r, &init.as_ref(), &LabelRef::EMPTY, &mut by_r, &mut by_c),
            Err(LabelError::ContextUnreadable { tag: E })
        );
        let vetted = l(&[], &[E]);
        assert_eq!(
            check_registration(&r, &init.as_ref(), &vetted.as_ref(), &mut by_r, &mut by_c),
            Ok(())
        );
        assert_eq!(
            check_registration(
                &r,
                &init.as_ref(),
                &vetted.as_ref(),
                &mut NoOwnership,
                &mut by_c
            ),
            Err(LabelError::NotOwned {
                tag: E,
                right: Right::Plus
            })
        );
        let data = l(&[U], &[]);
        assert_eq!(
            check_registration(
                &r,
                &l(&[U], &[]).as_ref(),
                &data.as_ref(),
                &mut NoOwnership,
                &mut NoOwnership
            ),
            Err(LabelError::RegistrarUnreadable { tag: U })
        );
    }
}
