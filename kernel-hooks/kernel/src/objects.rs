//! The kernel's objects, and the [`Host`] the engine sees them through.
//!
//! Every object has an id, an optional `kuid` (the key object that signs for it) and default
//! protections. Its body is one of:
//! - data or code: backing frames, presented to user tasks in a 1 GiB slot;
//! - a security context: its encoded bytes in frames, presented in a slot like data, so user
//!   tasks can read and (if allowed) write them; the engine reads the same frames through the
//!   kernel's identity map (untrusted: they are whatever the context's writers put there);
//! - a key: the verifying key, parsed once at boot and kept parsed.
//!
//! The table is built at boot and published once ([`publish`]); after that its shape is
//! read-only: only the frames' contents (user writes) and each context's write-protection
//! state change. The page tables are the other mutable thing the engine reaches, through
//! [`Host::unmap`] and, for dirty contexts, [`Host::with_ctx`].
//!
//! # Context objects: who may write them, and how their writes reach the engine
//!
//! A context object is mapped into user tasks by the fault path like any object, so **who may
//! read or write a context is decided by the engine**, from the faulting task's own contexts:
//! contexts have no default protections, and a task may write one only if a context of its
//! holds a capability with `WRITE` on that context object, signed by the object's `kuid` (the
//! self-editing scenario's context holds one for itself). The kernel then keeps the
//! write-protection protocol of the integration guide (section 5):
//!
//! 1. a context page is always mapped **read-only** at first, whatever the engine grants;
//! 2. a write fault on it that the engine allows opens the write's window
//!    ([`CtxObject::open_write_window`]: until it closes, every other CPU's `with_ctx` of the
//!    context waits), calls [`Engine::invalidate_ctx`] (which unmaps everything granted under
//!    that context), marks the context *dirty* and maps the page writable
//!    ([`CtxObject::map_writable`]), and closes the window;
//! 3. [`Host::with_ctx`] write-protects a dirty context again (clears the W bit of its
//!    mappings, `invlpg`) before it lends the bytes, and holds the context's state lock while
//!    the engine reads them, so no write fault can make the page writable meanwhile.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use kernel_hooks::{CtxBytes, Engine, Host, Invalidation, ObjectInfo, Unmap};
use spin::{Mutex, Once};
use twizzler_capsec::{
    LabelId, LabelRef, ObjID, PrincipalLabels, Protections, RecordId, VerifyingKey,
};

use crate::clock;
use crate::paging::{CtxTag, Frame, PAGE, PageTables, SLOT_SIZE};

/// What an object holds.
pub enum Body {
    /// Data or code: one frame per page (index = page number; page 0 is the null page and
    /// has a frame too, which the engine never lets anyone map).
    Frames(Vec<Frame>),
    /// A security context.
    Context(CtxObject),
    /// A key object's verifying key.
    Key(VerifyingKey),
}

/// A security context object: its bytes start at object byte [`PAGE`] (the first page past
/// the null page, as a Twizzler object's base) and fill consecutive frames.
pub struct CtxObject {
    /// `frames[0]` is the null page; `frames[1..]` hold the bytes, at consecutive physical
    /// addresses (so the identity map shows them as one range).
    frames: Vec<Frame>,
    /// How many bytes the context has (its size: the engine sees no more).
    len: usize,
    /// Write-protection state; also held while the engine reads the bytes.
    state: Mutex<CtxState>,
}

struct CtxState {
    /// A user mapping of the context may be writable.
    dirty: bool,
    /// The CPU whose write to the context is in its window ([`CtxObject::open_write_window`]):
    /// every other CPU's `with_ctx` of the context waits until it closes.
    writer: Option<usize>,
}

/// No CPU holds [`WRITE_GATE`].
const NO_CPU: usize = usize::MAX;

/// The CPU whose context write is in its window, system-wide ([`NO_CPU`]: none). One window
/// at a time: a writer's own decisions may read other contexts, and with two windows open
/// at once, each writer could wait in `with_ctx` for the other's context.
static WRITE_GATE: AtomicUsize = AtomicUsize::new(NO_CPU);

