//! Editing a context object in place, through the program's own mapping of it.

use twizzler_capsec::{SecCtx, SecCtxEditor};

use crate::abi::Error;
use crate::heap::PAGE;

/// Edits the context object mapped at `base` (`pages` pages past its null page) in place:
/// parses the bytes it holds, applies `change` with the crate's editor, and writes the result
/// back over them, laid out for in-place updates. The writes are ordinary stores into the
/// object: page faults the engine decides (the task needs `W` on the context object), under
/// the kernel's context write-protection protocol.
pub fn edit(base: u64, pages: u64, change: impl FnOnce(&mut SecCtxEditor)) -> Result<(), Error> {
    let len = usize::try_from(pages * PAGE).map_err(|_| Error::BadArg)?;
    let at = (base + PAGE) as *mut u8;
    // SAFETY: the context object's bytes past its null page are `len` bytes the task has
    // mapped (pages appear on fault), which no Rust reference of the program's points into;
    // they are read here, and written below once this borrow has ended.
    let current = unsafe { core::slice::from_raw_parts(at as *const u8, len) };
    let (mut ed, heap_offset) = match SecCtx::parse(current) {
        Ok(c) => (SecCtxEditor::from_ctx(&c), Some(c.heap_offset())),
        Err(_) => return Err(Error::Malformed),
    };
    change(&mut ed);
    let bytes = ed
        .encode_for_update(heap_offset)
        .map_err(|_| Error::NoSpace)?;
    if bytes.len() > len {
        return Err(Error::NoSpace);
    }
    // SAFETY: as above; `bytes.len() <= len`, and `bytes` (on the heap) does not overlap the
    // context object.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len()) };
    Ok(())
}
