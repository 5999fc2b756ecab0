//! Shared fixtures for the criterion benchmarks in `benches/benches/`.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use twizzler_capsec::{Authority, KeyLookupError, ObjID, VerifyingKey};

/// An authority that knows one object's key, with no revocation and no verification memo
/// (every decision verifies the signature): the uncached cost of the rule.
pub struct OneKey(pub ObjID, pub VerifyingKey);

impl Authority for OneKey {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        if obj == self.0 {
            Ok(&self.1)
        } else {
            Err(KeyLookupError::NoKuid(obj))
        }
    }
}

/// A host kernel for the fault-path benchmarks: objects in a map, one context (whose bytes
/// can be swapped between prepared versions), keys parsed once, a fixed clock, no-op unmaps.
pub mod host {
    use std::collections::{HashMap, HashSet};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kernel_hooks::{CtxBytes, Engine, Host, ObjectInfo, Unmap};
    use twizzler_capsec::{
        Cap, CapGrant, Label, LabelId, LabelRef, ObjID, PrincipalLabels, Protections, RecordId,
        SecCtxEditor, SigningKey, VerifyingKey,
    };

    /// The context of the fault-path benchmarks.
    pub const CTX: ObjID = ObjID::new(0xc0_0000);
    /// The key object of every benchmark object.
    pub const KUID: ObjID = ObjID::new(0x6_0000);
    /// The benchmarks' clock.
    pub const NOW: u64 = 1_700_000_000_000_000_000;

    /// The metadata of every benchmark object, as the fault carries it.
    pub const INFO: ObjectInfo = ObjectInfo::new(Some(KUID), Protections::empty());

    /// Benchmark object `i`.
    pub fn obj(i: u128) -> ObjID {
        ObjID::new(0x1_0000_0000 + i)
    }

    /// An engine whose context holds `n` read capabilities (one per object `obj(i)`) signed
    /// with `key`, in `versions` versions (at least one) that differ only in generation (see
    /// [`BenchHost::next_version`]). With `sign_all` false only object 0's capability carries
    /// a real signature (the others reuse it and must not be faulted on), which keeps building
    /// a 10,000-record context quick.
    pub fn fault_engine(
        n: u128,
        key: &SigningKey,
        sign_all: bool,
        versions: usize,
    ) -> Box<Engine<BenchHost>> {
        let first = Cap::mint(CapGrant::new(obj(0), CTX, Protections::READ), key)
            .expect("benchmark keys sign");
        let mut e = SecCtxEditor::new();
        e.add_cap(&first);
        for i in 1..n {
            let g = CapGrant::new(obj(i), CTX, Protections::READ);
            e.add_cap(&if sign_all {
                Cap::mint(g, key).expect("benchmark keys sign")
            } else {
                Cap::from_parts(g, *first.signature())
            });
        }
        let versions = (0..versions.max(1))
            .map(|_| {
                e.set_global_mask(Protections::all()); // an edit: bumps the generation
                e.encode().expect("benchmark contexts encode")
            })
            .collect();
        let objects = (0..n).map(|i| (obj(i), INFO)).collect();
        Box::new(Engine::new(bench_host(objects, key, versions)))
    }

    /// An engine over one object, `obj(0)` (key `key`), and one context, `ed`'s.
    pub fn one_object_engine(ed: &SecCtxEditor, key: &SigningKey) -> Box<Engine<BenchHost>> {
        bytes_engine(ed.encode().expect("benchmark contexts encode"), key)
    }

    /// An engine over one object, `obj(0)` (key `key`), and one context whose bytes are
    /// `bytes`.
    pub fn bytes_engine(bytes: Vec<u8>, key: &SigningKey) -> Box<Engine<BenchHost>> {
        Box::new(Engine::new(bench_host(
            [(obj(0), INFO)].into(),
            key,
            vec![bytes],
        )))
    }

    /// [`one_object_engine`] on a host whose clock runs (`BenchHost<true>`).
    pub fn running_clock_engine(
        ed: &SecCtxEditor,
        key: &SigningKey,
    ) -> Box<Engine<BenchHost<true>>> {
        let bytes = ed.encode().expect("benchmark contexts encode");
        Box::new(Engine::new(bench_host(
            [(obj(0), INFO)].into(),
            key,
            vec![bytes],
        )))
    }

