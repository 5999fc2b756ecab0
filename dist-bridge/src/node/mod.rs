//! The node service: one node's [`Owner`](crate::owner::Owner) and object store behind gRPC (`tonic`), plus the
//! broadcast-revocation baseline between peers.
//!
//! [`Node::start`](super::Node::start) binds the listener, starts a new life of the controller
//! ([`VersionFile::open_and_bump`](crate::controller::VersionFile::open_and_bump): every token of an earlier life is dead from here on),
//! and serves the `dist_bridge.v1.Node` service (`proto/dist_bridge.proto`) until
//! [`RunningNode::shutdown`](super::RunningNode::shutdown): in-flight requests finish, then the version file's lock is
//! released, so a new life can start on the same files. Every connection is told to go away
//! (an HTTP/2 GOAWAY); those still open
//! [`NodeConfig::shutdown_deadline`](super::NodeConfig::shutdown_deadline) after the shutdown
//! began (an idle client, a stream it never ends) are cut, so no client can hold the node.
//! The node's clients send again a request that a GOAWAY refused unprocessed.
//!
//! # Example
//!
//! ```
//! use dist_bridge::*;
//! use dist_bridge::certs::DevCa;
//! use dist_bridge::client::Reach;
//! use secctx::{DbStore, ObjMeta, Object, ObjectStore, keypair};
//! use twizzler_capsec::{Cap, CapGrant, Expiry, ObjID, Protections, SigningKey, SigningScheme};
//! # use rand_core::SeedableRng;
//! # let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // use the OS RNG in real code
//! # let dir = std::env::temp_dir().join(format!("dist-bridge-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! // Certificates: a CA, node 1, and a client (`dist-bridge certs` does the same).
//! let ca = DevCa::generate().unwrap();
//! ca.save(dir.join("certs"), false).unwrap();
//! let node_tls = ca.issue(&PeerIdentity::Node(1), &[]).unwrap().save(dir.join("certs"), false).unwrap();
//! let app = PeerIdentity::Client("app".into());
//! let app_tls = ca.issue(&app, &[]).unwrap().save(dir.join("certs"), false).unwrap();
//!
//! // The node's store: a verifying key, an object it signs for, and the caller's context
//! // with its own key (which proves, at export, that the caller speaks for the context).
//! let store = DbStore::open(dir.join("store")).unwrap();
//! let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let ctx_key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let (kuid, object, ctx, ctx_kuid) = (ObjID::new(1), ObjID::new(2), ObjID::new(3), ObjID::new(4));
//! keypair::store_verifying_key(&store, kuid, &key.verifying_key()).unwrap();
//! keypair::store_verifying_key(&store, ctx_kuid, &ctx_key.verifying_key()).unwrap();
//! store.create(&Object { id: object, meta: ObjMeta::signed_by(kuid), data: b"hello".to_vec() }).unwrap();
//! store.create(&Object { id: ctx, meta: ObjMeta::signed_by(ctx_kuid), data: Vec::new() }).unwrap();
//! let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
//!
//! tokio::runtime::Runtime::new().unwrap().block_on(async {
//!     let mut config = NodeConfig::new(1, dir.join("store"), dir.join("controller.version"));
//!     config.transport = Some(Transport::Tls(node_tls)); // mutual TLS
//!     let node = Node::start(config).await.unwrap(); // listens on 127.0.0.1:<any port>
//!     let tls = app_tls.load().unwrap();
//!     let client = NodeClient::connect(node.addr(), 1, Reach::Tls(&tls)).await.unwrap();
//!
//!     let scope = Scope::new(Rights::READ | Rights::REVOKE, ByteRange::WHOLE, Expiry::NEVER);
//!     let token = client.export(&cap, ctx, &ctx_key, scope).await.unwrap();
//!     assert_eq!(client.read(&token, 0, 5).await.unwrap(), b"hello");
//!
//!     client.revoke(&token).await.unwrap();
//!     let refused = client.read(&token, 0, 5).await.unwrap_err();
//!     // A client (not an operator) is told only that it was refused; the node's log (and
//!     // Status, for operators) says why: revoked.
//!     assert_eq!(refused.kind(), Some(ErrorKind::Denied));
//!     node.shutdown().await.unwrap();
//! });
//! # let _ = std::fs::remove_dir_all(&dir);
//! ```
//!
//! # Requests
//!
//! | RPC | what the node does |
//! |---|---|
//! | `Export` | decodes the capability, looks up the object's `kuid` key in the store ([`StoreKeys`](crate::keys::StoreKeys)), [`Owner::export`](crate::owner::Owner::export) |
//! | `Invoke` | [`Owner::check_bytes`](crate::owner::Owner::check_bytes), then reads or writes the object's bytes in the store |
//! | `Revoke` | [`Owner::check_revoke`](crate::owner::Owner::check_revoke), then [`Owner::revoke`](crate::owner::Owner::revoke) under the object's gate |
//! | `Renew` / `DeriveGuard` | [`Owner::renew`](crate::owner::Owner::renew) / [`Owner::export_from`](crate::owner::Owner::export_from) |
//! | `Status` | controller, [`TableStats`](crate::table::TableStats), RPC counters, baseline counters |
//! | `PollUpgrades` | the [`UpgradeNotice`](crate::owner::UpgradeNotice)s published so far (bounded buffer) |
//! | `BroadcastIssue` / `BroadcastRevoke` / `BroadcastCheck` / `Broadcast` | the baseline ([`BroadcastNode`](crate::broadcast::BroadcastNode)) |
//!
//! Refusals are gRPC statuses as described in [`crate::wire`].
//!
//! The node also serves the standard gRPC health service (`grpc.health.v1.Health`, from
//! `tonic-health`): `dist_bridge.v1.Node` (and the server, `""`) report `SERVING` from start
//! until shutdown begins, then `NOT_SERVING`.
//!
//! # Invocation semantics
//!
//! - **Read** `len` bytes at `offset`: bytes past the object's stored end read as zeros (an
//!   object is a sparse space of up to 1 GiB; only its prefix is stored).
//! - **Write** `data` at `offset`: one store transaction that writes only the pages the range
//!   touches ([`secctx::ObjectStore::write_at`]). A write past the stored end **extends** the
//!   object, zero-filling any gap; it never reaches past the token's range, which the check
//!   has already confined (and which lies inside 1 GiB).
//! - At most [`NodeConfig::max_io_bytes`](super::NodeConfig::max_io_bytes) per invocation, and writes grow an object to at
//!   most [`NodeConfig::max_object_bytes`](super::NodeConfig::max_object_bytes) ([`ErrorKind::ObjectTooLarge`](crate::wire::ErrorKind::ObjectTooLarge) beyond).
//!
//! # Revocation is ordered after every invocation it lets through
//!
//! An invocation holds its object's *gate* shared from before its check until its read or
//! write is done (also when the caller goes away mid-request); a revocation takes the gate of
//! the object whose guards it revokes exclusively around
//! [`Owner::revoke`](crate::owner::Owner::revoke). So when `Revoke` returns, every invocation
//! that was accepted before it has completed its effect, and every later one is refused; and a
//! revocation waits only for the invocations in flight on its own object. The gate is only
//! for revocations that will happen: the token is checked
//! ([`Owner::check_revoke`](crate::owner::Owner::check_revoke), its tag first) before the
//! gate is taken, so a token the owner did not issue (which could name any object) is
//! refused at once and holds up no invocation.
//!
//! # Messages
//!
//! Revocation is one request and one reply, between the holder and the owner; the owner
//! sends nothing to anybody ([`RpcCounters`](crate::client::RpcCounters) shows it). Only the
//! baseline's `BroadcastRevoke` makes the node send requests: one `Broadcast` to each of its
//! `N - 1` peers, whose replies carry the acknowledgements.
//!
//! # Background
//!
//! A maintenance task runs every [`NodeConfig::maintenance_interval`](super::NodeConfig::maintenance_interval): it publishes the
//! upgrade notices of range upgrades ([`Owner::drain_upgrades`](crate::owner::Owner::drain_upgrades)) for `PollUpgrades`, frees
//! expired guards ([`Owner::sweep_expired`](crate::owner::Owner::sweep_expired)), and applies the store's revocation list: the
//! guards exported from a capability revoked there, and the guards whose capability a `kuid`
//! key revoked there verified. It records the list in the owner first
//! ([`Owner::note_store_revocations`](crate::owner::Owner::note_store_revocations)), under
//! the lock exports create guards under, so an `Export` that read the list before the
//! revocation is refused from then on; then it revokes the guards already made, each under
//! its object's gate
//! ([`Owner::revoke_store_revoked`](crate::owner::Owner::revoke_store_revoked)). Once a tick
//! has seen a revocation, no guard from that record or key exists or can be created.
//!
//! # The renew window
//!
//! When the guard table opens a version range it *upgrades* the live guards of the range
//! after it (see [`crate::table`]): their tokens are then refused as `upgraded` (the one
//! refusal a holder sees in full), and `Renew` exchanges such a token for one at the new
//! version. That exchange works until the range of the old version is opened again, which is
//! the **next** range opening: after `range_size = max_version / ranges` more epoch
//! increments. After it the old token is dead for good (`Renew` answers `not renewable`).
//!
//! - **In operations.** Each epoch increment is one flush of the batch of freed entries:
//!   normally `batch_size` guard releases (revocations with their descendants, expired guards
//!   swept by the maintenance task, guards revoked from the store's list). But an `Export`
//!   or `DeriveGuard` that finds every entry live while some are pending flushes the partial
//!   batch at once, however small, and so can end another holder's window early. The window
//!   is therefore between `range_size` releases (a table that is always full) and
//!   `range_size × batch_size` releases.
//! - **In time**: that many releases at the node's rate of releases. With the defaults
//!   (`max_version` the full 64-bit space, 16 ranges, batches of 64) `range_size` is about
//!   1.15 × 10¹⁸ epochs: the window never closes in practice. With `max_version = 1000000`
//!   and 16 ranges it is 62,500 epochs: 4 million releases with full batches, but only
//!   62,500 if every export finds the table full; at 1,000 releases a second, between about
//!   a minute and about an hour.
//! - **To lengthen it**, an operator configures in `[guard_table]`: a larger `max_version`
//!   (or none, for the full space), fewer `ranges` (at least 2; each is `max_version / ranges`
//!   versions), a larger `batch_size`, and a `capacity` large enough that the table is not
//!   full (so exports never force partial batches). Holders renew sooner when they act on
//!   `upgraded` at once, or follow `PollUpgrades` (published every `maintenance_interval`).
//!
//! # Security
//!
//! - **Mutual TLS** ([`crate::tls`]): every client and peer presents a certificate from the
//!   cluster CA, and the node presents one naming its node id; who a caller is comes from its
//!   certificate ([`crate::identity`]), never from its address or from a field of its
//!   message. Plaintext exists only as the explicit, loudly logged
//!   [`Transport::Insecure`](crate::tls::Transport::Insecure), for tests, where every caller
//!   is anonymous.
//! - **Revoked certificates** ([`crate::revoked_certs`],
//!   [`NodeConfig::revoked_certs`](super::NodeConfig::revoked_certs)): a listed certificate's
//!   handshakes fail, and every open connection using it, served or to a peer, ends when
//!   the node reads the list that names it (the maintenance tick after the file changes, or
//!   [`RunningNode::reload_revoked_certs`](super::RunningNode::reload_revoked_certs)).
//! - **Export** needs a proof that the caller speaks for the capability's context: a
//!   signature by the context object's `kuid` key over the request, the node id, a time and
//!   a nonce ([`crate::export_proof`]). No address is trusted.
//! - **No oracles**: the owner checks a token's tag before anything that tells live, revoked
//!   or reused guards apart, and every caller but an operator gets one
//!   [`ErrorKind::Denied`](crate::wire::ErrorKind::Denied) for every failed check
//!   ([`crate::wire::public_view`]). The reason goes to the log (`refused` lines, with the
//!   caller's identity) and to operators, in their own refusals and in `Status`.
//! - **Roles**: `Status`, `PollUpgrades` (which names upgraded guards) and the baseline's
//!   `BroadcastIssue`/`BroadcastRevoke` are for operators (`PollUpgrades` also for nodes);
//!   `Broadcast` only from the node its `from` names.
//! - **Bounds** on everything a client controls: see [`super::NodeConfig`]
//!   (connections, streams per connection, handshake, request and idle timeouts, message
//!   size, derived guards per exported guard, export nonces, shutdown deadline).
//!
//! Metrics ([`NodeConfig::metrics_listen`](super::NodeConfig::metrics_listen)) are plain HTTP
//! for a management network.
//!
//! # Modules
//!
//! `config` (what a node is told), `lifecycle` (starting, serving, stopping), `shared` (the
//! state every request and the maintenance task share, and that task), `store_revocations`
//! (the task's application of the store's revocation list), `counters` (RPC
//! counters, refusals and upgrade notices), `metrics` (Prometheus), `caller` (who sent a
//! request), `gates` (per-object revocation gates), `serve` (the HTTP/2 server: accepting,
//! TLS, and each connection's life: idle, age and shutdown limits, each ended by a GOAWAY),
//! `conn_service` (what each request passes: its connection recorded, revoked certificates
//! refused with `cert_check`, the request time limit, request bytes charged to `pending`),
//! `pending` (the node-wide bound on bytes held for request messages still arriving),
//! `busy` (which connections have requests in flight), `storage` (an invocation's ranged read or write) and `service` (the
//! RPCs).

mod busy;
mod caller;
mod cert_check;
mod config;
mod conn_service;
mod counters;
mod gates;
mod lifecycle;
mod metrics;
mod pending;
mod serve;
mod service;
mod shared;
mod storage;
mod store_revocations;

pub use config::{MAX_DURATION, MAX_IO_LIMIT, MAX_MESSAGE_LIMIT, NodeConfig, Peer};
pub use lifecycle::{Node, RunningNode, ServeError, ShutdownHandle, StartError};
