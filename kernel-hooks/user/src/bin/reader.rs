//! The other microservice (see `owner`): it publishes one of its private contexts in the
//! mailbox, waits for the owner's ids and the capability the owner signed for that context,
//! installs it, attaches and switches to the context, and reads the shared object in a
//! loop, counting every granted read in the mailbox, until a read is denied.
//!
//! First it tries what it must not do: read the owner's private object (mapped by id; its
//! contexts hold no capability for it), the owner's heap (by address, not mapped), the
//! owner's heap and stack mapped by the ids the owner published (no capability, no default
//! rights), all pages the owner has mapped for itself while it runs on the other CPU, and
//! attach the owner's own context (a private one: no default rights).
//!
//! Arguments: the mailbox object's id (low, high).

#![no_std]
#![no_main]

use kernel_hooks_user::abi::{mailbox, report};
use kernel_hooks_user::heap::PAGE;
use kernel_hooks_user::mailbox::Mailbox;
use kernel_hooks_user::rt::try_read;
use kernel_hooks_user::{Error, ctx, entry, heap, sys};
use twizzler_capsec::{CAP_LEN, Cap, ObjID};

entry!(main);

fn main(args: [u64; 4]) -> u64 {
    match run(kernel_hooks_user::abi::id_from_words(args[0], args[1])) {
        Ok(()) => 0,
        Err(e) => {
            sys::report(100, report::ERROR, e as u64);
            1
        }
    }
}

/// Pages of its private contexts.
const CTX_PAGES: u64 = kernel_hooks_user::abi::self_info::CONTEXT_PAGES;

fn run(mailbox_id: ObjID) -> Result<(), Error> {
    let me = heap::init()?;
    // SAFETY: the mailbox object is used only as the mailbox.
    let mb = unsafe { Mailbox::at(sys::map(mailbox_id)?) };
    // Its context: one of its private context objects (no other task may attach it), which
    // it publishes for the owner to sign its capability to.
    let ctx = me.context(0)?;
    mb.set_id(mailbox::CTX, ctx);
    mb.set(mailbox::CTX_SET, 1);
    while mb.get(mailbox::READY) == 0 {
        sys::yield_now();
    }
    let cap = Cap::decode(&mb.bytes::<CAP_LEN>(mailbox::CAP)).map_err(|_| Error::Malformed)?;
    // The owner's capability, and capabilities for its own code, stack and heap (signed with
    // its own key: no default rights on them), without which it could not run once the
    // context is active.
    let mine = me.caps_for(ctx)?;
    ctx::edit(sys::map(ctx)?, CTX_PAGES, |ed| {
        ed.add_cap(&cap);
        for c in &mine {
            ed.add_cap(c);
        }
    })?;
    // The owner's own context holds capabilities for the owner's memory: it is private to
    // the owner, so the reader may not attach it, although it knows its id.
    match sys::attach(mb.id(mailbox::OWNER_CTX)) {
        Ok(()) => sys::report(7, report::OK, 0),
        Err(e) => sys::report(7, report::ERROR, e as u64),
    }
    sys::attach(ctx)?;
    sys::switch(ctx)?;
    mb.set(mailbox::READER_SWITCHED, 1);
    while mb.get(mailbox::OWNER_TOUCHED) == 0 {
        sys::yield_now();
    }
    let secret = sys::map(mb.id(mailbox::SECRET))? + PAGE;
    match try_read(secret) {
        Ok(b) => sys::report(3, report::OK, u64::from(b)),
        Err(_) => sys::report(3, report::DENIED, 0),
    }
    match try_read(mb.get(mailbox::HEAP) + PAGE) {
        Ok(b) => sys::report(4, report::OK, u64::from(b)),
        Err(_) => sys::report(4, report::DENIED, 0),
    }
    // Ids are not secrets: mapped by id, the owner's heap must still be denied.
    let heap = sys::map(mb.id(mailbox::HEAP_ID))? + PAGE;
    match try_read(heap) {
        Ok(b) => sys::report(5, report::OK, u64::from(b)),
        Err(_) => sys::report(5, report::DENIED, 0),
    }
    let stack = sys::map(mb.id(mailbox::STACK_ID))? + PAGE;
    match try_read(stack) {
        Ok(b) => sys::report(6, report::OK, u64::from(b)),
        Err(_) => sys::report(6, report::DENIED, 0),
    }
    let shared = sys::map(mb.id(mailbox::OBJECT))? + PAGE;
    while try_read(shared).is_ok() {
        mb.bump(mailbox::READS);
    }
    // The denial first: the kernel attaches the denials it delivered to the next report.
    sys::report(1, report::DENIED, 0);
    sys::report(2, report::OK, mb.get(mailbox::READS));
    Ok(())
}
