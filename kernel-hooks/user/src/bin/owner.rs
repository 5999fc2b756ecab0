//! One of two microservices sharing an object, run at the same time as `reader` on another
//! CPU: the owner makes the shared object and a capability for the context the reader
//! published (one of the reader's private contexts), publishes the object's id and the
//! capability's bytes in the mailbox the kernel gives them, waits until the reader is reading
//! in a loop, and revokes the capability under it. It records how many reads the reader had
//! counted when the revocation returned; the kernel checks the reader did at most one more.
//!
//! Before it publishes anything, it moves into a context of its own holding a capability for
//! a private object (no default protections) and writes to that object; it publishes the
//! private object's id and its heap's address too, which the reader must not be able to read
//! (its own contexts grant neither, and it has not mapped the heap) although the owner's
//! pages are mapped while it runs.
//!
//! Arguments: the mailbox object's id (low, high).

#![no_std]
#![no_main]

extern crate alloc;

use kernel_hooks_user::abi::{self, KIND_DATA, mailbox, report};
use kernel_hooks_user::heap::PAGE;
use kernel_hooks_user::mailbox::Mailbox;
use kernel_hooks_user::rt::{try_read, try_write};
use kernel_hooks_user::{Error, ctx, entry, heap, sys};
use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};

entry!(main);

/// Pages of its private contexts (the editor lays the heap out a page past the tables).
const CTX_PAGES: u64 = abi::self_info::CONTEXT_PAGES;
/// Reads the reader must have done before the revocation.
const READS_FIRST: u64 = 10;

fn main(args: [u64; 4]) -> u64 {
    match run(kernel_hooks_user::abi::id_from_words(args[0], args[1])) {
        Ok(()) => 0,
        Err(e) => {
            sys::report(100, report::ERROR, e as u64);
            1
        }
    }
}

/// What the owner writes into its private object.
const SECRET_BYTE: u8 = 0x5e;

fn run(mailbox_id: ObjID) -> Result<(), Error> {
    let me = heap::init()?;
    let heap_id = me.heap;
    // SAFETY: the mailbox object is used only as the mailbox.
    let mb = unsafe { Mailbox::at(sys::map(mailbox_id)?) };
    let mut seed = [0u8; 32];
    sys::entropy(&mut seed)?;
    let sk =
        SigningKey::from_entropy(SigningScheme::Ed25519, &seed).map_err(|_| Error::Malformed)?;
    let kuid = sys::create_key(&sk.verifying_key().encode())?;
    // Its private object, reachable only through a capability in its own context, made
    // before it is active (a small edit of the active context only).
    let secret = sys::create_object(KIND_DATA, 1, Protections::empty(), Some(kuid))?;
    let rw = Protections::READ | Protections::WRITE;
    // Its own context: one of its private context objects, which no other task may attach.
    let own_ctx = me.context(0)?;
    let own_cap =
        Cap::mint(CapGrant::new(secret, own_ctx, rw), &sk).map_err(|_| Error::Malformed)?;
    // It also grants the owner's code, stack and heap (no default rights on them).
    let mine = me.caps_for(own_ctx)?;
    ctx::edit(sys::map(own_ctx)?, CTX_PAGES, |ed| {
        ed.add_cap(&own_cap);
        for c in &mine {
            ed.add_cap(c);
        }
    })?;
    sys::attach(own_ctx)?;
    sys::switch(own_ctx)?;
    let secret_page = sys::map(secret)? + PAGE;
    // SAFETY: the private object's page is used by nothing else of this program.
    if unsafe { try_write(secret_page, SECRET_BYTE) }.is_err() {
        return Err(Error::NotAllowed);
    }
    let shared = sys::create_object(KIND_DATA, 1, Protections::empty(), Some(kuid))?;
    // The reader's capability, for the context the reader published (one of its private
    // ones): signed here, handed over as bytes, installed by the reader itself.
    while mb.get(mailbox::CTX_SET) == 0 {
        sys::yield_now();
    }
    let reader_ctx = mb.id(mailbox::CTX);
    let cap = Cap::mint(CapGrant::new(shared, reader_ctx, Protections::READ), &sk)
        .map_err(|_| Error::Malformed)?;
    mb.set_bytes(mailbox::CAP, &cap.encode());
    mb.set_id(mailbox::OBJECT, shared);
    mb.set_id(mailbox::OWNER_CTX, own_ctx);
    mb.set_id(mailbox::SECRET, secret);
    mb.set(mailbox::HEAP, sys::map(heap_id)?);
    mb.set_id(mailbox::HEAP_ID, heap_id);
    mb.set_id(mailbox::STACK_ID, me.stack);
    mb.set(mailbox::READY, 1);
    sys::report(1, report::OK, 0);

    // Once the reader has switched (a switch unmaps pages), the owner's private page and
    // heap page are touched again, so they are mapped for the owner while the reader tries
    // them.
    while mb.get(mailbox::READER_SWITCHED) == 0 {
        sys::yield_now();
    }
    // SAFETY: as above.
    if unsafe { try_write(secret_page, SECRET_BYTE) }.is_err()
        || try_read(mb.get(mailbox::HEAP) + PAGE).is_err()
    {
        return Err(Error::NotAllowed);
    }
    mb.set(mailbox::OWNER_TOUCHED, 1);

    while mb.get(mailbox::READS) < READS_FIRST {
        sys::yield_now();
    }
    match sys::revoke_cap(&cap) {
        Ok(()) => sys::report(2, report::OK, 0),
        Err(e) => sys::report(2, report::ERROR, e as u64),
    }
    let at_revoke = mb.get(mailbox::READS);
    mb.set(mailbox::READS_AT_REVOKE, at_revoke);
    sys::report(3, report::OK, at_revoke);
    Ok(())
}