/// A context write's window, from the write fault's `invalidate_ctx` to the writable
/// install: while it is open, only its CPU reads the context ([`Host::with_ctx`] makes the
/// others wait). Closed when dropped.
pub struct WriteWindow<'a> {
    ctx: &'a CtxObject,
}

impl Drop for WriteWindow<'_> {
    fn drop(&mut self) {
        self.ctx.state.lock().writer = None;
        WRITE_GATE.store(NO_CPU, Ordering::Release);
    }
}

impl CtxObject {
    /// A context of `bytes` in `frames` (consecutive, the first one the null page, enough for
    /// the bytes), which it fills. `None` if they do not fit.
    pub fn new(mut frames: Vec<Frame>, bytes: &[u8]) -> Option<Self> {
        let contiguous = frames
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.addr() + PAGE == b.addr()));
        let room = frames.len().saturating_sub(1).saturating_mul(PAGE as usize);
        if !contiguous || bytes.len() > room {
            return None;
        }
        for (frame, chunk) in frames.iter_mut().skip(1).zip(bytes.chunks(PAGE as usize)) {
            if !frame.write_at(0, chunk) {
                return None;
            }
        }
        Some(Self {
            frames,
            len: bytes.len(),
            state: Mutex::new(CtxState {
                dirty: false,
                writer: None,
            }),
        })
    }

    /// The first byte, in the kernel's identity map (null if the context has no bytes frame).
    fn base(&self) -> Option<*const u8> {
        self.frames.get(1).map(|f| f.addr() as *const u8)
    }

    /// The little-endian `u32` at byte `at` of the context, read as the kernel sees it now.
    pub fn read_u32(&self, at: usize) -> Option<u32> {
        let mut b = [0u8; 4];
        for (i, byte) in b.iter_mut().enumerate() {
            let off = at.checked_add(i).filter(|&o| o < self.len)?;
            let frame = self.frames.get(1 + off / PAGE as usize)?;
            *byte = frame.read_byte(off as u64);
        }
        Some(u32::from_le_bytes(b))
    }

    /// Opens the window of a write to this context (step 2 of the protocol): called before
    /// the write fault's `invalidate_ctx`, kept until the page is writable. Without it, a miss
    /// under the context on another CPU between the invalidation and the install reads the
    /// bytes from before the write and caches what they grant, and nothing sweeps that
    /// decision once the page is writable (the write itself no longer faults). With it, that
    /// miss waits, then finds the context dirty: it write-protects it and reads the bytes
    /// as they are, and the next write faults and invalidates again.
    ///
    /// Waits (holding nothing) while another CPU's window is open anywhere: see
    /// [`WRITE_GATE`]. The writer's own reads of this context (re-faulting its instruction's
    /// page, deciding the write again) pass: no one else can write the context meanwhile, as
    /// every user mapping of it is read-only until this write's install.
    pub fn open_write_window(&self) -> WriteWindow<'_> {
        let me = crate::smp::current();
        while WRITE_GATE
            .compare_exchange(NO_CPU, me, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            core::hint::spin_loop();
        }
        self.state.lock().writer = Some(me);
        WriteWindow { ctx: self }
    }

    /// Step 2 of the protocol, after `invalidate_ctx`: marks the context dirty and runs `map`
    /// (which maps the faulting page writable) under the state lock, so a concurrent
    /// `with_ctx` either sees the page read-only or sees the context dirty and protects it.
    pub fn map_writable<R>(&self, map: impl FnOnce() -> R) -> R {
        let mut state = self.state.lock();
        state.dirty = true;
        map()
    }

    /// Writes `bytes` at byte `at` of the context, as the kernel (a context edit made on
    /// behalf of its owner), holding the state lock so the engine is not reading meanwhile;
    /// the caller then calls `Engine::invalidate_ctx`. `false` if they do not fit.
    pub fn kernel_write(&self, at: usize, bytes: &[u8]) -> bool {
        let Some(end) = at.checked_add(bytes.len()).filter(|&e| e <= self.len) else {
            return false;
        };
        let _state = self.state.lock();
        for (off, b) in (at..end).zip(bytes) {
            match self.frames.get(1 + off / PAGE as usize) {
                Some(frame) => frame.store_byte(off as u64, *b),
                None => return false,
            }
        }
        true
    }

    /// A copy of the context's bytes as they are now (under the state lock, so not torn by a
    /// kernel edit).
    pub fn snapshot(&self) -> Vec<u8> {
        let _state = self.state.lock();
        (0..self.len)
            .map(|off| {
                self.frames
                    .get(1 + off / PAGE as usize)
                    .map_or(0, |f| f.read_byte(off as u64))
            })
            .collect()
    }

    /// Whether a user mapping of the context may be writable.
    pub fn is_dirty(&self) -> bool {
        self.state.lock().dirty
    }
}

