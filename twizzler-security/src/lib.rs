//! Capability security for Twizzler, as a `no_std` library.
//!
//! Twizzler programs map persistent objects and access them without the kernel; the kernel
//! decides, at the first page fault into an object, which protections to program into the MMU.
//! It decides from **signed capabilities** held in the faulting thread's **security
//! contexts**. This crate holds everything that decision needs and that every other part of the
//! system must agree on:
//!
//! - [`ObjID`] and [`Protections`], with `twizzler-abi`'s representation;
//! - scheme-tagged keys and signatures ([`SigningKey`], [`VerifyingKey`], [`Signature`]):
//!   Ed25519 (strict) and ECDSA P-256 (low-S);
//! - signed capabilities ([`Cap`]) and delegation chains ([`Del`]), with canonical, total
//!   encodings and domain-separated BLAKE3 or SHA-256 signed messages;
//! - [`Gate`]s with checked arithmetic, and [`Expiry`];
//! - the on-object security-context format: a zero-copy validating reader ([`SecCtx`]) and,
//!   with `alloc`, an editor ([`SecCtxEditor`]);
//! - the permission rule as a pure function ([`evaluate`]) returning [`PermsInfo`];
//! - information flow control (`docs/DIFC.md`): labels ([`Label`], their `TLBL` encoding),
//!   ownership records (capabilities with the `TAG` flag, [`Cap::mint_ownership`], looked up
//!   by [`owns`]), and the flow rule as pure functions ([`flow`], [`check_relabel`],
//!   [`check_switch`], …), joined to the permission rule by [`evaluate_labelled`].
//!
//! Features: `alloc` (the context editor), `std` (PEM import and export, implies `alloc`;
//! default), `serde`.
//!
//! # Example
//!
//! ```
//! use twizzler_capsec::*;
//! # struct Keys(std::collections::HashMap<ObjID, VerifyingKey>);
//! # impl Authority for Keys {
//! #     fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
//! #         self.0.get(&obj).ok_or(KeyLookupError::NoKuid(obj))
//! #     }
//! # }
//! # struct Rng(u64);
//! # impl rand_core::TryRng for Rng {
//! #     type Error = core::convert::Infallible;
//! #     fn try_next_u32(&mut self) -> Result<u32, Self::Error> { Ok(self.try_next_u64()? as u32) }
//! #     fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
//! #         self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
//! #         Ok(self.0)
//! #     }
//! #     fn try_fill_bytes(&mut self, d: &mut [u8]) -> Result<(), Self::Error> {
//! #         for b in d { *b = self.try_next_u64()? as u8; } Ok(())
//! #     }
//! # }
//! # impl rand_core::TryCryptoRng for Rng {}
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let mut rng = Rng(1); // use a real CSPRNG: this one is for the example only
//! let (object, context) = (ObjID::new(0x1000), ObjID::new(0x2000));
//!
//! // The object's owner signs a read-only capability for the context.
//! let object_key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let cap = Cap::mint(CapGrant::new(object, context, Protections::READ), &object_key)?;
//!
//! // Userspace writes it into the context object.
//! let mut editor = SecCtxEditor::new();
//! editor.add_cap(&cap);
//! let bytes = editor.encode()?;
//!
//! // The kernel, at a page fault, validates the bytes and evaluates the rule.
//! let ctx = SecCtx::parse(&bytes)?;
//! let keys = Keys([(object, object_key.verifying_key())].into());
//! let now = 1;
//! let read = evaluate(context, &ctx, object, Protections::empty(), &keys, Access::read(0x1000), now);
//! assert!(read.grants(AccessKind::Read.required()));
//! let write = evaluate(context, &ctx, object, Protections::empty(), &keys, Access::write(0x1000), now);
//! assert!(!write.grants(AccessKind::Write.required()));
//! # Ok(())
//! # }
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod cap;
pub mod codec;
pub mod ctx;
mod del;
mod error;
mod flow;
mod gate;
mod hash;
mod ids;
mod keys;
pub mod label;
#[cfg(feature = "std")]
mod pem;
mod perms;
mod record;
#[cfg(feature = "serde")]
mod serde_impls;
mod time;

pub use cap::{
    CAP_BODY_LEN, CAP_DOMAIN, CAP_LEN, CAP_MAGIC, CAP_VERSION, Cap, CapGrant, FLAG_TAG, OwnRights,
    OwnershipGrant, TAG_DOMAIN,
};
#[cfg(feature = "alloc")]
pub use ctx::{BuildError, SecCtxEditor};
pub use ctx::{
    CtxError, CtxFlags, CtxHeader, CtxMem, Entry, MAX_RECORD_LEN, Mask, SecCtx, Validated, WRITING,
};
pub use del::{
    DEL_DOMAIN, DEL_MAGIC, DEL_VERSION, Del, DelGrant, LINK_LEN, Link, MAX_CHAIN_DEPTH,
    MAX_DEL_LEN, del_len,
};
pub use error::{
    Amplification, DecodeError, DelegateError, GateError, KeyLookupError, ReservedField, SignError,
    VerifyError,
};
pub use flow::{
    FlowDenial, FlowResult, LabelError, NoOwnership, Ownership, PrincipalLabels, RelabelClass,
    Right, check_registration, check_relabel, check_switch, check_write_clauses, classify, flow,
    readable, transitional,
};
pub use gate::Gate;
pub use hash::{DIGEST_LEN, HashAlg, MessageHasher, RecordId};
pub use ids::{
    MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, ParseObjIdError, ParseProtectionsError, Protections,
};
pub use keys::{
    KEY_ENCODED_LEN, KeyBytes, MAX_KEY_LEN, MAX_SIG_LEN, SIG_ENCODED_LEN, SecretBytes, Signature,
    SigningKey, SigningScheme, VerifyingKey,
};
pub use label::{
    ALL_CONTEXTS, LABEL_HEADER_LEN, LABEL_MAGIC, LABEL_VERSION, Label, LabelBytes, LabelId,
    LabelRef, MAX_LABEL_LEN, MAX_LABEL_TAGS, Tags, label_len, tags_difference, tags_subset,
};
#[cfg(feature = "std")]
pub use pem::PemError;
pub use perms::{
    Access, AccessKind, CtxOwnership, Grant, LabelledPerms, OwnedBy, PermsInfo, RecordReport,
    Verdict, allowed_by_masks, evaluate, evaluate_explained, evaluate_labelled, owns,
    owns_explained,
};
pub use record::{Authority, Record, RecordKind, cap_check_id, signature_check_id};
pub use time::Expiry;
