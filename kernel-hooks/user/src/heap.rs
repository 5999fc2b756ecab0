//! The global allocator: a first-fit heap (`linked_list_allocator`) over the heap object the
//! loader made for the program (no default protections, keyed by the program's own key; its
//! start context holds the capability for it), so every heap page is a page fault the engine
//! decides and no other program can read it, whatever ids it learns.

use linked_list_allocator::LockedHeap;

use crate::abi::Error;
use crate::own::Own;

/// Bytes per page.
pub const PAGE: u64 = 4096;

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Hands the pages past the null page of the program's heap object to the allocator and
/// returns the program's own key and objects ([`Own`]). Call once, before allocating.
/// (Programs create further objects themselves, with `sys::create_object` and the keys they
/// choose.)
pub fn init() -> Result<Own, Error> {
    let own = Own::get()?;
    let mut heap = HEAP.lock();
    if heap.size() != 0 {
        return Err(Error::Already);
    }
    let len = usize::try_from(own.heap_pages * PAGE).map_err(|_| Error::Malformed)?;
    // SAFETY: `heap_base + PAGE .. heap_base + (heap_pages + 1) * PAGE` is the heap object's
    // memory past its null page, which the loader made for this program and mapped for it
    // (pages appear on fault, granted by its start context's capability), used by nothing
    // else; the allocator is empty (checked above), so it is handed over once.
    unsafe { heap.init((own.heap_base + PAGE) as *mut u8, len) };
    Ok(own)
}
