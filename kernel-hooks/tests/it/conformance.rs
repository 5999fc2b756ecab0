//! The conformance suite (`kernel_hooks::conformance`) on a std host: page tables in a map
//! keyed by (context, object, page), a clock the harness moves, revocation sets, and threads
//! for the race. Run once for a host that unmaps per context and once for one that unmaps per
//! object.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::conformance::{self, Body, Calls, Harness, Ids, Outcome, World};
use kernel_hooks::{
    CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, SwitchResult, Unmap,
    UnmapGranularity,
};
use twizzler_capsec::{AccessKind, ObjID, PAGE_SIZE, Protections, RecordId, VerifyingKey};

/// Unix time when the host's monotonic clock reads 0.
const BOOT_UNIX_NS: u64 = 1_767_225_600_000_000_000;

/// (context, object, page) → protections in the page tables.
type Pages = HashMap<(ObjID, ObjID, u64), Protections>;

/// A host kernel made of maps. `PER_OBJECT` chooses its unmap granularity.
struct StdHost<const PER_OBJECT: bool> {
    objects: HashMap<ObjID, (ObjectInfo, Protections)>,
    contexts: HashMap<ObjID, Vec<u8>>,
    keys: HashMap<ObjID, VerifyingKey>,
    now: AtomicU64,
    /// The page tables; `unmap` and the fault path's install take this lock.
    pages: Mutex<Pages>,
    revoked_keys: Mutex<HashSet<ObjID>>,
    revoked_records: Mutex<HashSet<RecordId>>,
    clock_calls: AtomicU64,
    metadata_calls: AtomicU64,
    other_calls: AtomicU64,
}

impl<const PER_OBJECT: bool> StdHost<PER_OBJECT> {
    fn new(world: &World) -> Self {
        let mut objects = HashMap::new();
        let mut contexts = HashMap::new();
        let mut keys = HashMap::new();
        for o in &world.objects {
            let info = ObjectInfo::new(o.kuid, o.default_prots);
            objects.insert(o.id, (info, o.region));
            match &o.body {
                Body::Data => {}
                Body::Context(bytes) => {
                    contexts.insert(o.id, bytes.clone());
                }
                Body::Key(k) => {
                    keys.insert(o.id, k.clone());
                }
            }
        }
        Self {
            objects,
            contexts,
            keys,
            now: AtomicU64::new(1_000),
            pages: Mutex::default(),
            revoked_keys: Mutex::default(),
            revoked_records: Mutex::default(),
            clock_calls: AtomicU64::new(0),
            metadata_calls: AtomicU64::new(0),
            other_calls: AtomicU64::new(0),
        }
    }

    fn other(&self) {
        self.other_calls.fetch_add(1, Ordering::SeqCst);
    }

    /// The object's metadata, as the fault path reads it (counted).
    fn read_meta(&self, id: ObjID) -> Option<ObjectInfo> {
        self.metadata_calls.fetch_add(1, Ordering::SeqCst);
        self.objects.get(&id).map(|(info, _)| *info)
    }
}

impl<const PER_OBJECT: bool> Host for StdHost<PER_OBJECT> {
    const UNMAP_GRANULARITY: UnmapGranularity = if PER_OBJECT {
        UnmapGranularity::PerObject
    } else {
        UnmapGranularity::PerContext
    };

    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.read_meta(id)
    }

    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        self.other();
        self.contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
    }

    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        self.other();
        self.keys.get(&kuid).map(f)
    }

    fn key_revoked(&self, kuid: ObjID) -> bool {
        self.other();
        self.revoked_keys.lock().unwrap().contains(&kuid)
    }

    fn record_revoked(&self, id: &RecordId) -> bool {
        self.other();
        self.revoked_records.lock().unwrap().contains(id)
    }

    fn monotonic_ns(&self) -> u64 {
        self.clock_calls.fetch_add(1, Ordering::SeqCst);
        self.now.load(Ordering::SeqCst)
    }

    fn unmap(&self, what: Unmap) {
        self.other();
        self.pages
            .lock()
            .unwrap()
            .retain(|(c, t, _), _| match what.as_full_unmap() {
                Unmap::Object { ctx, target } => !(*c == ctx && *t == target),
                Unmap::Context(ctx) => *c != ctx,
                Unmap::ObjectEverywhere(target) => *t != target,
                Unmap::WriteProtectContext(_) | Unmap::WriteProtectObjectEverywhere(_) => true,
            });
    }
}

/// The harness: the engine over a [`StdHost`], and the host's fault path.
struct StdHarness<const PER_OBJECT: bool> {
    engine: Engine<StdHost<PER_OBJECT>>,
}

impl<const PER_OBJECT: bool> StdHarness<PER_OBJECT> {
    fn new(world: &World) -> Self {
        let engine = Engine::new(StdHost::new(world));
        engine.set_wall_clock_offset(BOOT_UNIX_NS);
        Self { engine }
    }

    fn host(&self) -> &StdHost<PER_OBJECT> {
        self.engine.host()
    }
}

impl<const PER_OBJECT: bool> Harness for StdHarness<PER_OBJECT> {
    type Host = StdHost<PER_OBJECT>;

    fn engine(&self) -> &Engine<Self::Host> {
        &self.engine
    }

