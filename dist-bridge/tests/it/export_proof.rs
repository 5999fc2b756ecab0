//! Export is authenticated: the caller proves the context it exports for with the context
//! key's signature over the request, its nonce and time, wherever it connects from.
//!
//! The finding: a loopback caller was trusted to run in whatever context it named, so any
//! local process (or a TLS terminator or proxy on the same host) could export a capability
//! granted to another context. Every test here connects from loopback.

use std::time::Duration;

use crate::net::*;
use dist_bridge::export_proof::{ExportClaim, NONCE_LEN, proof_message};
use dist_bridge::pb;
use dist_bridge::*;
use secctx::ObjectStore;
use twizzler_capsec::{SigningKey, SigningScheme};

/// An export request for node 1's capability, with a proof signed by `key` over `claim_node`,
/// `time`, `nonce` and `signed_scope` (which may differ from the scope sent).
fn request(
    site: &Site,
    key: &SigningKey,
    claim_node: u64,
    time: u64,
    nonce: [u8; NONCE_LEN],
    signed_scope: Scope,
    sent_scope: Scope,
) -> pb::ExportRequest {
    let cap = site.cap.encode().to_vec();
    let claim = ExportClaim {
        node: claim_node,
        cap: &cap,
        context: CTX,
        scope: &signed_scope,
    };
    let signature = key.sign(&proof_message(&claim, time, &nonce)).unwrap();
    pb::ExportRequest {
        cap,
        context: CTX.to_le_bytes().to_vec(),
        scope: Some(dist_bridge::wire::scope_to_pb(&sent_scope)),
        proof: Some(pb::ExportProof {
            time,
            nonce: nonce.to_vec(),
            signature: signature.encode().to_vec(),
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_without_the_context_key_are_refused() {
    bounded(async {
        let net = Net::start("proof", 2, |_| {}).await;
        let (site, c) = (&net.sites[0], net.client(0));
        let key = ctx_key();
        let stranger = SigningKey::generate(
            SigningScheme::Ed25519,
            &mut <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(99),
        );
        let now = now_ns();
        let ok = |n: u8| request(site, &key, 1, now, [n; 16], read_all(), read_all());

        // No proof at all (what a loopback caller used to send).
        let mut bare = ok(1);
        bare.proof = None;
        assert_refused(
            c.export_raw(bare).await,
            ErrorKind::BadProof,
            "carries none",
        );
        // Signed by a key that is not the context's.
        assert_refused(
            c.export_raw(request(
                site,
                &stranger,
                1,
                now,
                [2; 16],
                read_all(),
                read_all(),
            ))
            .await,
            ErrorKind::BadProof,
            "does not verify",
        );
        // Signed for a narrower scope than the one sent.
        let narrow = read_all().with_range(range(0, 1));
        assert_refused(
            c.export_raw(request(site, &key, 1, now, [3; 16], narrow, read_all()))
                .await,
            ErrorKind::BadProof,
            "does not verify",
        );
        // Signed for node 2, sent to node 1.
        assert_refused(
            c.export_raw(request(site, &key, 2, now, [4; 16], read_all(), read_all()))
                .await,
            ErrorKind::BadProof,
            "does not verify",
        );
        // A nonce of the wrong length, a signature that does not decode.
        let mut short = ok(5);
        short.proof.as_mut().unwrap().nonce.pop();
        assert_refused(c.export_raw(short).await, ErrorKind::BadProof, "nonce");
        let mut garbled = ok(6);
        garbled.proof.as_mut().unwrap().signature = vec![0xff; 3];
        assert_refused(
            c.export_raw(garbled).await,
            ErrorKind::BadProof,
            "signature",
        );
        // Too far from the node's clock, either way.
        let skew = Duration::from_secs(120).as_nanos() as u64;
        for time in [now - skew, now + skew, 0, u64::MAX] {
            assert_refused(
                c.export_raw(request(
                    site,
                    &key,
                    1,
                    time,
                    [7; 16],
                    read_all(),
                    read_all(),
                ))
                .await,
                ErrorKind::BadProof,
                "too far",
            );
        }
        // The genuine request works once; replayed, it is refused.
        let t = c.export_raw(ok(8)).await.unwrap();
        assert_eq!(c.read(&t, 0, 6).await.unwrap(), b"object");
        assert_refused(
            c.export_raw(ok(8)).await,
            ErrorKind::BadProof,
            "already used",
        );
        // A plain client is told only that it was refused, whatever the reason.
        let holder = net.holder(0).await;
        assert_refused(holder.export_raw(ok(8)).await, ErrorKind::Denied, "refused");
        let mut bare = ok(9);
        bare.proof = None;
        assert_refused(holder.export_raw(bare).await, ErrorKind::Denied, "refused");
        // Nothing refused made a guard.
        let status = c.status().await.unwrap();
        assert_eq!(status.table.live, 1);
        net.shutdown().await;
    })
    .await;
}

/// When the context's key is revoked in the owner's store, or the context has no kuid, no
/// proof is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_missing_context_key_proves_nothing() {
    bounded(async {
        let net = Net::start("proof-revoked", 1, |_| {}).await;
        let (site, c) = (&net.sites[0], net.client(0));
        let key = ctx_key();
        c.export(&site.cap, CTX, &key, read_all()).await.unwrap();
        secctx::revocations::RevocationList::add(&site.store, |l| l.keys.insert(CTX_KUID)).unwrap();
        assert_refused(
            c.export(&site.cap, CTX, &key, read_all()).await,
            ErrorKind::BadProof,
            "no usable key",
        );
        // A context object without a kuid.
        let bare_ctx = twizzler_capsec::ObjID::new(0xc7c7_0003);
        site.store
            .create(&secctx::Object {
                id: bare_ctx,
                meta: secctx::ObjMeta::plain(),
                data: Vec::new(),
            })
            .unwrap();
        assert_refused(
            c.export(&site.cap, bare_ctx, &key, read_all()).await,
            ErrorKind::BadProof,
            "no usable key",
        );
        net.shutdown().await;
    })
    .await;
}

/// A context object signed for by `kuid`, and a read capability for the site's object granted
/// to it.
fn context_with_cap(
    site: &Site,
    ctx: twizzler_capsec::ObjID,
    kuid: twizzler_capsec::ObjID,
) -> twizzler_capsec::Cap {
    site.store
        .create(&secctx::Object {
            id: ctx,
            meta: secctx::ObjMeta::signed_by(kuid),
            data: Vec::new(),
        })
        .unwrap();
    twizzler_capsec::Cap::mint(
        twizzler_capsec::CapGrant::new(site.object, ctx, twizzler_capsec::Protections::READ),
        &site.key,
    )
    .unwrap()
}

/// The nonce memory is bounded, overall and per signing key: past its share, one key's
/// exports are refused as busy, for every context that key signs for, while another key's
/// go on; and invocations go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nonce_memory_is_bounded() {
    use rand_core::SeedableRng;
    bounded(async {
        let net = Net::start("proof-nonces", 1, |c| {
            c.export_nonces = 3;
            c.export_nonces_per_key = 2;
        })
        .await;
        let (site, c) = (&net.sites[0], net.client(0));
        let key = ctx_key();
        // A second context with the same key; a third with a key of its own.
        let same_key_ctx = twizzler_capsec::ObjID::new(0xc7c7_0004);
        let same_key_cap = context_with_cap(site, same_key_ctx, CTX_KUID);
        let own_key = SigningKey::generate(
            SigningScheme::Ed25519,
            &mut rand_chacha::ChaCha20Rng::seed_from_u64(0x5eed),
        );
        assert!(own_key.verifying_key() != key.verifying_key());
        let own_kuid = twizzler_capsec::ObjID::new(0xc7c7_0005);
        secctx::keypair::store_verifying_key(&site.store, own_kuid, &own_key.verifying_key())
            .unwrap();
        let own_key_ctx = twizzler_capsec::ObjID::new(0xc7c7_0006);
        let own_key_cap = context_with_cap(site, own_key_ctx, own_kuid);

        let mut tokens = Vec::new();
        for _ in 0..2 {
            tokens.push(c.export(&site.cap, CTX, &key, read_all()).await.unwrap());
        }
        assert_refused(
            c.export(&site.cap, CTX, &key, read_all()).await,
            ErrorKind::Busy,
            "too many recent exports",
        );
        // The key's share is spent for every context it signs for.
        assert_refused(
            c.export(&same_key_cap, same_key_ctx, &key, read_all())
                .await,
            ErrorKind::Busy,
            "too many recent exports",
        );
        // Another key still has room; then the whole memory is full.
        tokens.push(
            c.export(&own_key_cap, own_key_ctx, &own_key, read_all())
                .await
                .unwrap(),
        );
        assert_refused(
            c.export(&own_key_cap, own_key_ctx, &own_key, read_all())
                .await,
            ErrorKind::Busy,
            "too many recent exports",
        );
        for t in &tokens {
            c.read(t, 0, 1).await.unwrap();
        }
        net.shutdown().await;
    })
    .await;
}
