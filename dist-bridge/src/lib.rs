//! Owner-hosted, versioned, revocable guards that carry signed capabilities across machines.
//!
//! This is the transport-independent core of distribution, after the cloud-scale distributed
//! capabilities paper, adapted to Twizzler's signed capabilities. A node service (gRPC) wraps
//! it; nothing here does I/O except [`VersionFile`].
//!
//! - A node runs a **controller** named [`ControllerId`] `(node, version)`; the version is
//!   bumped and fsynced at every start ([`VersionFile::open_and_bump`]), so a restart revokes
//!   everything the node issued before.
//! - The owner of an object keeps a bounded **guard table** ([`table`]) of versioned entries,
//!   reused in batches, with version-range upgrade when versions run low.
//! - [`Owner::export`] turns a signed capability for a local object (checked against the
//!   object's `kuid` key) into a guard and a self-contained [`GuardedToken`] ([`token`]).
//! - A holder **attenuates** a token offline ([`GuardedToken::attenuate`]): fewer rights, a
//!   narrower byte range, an earlier expiry; the chained keyed-BLAKE3 tag ([`crypto`]) lets
//!   anyone add a caveat and nobody remove one.
//! - [`Owner::check`] decides an invocation at the owner only: controller version, guard
//!   version, the tag chain, rights and range.
//! - [`Owner::revoke`] is one round trip to the owner and revokes the guard's whole subtree
//!   in the guard derivation tree ([`Owner::export_from`] makes child guards).
//! - [`broadcast`] is the baseline the paper compares against: broadcast-based revocation.
//!
//! Every type that crosses the wire has a canonical byte encoding with total decoding
//! ([`GuardedToken`], [`ControllerId`], [`UpgradeNotice`], [`BroadcastMessage`]); every error is
//! a typed enum with a message; [`Owner`] and [`BroadcastNode`] are `Send + Sync` and hold no
//! global state.
//!
//! # For the node service
//!
//! At start: [`VersionFile::open_and_bump`] (keep the returned value alive while serving), then
//! [`Owner::new`] with its [`ControllerId`] and [`NodeSecret::generate`]. Then, per request:
//! [`Owner::export`] for callers who proved they speak for the capability's context (with [`StoreKeys`] over the node's store);
//! [`Owner::check_bytes`] for remote invocations; [`Owner::revoke`], [`Owner::export_from`]
//! and [`Owner::renew`] for holders; [`GuardedToken::decode`] / [`GuardedToken::encode`] at
//! the wire. In the background: [`Owner::drain_upgrades`] (push the [`UpgradeNotice`]s to the
//! holders, who call renew), [`Owner::sweep_expired`], and, when capabilities or keys are
//! revoked in the store, [`Owner::note_store_revocations`] then
//! [`Owner::revoke_store_revoked`]. Tokens are bearer tokens: carry them over
//! authenticated, encrypted channels.
//!
//! That service is [`node`]: [`Node::start`] serves one node's owner and `secctx` object store
//! over gRPC (`tonic`, `proto/dist_bridge.proto`, generated in [`pb`]); [`client`] is the
//! typed client library ([`NodeClient`], [`Cluster`]); [`wire`] maps core errors to gRPC
//! statuses and back ([`ErrorKind`]), and tells callers who are not operators only
//! [`wire::public_view`]; [`config`] is the `dist-bridge` binary's configuration file. At the
//! network boundary: [`tls`] (mutual TLS material and configurations), [`identity`] (who a
//! certificate names), [`certs`] (a development CA), [`revoked_certs`] (certificates withdrawn
//! before they expire) and [`export_proof`] (a caller proves the context it exports for).
//!
//! # Example
//!
//! ```
//! use dist_bridge::*;
//! use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};
//! # use rand_core::SeedableRng;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // use the OS RNG in real code
//!
//! // Node 1 owns an object; its key signs a read-write capability for context `ctx`.
//! let (object, ctx) = (ObjID::new(0x1000), ObjID::new(0x2000));
//! let object_key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let cap = Cap::mint(
//!     CapGrant::new(object, ctx, Protections::READ | Protections::WRITE),
//!     &object_key,
//! )?;
//! let keys = MapKeys([(object, object_key.verifying_key())].into());
//!
//! // The owner (in a real node: the id from `VersionFile::open_and_bump`).
//! let owner = Owner::new(
//!     ControllerId::new(1, 1),
//!     NodeSecret::generate()?,
//!     GuardTableConfig::default(),
//! )?;
//! let now = 1_000;
//!
//! // Export: the capability becomes a guard and a token for remote use.
//! let request = ExportRequest::new(ctx, Rights::all(), ByteRange::WHOLE);
//! let token = owner.export(&cap, &keys, &request, now)?;
//!
//! // A holder attenuates it offline: read-only, first page only; then sends the bytes on.
//! let page = ByteRange::new(0, 4096)?;
//! let weak = token.with_rights(Rights::READ)?.with_range(page)?;
//! let wire = weak.encode();
//!
//! // The owner checks invocations.
//! assert!(owner.check_bytes(&wire, Op::Read, 0, 512, now).is_ok());
//! assert!(matches!(
//!     owner.check_bytes(&wire, Op::Write, 0, 512, now),
//!     Err(InvokeError::RightsExceeded { .. })
//! ));
//! assert!(matches!(
//!     owner.check_bytes(&wire, Op::Read, 4096, 1, now),
//!     Err(InvokeError::OutOfRange { .. })
//! ));
//!
//! // The holder of the original token revokes: every derived token is refused.
//! owner.revoke(&token, now)?;
//! assert!(matches!(
//!     owner.check_bytes(&wire, Op::Read, 0, 512, now),
//!     Err(InvokeError::Revoked { .. })
//! ));
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod broadcast;
pub mod certs;
pub mod client;
pub mod config;
mod connector;
pub mod controller;
pub mod crypto;
pub mod difc;
pub mod export_proof;
pub mod identity;
pub mod keys;
pub mod node;
pub mod owner;
mod resend;
pub mod revoked_certs;
pub mod rights;
pub mod table;
pub mod tls;
pub mod token;
pub mod wire;

/// Nanoseconds since the Unix epoch (0 for a clock before it): the time base of expiries and
/// export proofs.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The generated gRPC messages and service (`proto/dist_bridge.proto`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("dist_bridge.v1");
}

pub use broadcast::{BroadcastMessage, BroadcastNode, CapName, MessageCounts, Outgoing};
pub use client::{ClientError, Cluster, NodeClient, NodeStatus};
pub use controller::{ControllerId, VersionFile, VersionFileError};
pub use crypto::{NodeSecret, SecretError};
pub use identity::PeerIdentity;
pub use keys::{AuthorityKeys, KeyLookup, KeySourceError, KuidKey, MapKeys, StoreKeys};
pub use node::{Node, NodeConfig, RunningNode, ShutdownHandle, StartError};
pub use owner::{
    ExportError, ExportRequest, Grant, InvokeError, NoticeDecodeError, Owner, RevokeReport,
    UpgradeNotice,
};
pub use rights::{ByteRange, Op, RangeError, Rights};
pub use table::{ConfigError, GuardTableConfig, TableStats, VersionChange};
pub use tls::{TlsFiles, Transport};
pub use token::{
    AttenuateError, GuardRef, GuardedToken, MAX_CAVEATS, Scope, TokenBody, TokenDecodeError,
    Widening,
};
pub use wire::ErrorKind;
