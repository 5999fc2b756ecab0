//! The RPCs of the `dist_bridge.v1.Node` service.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::task::JoinSet;
use tonic::{Code, Request, Response, Status};
use tracing::{info, warn};
use twizzler_capsec::{Cap, Signature};

use crate::broadcast::BroadcastMessage;
use crate::export_proof::{ExportClaim, ExportProof, NONCE_LEN, ProofError, Signer};
use crate::keys::{KeyLookup, StoreKeys};
use crate::owner::ExportRequest;
use crate::pb;
use crate::pb::node_server::Node as NodeRpc;
use crate::rights::Op;
use crate::table::TableStats;
use crate::token::GuardedToken;
use crate::wire::{self, ErrorKind};

use super::caller::Caller;
use super::counters::{LogLine, REFUSAL_LINES_PER_SECOND, Rpc};
use super::gates;
use super::shared::{Shared, now_ns};
use super::storage::{read_bytes, write_bytes};

/// Reads up to this many bytes (16 pages) run on the async worker; larger ones on the
/// blocking pool.
const INLINE_READ_BYTES: u64 = 64 << 10;

#[derive(Debug, Clone)]
pub(super) struct Service {
    pub(super) shared: Arc<Shared>,
}

pub(super) fn internal(what: impl fmt::Display) -> Status {
    wire::refusal(Code::Internal, ErrorKind::Internal, what)
}

pub(super) fn decode_token(bytes: &[u8]) -> Result<GuardedToken, Status> {
    GuardedToken::decode(bytes).map_err(|e| wire::invoke_status(&e.into()))
}

fn not_allowed(what: impl fmt::Display) -> Status {
    wire::refusal(Code::PermissionDenied, ErrorKind::NotAllowed, what)
}

/// A refused export proof as a status.
fn proof_status(e: &ProofError) -> Status {
    match e {
        ProofError::Busy => wire::refusal(Code::ResourceExhausted, ErrorKind::Busy, e),
        _ => wire::refusal(Code::Unauthenticated, ErrorKind::BadProof, e),
    }
}

/// The proof of an export request, parsed.
fn proof_from_pb(p: Option<pb::ExportProof>) -> Result<ExportProof, ProofError> {
    let p = p.ok_or(ProofError::Missing("the request carries none"))?;
    let nonce: [u8; NONCE_LEN] = p
        .nonce
        .as_slice()
        .try_into()
        .map_err(|_| ProofError::Missing("the nonce is not 16 bytes"))?;
    let signature = Signature::decode(&p.signature)
        .map_err(|_| ProofError::Missing("the signature does not decode"))?;
    Ok(ExportProof {
        time: p.time,
        nonce,
        signature,
    })
}

