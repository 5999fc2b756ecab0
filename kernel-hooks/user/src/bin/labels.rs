//! Labels from ring 3 (`docs/DIFC.md` §4.1): the two DIFC system calls, validated like the
//! others, and a label change a program makes for itself.
//!
//! The program makes a key, a tag object keyed by it, and objects at labels it chooses
//! (`SYS_CREATE_LABELLED`); passes the calls malformed labels and short buffers; asks for a
//! raise its start context owns nothing for; asks to create an object at an integrity it
//! cannot endorse. Then it builds a context owning `T+` and `T−` of its tag (an ownership
//! record it signs itself: the tag object is keyed by its key), switches to it, raises to
//! `{T}` (`SYS_SCTX_LABEL`), reads the `{T}` object, writes a public one (a declassification:
//! it owns `T−`, which is also what lets it keep writing its own unlabelled stack and heap),
//! and drops back to the empty label. Each step is reported to the kernel, which checks it.

#![no_std]
#![no_main]

extern crate alloc;

use kernel_hooks_user::abi::{self, KIND_DATA, report};
use kernel_hooks_user::heap::{self, PAGE};
use kernel_hooks_user::rt::{try_read, try_write};
use kernel_hooks_user::{Error, ctx, entry, sys};
use twizzler_capsec::{
    Cap, Label, ObjID, OwnRights, OwnershipGrant, Protections, SigningKey, SigningScheme,
};

entry!(main);

/// Pages of the context object.
const CTX_PAGES: u64 = abi::self_info::CONTEXT_PAGES;

/// The steps, as the kernel's table numbers them.
mod step {
    pub const KEYS: u64 = 1;
    pub const LABEL_MALFORMED: u64 = 2;
    pub const LABEL_TOO_LONG: u64 = 3;
    pub const RAISE_UNOWNED: u64 = 4;
    pub const CREATE_UP: u64 = 5;
    pub const CREATE_SHORT: u64 = 6;
    pub const CREATE_MALFORMED: u64 = 7;
    pub const CREATE_ENDORSE: u64 = 8;
    pub const READ_UP: u64 = 9;
    pub const REGISTER_UNOWNED: u64 = 10;
    pub const REGISTER: u64 = 11;
    pub const READ_REGISTERED: u64 = 12;
    pub const SWITCH_BACK: u64 = 13;
    pub const SWITCH: u64 = 14;
    pub const RAISE: u64 = 15;
    pub const READ_SECRET: u64 = 16;
    pub const DECLASSIFY: u64 = 17;
    pub const DROP: u64 = 18;
}

fn ok(step: u64, detail: u64) {
    sys::report(step, report::OK, detail);
}

fn failed(step: u64, e: Error) -> u64 {
    sys::report(step, report::ERROR, e as u64);
    step
}

/// Reports what a call returned: OK, or its error.
fn check<T>(step: u64, r: Result<T, Error>) {
    match r {
        Ok(_) => ok(step, 0),
        Err(e) => sys::report(step, report::ERROR, e as u64),
    }
}

/// Reports a probe's outcome: OK with the byte, or DENIED.
fn access(step: u64, r: Result<u8, kernel_hooks_user::rt::Denied>) {
    match r {
        Ok(b) => sys::report(step, report::OK, u64::from(b)),
        Err(_) => sys::report(step, report::DENIED, 0),
    }
}