/// One object.
pub struct Object {
    /// Its id.
    pub id: ObjID,
    /// The key object that signs for it.
    pub kuid: Option<ObjID>,
    /// Rights every context has on it.
    pub default_prots: Protections,
    /// The slot it is presented in (data, code and context objects).
    pub slot: Option<u64>,
    /// Its data label (`docs/DIFC.md` §1.3), interned in [`crate::labels`]: set when the
    /// kernel creates the object, never written again. [`LabelId::EMPTY`] for every object
    /// made at boot.
    pub label: LabelId,
    /// Its contents.
    pub body: Body,
}

impl Object {
    /// The frame backing byte `offset`, if the object has one there.
    pub fn frame_at(&self, offset: u64) -> Option<&Frame> {
        let page = usize::try_from(offset / PAGE).ok()?;
        match &self.body {
            Body::Frames(frames) => frames.get(page),
            Body::Context(ctx) => ctx.frames.get(page),
            Body::Key(_) => None,
        }
    }

    /// The first byte of its slot.
    pub fn base(&self) -> Option<u64> {
        self.slot.map(|s| s * SLOT_SIZE)
    }

    /// What the engine needs to know about it. (This kernel makes every id itself, so every
    /// `kuid` is trusted; Twizzler's kernel passes it only if the id verifies.)
    pub fn info(&self) -> ObjectInfo {
        ObjectInfo::new(self.kuid, self.default_prots).with_label(self.label)
    }

    /// The context, if this is a context object.
    pub fn as_context(&self) -> Option<&CtxObject> {
        match &self.body {
            Body::Context(c) => Some(c),
            _ => None,
        }
    }
}

/// How many objects user programs (and the kernel, loading them) may add after boot.
pub const MAX_DYNAMIC: usize = 256;

/// Every object: those built at boot, sorted by id, then the ones added since
/// ([`ObjectTable::insert`]), in order. Objects are never removed, so a `&Object` the table
/// hands out stays valid for ever.
pub struct ObjectTable {
    objects: Vec<Object>,
    /// Objects added after boot: each entry is set once; `claimed` counts the entries handed
    /// out (an entry claimed but not yet set reads as absent).
    dynamic: alloc::boxed::Box<[Once<Object>]>,
    claimed: AtomicUsize,
    /// Held while an object is checked for a unique id and slot and inserted.
    inserting: Mutex<()>,
}

/// Why [`ObjectTable::insert`] refused an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table has no room left.
    Full,
    /// An object already has that id or that slot.
    Taken,
}

impl ObjectTable {
    /// A table of `objects` (sorted here).
    pub fn new(mut objects: Vec<Object>) -> Self {
        objects.sort_by_key(|o| o.id);
        Self {
            objects,
            dynamic: (0..MAX_DYNAMIC).map(|_| Once::new()).collect(),
            claimed: AtomicUsize::new(0),
            inserting: Mutex::new(()),
        }
    }

    fn index(&self, id: ObjID) -> Option<usize> {
        self.objects.binary_search_by_key(&id, |o| o.id).ok()
    }

