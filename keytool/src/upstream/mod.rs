//! Upstream Twizzler's capabilities (its `twizzler-security` crate, at commit c09e6e38), for
//! `keytool convert-upstream-cap`.
//!
//! Upstream keeps a capability inside a context object whose layout is whatever rustc chose
//! for its structs (neither `SecCtxBase` nor `Cap` is `repr(C)`), so no outside reader can
//! parse those bytes soundly. What upstream does fix is the message it signs. An adopter writes
//! each capability's fields in a neutral text form ([`form`]); [`convert`] rebuilds upstream's
//! signed message from them, checks upstream's signature, and maps the fields onto our
//! capability one to one, or refuses.

pub(crate) mod convert;
pub(crate) mod form;
