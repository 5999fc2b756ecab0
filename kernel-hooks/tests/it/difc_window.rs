//! A principal-label change racing faults on several threads (`docs/DIFC.md` §4.2), with the
//! host's page table modelled as in `window.rs`: faulting threads decide, then install under
//! the lock `unmap` takes, only if the ticket is still current. Another thread raises the
//! context's label ∅ → {T} and drops it back, again and again, as `sys_sctx_label` does
//! (transitional row, `relabel_ctx`, final row). Once a raise's `relabel_ctx` returned, no
//! writable mapping of the public object exists or is installed until the drop; once a
//! drop's returned, no mapping of the `{T}` object exists or is installed until the next
//! raise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use crate::difc::{T, add_tags, label};
use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, SecCtxMgr, Unmap};
use twizzler_capsec::{
    AccessKind, Expiry, Label, ObjID, Protections, Right, classify, transitional,
};

/// The public object and the secret one.
const PUBLIC: ObjID = FILE;
const SECRET: ObjID = OTHER;

/// The test host plus a page table: the protections mapped per (context, object), behind
/// the lock `unmap` takes. Write protection is modelled exactly (only `W` goes).
struct PageTableHost {
    inner: TestHost,
    mapped: Mutex<HashMap<(ObjID, ObjID), Protections>>,
}

impl Host for PageTableHost {
    delegate_to_test_host!(inner);
    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        self.inner.with_ctx(ctx, f)
    }
    fn unmap(&self, what: Unmap) {
        let mut pt = self.mapped.lock().unwrap();
        let wp = |p: &mut Protections| p.remove(Protections::WRITE);
        match what {
            Unmap::Object { ctx, target } => {
                pt.remove(&(ctx, target));
            }
            Unmap::Context(ctx) => pt.retain(|(c, _), _| *c != ctx),
            Unmap::ObjectEverywhere(target) => pt.retain(|(_, t), _| *t != target),
            Unmap::WriteProtectContext(ctx) => pt
                .iter_mut()
                .filter(|((c, _), _)| *c == ctx)
                .for_each(|(_, p)| wp(p)),
            Unmap::WriteProtectObjectEverywhere(target) => pt
                .iter_mut()
                .filter(|((_, t), _)| *t == target)
                .for_each(|(_, p)| wp(p)),
        }
    }
}

/// What must not be mapped now: `W` on the public object (after a raise), anything of the
/// secret one (after a drop, and at the start).
#[derive(Default)]
struct Forbidden {
    public_write: AtomicBool,
    secret: AtomicBool,
}

impl Forbidden {
    fn violated_by(&self, target: ObjID, prots: Protections) -> bool {
        (target == PUBLIC && prots.contains(W) && self.public_write.load(Ordering::SeqCst))
            || (target == SECRET && !prots.is_empty() && self.secret.load(Ordering::SeqCst))
    }
}

#[test]
fn relabel_racing_faults_leaves_no_forbidden_mapping() {
    let w = World::new();
    let host = PageTableHost {
        inner: TestHost::default(),
        mapped: Mutex::default(),
    };
    let k = add_tags(&host.inner);
    for id in [PUBLIC, SECRET] {
        let i = w.host().info(id);
        host.inner.set_object(id, i.kuid, i.default_prots);
    }
    host.inner.set_key(K_FILE, w.key(FILE));
    host.inner.set_key(K_OTHER, w.key(OTHER));
    host.inner.set_object_label(SECRET, label(&[T], &[]));
    let mut e = ctx_with(&[&w.cap(PUBLIC, CTX_A, RW), &w.cap(SECRET, CTX_A, RW)]);
    e.add_cap(&k.own(T, CTX_A, Right::Plus, Expiry::NEVER));
    host.inner.set_ctx(CTX_A, &e);
    let engine = Arc::new(Engine::new(host));
    let forbidden = Arc::new(Forbidden::default());
    forbidden.secret.store(true, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let installs = Arc::new(AtomicU64::new(0));
    let faulters: Vec<_> = (0..3)
        .map(|n| {
            let (engine, forbidden, stop) = (engine.clone(), forbidden.clone(), stop.clone());
            let (violations, installs) = (violations.clone(), installs.clone());
            std::thread::spawn(move || {
                let t = SecCtxMgr::new(CTX_A);
                let accesses = [
                    (PUBLIC, AccessKind::Write),
                    (SECRET, AccessKind::Read),
                    (PUBLIC, AccessKind::Read),
                ];
                let mut i = n;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (target, kind) = accesses[i % accesses.len()];
                    let info = engine.host().inner.info(target);
                    let Decision::Map { prots, ticket, .. } =
                        engine.decide(&t, &Fault::new(target, info, 0x1000, kind))
                    else {
                        continue;
                    };
                    for _ in 0..100 {
                        std::hint::spin_loop();
                    }
                    let mut pt = engine.host().mapped.lock().unwrap();
                    if !engine.is_current(&ticket) {
                        continue;
                    }
                    if forbidden.violated_by(target, prots) {
                        violations.fetch_add(1, Ordering::Relaxed);
                    }
                    *pt.entry((CTX_A, target)).or_default() |= prots;
                    installs.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (empty, secret) = (Label::EMPTY, label(&[T], &[]));
    let change = |old: Label, new: Label| {
        let row = transitional(&old.as_ref(), &new.as_ref()).unwrap();
        engine.host().inner.set_ctx_row(CTX_A, Some(row));
        engine.relabel_ctx(CTX_A, classify(&old.as_ref(), &new.as_ref()));
    };
    let leftovers = |what: &Forbidden| {
        let pt = engine.host().mapped.lock().unwrap();
        pt.iter()
            .filter(|((c, t), p)| *c == CTX_A && what.violated_by(*t, **p))
            .count()
    };
    for _ in 0..300 {
        // Raise: from the moment relabel_ctx returned, no writable public mapping.
        change(empty, secret);
        forbidden.public_write.store(true, Ordering::SeqCst);
        assert_eq!(
            leftovers(&forbidden),
            0,
            "a writable public page survived a raise"
        );
        forbidden.secret.store(false, Ordering::SeqCst);
        engine.host().inner.set_ctx_label(CTX_A, secret);
        std::thread::yield_now();
        // Drop: from the moment relabel_ctx returned, no mapping of the secret object.
        change(secret, empty);
        forbidden.secret.store(true, Ordering::SeqCst);
        assert_eq!(leftovers(&forbidden), 0, "a secret page survived a drop");
        forbidden.public_write.store(false, Ordering::SeqCst);
        engine.host().inner.set_ctx_label(CTX_A, empty);
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for f in faulters {
        f.join().unwrap();
    }
    assert_eq!(violations.load(Ordering::Relaxed), 0);
    assert!(
        installs.load(Ordering::Relaxed) > 0,
        "the faulters installed nothing"
    );
}