    fn fault(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Result<Protections, String> {
        let host = self.host();
        // What the fault handler keeps at hand for the mapped object (the region, and the
        // default protections `check_id` returns): no metadata read. The fault's byte offset,
        // not its page's; the `kuid` is left to a miss.
        let (info, region) = host.objects.get(&target).copied().ok_or("no object")?;
        let fault = Fault::lazy(target, info.default_prots, offset, kind);
        for _ in 0..4 {
            let (prots, ctx, switch_to, ticket) = match self.engine.decide(thread, &fault) {
                Decision::Map {
                    prots,
                    ctx,
                    switch_to,
                    ticket,
                    ..
                } => (prots, ctx, switch_to, ticket),
                Decision::Violation(v) => return Err(v.to_string()),
            };
            if let Some(c) = switch_to
                && thread.switch_context(c) == SwitchResult::NotAttached
            {
                return Err("detached before the switch".into());
            }
            let mut pages = host.pages.lock().unwrap();
            if !self.engine.is_current(&ticket) {
                continue;
            }
            if thread.active_id() != ctx {
                return Err("switched away before the install".into());
            }
            let mapped = prots & region;
            pages.insert((ctx, target, offset / PAGE_SIZE), mapped);
            return Ok(mapped);
        }
        Err("the decision kept going stale".into())
    }

    fn mapped(&self, ctx: ObjID, target: ObjID, offset: u64) -> Option<Protections> {
        let pages = self.host().pages.lock().unwrap();
        pages.get(&(ctx, target, offset / PAGE_SIZE)).copied()
    }

    fn write_protect(&self, target: ObjID) {
        // What the engine granted minus write (never the region's protections minus write),
        // and nothing where it has no decision left.
        let mut pages = self.host().pages.lock().unwrap();
        pages.retain(|&(ctx, t, page), p| {
            if t != target {
                return true;
            }
            match self.engine.granted(ctx, t, page * PAGE_SIZE) {
                Some(g) => {
                    *p &= g - Protections::WRITE;
                    true
                }
                None => false,
            }
        });
    }

    fn now(&self) -> u64 {
        self.host().now.load(Ordering::SeqCst)
    }

    fn wait_until(&self, t: u64) {
        self.host().now.fetch_max(t, Ordering::SeqCst);
    }

    fn expire(&self) {
        self.engine.expire();
    }

    fn revoke_key(&self, kuid: ObjID) {
        self.host().revoked_keys.lock().unwrap().insert(kuid);
        self.engine.revoke_key(kuid);
    }

    fn revoke_record(&self, id: RecordId) {
        self.host().revoked_records.lock().unwrap().insert(id);
        self.engine.revoke_record(id);
    }

    fn calls(&self) -> Calls {
        let h = self.host();
        Calls {
            clock: h.clock_calls.load(Ordering::SeqCst),
            metadata: h.metadata_calls.load(Ordering::SeqCst),
            other: h.other_calls.load(Ordering::SeqCst),
        }
    }

    fn kernel_access(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Option<Result<(), String>> {
        // A kernel-mode fault on a user address is decided as the thread's own access: the
        // same fault path, so nothing is mapped that the thread could not map itself.
        Some(self.fault(thread, target, offset, kind).map(|_| ()))
    }

    fn race(&self, a: &(dyn Fn() + Sync), b: &(dyn Fn() + Sync)) -> bool {
        std::thread::scope(|s| {
            s.spawn(a);
            s.spawn(b);
        });
        true
    }
}

fn run_suite<const PER_OBJECT: bool>(ids: Ids) {
    let world = World::build_with(BOOT_UNIX_NS + 1_000, ids).expect("the world builds");
    let harness = StdHarness::<PER_OBJECT>::new(&world);
    let reports = conformance::run(&harness, &world);
    for r in &reports {
        println!("{r}");
    }
    println!("{}", conformance::summary(&reports));
    // A std host takes no interrupts: the interrupt check is skipped here (the QEMU kernel
    // runs it); every other check must pass, the race included.
    let bad: Vec<_> = reports
        .iter()
        .filter(|r| {
            r.outcome != Outcome::Pass
                && !(matches!(r.outcome, Outcome::Skipped(_)) && r.name.contains("interrupt"))
        })
        .map(ToString::to_string)
        .collect();
    assert!(
        bad.is_empty(),
        "checks that did not pass:\n{}",
        bad.join("\n")
    );
}

#[test]
fn a_host_that_unmaps_per_context_conforms() {
    run_suite::<false>(Ids::FIXED);
}

#[test]
fn a_host_that_unmaps_per_object_conforms() {
    run_suite::<true>(Ids::FIXED);
}

/// Ids a host derives itself (as Twizzler's kernel does from an object's `kuid`): large,
/// unordered, none of them `0xa000 | n`.
fn derived_ids() -> Ids {
    let id = |n: u128| ObjID::new(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834 ^ (n << 96) ^ n);
    Ids {
        k_targets: id(11),
        k_race: id(3),
        ctx_a: id(7),
        ctx_b: id(1),
        ctx_c: id(9),
        expiring: id(5),
        rwx: id(2),
        code: id(10),
        plain: id(4),
        shared: id(8),
        race: id(6),
    }
}

#[test]
fn a_host_with_ids_of_its_own_conforms() {
    // The checks name objects only through the world's ids: nothing assumes the fixed ones.
    run_suite::<false>(derived_ids());
}

#[test]
fn a_world_with_two_objects_of_one_id_is_refused() {
    let mut ids = derived_ids();
    ids.race = ids.ctx_a;
    assert!(World::build_with(BOOT_UNIX_NS, ids).is_err());
    assert_eq!(ids.kuid_of(ids.plain), Some(ids.k_targets));
    assert_eq!(
        derived_ids().kuid_of(derived_ids().race),
        Some(derived_ids().k_race)
    );
    assert_eq!(
        ids.kuid_of(ids.ctx_b),
        None,
        "a context is keyed by nobody here"
    );
}