    /// A host with `objects` (their key `key`, under [`KUID`]) and context [`CTX`] in
    /// `versions`, at [`NOW`], nothing revoked, nothing labelled.
    fn bench_host<const RUNNING: bool>(
        objects: HashMap<ObjID, ObjectInfo>,
        key: &SigningKey,
        versions: Vec<Vec<u8>>,
    ) -> BenchHost<RUNNING> {
        BenchHost {
            objects,
            keys: [(KUID, key.verifying_key())].into(),
            ctx: CTX,
            versions,
            current: AtomicUsize::new(0),
            now: NOW,
            started: std::time::Instant::now(),
            revoked_keys: HashSet::new(),
            revoked_records: HashSet::new(),
            labels: Vec::new(),
            ctx_row: PrincipalLabels::steady(LabelId::EMPTY),
        }
    }

    /// An engine whose context holds `k` valid read capabilities for `obj(0)`, all signed with
    /// `key` and all covering page 1, each with its own gate (pages `1..=i + 1`), so none merges
    /// with another in the cache entry: a miss verifies `k` signatures, and past the entry's
    /// grant slots the entry is incomplete.
    pub fn records_engine(k: u64, key: &SigningKey) -> Box<Engine<BenchHost>> {
        let mut e = SecCtxEditor::new();
        for i in 0..k {
            let mut g = CapGrant::new(obj(0), CTX, Protections::READ);
            g.gate = twizzler_capsec::Gate::new(4096, (i + 1) * 4096, 1)
                .expect("a page range inside the object");
            e.add_cap(&Cap::mint(g, key).expect("benchmark keys sign"));
        }
        one_object_engine(&e, key)
    }