impl Service {
    /// An invocation of `op`, checked and done; the refusal in detail.
    async fn invoke_op(
        &self,
        op: Op,
        r: pb::InvokeRequest,
        caller: &Caller,
        arrived: Option<Instant>,
    ) -> Result<Vec<u8>, Status> {
        let sh = &self.shared;
        let data = r.data;
        match op {
            Op::Read if !data.is_empty() => {
                return Err(wire::bad_request("a read carries no data"));
            }
            Op::Write if data.len() as u64 != r.len => {
                return Err(wire::bad_request(format!(
                    "write of {} bytes says len {}",
                    data.len(),
                    r.len
                )));
            }
            _ => {}
        }
        if r.len > sh.max_io_bytes {
            return Err(wire::bad_request(format!(
                "{} bytes requested; this node moves at most {} per invocation",
                r.len, sh.max_io_bytes
            )));
        }
        // The gate of the token's object, held from before the check until the effect is
        // done, even if this handler is cancelled: the guard moves into the blocking task.
        let token = decode_token(&r.token)?;
        let gate = sh.gates.of(token.object()).read_owned().await;
        // Once the store has labels, every invocation is decided again under the flow rule,
        // with the context's current label and ownership (`docs/DIFC.md` §5.9): a format-2
        // token names its context, a format-1 one (exported before the store had labels) is
        // decided for the context its guard was exported for.
        let labelled =
            token.labels().is_some() || sh.labels_seen.load(std::sync::atomic::Ordering::Acquire);
        let grant = if labelled {
            let labels = sh.labels.labels().map_err(|e| wire::store_status(&e))?;
            sh.owner.check_labelled(
                &token,
                op,
                r.offset,
                r.len,
                now_ns(),
                &labels,
                &sh.difc,
                caller.node_id(),
            )
        } else {
            sh.owner.check(&token, op, r.offset, r.len, now_ns())
        }
        .map_err(|e| wire::invoke_status(&e))?;
        // A small read is served here, on the async worker, from the store's kept read
        // snapshot (`SnapshotReader`: one header read while nothing was committed, a fresh
        // transaction after any commit, so the read sees every commit that completed before
        // it). The blocking pool's hand-off cost more than the read (0.51x the bare echo
        // service's rate at 64 in flight), and so did a read transaction per read in redb's
        // multi-writer mode (its header lock). Larger reads and every write (which fsyncs) go
        // to the blocking pool. A request the connection layer stamped with its arrival skips
        // the header read when another read checked it since (several requests served in one
        // go share one check).
        if op == Op::Read && r.len <= INLINE_READ_BYTES {
            let bytes = match arrived {
                Some(at) => sh
                    .reader
                    .read_at_arrived(at, grant.object, grant.offset, grant.len),
                None => sh.reader.read_at(grant.object, grant.offset, grant.len),
            }
            .map_err(|e| wire::store_status(&e));
            drop(gate);
            return bytes;
        }
        let store = sh.store.clone();
        let max_object = sh.max_object_bytes;
        tokio::task::spawn_blocking(move || {
            let result = match op {
                Op::Read => read_bytes(&store, &grant),
                Op::Write => write_bytes(&store, &grant, &data, max_object).map(|()| Vec::new()),
            };
            drop(gate);
            result
        })
        .await
        .map_err(internal)?
    }

    /// Refuses the caller of `rpc` unless `allowed`; `who` says who may call it.
    fn only(
        &self,
        caller: &Caller,
        rpc: &'static str,
        allowed: bool,
        who: &str,
    ) -> Result<(), Status> {
        if allowed {
            return Ok(());
        }
        Err(self.refuse(
            caller,
            rpc,
            not_allowed(format!("{rpc} is for {who}; the caller is {caller}")),
        ))
    }

    /// Refuses every caller but an operator.
    fn operator_only(&self, caller: &Caller, rpc: &'static str) -> Result<(), Status> {
        self.only(caller, rpc, caller.is_operator(), "operators")
    }

    /// Logs and counts a refusal with its detailed reason, and returns what `caller` may be
    /// told: the detail for an operator, [`wire::public_view`] for everyone else.
    fn refuse(&self, caller: &Caller, rpc: &'static str, status: Status) -> Status {
        let kind = wire::kind_of(&status).map_or("none", ErrorKind::name);
        let at = now_ns();
        if let LogLine::Log { left_out } = self.shared.log_limit.line(at / 1_000_000_000) {
            if left_out > 0 {
                warn!(
                    left_out,
                    "refusals not logged (over {REFUSAL_LINES_PER_SECOND} a second); Status and metrics count them all"
                );
            }
            info!(
                rpc,
                %caller,
                addr = ?caller.addr(),
                code = ?status.code(),
                kind,
                message = status.message(),
                "refused"
            );
        }
        self.shared.metrics.refused(rpc, kind);
        if let Ok(mut r) = self.shared.refusals.lock() {
            r.record(
                pb::Refusal {
                    at,
                    rpc: rpc.to_owned(),
                    kind: kind.to_owned(),
                    message: status.message().to_owned(),
                    caller: caller.to_string(),
                },
                kind,
            );
        }
        if caller.is_operator() {
            status
        } else {
            wire::public_view(&status)
        }
    }
}