    /// The objects added after boot, with their index among them.
    fn added(&self) -> impl Iterator<Item = (usize, &Object)> {
        let n = self.claimed.load(Ordering::Acquire).min(MAX_DYNAMIC);
        self.dynamic
            .iter()
            .take(n)
            .enumerate()
            .filter_map(|(i, o)| o.get().map(|o| (i, o)))
    }

    /// The object `id`.
    pub fn get(&self, id: ObjID) -> Option<&Object> {
        self.index(id)
            .and_then(|i| self.objects.get(i))
            .or_else(|| self.added().map(|(_, o)| o).find(|o| o.id == id))
    }

    /// How many context objects there are.
    pub fn contexts(&self) -> usize {
        self.objects
            .iter()
            .chain(self.added().map(|(_, o)| o))
            .filter(|o| o.as_context().is_some())
            .count()
    }

    /// The object presented in slot `slot`.
    pub fn in_slot(&self, slot: u64) -> Option<&Object> {
        self.objects
            .iter()
            .find(|o| o.slot == Some(slot))
            .or_else(|| self.added().map(|(_, o)| o).find(|o| o.slot == Some(slot)))
    }

    /// The page-table tag of pages granted under context `ctx`: its index in the table plus
    /// one (objects added after boot count after the boot ones), or [`CtxTag::UNKNOWN`] for a
    /// context not in the table (or past the 127 tags).
    pub fn tag_of(&self, ctx: ObjID) -> CtxTag {
        let index = self.index(ctx).or_else(|| {
            self.added()
                .find(|(_, o)| o.id == ctx)
                .map(|(i, _)| self.objects.len().saturating_add(i))
        });
        index.map_or(CtxTag::UNKNOWN, |i| CtxTag::new(i.saturating_add(1)))
    }

    /// Adds `object` after boot: its id and its slot (if it has one) must be new.
    pub fn insert(&self, object: Object) -> Result<&Object, InsertError> {
        let _guard = self.inserting.lock();
        if self.get(object.id).is_some() {
            return Err(InsertError::Taken);
        }
        if let Some(slot) = object.slot
            && self.in_slot(slot).is_some()
        {
            return Err(InsertError::Taken);
        }
        let i = self.claimed.load(Ordering::Acquire);
        let entry = self.dynamic.get(i).ok_or(InsertError::Full)?;
        let added = entry.call_once(|| object);
        self.claimed.store(i + 1, Ordering::Release);
        Ok(added)
    }
}

static OBJECTS: Once<ObjectTable> = Once::new();

/// The page tables (set once paging is up). The engine's unmap callbacks lock it, so the
/// kernel never holds it across a call into the engine. Lock order: a context's state lock,
/// then this.
pub static PAGING: Mutex<Option<PageTables>> = Mutex::new(None);

/// Publishes the object table; later calls are ignored.
pub fn publish(table: ObjectTable) {
    OBJECTS.call_once(|| table);
}

/// The published object table.
pub fn table() -> Option<&'static ObjectTable> {
    OBJECTS.get()
}

/// How many times the engine asked for an unmap, and how many present pages that cleared.
static UNMAP_CALLS: AtomicU64 = AtomicU64::new(0);
static PAGES_UNMAPPED: AtomicU64 = AtomicU64::new(0);
/// A scenario's action, run once in the next context write's window: right after the write
/// fault's `invalidate_ctx`, before the page is made writable ([`in_next_write_window`]).
static WRITE_WINDOW_HOOK: Mutex<Option<WindowHook>> = Mutex::new(None);

/// What [`in_next_write_window`] runs.
type WindowHook = alloc::boxed::Box<dyn FnOnce() + Send>;

/// Runs `f` once, in the next context write's window (the several-CPU scenario that races a
/// miss on another CPU with a context write).
pub fn in_next_write_window(f: WindowHook) {
    *WRITE_WINDOW_HOOK.lock() = Some(f);
}

/// The fault path's call at the window: runs the scenario's action, if one is set.
pub fn run_write_window_hook() {
    let hook = WRITE_WINDOW_HOOK.lock().take();
    if let Some(f) = hook {
        f();
    }
}