    /// The order [`page_records_engine`] writes its records in.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum PageOrder {
        /// Page 1 first, page `k` last (gate order, as a context built page by page is).
        Pages,
        /// Page `k` first, page 1 last.
        Reversed,
        /// Every page but the middle one (`k / 2`) in a scattered order, then the middle one:
        /// the order tells a search nothing.
        Shuffled,
    }

    /// An engine whose context holds `k` read capabilities for `obj(0)`, one per page
    /// (`1..=k`, each gated to its page), signed with `key`, listed in `order` (the editor
    /// writes gate order, `Pages`; the others are as another writer may list them).
    pub fn page_records_engine(
        k: u64,
        order: PageOrder,
        key: &SigningKey,
    ) -> Box<Engine<BenchHost>> {
        let pages: Vec<u64> = match order {
            PageOrder::Pages => (1..=k).collect(),
            PageOrder::Reversed => (1..=k).rev().collect(),
            // 389 is prime to k - 1 = 999 (the benchmarks' k), so i * 389 mod (k - 1) visits
            // each of the others; for other k it still lists each page at most once.
            PageOrder::Shuffled => {
                let others: Vec<u64> = (1..=k).filter(|p| *p != k / 2).collect();
                let n = others.len() as u64;
                let mut seen = HashSet::new();
                (0..n)
                    .map(|i| others[((i * 389) % n.max(1)) as usize])
                    .filter(|p| seen.insert(*p))
                    .chain([k / 2])
                    .collect()
            }
        };
        let mut e = SecCtxEditor::new();
        let mut listed = Vec::new();
        for page in pages {
            let mut g = CapGrant::new(obj(0), CTX, Protections::READ);
            g.gate =
                twizzler_capsec::Gate::new(page * 4096, 4096, 1).expect("a page inside the object");
            let cap = Cap::mint(g, key).expect("benchmark keys sign");
            e.add_cap(&cap);
            listed.push(cap.encode());
        }
        // The editor writes a target's capabilities in gate order; list them as given, as
        // another writer may.
        let bytes = e.encode().expect("benchmark contexts encode");
        let relisted =
            twizzler_capsec::ctx::as_listed(bytes, &listed).expect("benchmark contexts parse");
        bytes_engine(relisted, key)
    }

    /// An engine whose context denies faults on `obj(0)`: with `bad` true it holds `n` records
    /// for `obj(0)` signed by the wrong key; with `bad` false it holds `n` valid records for
    /// other objects and none for `obj(0)`. `key` signs for every object; `wrong` is another key.
    pub fn denial_engine(
        n: u128,
        key: &SigningKey,
        wrong: &SigningKey,
        bad: bool,
    ) -> Box<Engine<BenchHost>> {
        let mut e = SecCtxEditor::new();
        if bad {
            for i in 0..n {
                let mut g = CapGrant::new(obj(0), CTX, Protections::READ);
                // Distinct records (distinct signatures to check).
                g.expires = twizzler_capsec::Expiry::from_raw(NOW + 1_000_000_000 + i as u64);
                e.add_cap(&Cap::mint(g, wrong).expect("benchmark keys sign"));
            }
        } else {
            let first = Cap::mint(CapGrant::new(obj(1), CTX, Protections::READ), key)
                .expect("benchmark keys sign");
            for i in 1..=n {
                let g = CapGrant::new(obj(i), CTX, Protections::READ);
                e.add_cap(&Cap::from_parts(g, *first.signature()));
            }
        }
        one_object_engine(&e, key)
    }

    /// The benchmark host.
    pub struct BenchHost<const RUNNING: bool = false> {
        /// Objects by id.
        pub objects: HashMap<ObjID, ObjectInfo>,
        /// Keys by kuid.
        pub keys: HashMap<ObjID, VerifyingKey>,
        /// The context's id.
        pub ctx: ObjID,
        /// Versions of the context's bytes; `current` picks one.
        pub versions: Vec<Vec<u8>>,
        /// Which version the context holds now.
        pub current: AtomicUsize,
        /// The time.
        pub now: u64,
        /// With `RUNNING`, the clock runs: `now` plus the time since this instant, read from
        /// the operating system's monotonic clock on every call (`clock_gettime`), so that a
        /// benchmark pays what a kernel's clock read costs. Without, the clock is `now`, a
        /// field read (and this is not read).
        pub started: std::time::Instant,
        /// Revoked key objects (the host's set; the engine keeps none).
        pub revoked_keys: HashSet<ObjID>,
        /// Revoked records.
        pub revoked_records: HashSet<RecordId>,
        /// Interned labels: `LabelId(i + 1)` is `labels[i]`.
        pub labels: Vec<Label>,
        /// The context's principal row.
        pub ctx_row: PrincipalLabels<LabelId>,
    }

    /// An engine over one object, `obj(0)` at data label `object` (key `key`), one context
    /// (`ed`'s) at principal label `principal`, and tag objects `tags` (each with its key
    /// object and signing key). The fault must carry the object's label: `INFO` with
    /// [`ObjectInfo::with_label`] of the id returned.
    pub fn labelled_engine(
        ed: &SecCtxEditor,
        key: &SigningKey,
        principal: Label,
        object: Label,
        tags: &[(ObjID, ObjID, &SigningKey)],
    ) -> (Box<Engine<BenchHost>>, LabelId) {
        let mut e = one_object_engine(ed, key);
        let h = e.host_mut();
        let mut intern = |l: Label| {
            if l.is_empty() {
                return LabelId::EMPTY;
            }
            let i = h.labels.iter().position(|x| *x == l).unwrap_or_else(|| {
                h.labels.push(l);
                h.labels.len() - 1
            });
            LabelId(u32::try_from(i + 1).expect("few labels"))
        };
        let p = intern(principal);
        let o = intern(object);
        h.ctx_row = PrincipalLabels::steady(p);
        h.objects.insert(obj(0), INFO.with_label(o));
        for (tag, kuid, k) in tags {
            h.objects
                .insert(*tag, ObjectInfo::new(Some(*kuid), Protections::empty()));
            h.keys.insert(*kuid, k.verifying_key());
        }
        (e, o)
    }

    impl<const RUNNING: bool> BenchHost<RUNNING> {
        /// Switches the context to the next prepared version (a context edit). The caller
        /// then calls `invalidate_ctx`, as a kernel's write fault on the context does.
        pub fn next_version(&self) {
            let n = self.versions.len().max(1);
            let c = self.current.load(Ordering::Relaxed);
            self.current.store((c + 1) % n, Ordering::Relaxed);
        }
    }

    impl<const RUNNING: bool> Host for BenchHost<RUNNING> {
        fn object(&self, id: ObjID) -> Option<ObjectInfo> {
            self.objects.get(&id).copied()
        }
        fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
            if ctx != self.ctx {
                return None;
            }
            self.versions
                .get(self.current.load(Ordering::Relaxed))
                .map(|b| f(CtxBytes::private(b)))
        }
        fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
            self.keys.get(&kuid).map(f)
        }
        fn key_revoked(&self, kuid: ObjID) -> bool {
            self.revoked_keys.contains(&kuid)
        }
        fn record_revoked(&self, id: &RecordId) -> bool {
            self.revoked_records.contains(id)
        }
        fn monotonic_ns(&self) -> u64 {
            if !RUNNING {
                return self.now;
            }
            let since = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.now.saturating_add(since)
        }
        fn unmap(&self, _what: Unmap) {}
        fn ctx_label(&self, ctx: ObjID) -> Option<PrincipalLabels<LabelId>> {
            Some(if ctx == self.ctx {
                self.ctx_row
            } else {
                PrincipalLabels::steady(LabelId::EMPTY)
            })
        }
        fn with_label<R>(&self, id: LabelId, f: impl FnOnce(LabelRef<'_>) -> R) -> Option<R> {
            if id.is_empty() {
                return Some(f(LabelRef::EMPTY));
            }
            let i = usize::try_from(id.0).ok()?.checked_sub(1)?;
            self.labels.get(i).map(|l| f(l.as_ref()))
        }
    }
}

pub mod upstream;
