//! The page-fault decision engine of Twizzler's capability security.
//!
//! Twizzler programs map persistent objects and access them without the kernel; the kernel
//! steps in at the first page fault into an object and decides, from the signed capabilities
//! and delegations in the faulting thread's security contexts, which protections to program
//! into the MMU. This crate is that decision, for any kernel:
//!
//! - [`Host`]: what the kernel provides: context bytes lent for a scope ([`CtxBytes`], never
//!   a reference into user-writable memory), verifying keys lent for a scope, other objects'
//!   `kuid`, a monotonic clock, and unmapping (per context or per object);
//! - [`SecCtxMgr`]: a thread's active and inactive contexts, after Twizzler's own
//!   (`lookup`, `check_active_access`, `search_access`, `switch_context`, `attach`, `detach`,
//!   `new_kernel`, `Clone`), honouring `UNDETACHABLE`;
//! - [`Engine::decide`]: a [`Fault`] (which carries the object's default protections, and its
//!   `kuid` too unless [`Fault::lazy`] leaves that to a miss, so a cached decision calls
//!   nothing in the host but its clock) becomes [`Decision::Map`] with
//!   protections the rule grants, never more: at least what the access needs, and what the
//!   records verified so far provide (a first fault verifies only what the access needs, so a
//!   later access that needs more faults again); data gates whole pages only; code gates as entry points
//!   when a fetch switches contexts) or [`Decision::Violation`] with the reason;
//! - [`VerifyCache`]: verified decisions per (context, object), stamped with the engine's
//!   epoch, the object's `kuid` and default protections and the records' earliest expiry, so a
//!   hit costs a hash and a few loads and compares, with no lock (seqlocked sets); and
//!   [`RecordMemo`], the signature checks
//!   that succeeded, so a record still present after a context edit is not verified again;
//! - revocation and invalidation ([`Engine::revoke_key`], [`Engine::revoke_record`], after the
//!   host recorded the revocation in its own sets, which may hold millions;
//!   [`Engine::invalidate_ctx`], [`Engine::invalidate_key`], [`Engine::expire`] with
//!   [`Engine::next_deadline`] for the timer), each unmapping through the host, after the
//!   engine's locks are released, what it takes away.
//!
//! The module `conformance` (feature `conformance`) is the suite of checks every host runs.
//!
//! The engine is `no_std`, heap-free and `const`-constructible, and all zero bytes when new: a
//! kernel keeps it in a `static` in `.bss`. [`SecCtxMgr`] keeps its inactive contexts on the
//! heap (`alloc`). The integration guide for a kernel is the crate's `README.md`.
//!
//! # Example
//!
//! ```
//! use std::collections::HashMap;
//! use kernel_hooks::*;
//! use twizzler_capsec::*;
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
//! # let mut rng = Rng(7); // use a real CSPRNG: this one is for the example only
//!
//! /// A toy kernel: objects, context bytes and keys in maps.
//! struct Kernel {
//!     objects: HashMap<ObjID, ObjectInfo>,
//!     contexts: HashMap<ObjID, Vec<u8>>,
//!     keys: HashMap<ObjID, VerifyingKey>,
//! }
//! impl Host for Kernel {
//!     fn object(&self, id: ObjID) -> Option<ObjectInfo> { self.objects.get(&id).copied() }
//!     fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
//!         // Private memory here; a kernel lends shared memory with `CtxBytes::shared`.
//!         self.contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
//!     }
//!     fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
//!         self.keys.get(&kuid).map(f)
//!     }
//!     // Revocation sets are the kernel's (any size); this toy revokes nothing.
//!     fn key_revoked(&self, _kuid: ObjID) -> bool { false }
//!     fn record_revoked(&self, _id: &RecordId) -> bool { false }
//!     fn monotonic_ns(&self) -> u64 { 1 }
//!     fn unmap(&self, _what: Unmap) {}
//! }
//!
//! let (file, key_obj, ctx) = (ObjID::new(0x10), ObjID::new(0x11), ObjID::new(0x20));
//! let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let cap = Cap::mint(CapGrant::new(file, ctx, Protections::READ), &key)?;
//! let mut editor = SecCtxEditor::new();
//! editor.add_cap(&cap);
//!
//! let info = ObjectInfo::new(Some(key_obj), Protections::empty());
//! let engine = Engine::new(Kernel {
//!     objects: [(file, info)].into(),
//!     contexts: [(ctx, editor.encode()?)].into(),
//!     keys: [(key_obj, key.verifying_key())].into(),
//! });
//! let thread = SecCtxMgr::new(ctx);
//!
//! // The fault handler holds the object, so the fault carries its metadata.
//! let read = Fault::new(file, info, 0x1000, AccessKind::Read);
//! assert!(matches!(engine.decide(&thread, &read), Decision::Map { prots, .. } if prots == Protections::READ));
//! // The second fault is served from the cache, without verifying the signature again.
//! engine.decide(&thread, &read);
//! assert_eq!((engine.stats().hits, engine.stats().verifies), (1, 1));
//!
//! let write = Fault { kind: AccessKind::Write, ..read };
//! assert!(matches!(engine.decide(&thread, &write), Decision::Violation(Violation::Denied { .. })));
//! # Ok(())
//! # }
//! ```

#![no_std]
#![warn(missing_docs)]
// `unsafe` is denied everywhere but one constructor, `CtxBytes::shared`, which turns a
// kernel's pointer to shared memory into atomics (its SAFETY comment says why that is sound).
#![deny(unsafe_code)]

extern crate alloc;

// Built with `--cfg loom` (see `loom/tests/loom_cache.rs`), the crate is only its lock-free
// primitives, over loom's atomics: the engine, which must be `const`-constructible, is not.
mod seq;
pub mod seqset;
mod sync;

#[cfg(not(loom))]
mod authority;
#[cfg(not(loom))]
pub mod cache;
#[cfg(all(feature = "conformance", not(loom)))]
pub mod conformance;
#[cfg(not(loom))]
mod ctx_bytes;
#[cfg(not(loom))]
mod engine;
#[cfg(not(loom))]
mod fault;
#[cfg(not(loom))]
mod host;
#[cfg(not(loom))]
pub mod memo;
#[cfg(not(loom))]
mod mgr;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
mod ticket;

#[cfg(not(loom))]
pub use cache::{ObjectPerms, VerifyCache};
#[cfg(not(loom))]
pub use ctx_bytes::CtxBytes;
#[cfg(not(loom))]
pub use engine::{Engine, INVALIDATION_LIST, Invalidation, MAX_VERIFICATIONS_PER_FAULT};
#[cfg(not(loom))]
pub use fault::{Decision, DenyCause, Fault, KuidAt, Violation};
#[cfg(not(loom))]
pub use host::{Host, ObjectInfo, Unmap, UnmapGranularity};
#[cfg(not(loom))]
pub use memo::RecordMemo;
#[cfg(not(loom))]
pub use mgr::{AttachError, DetachError, KERNEL_SCTX, SecCtxMgr, SwitchResult};
#[cfg(not(loom))]
pub use stats::Stats;
#[cfg(not(loom))]
pub use ticket::MapTicket;
