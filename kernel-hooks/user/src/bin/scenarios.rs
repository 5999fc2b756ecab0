//! Policies a policy author tries first, each built by the program itself and lived under:
//!
//! - an append-only log: read access to the whole log, write access only through a data gate
//!   over its append window;
//! - delegation to a child context with fewer rights, revoked while the child runs;
//! - a capability that expires while the program runs;
//! - a program editing its own active context, and denied on its next access;
//! - a library reachable only through its entry gate;
//! - a parser jailed in an UNDETACHABLE context with read access to its input only (last: the
//!   program cannot leave it).
//!
//! The program works from a home context of its own, signed for by its own key (so it can
//! sign delegations as their provider). Every context it switches to (home, the child, the
//! library's, the jail) is one of the private context objects the loader made for it (no
//! default rights: no other task may attach them), and holds capabilities for the program's
//! own code, stack and heap, signed with the key the loader gave it (`own`): those objects
//! have no default rights either. Home and the child also hold `rw-` on the private
//! contexts, to edit and attach them; the library's context and the jail do not.

#![no_std]
#![no_main]

extern crate alloc;

use kernel_hooks_user::abi::{KIND_DATA, report};
use kernel_hooks_user::heap::{self, PAGE};
use kernel_hooks_user::own::Own;
use kernel_hooks_user::rt::{try_call, try_read, try_write};
use kernel_hooks_user::{Error, ctx, entry, sys};
use twizzler_capsec::{
    Cap, CapGrant, CtxFlags, Del, DelGrant, Expiry, Gate, ObjID, Protections, SigningKey,
    SigningScheme,
};

entry!(main);

/// Pages of each context object.
const CTX_PAGES: u64 = 4;
/// How long the expiring capability lives, from when it is signed: long enough that the read
/// before its expiry never races it, however slow the machine; the program then moves the
/// engine's clock past it (a test-only call the kernel grants this program).
const EXPIRY_NS: u64 = 3_600_000_000_000;

fn r() -> Protections {
    Protections::READ
}

fn rw() -> Protections {
    Protections::READ | Protections::WRITE
}

/// A failed setup call: reported as step 100 + where, with the error.
fn setup<T>(at: u64, r: Result<T, Error>) -> Result<T, u64> {
    r.map_err(|e| {
        sys::report(100 + at, report::ERROR, e as u64);
        100 + at
    })
}

/// A failed signature: reported as step 100 + where.
fn signed<T, E>(at: u64, r: Result<T, E>) -> Result<T, u64> {
    setup(at, r.map_err(|_| Error::Malformed))
}

fn read(step: u64, addr: u64) {
    match try_read(addr) {
        Ok(b) => sys::report(step, report::OK, u64::from(b)),
        Err(_) => sys::report(step, report::DENIED, 0),
    }
}

fn write(step: u64, addr: u64, value: u8) {
    // SAFETY: only ever called on objects this program's Rust code does not use.
    match unsafe { try_write(addr, value) } {
        Ok(()) => sys::report(step, report::OK, u64::from(value)),
        Err(_) => sys::report(step, report::DENIED, 0),
    }
}

fn check<T>(step: u64, r: Result<T, Error>) {
    match r {
        Ok(_) => sys::report(step, report::OK, 0),
        Err(e) => sys::report(step, report::ERROR, e as u64),
    }
}

/// A mapped object: its id and the address of its byte 0.
#[derive(Clone, Copy)]
struct Mapped {
    id: ObjID,
    base: u64,
}

fn object(kind: u64, pages: u64, prots: Protections, kuid: Option<ObjID>) -> Result<Mapped, Error> {
    let id = sys::create_object(kind, pages, prots, kuid)?;
    Ok(Mapped {
        id,
        base: sys::map(id)?,
    })
}

fn main(_args: [u64; 4]) -> u64 {
    match run() {
        Ok(()) => 0,
        Err(at) => at,
    }
}

/// Context `ctx`'s capabilities for the program's own objects.
fn own_caps(me: &Own, at: u64, ctx: ObjID) -> Result<alloc::vec::Vec<Cap>, u64> {
    setup(at, me.caps_for(ctx))
}

/// Context `ctx`'s capabilities for the program's own objects and `rw-` on its private
/// contexts.
fn own_and_ctx_caps(me: &Own, at: u64, ctx: ObjID) -> Result<alloc::vec::Vec<Cap>, u64> {
    let mut caps = own_caps(me, at, ctx)?;
    caps.extend(setup(at, me.context_caps_for(ctx))?);
    Ok(caps)
}