/// A system call with raw arguments (pointers into this program's own memory).
fn raw(n: u64, a: [u64; 5]) -> Result<(), Error> {
    // SAFETY: these calls only read user memory.
    let (rax, _, _) = unsafe { sys::raw(n, a) };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

fn main(_args: [u64; 4]) -> u64 {
    match run() {
        Ok(()) => 0,
        Err(step) => step,
    }
}

fn run() -> Result<(), u64> {
    let me = heap::init().map_err(|e| failed(step::KEYS, e))?;

    // 1. A key, and a tag object keyed by it: its key signs the tag's ownership records.
    let mut seed = [0u8; 32];
    sys::entropy(&mut seed).map_err(|e| failed(step::KEYS, e))?;
    let sk = SigningKey::from_entropy(SigningScheme::Ed25519, &seed)
        .map_err(|_| failed(step::KEYS, Error::Malformed))?;
    seed.fill(0);
    let kuid = sys::create_key(&sk.verifying_key().encode()).map_err(|e| failed(step::KEYS, e))?;
    let tag = sys::create_object(KIND_DATA, 1, Protections::empty(), Some(kuid))
        .map_err(|e| failed(step::KEYS, e))?;
    let secret_label =
        Label::from_tags(&[tag], &[]).map_err(|_| failed(step::KEYS, Error::Malformed))?;
    let vetted_label =
        Label::from_tags(&[], &[tag]).map_err(|_| failed(step::KEYS, Error::Malformed))?;
    ok(step::KEYS, 0);

    // 2-4. Label changes refused: bytes that are no label, a length past MAX_COPY, a raise
    // the start context owns no T+ for.
    let garbage = [0x55u8; 24];
    check(
        step::LABEL_MALFORMED,
        raw(abi::SYS_SCTX_LABEL, [garbage.as_ptr() as u64, 24, 0, 0, 0]),
    );
    check(
        step::LABEL_TOO_LONG,
        raw(
            abi::SYS_SCTX_LABEL,
            [garbage.as_ptr() as u64, abi::MAX_COPY + 1, 0, 0, 0],
        ),
    );
    check(step::RAISE_UNOWNED, sys::sctx_label(&secret_label));

    // 5-8. Creation: up is a write the empty label may make; a buffer without the kuid,
    // bytes that are no label, and an integrity it may not endorse are refused.
    let rw = Protections::READ | Protections::WRITE;
    let secret = sys::create_labelled(KIND_DATA, 1, rw, None, Some(&secret_label));
    check(step::CREATE_UP, secret);
    check(
        step::CREATE_SHORT,
        raw(
            abi::SYS_CREATE_LABELLED,
            [KIND_DATA, 1, 0, garbage.as_ptr() as u64, 8],
        ),
    );
    check(
        step::CREATE_MALFORMED,
        raw(
            abi::SYS_CREATE_LABELLED,
            [KIND_DATA, 1, 0, garbage.as_ptr() as u64, 24],
        ),
    );
    check(
        step::CREATE_ENDORSE,
        sys::create_labelled(KIND_DATA, 1, rw, None, Some(&vetted_label)),
    );
    let secret = secret.map_err(|e| failed(step::CREATE_UP, e))?;
    let secret_base = sys::map(secret).map_err(|e| failed(step::READ_UP, e))?;
    // 9. It made the {T} object but may not read it at the empty label.
    access(step::READ_UP, try_read(secret_base + PAGE));

    // 10-13. Registration (§1.4): a context proposing {T} in its version-3 section is
    // adopted at its first attach only if the registrar or the context owns T+. One without
    // any ownership is refused; one owning T+ and T− itself is registered at {T}: the program
    // switches into it (it owns T−, so its unlabelled stack stays writable), reads its {T}
    // object there, and switches back (T− lets it shed T).
    let start = sys::active().map_err(|e| failed(step::REGISTER_UNOWNED, e))?;
    let propose = |i: usize, step: u64, owned: bool| -> Result<ObjID, u64> {
        let c = me.context(i).map_err(|e| failed(step, e))?;
        let base = sys::map(c).map_err(|e| failed(step, e))?;
        let mine = me.caps_for(c).map_err(|e| failed(step, e))?;
        let own = Cap::mint_ownership(
            OwnershipGrant::new(tag, c, OwnRights::PLUS | OwnRights::MINUS),
            &sk,
        )
        .map_err(|_| failed(step, Error::Malformed))?;
        ctx::edit(base, CTX_PAGES, |ed| {
            ed.set_initial_label(secret_label);
            if owned {
                ed.add_cap(&own);
            }
            for cap in &mine {
                ed.add_cap(cap);
            }
        })
        .map_err(|e| failed(step, e))?;
        Ok(c)
    };
    let unowned = propose(1, step::REGISTER_UNOWNED, false)?;
    check(step::REGISTER_UNOWNED, sys::attach(unowned));
    let registered = propose(2, step::REGISTER, true)?;
    sys::attach(registered).map_err(|e| failed(step::REGISTER, e))?;
    sys::switch(registered).map_err(|e| failed(step::REGISTER, e))?;
    ok(step::REGISTER, 0);
    access(step::READ_REGISTERED, try_read(secret_base + PAGE));
    check(step::SWITCH_BACK, sys::switch(start));

    // 14. A private context owning T+ and T− (signed with its own key, which keys the tag),
    // with its own code, stack and heap; attach and switch.
    let public = sys::create_object(KIND_DATA, 1, rw, None).map_err(|e| failed(step::SWITCH, e))?;
    let public_base = sys::map(public).map_err(|e| failed(step::SWITCH, e))?;
    let c = me.context(0).map_err(|e| failed(step::SWITCH, e))?;
    let c_base = sys::map(c).map_err(|e| failed(step::SWITCH, e))?;
    let owns = Cap::mint_ownership(
        OwnershipGrant::new(tag, c, OwnRights::PLUS | OwnRights::MINUS),
        &sk,
    )
    .map_err(|_| failed(step::SWITCH, Error::Malformed))?;
    let mine = me.caps_for(c).map_err(|e| failed(step::SWITCH, e))?;
    ctx::edit(c_base, CTX_PAGES, |ed| {
        ed.add_cap(&owns);
        for cap in &mine {
            ed.add_cap(cap);
        }
    })
    .map_err(|e| failed(step::SWITCH, e))?;
    sys::attach(c).map_err(|e| failed(step::SWITCH, e))?;
    sys::switch(c).map_err(|e| failed(step::SWITCH, e))?;
    ok(step::SWITCH, 0);

    // 15-18. Raise, read the secret, declassify into the public object, drop.
    check(step::RAISE, sys::sctx_label(&secret_label));
    access(step::READ_SECRET, try_read(secret_base + PAGE));
    // SAFETY: the public object is not memory this program's Rust code uses.
    access(
        step::DECLASSIFY,
        unsafe { try_write(public_base + PAGE, 0x5d) }.map(|()| 0x5d),
    );
    check(step::DROP, sys::sctx_label(&Label::EMPTY));
    Ok(())
}
