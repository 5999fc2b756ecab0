//! The global allocator: a first-fit heap (`linked_list_allocator`) over a data object the
//! program creates and maps itself, so every heap page is a page fault the engine decides.

use linked_list_allocator::LockedHeap;
use twizzler_capsec::{ObjID, Protections};

use crate::abi::{Error, KIND_DATA};
use crate::sys;

/// Bytes per page.
pub const PAGE: u64 = 4096;

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Creates a heap object of `pages` pages (readable and writable by default, no key), maps it
/// and hands its pages past the null page to the allocator. Call once, before allocating.
pub fn init(pages: u64) -> Result<ObjID, Error> {
    let id = sys::create_object(
        KIND_DATA,
        pages,
        Protections::READ | Protections::WRITE,
        None,
    )?;
    let base = sys::map(id)?;
    let mut heap = HEAP.lock();
    if heap.size() != 0 {
        return Err(Error::Already);
    }
    // SAFETY: `base + PAGE .. base + (pages + 1) * PAGE` is the object's memory past its null
    // page, mapped (on fault) readable and writable for this task and used by nothing else;
    // the allocator is empty (checked above), so it is handed over once.
    unsafe { heap.init((base + PAGE) as *mut u8, (pages * PAGE) as usize) };
    Ok(id)
}