#[tonic::async_trait]
impl NodeRpc for Service {
    async fn export(
        &self,
        request: Request<pb::ExportRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        sh.received(Rpc::Export);
        let caller = Caller::of(&request);
        let refuse = |s| self.refuse(&caller, "export", s);
        let r = request.into_inner();
        let cap = Cap::decode(&r.cap)
            .map_err(|e| refuse(wire::bad_request(format!("bad capability: {e}"))))?;
        let context = wire::objid_from_bytes(&r.context, "context").map_err(refuse)?;
        let scope = wire::scope_from_pb(r.scope).map_err(refuse)?;
        let proof = proof_from_pb(r.proof).map_err(|e| refuse(proof_status(&e)))?;
        let now = now_ns();
        // Cheap refusals first: a proof outside the window needs no key lookup.
        if proof.time.abs_diff(now) > sh.proofs.skew_ns() {
            return Err(refuse(proof_status(&ProofError::Skew {
                time: proof.time,
                now,
            })));
        }
        let shared = sh.clone();
        let token = tokio::task::spawn_blocking(move || {
            let keys = StoreKeys::new(&shared.store).map_err(|e| wire::store_status(&e))?;
            // The caller speaks for `context`: its kuid key signed this very request.
            let claim = ExportClaim {
                node: shared.owner.id().node,
                cap: &r.cap,
                context,
                scope: &scope,
            };
            let key = keys.kuid_key(context).map_err(|e| {
                proof_status(&ProofError::NoContextKey(format!("context {context}: {e}")))
            })?;
            proof.verify(&key, &claim).map_err(|e| proof_status(&e))?;
            // Only a verified proof takes a place among the remembered nonces.
            shared
                .proofs
                .admit(&proof, Signer::of(&key), now)
                .map_err(|e| proof_status(&e))?;
            let labels = shared.labels.labels().map_err(|e| wire::store_status(&e))?;
            if crate::difc::LabelSource::active(&labels) {
                shared
                    .labels_seen
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            shared
                .owner
                .export_labelled(&cap, &keys, &labels, &ExportRequest { context, scope }, now)
                .map_err(|e| wire::export_status(&e))
        })
        .await
        .map_err(internal)?
        .map_err(refuse)?;
        info!(%caller, guard = %token.guard(), object = %token.object(), scope = ?token.scope(), "exported");
        Ok(Response::new(pb::TokenReply {
            token: token.encode(),
        }))
    }

    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeReply>, Status> {
        let started = Instant::now();
        let sh = &self.shared;
        let caller = Caller::of(&request);
        let arrived = request
            .extensions()
            .get::<super::conn_service::Arrived>()
            .map(|a| a.0);
        sh.received(Rpc::Invoke);
        let r = request.into_inner();
        let op = match pb::Op::try_from(r.op) {
            Ok(pb::Op::Read) => Op::Read,
            Ok(pb::Op::Write) => Op::Write,
            _ => {
                let e = wire::bad_request(format!("unknown operation {}", r.op));
                return Err(self.refuse(&caller, "invoke", e));
            }
        };
        let result = self.invoke_op(op, r, &caller, arrived).await;
        sh.metrics.invoked(op, result.is_ok(), started.elapsed());
        result
            .map(|data| Response::new(pb::InvokeReply { data }))
            .map_err(|s| self.refuse(&caller, "invoke", s))
    }

    async fn revoke(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::RevokeReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::Revoke);
        let token = decode_token(&request.into_inner().token)
            .map_err(|s| self.refuse(&caller, "revoke", s))?;
        // Waits only for invocations on this object (every guard it revokes is of it), and
        // only once the token is known to revoke something.
        let report = gates::revoke(&sh.owner, &sh.gates, &token, now_ns())
            .await
            .map_err(|e| self.refuse(&caller, "revoke", wire::invoke_status(&e)))?;
        sh.metrics.revoked(report.guards_revoked);
        info!(%caller, guard = %token.guard(), guards = report.guards_revoked, "revoked");
        Ok(Response::new(pb::RevokeReply {
            guards_revoked: report.guards_revoked,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::Renew);
        let token = decode_token(&request.into_inner().token)
            .map_err(|s| self.refuse(&caller, "renew", s))?;
        let fresh = sh
            .owner
            .renew(&token, now_ns())
            .map_err(|e| self.refuse(&caller, "renew", wire::invoke_status(&e)))?;
        Ok(Response::new(pb::TokenReply {
            token: fresh.encode(),
        }))
    }

    async fn derive_guard(
        &self,
        request: Request<pb::DeriveRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::DeriveGuard);
        let r = request.into_inner();
        let token = decode_token(&r.token).map_err(|s| self.refuse(&caller, "derive_guard", s))?;
        let scope =
            wire::scope_from_pb(r.scope).map_err(|s| self.refuse(&caller, "derive_guard", s))?;
        let child = sh
            .owner
            .export_from(&token, scope, now_ns())
            .map_err(|e| self.refuse(&caller, "derive_guard", wire::invoke_status(&e)))?;
        info!(parent = %token.guard(), guard = %child.guard(), "derived guard");
        Ok(Response::new(pb::TokenReply {
            token: child.encode(),
        }))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        self.operator_only(&caller, "status")?;
        let table: TableStats = sh.owner.stats().map_err(|e| wire::invoke_status(&e))?;
        let counts = sh
            .broadcast
            .counts()
            .map_err(|e| wire::broadcast_status(&e))?;
        let revoked_len = sh
            .broadcast
            .revoked_len()
            .map_err(|e| wire::broadcast_status(&e))?;
        let id = sh.owner.id();
        let refusals = sh
            .refusals
            .lock()
            .map_err(|_| internal("refusal log unavailable"))?;
        Ok(Response::new(pb::StatusReply {
            node: id.node,
            controller_version: id.version,
            table: Some(wire::stats_to_pb(&table)),
            counters: Some(sh.counters.to_pb(|rpc| sh.metrics.received_count(rpc))),
            broadcast: Some(pb::BroadcastStats {
                sent: counts.sent,
                received: counts.received,
                revocations: counts.revocations,
                revoked_len: revoked_len as u64,
            }),
            peers: sh.broadcast.peers().to_vec(),
            refusals: refusals
                .by_kind
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect(),
            recent_refusals: refusals.recent.iter().cloned().collect(),
        }))
    }

    async fn poll_upgrades(
        &self,
        request: Request<pb::PollUpgradesRequest>,
    ) -> Result<Response<pb::PollUpgradesReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        // Notices name upgraded guards: not for clients, who learn of an upgrade from the
        // refusal of their own token.
        self.only(
            &caller,
            "poll_upgrades",
            caller.is_operator() || caller.is_any_node(),
            "operators and nodes",
        )?;
        let after = request.into_inner().after;
        // Publish what is pending now, so a holder need not wait for the next tick.
        sh.publish_upgrades();
        let n = sh
            .notices
            .lock()
            .map_err(|_| internal("notice buffer unavailable"))?;
        let first_kept = n
            .kept
            .front()
            .map_or(n.latest.saturating_add(1), |(s, _)| *s);
        let missed = after < n.latest && after.saturating_add(1) < first_kept;
        let notices = n
            .kept
            .iter()
            .filter(|(seq, _)| *seq > after)
            .map(|(seq, bytes)| pb::Notice {
                seq: *seq,
                notice: bytes.clone(),
            })
            .collect();
        Ok(Response::new(pb::PollUpgradesReply {
            notices,
            latest: n.latest,
            missed,
        }))
    }

