//! In-kernel tests of lifetimes: memory contexts going away while a revocation walks the
//! memory contexts that map an object.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use twizzler_abi::{
    device::CacheType,
    object::{MAX_SIZE, Protections},
    syscall::MapFlags,
};
use twizzler_kernel_macros::kernel_test;

use super::fault_path::va;
use super::object_with;
use crate::{
    arch::context::ArchContext,
    memory::context::{Context, ObjectContextInfo, UserContext, virtmem::Slot},
    obj::{InvalidateMode, PageNumber},
    processor::sched::{SchedFlags, schedule},
    thread::{entry::run_closure_in_new_thread, priority::Priority},
};

/// How many memory contexts thread B makes and lets go of.
const ROUNDS: usize = 200;

#[kernel_test]
fn port_revocation_racing_the_drop_of_a_memory_context_that_maps_its_object() {
    // A revocation walks the memory contexts that map its object (`Object::invalidate_in`,
    // the port's per-context unmap, and upstream's `Object::invalidate`), upgrading each weak
    // reference the object keeps. If the walk holds the last reference when it lets one go,
    // the context's drop runs there, and it takes the object's table of contexts
    // (`remove_context`): the walk must no longer hold that lock (upstream's mutex panics,
    // "not re-entrant"). Thread B maps the object in a fresh memory context, waits until A's
    // walk has passed over it, and lets it go, ROUNDS times, while A revokes in a loop.
    let obj = object_with(None, &[0x11; 64]);
    let sctx = object_with(None, &[]).id();
    let pages = PageNumber::from(0usize)..PageNumber::meta_page().next();
    let passes = Arc::new(AtomicU64::new(0));
    let rounds = Arc::new(AtomicUsize::new(0));
    let (_, b) = run_closure_in_new_thread(Priority::USER, {
        let (obj, passes, rounds) = (obj.clone(), passes.clone(), rounds.clone());
        move || {
            let slot =
                Slot::try_from(va((23 * MAX_SIZE) as u64)).unwrap_or_else(|_| panic!("slot"));
            for _ in 0..ROUNDS {
                let mem = Arc::new(Context::new());
                mem.register_sctx(sctx, ArchContext::new());
                let info = ObjectContextInfo::new(
                    obj.clone(),
                    Protections::READ,
                    CacheType::WriteBack,
                    MapFlags::empty(),
                );
                if mem.insert_object(slot, &info).is_err() {
                    panic!("the object maps in a fresh memory context");
                }
                // Two of A's walks begun since the mapping: A has held `mem` at least once,
                // and is most likely inside its next walk when B lets go of it.
                let seen = passes.load(Ordering::Acquire);
                while passes.load(Ordering::Acquire) < seen + 2 {
                    schedule(SchedFlags::YIELD | SchedFlags::REINSERT);
                }
                drop(mem);
                rounds.fetch_add(1, Ordering::AcqRel);
            }
        }
    });
    while rounds.load(Ordering::Acquire) < ROUNDS {
        obj.invalidate_in(sctx, pages.clone());
        passes.fetch_add(1, Ordering::AcqRel);
        obj.invalidate(pages.clone(), InvalidateMode::Full);
        passes.fetch_add(1, Ordering::AcqRel);
    }
    b.wait();
    assert_eq!(
        rounds.load(Ordering::Acquire),
        ROUNDS,
        "B let go of every context"
    );
}
