//! Editing a context object in place, through the program's own mapping of it.

use twizzler_capsec::{SecCtx, SecCtxEditor};

use crate::abi::Error;
use crate::heap::PAGE;

/// Edits the context object mapped at `base` (`pages` pages past its null page) in place:
/// parses the bytes it holds, applies `change` with the crate's editor, and writes back only
/// the bytes that differ, laid out for in-place updates. The writes are ordinary stores into
/// the object: page faults the engine decides (the task needs `W` on the context object),
/// under the kernel's context write-protection protocol.
///
/// Writing only what differs is what makes editing the *active* context workable: each
/// store that finds the context write-protected invalidates everything granted under it
/// (this program's code, stack and heap pages too), so the cost grows with the bytes written
/// while the edit runs, not with the context's size.
pub fn edit(base: u64, pages: u64, change: impl FnOnce(&mut SecCtxEditor)) -> Result<(), Error> {
    let len = usize::try_from(pages * PAGE).map_err(|_| Error::BadArg)?;
    let at = (base + PAGE) as *mut u8;
    let (mut ed, heap_offset) = {
        // SAFETY: the context object's bytes past its null page are `len` bytes the task has
        // mapped (pages appear on fault), which no Rust reference of the program's points
        // into; this borrow ends before the bytes are written below.
        let current = unsafe { core::slice::from_raw_parts(at as *const u8, len) };
        match SecCtx::parse(current) {
            Ok(c) => (SecCtxEditor::from_ctx(&c), Some(c.heap_offset())),
            Err(_) => return Err(Error::Malformed),
        }
    };
    change(&mut ed);
    let bytes = ed
        .encode_for_update(heap_offset)
        .map_err(|_| Error::NoSpace)?;
    if bytes.len() > len {
        return Err(Error::NoSpace);
    }
    for (i, b) in bytes.iter().enumerate() {
        // SAFETY: `i < bytes.len() <= len`, inside the object's mapped bytes (as above); no
        // reference into them is alive, and `bytes` (on the heap) does not overlap them.
        unsafe {
            let p = at.add(i);
            if core::ptr::read_volatile(p) != *b {
                core::ptr::write_volatile(p, *b);
            }
        }
    }
    Ok(())
}