    async fn broadcast_issue(
        &self,
        request: Request<pb::BroadcastIssueRequest>,
    ) -> Result<Response<pb::CapName>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::BroadcastIssue);
        self.operator_only(&caller, "broadcast_issue")?;
        let cap = sh
            .broadcast
            .issue()
            .map_err(|e| self.refuse(&caller, "broadcast_issue", wire::broadcast_status(&e)))?;
        Ok(Response::new(wire::cap_name_to_pb(&cap)))
    }

    async fn broadcast_revoke(
        &self,
        request: Request<pb::CapName>,
    ) -> Result<Response<pb::BroadcastRevokeReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::BroadcastRevoke);
        self.operator_only(&caller, "broadcast_revoke")?;
        let cap = wire::cap_name_from_pb(&request.into_inner());
        let outgoing = sh
            .broadcast
            .revoke(cap)
            .map_err(|e| self.refuse(&caller, "broadcast_revoke", wire::broadcast_status(&e)))?;
        let from = sh.broadcast.node();
        let mut sends = JoinSet::new();
        for out in &outgoing {
            let to = out.to;
            let message = out.message;
            let client = sh.peers.get(&to).cloned();
            sh.counters.requests_sent.fetch_add(1, Ordering::Relaxed);
            sends.spawn(async move {
                let result = match client {
                    Some(c) => c.broadcast(from, message).await.map_err(|e| e.to_string()),
                    None => Err("no address for this peer".to_owned()),
                };
                (to, result)
            });
        }
        let mut acks = 0u32;
        let mut failures = Vec::new();
        while let Some(joined) = sends.join_next().await {
            match joined {
                Ok((peer, Ok(replies))) => {
                    sh.counters.replies_received.fetch_add(1, Ordering::Relaxed);
                    for m in replies {
                        if matches!(m, BroadcastMessage::Ack(c) if c == cap) {
                            acks = acks.saturating_add(1);
                        }
                        if let Err(e) = sh.broadcast.handle(peer, m) {
                            failures.push(format!("node {peer}: {e}"));
                        }
                    }
                }
                Ok((peer, Err(e))) => failures.push(format!("node {peer}: {e}")),
                Err(e) => failures.push(format!("send task: {e}")),
            }
        }
        let complete = sh
            .broadcast
            .is_complete(cap)
            .map_err(|e| wire::broadcast_status(&e))?;
        if !failures.is_empty() {
            return Err(self.refuse(
                &caller,
                "broadcast_revoke",
                wire::refusal(
                    Code::Unavailable,
                    ErrorKind::PeerFailed,
                    format!(
                        "{cap} is revoked here, but {} of {} peers did not acknowledge: {}",
                        failures.len(),
                        outgoing.len(),
                        failures.join("; ")
                    ),
                ),
            ));
        }
        info!(%cap, peers = outgoing.len(), acks, "broadcast revocation");
        Ok(Response::new(pb::BroadcastRevokeReply {
            peers_notified: u32::try_from(outgoing.len()).unwrap_or(u32::MAX),
            acks,
            complete,
        }))
    }

    async fn broadcast_check(
        &self,
        request: Request<pb::CapName>,
    ) -> Result<Response<pb::BroadcastCheckReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::BroadcastCheck);
        let cap = wire::cap_name_from_pb(&request.into_inner());
        sh.broadcast
            .check(cap)
            .map_err(|e| self.refuse(&caller, "broadcast_check", wire::broadcast_status(&e)))?;
        Ok(Response::new(pb::BroadcastCheckReply {}))
    }

    async fn broadcast(
        &self,
        request: Request<pb::BroadcastRequest>,
    ) -> Result<Response<pb::BroadcastReply>, Status> {
        let sh = &self.shared;
        let caller = Caller::of(&request);
        sh.received(Rpc::Broadcast);
        let r = request.into_inner();
        // A message is from the node its sender's certificate names, never from the node
        // its `from` field claims.
        if !caller.is_node(r.from) {
            return Err(self.refuse(
                &caller,
                "broadcast",
                not_allowed(format!(
                    "a message claiming to be from node {} sent by {caller}",
                    r.from
                )),
            ));
        }
        let message = BroadcastMessage::decode(&r.message)
            .map_err(|e| self.refuse(&caller, "broadcast", wire::broadcast_status(&e)))?;
        let replies = sh
            .broadcast
            .handle(r.from, message)
            .map_err(|e| self.refuse(&caller, "broadcast", wire::broadcast_status(&e)))?;
        Ok(Response::new(pb::BroadcastReply {
            replies: replies
                .iter()
                .filter(|o| o.to == r.from)
                .map(|o| o.message.encode().to_vec())
                .collect(),
        }))
    }
}