/// `with_ctx` calls that waited for another CPU's context write to leave its window.
static WINDOW_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many `with_ctx` calls waited for another CPU's context write to leave its window
/// since boot.
pub fn window_waits() -> u64 {
    WINDOW_WAITS.load(Ordering::Relaxed)
}

/// Pages a label change's write-protection (`Unmap::WriteProtect*`) took write access from.
static PAGES_WRITE_PROTECTED: AtomicU64 = AtomicU64::new(0);

/// `rdtsc` cycles the host's unmaps spent walking page tables and shooting TLBs down, and
/// the pages they changed, since boot ([`wp_cycles`]).
static WALK_CYCLES: AtomicU64 = AtomicU64::new(0);
static SHOOTDOWN_CYCLES: AtomicU64 = AtomicU64::new(0);
static WALK_PAGES: AtomicU64 = AtomicU64::new(0);

/// Totals of the host's unmap work since boot (differences of two readings time one call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkTotals {
    /// Cycles walking page tables (unmap or write-protection).
    pub walk: u64,
    /// Cycles in TLB shootdowns.
    pub shootdown: u64,
    /// Page-table entries changed.
    pub pages: u64,
}

/// The host's unmap work so far.
pub fn wp_cycles() -> WalkTotals {
    WalkTotals {
        walk: WALK_CYCLES.load(Ordering::Relaxed),
        shootdown: SHOOTDOWN_CYCLES.load(Ordering::Relaxed),
        pages: WALK_PAGES.load(Ordering::Relaxed),
    }
}

/// Pages write-protected by label changes so far.
pub fn write_protected_pages() -> u64 {
    PAGES_WRITE_PROTECTED.load(Ordering::Relaxed)
}

/// Pages a dirty context's re-protection took write access from.
static PAGES_REPROTECTED: AtomicU64 = AtomicU64::new(0);

/// (unmap calls, pages cleared) so far.
pub fn unmap_counts() -> (u64, u64) {
    (
        UNMAP_CALLS.load(Ordering::Relaxed),
        PAGES_UNMAPPED.load(Ordering::Relaxed),
    )
}

/// Pages write-protected again by `with_ctx` so far.
pub fn reprotected_pages() -> u64 {
    PAGES_REPROTECTED.load(Ordering::Relaxed)
}

/// How many times the engine called each host method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCalls {
    /// [`Host::object`].
    pub object: u64,
    /// [`Host::with_ctx`].
    pub with_ctx: u64,
    /// [`Host::with_key`].
    pub with_key: u64,
    /// [`Host::monotonic_ns`].
    pub clock: u64,
    /// [`Host::unmap`].
    pub unmap: u64,
}

impl HostCalls {
    /// The calls made between `earlier` and `self`.
    pub fn since(&self, earlier: &HostCalls) -> HostCalls {
        HostCalls {
            object: self.object.wrapping_sub(earlier.object),
            with_ctx: self.with_ctx.wrapping_sub(earlier.with_ctx),
            with_key: self.with_key.wrapping_sub(earlier.with_key),
            clock: self.clock.wrapping_sub(earlier.clock),
            unmap: self.unmap.wrapping_sub(earlier.unmap),
        }
    }

    /// Calls other than the clock.
    pub fn besides_clock(&self) -> u64 {
        self.object + self.with_ctx + self.with_key + self.unmap
    }
}

static CALLS_OBJECT: AtomicU64 = AtomicU64::new(0);
static CALLS_WITH_CTX: AtomicU64 = AtomicU64::new(0);
static CALLS_WITH_KEY: AtomicU64 = AtomicU64::new(0);
static CALLS_CLOCK: AtomicU64 = AtomicU64::new(0);

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The host calls made so far.
pub fn host_calls() -> HostCalls {
    HostCalls {
        object: CALLS_OBJECT.load(Ordering::Relaxed),
        with_ctx: CALLS_WITH_CTX.load(Ordering::Relaxed),
        with_key: CALLS_WITH_KEY.load(Ordering::Relaxed),
        clock: CALLS_CLOCK.load(Ordering::Relaxed),
        unmap: UNMAP_CALLS.load(Ordering::Relaxed),
    }
}