/// Private context `i` (see [`Own::contexts`]), mapped.
fn private(me: &Own, at: u64, i: usize) -> Result<Mapped, u64> {
    let id = setup(at, me.context(i))?;
    Ok(Mapped {
        id,
        base: setup(at, sys::map(id))?,
    })
}

fn run() -> Result<(), u64> {
    let me = setup(0, heap::init())?;
    let mut seed = [0u8; 32];
    setup(1, sys::entropy(&mut seed))?;
    let sk = signed(2, SigningKey::from_entropy(SigningScheme::Ed25519, &seed))?;
    let kuid = setup(3, sys::create_key(&sk.verifying_key().encode()))?;
    // The home context: a private one, signed for by the program's key (`me.key()`).
    let home = private(&me, 4, 0)?;
    let start = setup(5, sys::active())?;
    let home_mine = own_and_ctx_caps(&me, 5, home.id)?;
    setup(
        5,
        ctx::edit(home.base, CTX_PAGES, |ed| {
            for c in &home_mine {
                ed.add_cap(c);
            }
        }),
    )?;
    setup(6, sys::attach(home.id))?;
    setup(6, sys::switch(home.id))?;
    // Home is edited from the start context: a write into the active context invalidates
    // everything granted under it (code, stack and heap pages included), and a copy of a
    // whole context would then fault page after page, each fault a miss that re-protects
    // the context for the next store.
    let edit_home = |change: &dyn Fn(&mut twizzler_capsec::SecCtxEditor)| {
        setup(7, sys::switch(start))?;
        setup(7, ctx::edit(home.base, CTX_PAGES, |ed| change(ed)))?;
        setup(7, sys::switch(home.id))
    };

    // The log: pages 1-2 hold old entries, page 3 is the append window.
    let log = setup(8, object(KIND_DATA, 3, Protections::empty(), Some(kuid)))?;
    let read_all = signed(9, Cap::mint(CapGrant::new(log.id, home.id, r()), &sk))?;
    let mut window = CapGrant::new(log.id, home.id, rw());
    window.gate = signed(10, Gate::new(3 * PAGE, PAGE, 1))?;
    let append = signed(11, Cap::mint(window, &sk))?;
    edit_home(&|ed| {
        ed.add_cap(&read_all);
        ed.add_cap(&append);
    })?;
    write(1, log.base + PAGE, 0x11);
    write(2, log.base + 3 * PAGE + 8, 0x22);
    read(3, log.base + 2 * PAGE);

    // Delegation: home holds rw- on the data; a child context receives r-- from it.
    let data = setup(12, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let root = signed(13, Cap::mint(CapGrant::new(data.id, home.id, rw()), &sk))?;
    edit_home(&|ed| ed.add_cap(&root))?;
    let child = private(&me, 14, 1)?;
    // Signed by the provider context's key: home's, the program's own.
    let del = signed(
        15,
        Del::from_cap(&root, DelGrant::new(child.id, r()), me.key()),
    )?;
    let child_mine = own_and_ctx_caps(&me, 16, child.id)?;
    setup(
        16,
        ctx::edit(child.base, CTX_PAGES, |ed| {
            ed.add_del(&del);
            for c in &child_mine {
                ed.add_cap(c);
            }
        }),
    )?;
    // The child runs without home: with home still attached, the engine would grant the
    // write by switching the thread back to home (Twizzler's rule). (The start context stays
    // attached; it grants nothing on the data.)
    setup(17, sys::attach(child.id))?;
    setup(18, sys::switch(child.id))?;
    setup(18, sys::detach(home.id))?;
    read(4, data.base + PAGE);
    write(5, data.base + PAGE, 0x33);
    check(6, sys::revoke_cap(&root));
    read(7, data.base + PAGE);
    setup(19, sys::attach(home.id))?;
    setup(19, sys::switch(home.id))?;

    // A capability that expires while the program runs.
    let brief = setup(20, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let (now, _) = sys::clock();
    let until = now + EXPIRY_NS;
    let mut grant = CapGrant::new(brief.id, home.id, r());
    grant.expires = Expiry::from_raw(until);
    let expiring = signed(21, Cap::mint(grant, &sk))?;
    edit_home(&|ed| ed.add_cap(&expiring))?;
    read(8, brief.base + PAGE);
    let (now, _) = sys::clock();
    setup(
        42,
        sys::advance_clock(until.saturating_sub(now) + 1_000_000),
    )?;
    read(9, brief.base + PAGE);

    // A program editing its own (active) context: a mask takes its read right away, and
    // the next access is denied.
    let mine = setup(31, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let read_mine = signed(32, Cap::mint(CapGrant::new(mine.id, home.id, r()), &sk))?;
    edit_home(&|ed| ed.add_cap(&read_mine))?;
    read(16, mine.base + PAGE);
    check(
        17,
        ctx::edit(home.base, CTX_PAGES, |ed| {
            ed.set_mask(mine.id, Protections::empty(), Protections::empty())
        }),
    );
    read(18, mine.base + PAGE);

    // A library reachable only through its entry gate: code written by the program into an
    // object of its own (home may read and write it, not execute it), executable for the
    // library's context through a code gate with an entry point every 16 bytes. A call at an
    // entry point switches the thread into the library's context; a call between entry
    // points is denied.
    let lib = setup(33, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let lib_ctx = private(&me, 34, 2)?;
    let write_lib = signed(35, Cap::mint(CapGrant::new(lib.id, home.id, rw()), &sk))?;
    edit_home(&|ed| ed.add_cap(&write_lib))?;
    let mut exec = CapGrant::new(lib.id, lib_ctx.id, Protections::READ | Protections::EXEC);
    exec.gate = signed(36, Gate::new(PAGE, 0x100, 16))?;
    let enter_lib = signed(37, Cap::mint(exec, &sk))?;
    // The library's context also grants the program's own code and stack: the call returns
    // to them (and the program reads which context is active) under it.
    let lib_mine = own_caps(&me, 38, lib_ctx.id)?;
    setup(
        38,
        ctx::edit(lib_ctx.base, CTX_PAGES, |ed| {
            ed.add_cap(&enter_lib);
            for c in &lib_mine {
                ed.add_cap(c);
            }
        }),
    )?;
    // `mov eax, 0x2a; ret`, at every 8 bytes of the gate's range.
    const FUNC: [u8; 8] = [0xb8, 0x2a, 0, 0, 0, 0xc3, 0x90, 0x90];
    for i in 0..32u64 {
        for (j, b) in (0..).zip(FUNC) {
            // SAFETY: the library object is this program's, not memory Rust code uses.
            unsafe { core::ptr::write_volatile((lib.base + PAGE + i * 8 + j) as *mut u8, b) };
        }
    }
    setup(39, sys::attach(lib_ctx.id))?;
    // SAFETY: the code at both addresses is `mov eax, 0x2a; ret`.
    match unsafe { try_call(lib.base + PAGE) } {
        Ok(v) => sys::report(19, report::OK, v),
        Err(_) => sys::report(19, report::DENIED, 0),
    }
    match sys::active() {
        Ok(a) if a == lib_ctx.id => sys::report(20, report::OK, 0),
        Ok(_) => sys::report(20, report::ERROR, Error::NotAttached as u64),
        Err(e) => sys::report(20, report::ERROR, e as u64),
    }
    setup(40, sys::switch(home.id))?;
    // SAFETY: as above.
    match unsafe { try_call(lib.base + PAGE + 8) } {
        Ok(v) => sys::report(21, report::OK, v),
        Err(_) => sys::report(21, report::DENIED, 0),
    }
    setup(41, sys::detach(lib_ctx.id))?;

    // The jail: an UNDETACHABLE context granting r-- on the input only (and the program's
    // own code, stack and heap). A private context: home's capability lets the program
    // attach and edit it; the jail grants no right on itself.
    let input = setup(22, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let secret = setup(23, object(KIND_DATA, 1, Protections::empty(), Some(kuid)))?;
    let jail = private(&me, 24, 3)?;
    let see_secret = signed(25, Cap::mint(CapGrant::new(secret.id, home.id, r()), &sk))?;
    edit_home(&|ed| ed.add_cap(&see_secret))?;
    let parse_input = signed(27, Cap::mint(CapGrant::new(input.id, jail.id, r()), &sk))?;
    // The jailed parser still runs its own code on its own stack and heap.
    let jail_mine = own_caps(&me, 27, jail.id)?;
    setup(
        28,
        ctx::edit(jail.base, CTX_PAGES, |ed| {
            ed.add_cap(&parse_input);
            for c in &jail_mine {
                ed.add_cap(c);
            }
            ed.set_flags(CtxFlags::UNDETACHABLE);
        }),
    )?;
    read(10, secret.base + PAGE);
    setup(29, sys::attach(jail.id))?;
    setup(30, sys::switch(jail.id))?;
    read(11, input.base + PAGE);
    read(12, secret.base + PAGE);
    write(13, jail.base + PAGE, 0);
    check(14, sys::switch(home.id));
    check(15, sys::detach(home.id));
    Ok(())
}
