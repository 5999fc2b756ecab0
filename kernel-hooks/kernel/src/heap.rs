//! The kernel heap: a fixed arena in `.bss`, served by `linked_list_allocator`.
//!
//! Only boot-time work allocates (building keys, capabilities and security contexts with
//! `SecCtxEditor`, and the object table); the fault path and the engine's cache hit path do
//! not. A small, widely used allocator crate is preferred over a hand-written one: the heap's
//! speed does not matter here, its correctness does.

use core::cell::UnsafeCell;

use linked_list_allocator::LockedHeap;

/// Bytes of heap.
pub const HEAP_BYTES: usize = 8 * 1024 * 1024;

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; HEAP_BYTES]>);

// SAFETY: the arena is handed to the allocator once, in `init`, and never touched directly
// again; the allocator serialises access with its own lock.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; HEAP_BYTES]));

/// Hands the arena to the allocator. Call once, before anything allocates.
pub fn init() {
    let base = ARENA.0.get().cast::<u8>();
    // SAFETY: the arena is static (lives forever), unused by anything else, and `init` runs
    // once at boot before any allocation.
    unsafe { ALLOCATOR.lock().init(base, HEAP_BYTES) };
}

/// Bytes of heap in use.
pub fn used() -> usize {
    ALLOCATOR.lock().used()
}