/// Revoked key objects and records: the kernel's sets (any size, on the heap), consulted by
/// the engine on misses only. A revocation is recorded here first, then the engine is told.
static REVOKED_KEYS: Mutex<BTreeSet<ObjID>> = Mutex::new(BTreeSet::new());
static REVOKED_RECORDS: Mutex<BTreeSet<RecordId>> = Mutex::new(BTreeSet::new());

/// Revokes key object `kuid`: records it, then has the engine take away (and unmap, with
/// shootdown) everything granted under it.
pub fn revoke_key(kuid: ObjID) -> Invalidation {
    REVOKED_KEYS.lock().insert(kuid);
    ENGINE.revoke_key(kuid)
}

/// Revokes record `id` (and every delegation derived from it), as [`revoke_key`] does.
pub fn revoke_record(id: RecordId) -> Invalidation {
    REVOKED_RECORDS.lock().insert(id);
    ENGINE.revoke_record(id)
}

/// The kernel as the engine's host: the object table, the clock, the page tables.
pub struct KernelHost;

/// The decision engine, with its caches, for the whole kernel.
pub static ENGINE: Engine<KernelHost> = Engine::new(KernelHost);

impl Host for KernelHost {
    // The default, `PerContext`: every user page carries the tag of the context it was
    // granted under (see `paging::CtxTag`).

    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        bump(&CALLS_OBJECT);
        table()?.get(id).map(Object::info)
    }

    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        bump(&CALLS_WITH_CTX);
        let object = table()?.get(ctx)?;
        let c = object.as_context()?;
        let base = c.base()?;
        // Held until the engine is done: a write fault on this context waits here before it
        // can map a page writable (step 2 of the protocol takes this lock). The engine calls
        // only `with_key` and `object` inside, which do not take it.
        // A write to the context is in its window on another CPU: wait (holding nothing) until
        // it closes, so no decision is made from the bytes before that write.
        let me = crate::smp::current();
        let mut waited = false;
        let mut state = loop {
            let state = c.state.lock();
            match state.writer {
                Some(cpu) if cpu != me => {
                    drop(state);
                    if !waited {
                        // Counted as it starts: a scenario waits for this to know the miss
                        // is held back.
                        WINDOW_WAITS.fetch_add(1, Ordering::Relaxed);
                        waited = true;
                    }
                    core::hint::spin_loop();
                }
                _ => break state,
            }
        };
        if state.dirty {
            // Step 3: take write access away again before lending the bytes.
            let mut paging = PAGING.lock();
            let reprotected = match (object.slot, paging.as_mut()) {
                (Some(slot), Some(pt)) => pt.write_protect_slot(slot),
                _ => 0,
            };
            if reprotected > 0 {
                // No CPU may keep a writable translation while the engine reads.
                crate::smp::shootdown();
            }
            drop(paging);
            PAGES_REPROTECTED.fetch_add(reprotected as u64, Ordering::Relaxed);
            state.dirty = false;
        }
        // SAFETY: `base .. base + len` lies in the context's byte frames (checked to fit when
        // the object was made), which are RAM in the kernel's identity map, owned by the
        // object table (published once, never freed): mapped readable for the whole call.
        // Other CPUs may run user tasks meanwhile, and the kernel edits contexts at run time
        // (`CtxObject::kernel_write`, under `state`), so the bytes are shared memory: they are
        // lent with `CtxBytes::shared`, which reads them only with relaxed atomic byte loads,
        // never through a reference, so a concurrent writer is no undefined behaviour (a torn
        // read is the engine's to detect). Writers are held off anyway: user tasks reach the
        // bytes only through mappings this kernel makes, which are read-only now on every CPU
        // (the dirty ones were just write-protected and every CPU's TLB shot down before the
        // page-table lock was released), no write fault can make one writable before `state`
        // is released, and the kernel's own edits take `state` too.
        let bytes = unsafe { CtxBytes::shared(base, c.len) };
        let r = f(bytes);
        drop(state);
        Some(r)
    }

    /// The context's principal row (`crate::labels`). Every context this kernel makes is
    /// registered when it is made (its row, or the empty label for the boot contexts), so
    /// this is never `None`: an id that names no context gets the empty row, and the engine
    /// refuses it for want of a context (`with_ctx`), with today's reason, not as unlabelled.
    fn ctx_label(&self, ctx: ObjID) -> Option<PrincipalLabels<LabelId>> {
        Some(crate::labels::principal(ctx))
    }

    /// Lends an interned label without a lock (interned labels are append-only).
    fn with_label<R>(&self, id: LabelId, f: impl FnOnce(LabelRef<'_>) -> R) -> Option<R> {
        crate::labels::with_label(id, f)
    }

    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        bump(&CALLS_WITH_KEY);
        match &table()?.get(kuid)?.body {
            Body::Key(key) => Some(f(key)),
            _ => None,
        }
    }

    fn key_revoked(&self, kuid: ObjID) -> bool {
        REVOKED_KEYS.lock().contains(&kuid)
    }

    fn record_revoked(&self, id: &RecordId) -> bool {
        REVOKED_RECORDS.lock().contains(id)
    }

    fn monotonic_ns(&self) -> u64 {
        crate::timer::note_engine_call();
        bump(&CALLS_CLOCK);
        clock::monotonic_ns()
    }

    /// Unmaps exactly the pages granted under the context named (by their tags), then shoots
    /// down every CPU's TLB before returning (`smp::shootdown`, under the page-table lock, so
    /// a fault path installing an entry under a ticket waits for the whole unmap).
    fn unmap(&self, what: Unmap) {
        UNMAP_CALLS.fetch_add(1, Ordering::Relaxed);
        unmap_pages(what);
    }
}

