//! Writes into security-context objects (twizzler-port; integration guide, section 5).
//!
//! The engine's cache hit does not read the context, so the kernel must see every write to a
//! context object the engine reads. Twizzler's userspace edits a context by writing its
//! object through an ordinary mapping, so the fault path keeps the guide's protocol:
//!
//! 1. a page of a context object is mapped **read-only** at first, whatever the engine grants
//!    ([`check_fault`](super::check_fault) takes W off);
//! 2. a write fault into it that the engine allows opens the write's **window**
//!    ([`open_window`]: until it closes, every other thread's `with_ctx` of that context
//!    waits), calls `invalidate_ctx` (every decision made under the context is forgotten and
//!    everything mapped under it unmapped, in every memory context it was attached in),
//!    faults the instruction's page in again if the thread edits its own context, decides the
//!    write again, marks the context **dirty**, and maps the page writable. The window closes
//!    when the fault is done ([`FaultScope`], dropped at the end of `page_fault_to_region`),
//!    after the install;
//! 3. `with_ctx` of a dirty context first takes W off every mapping of it (upstream's
//!    `WriteProtect`, which clears W and nothing else with `0005`), then lends the bytes,
//!    holding the context's lock until the engine is done: the next write faults again.
//!
//! Without the window, a miss under the context by another thread between the invalidation
//! and the writable install reads the bytes from before the write and caches what they
//! grant, and nothing sweeps that decision after the write (the write no longer faults). One
//! window is open at a time, system-wide: a writer's own decisions may read other contexts,
//! and two writers of each other's contexts must not wait for each other. A waiting thread
//! holds no lock and yields.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use twizzler_abi::object::ObjID;

use crate::{
    mutex::Mutex,
    obj::{InvalidateMode, LookupFlags, LookupResult, PageNumber, lookup_object},
    processor::sched::{SchedFlags, schedule},
    spinlock::Spinlock,
    thread::current_thread_ref,
};

use super::SecurityContextRef;

/// No thread.
const NO_THREAD: u64 = u64::MAX;

/// The thread whose context write is in its window, system-wide ([`NO_THREAD`]: none).
static WRITE_GATE: AtomicU64 = AtomicU64::new(NO_THREAD);

/// How many reads of a context ([`CtxWrites::read`]) found another thread's window open and
/// waited for it to close: one per held read, counted once it starts waiting.
static HELD_READS: AtomicU64 = AtomicU64::new(0);

/// How many reads of a context have waited out another thread's write window since boot.
pub fn held_reads() -> u64 {
    HELD_READS.load(Ordering::Acquire)
}

/// The current thread's id ([`NO_THREAD`] outside a thread).
fn me() -> u64 {
    current_thread_ref().map_or(NO_THREAD, |t| t.id())
}

/// Lets others run while this thread waits for a window to close.
fn wait_a_moment() {
    if current_thread_ref().is_some() {
        schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
    } else {
        core::hint::spin_loop();
    }
}

/// One context's write-protection state (on its [`SecurityContext`](super::SecurityContext)).
pub struct CtxWrites {
    /// Dirty: a user mapping of the context may be writable. Held while the engine reads
    /// the bytes, and to open a window.
    dirty: Mutex<bool>,
    /// The thread whose write to this context is in its window ([`NO_THREAD`]: none).
    writer: AtomicU64,
}

impl CtxWrites {
    /// A context just mapped by the kernel: dirty, since a user mapping of it made before
    /// (while no thread had it attached) may be writable.
    pub fn new() -> Self {
        Self {
            dirty: Mutex::new(true),
            writer: AtomicU64::new(NO_THREAD),
        }
    }

    /// `with_ctx`'s side (step 3): waits out another thread's window, takes W off every
    /// mapping of context `ctx` if it is dirty, and runs `f` holding the lock (so no write
    /// fault can make a page of it writable meanwhile).
    pub fn read<R>(&self, ctx: ObjID, f: impl FnOnce() -> R) -> R {
        let me = me();
        let mut counted = false;
        let mut dirty = loop {
            let dirty = self.dirty.lock();
            let writer = self.writer.load(Ordering::Acquire);
            if writer == NO_THREAD || writer == me {
                break dirty;
            }
            drop(dirty);
            if !counted {
                counted = true;
                HELD_READS.fetch_add(1, Ordering::AcqRel);
            }
            wait_a_moment();
        };
        if *dirty {
            if let LookupResult::Found(obj) = lookup_object(ctx, LookupFlags::empty()) {
                let whole = PageNumber::from(0usize)..PageNumber::meta_page().next();
                obj.invalidate(whole, InvalidateMode::WriteProtect);
            }
            *dirty = false;
        }
        f()
    }

    /// Step 2, once the write is decided again: the page about to be mapped writable makes
    /// the context dirty.
    pub fn mark_dirty(&self) {
        *self.dirty.lock() = true;
    }
}

/// A thread's faults in progress (nested: a context write faults its instruction's page in
/// again) and the window it holds, if any (on the thread's `SecCtxMgr`).
pub struct ThreadWrites {
    depth: AtomicU32,
    window: Spinlock<Option<(SecurityContextRef, u32)>>,
}

impl ThreadWrites {
    /// No fault in progress, no window.
    pub const fn new() -> Self {
        Self {
            depth: AtomicU32::new(0),
            window: Spinlock::new(None),
        }
    }
}

/// Opens the window of the current thread's write to context `sctx` (step 2), at the
/// thread's current fault depth: waits (yielding) while another thread's window is open.
/// Closed by the [`FaultScope`] of that depth. Nothing happens outside a thread, or if the
/// thread holds a window already.
pub fn open_window(sctx: &SecurityContextRef) {
    let Some(ct) = current_thread_ref() else {
        return;
    };
    let me = ct.id();
    if WRITE_GATE.load(Ordering::Acquire) == me {
        return;
    }
    while WRITE_GATE
        .compare_exchange(NO_THREAD, me, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        wait_a_moment();
    }
    {
        // Under the context's lock: a `with_ctx` reading it now finishes first.
        let _dirty = sctx.writes.dirty.lock();
        sctx.writes.writer.store(me, Ordering::Release);
    }
    let depth = ct.secctx.writes.depth.load(Ordering::Relaxed);
    *ct.secctx.writes.window.lock() = Some((sctx.clone(), depth));
}

/// One fault of the current thread in progress: dropped when the fault is done, it closes
/// the window opened during it (after the install). `page_fault_to_region` makes one first.
pub struct FaultScope {
    depth: u32,
}

/// The current thread's [`FaultScope`] for the fault starting now (`None` outside a thread).
pub fn fault_scope() -> Option<FaultScope> {
    let ct = current_thread_ref()?;
    let depth = ct.secctx.writes.depth.fetch_add(1, Ordering::Relaxed) + 1;
    Some(FaultScope { depth })
}

impl Drop for FaultScope {
    fn drop(&mut self) {
        let Some(ct) = current_thread_ref() else {
            return;
        };
        let writes = &ct.secctx.writes;
        // Only the thread holding the gate can hold a window: every other fault (nearly
        // all of them) takes no lock here.
        if WRITE_GATE.load(Ordering::Acquire) != ct.id() {
            writes.depth.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let mine = {
            let mut window = writes.window.lock();
            match window.as_ref() {
                Some((_, d)) if *d == self.depth => window.take(),
                _ => None,
            }
        };
        if let Some((sctx, _)) = mine {
            sctx.writes.writer.store(NO_THREAD, Ordering::Release);
            WRITE_GATE.store(NO_THREAD, Ordering::Release);
        }
        writes.depth.fetch_sub(1, Ordering::Relaxed);
    }
}
