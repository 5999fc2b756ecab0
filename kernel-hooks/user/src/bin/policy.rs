//! The end-to-end program: it makes its own policy and lives under it.
//!
//! It generates an Ed25519 key pair from kernel entropy, creates a key object for the public
//! half, a data object signed for by that key (no default rights) and a context object,
//! signs a read capability for the data object to the context, writes it into the context in
//! place with the crate's editor, attaches the context and switches to it. Then it reads the
//! data object (granted), writes it (denied: no `W`), revokes the capability and reads again
//! (denied). Each step is reported to the kernel, which checks it against its own table and
//! against what it saw on the fault path.

#![no_std]
#![no_main]

extern crate alloc;

use kernel_hooks_user::abi::{self, KIND_DATA, report};
use kernel_hooks_user::heap::{self, PAGE};
use kernel_hooks_user::rt::{try_read, try_write};
use kernel_hooks_user::{Error, ctx, entry, sys};
use twizzler_capsec::{Cap, CapGrant, Protections, SigningKey, SigningScheme};

entry!(main);

/// Pages of the context object (its encoded bytes start at its byte `PAGE`).
const CTX_PAGES: u64 = abi::self_info::CONTEXT_PAGES;

/// The steps, as the kernel's table numbers them.
mod step {
    pub const KEYGEN: u64 = 1;
    pub const DATA: u64 = 2;
    pub const CTX: u64 = 3;
    pub const ATTACH: u64 = 4;
    pub const READ: u64 = 5;
    pub const WRITE: u64 = 6;
    pub const REVOKE: u64 = 7;
    pub const READ_REVOKED: u64 = 8;
}

fn ok(step: u64, detail: u64) {
    sys::report(step, report::OK, detail);
}

fn failed(step: u64, e: Error) -> u64 {
    sys::report(step, report::ERROR, e as u64);
    step
}

fn main(_args: [u64; 4]) -> u64 {
    match run() {
        Ok(()) => 0,
        Err(step) => step,
    }
}

/// Reports a probe's outcome: OK with the byte, or DENIED.
fn access(step: u64, r: Result<u8, kernel_hooks_user::rt::Denied>) {
    match r {
        Ok(b) => sys::report(step, report::OK, u64::from(b)),
        Err(_) => sys::report(step, report::DENIED, 0),
    }
}

fn run() -> Result<(), u64> {
    let me = heap::init().map_err(|e| failed(step::KEYGEN, e))?;

    // 1. A key pair from kernel entropy; the public half becomes a key object.
    let mut seed = [0u8; 32];
    sys::entropy(&mut seed).map_err(|e| failed(step::KEYGEN, e))?;
    let sk = SigningKey::from_entropy(SigningScheme::Ed25519, &seed)
        .map_err(|_| failed(step::KEYGEN, Error::Malformed))?;
    seed.fill(0);
    let kuid =
        sys::create_key(&sk.verifying_key().encode()).map_err(|e| failed(step::KEYGEN, e))?;
    ok(step::KEYGEN, kuid.raw() as u64);

    // 2. A data object the key signs for, with no default rights: only capabilities open it.
    let data = sys::create_object(KIND_DATA, 1, Protections::empty(), Some(kuid))
        .map_err(|e| failed(step::DATA, e))?;
    let data_base = sys::map(data).map_err(|e| failed(step::DATA, e))?;
    ok(step::DATA, data.raw() as u64);

    // 3. A context object, and a read capability for the data object written into it.
    // One of its private context objects (only it may attach it: no default rights).
    let ctx = me.context(0).map_err(|e| failed(step::CTX, e))?;
    let ctx_base = sys::map(ctx).map_err(|e| failed(step::CTX, e))?;
    let cap = Cap::mint(CapGrant::new(data, ctx, Protections::READ), &sk)
        .map_err(|_| failed(step::CTX, Error::Malformed))?;
    // And capabilities for its own code, stack and heap (no default rights on them), which
    // it needs to keep running once the context is active.
    let mine = me.caps_for(ctx).map_err(|e| failed(step::CTX, e))?;
    ctx::edit(ctx_base, CTX_PAGES, |ed| {
        ed.add_cap(&cap);
        for c in &mine {
            ed.add_cap(c);
        }
    })
    .map_err(|e| failed(step::CTX, e))?;
    ok(step::CTX, ctx.raw() as u64);

    // 4. Attach it and make it active.
    sys::attach(ctx).map_err(|e| failed(step::ATTACH, e))?;
    sys::switch(ctx).map_err(|e| failed(step::ATTACH, e))?;
    let active = sys::active().map_err(|e| failed(step::ATTACH, e))?;
    if active != ctx {
        return Err(failed(step::ATTACH, Error::NotAttached));
    }
    ok(step::ATTACH, 0);

    // 5-6. Read (the capability grants it), write (it does not).
    let byte = data_base + PAGE;
    access(step::READ, try_read(byte));
    // SAFETY: the data object is not memory this program's Rust code uses.
    access(step::WRITE, unsafe { try_write(byte, 0x5a) }.map(|()| 0x5a));

    // 7-8. Revoke the capability; the read is denied from then on.
    sys::revoke_cap(&cap).map_err(|e| failed(step::REVOKE, e))?;
    ok(step::REVOKE, 0);
    access(step::READ_REVOKED, try_read(byte));
    Ok(())
}