/// The host's unmap, for the engine and for the kernel itself (a detached context's pages,
/// see [`crate::task::detach`]): clears the pages `what` names, shooting down every CPU's
/// TLB before it returns when any was mapped. Returns how many were.
pub fn unmap_pages(what: Unmap) -> usize {
    let Some(t) = table() else { return 0 };
    let slot_of = |target: ObjID| t.get(target).and_then(|o| o.slot);
    let mut paging = PAGING.lock();
    let Some(pt) = paging.as_mut() else { return 0 };
    let t0 = crate::cpu::rdtsc();
    let cleared = match what {
        Unmap::Object { ctx, target } => {
            slot_of(target).map_or(0, |slot| pt.unmap_slot_under(slot, t.tag_of(ctx)))
        }
        Unmap::Context(ctx) => pt.unmap_all_under(t.tag_of(ctx)),
        Unmap::ObjectEverywhere(target) => slot_of(target).map_or(0, |s| pt.unmap_slot(s)),
        // A real write-protection: W cleared in place, pages stay mapped for reads and fetches.
        Unmap::WriteProtectContext(ctx) => pt.write_protect_all_under(t.tag_of(ctx)),
        Unmap::WriteProtectObjectEverywhere(target) => {
            slot_of(target).map_or(0, |s| pt.write_protect_slot(s))
        }
    };
    if what.is_write_protect() {
        PAGES_WRITE_PROTECTED.fetch_add(cleared as u64, Ordering::Relaxed);
    }
    let t1 = crate::cpu::rdtsc();
    if cleared > 0 {
        crate::smp::shootdown();
    }
    let t2 = crate::cpu::rdtsc();
    drop(paging);
    WALK_CYCLES.fetch_add(t1.wrapping_sub(t0), Ordering::Relaxed);
    SHOOTDOWN_CYCLES.fetch_add(t2.wrapping_sub(t1), Ordering::Relaxed);
    WALK_PAGES.fetch_add(cleared as u64, Ordering::Relaxed);
    PAGES_UNMAPPED.fetch_add(cleared as u64, Ordering::Relaxed);
    cleared
}
