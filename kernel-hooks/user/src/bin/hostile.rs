//! A hostile program: it passes the system calls bad pointers (kernel addresses, unmapped
//! slots, lengths past its mappings, wrapping lengths), names objects it does not hold,
//! contexts it may not attach and keys it does not own, and touches kernel memory directly.
//! Every call must come back with an error code and every access with a denial; the kernel
//! checks each against its table and must never fault.
//!
//! Arguments: a boot data object it holds no capability for (signed by a boot key) and a boot
//! context (low and high 32 bits of the first), that boot key and a public boot object
//! (default `r--`; the second), and a board object (the third and fourth: low, high), readable
//! by default, on which the kernel wrote the ids of the `policy` program's heap, stack and
//! context, which ran before: it maps the first two by id and tries to attach the third.

#![no_std]
#![no_main]

use kernel_hooks_user::abi::{self, KIND_CONTEXT, KIND_DATA, report};
use kernel_hooks_user::heap::{self, PAGE};
use kernel_hooks_user::rt::try_read;
use kernel_hooks_user::{Error, entry, sys};
use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, RecordKind, SigningKey, SigningScheme};

entry!(main);

/// Kernel memory (the kernel image is loaded at 1 MiB).
const KERNEL_ADDR: u64 = 0x10_0000;
/// A slot no object of this task's is in (the last user slot).
const UNMAPPED_ADDR: u64 = abi::LAST_SLOT * abi::SLOT_SIZE + PAGE;

/// Reports what a call returned: OK, or its error.
fn check<T>(step: u64, r: Result<T, Error>) {
    match r {
        Ok(_) => sys::report(step, report::OK, 0),
        Err(e) => sys::report(step, report::ERROR, e as u64),
    }
}

/// Reports a probe's outcome.
fn probe(step: u64, addr: u64) {
    match try_read(addr) {
        Ok(b) => sys::report(step, report::OK, u64::from(b)),
        Err(_) => sys::report(step, report::DENIED, 0),
    }
}

/// `SYS_ENTROPY` with a raw pointer and length.
fn entropy_raw(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: every address passed below is either rejected by the kernel or lies in this
    // program's heap object past what the allocator uses (its last page) or in its code,
    // which the kernel refuses to write.
    let (rax, _, _) = unsafe { sys::raw(abi::SYS_ENTROPY, [addr, len, 0, 0, 0]) };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

/// `SYS_CREATE_KEY` with a raw pointer and length.
fn create_key_raw(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: the kernel only reads user memory for this call.
    let (rax, _, _) = unsafe { sys::raw(abi::SYS_CREATE_KEY, [addr, len, 0, 0, 0]) };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

/// `SYS_SELF` with a raw pointer and length.
fn self_raw(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: every address passed below is either rejected by the kernel or lies in this
    // program's heap object past what the allocator uses (its last page).
    let (rax, _, _) = unsafe { sys::raw(abi::SYS_SELF, [addr, len, 0, 0, 0]) };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

/// Reads the little-endian `u64` at `addr` one byte at a time with the probe, `None` if
/// denied.
fn try_read_u64(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..8 {
        v |= u64::from(try_read(addr + i).ok()?) << (8 * i);
    }
    Some(v)
}

fn id(raw: u64) -> ObjID {
    ObjID::new(u128::from(raw))
}

fn main(args: [u64; 4]) -> u64 {
    let [secret, boot_ctx, boot_key, public] =
        [args[0], args[0] >> 32, args[1], args[1] >> 32].map(|w| id(w & 0xffff_ffff));
    let board = abi::id_from_words(args[2], args[3]);
    let Ok(me) = heap::init() else {
        return 1;
    };
    let Ok(heap_base) = sys::map(me.heap) else {
        return 2;
    };
    // The heap object's last page, which the allocator has not handed out yet: a scratch area.
    // (The heap object's last byte is at `base + (heap_pages + 1) * PAGE - 1`.)
    let scratch = heap_base + me.heap_pages * PAGE;
    let heap_end = heap_base + (me.heap_pages + 1) * PAGE;

    // Bad pointers.
    check(1, entropy_raw(KERNEL_ADDR, 16));
    check(2, entropy_raw(UNMAPPED_ADDR, 16));
    check(3, entropy_raw(heap_end, 16));
    check(4, entropy_raw(heap_end - 8, 16));
    check(5, entropy_raw(scratch, u64::MAX));
    check(6, entropy_raw(u64::MAX - 15, 16));
    check(
        7,
        entropy_raw(main as fn([u64; 4]) -> u64 as usize as u64, 16),
    );
    check(8, create_key_raw(KERNEL_ADDR, 32));
    check(9, entropy_raw(scratch, 64));
    check(10, create_key_raw(scratch, 64));

    // Objects it does not hold.
    check(11, sys::map(id(0x0bad_0b1e)));
    check(12, sys::map(secret));
    probe(13, sys::map(secret).unwrap_or(0) + PAGE);
    probe(14, sys::map(public).unwrap_or(0) + PAGE);
    check(15, sys::map(boot_key));

    // Contexts it may not attach, or switch to.
    check(16, sys::attach(boot_ctx));
    check(17, sys::attach(secret));
    let locked = sys::create_object(KIND_CONTEXT, 1, Protections::empty(), None);
    check(18, locked.and_then(sys::attach));
    check(19, sys::switch(boot_ctx));
    check(20, sys::active().and_then(sys::detach));

    // Keys and records it does not own.
    check(21, sys::revoke_key(boot_key));
    check(22, sys::revoke_key(secret));
    let mut seed = [0u8; 32];
    let own = sys::entropy(&mut seed)
        .map_err(|_| ())
        .and_then(|()| SigningKey::from_entropy(SigningScheme::Ed25519, &seed).map_err(|_| ()));
    let Ok(sk) = own else {
        return 3;
    };
    let Ok(ctx) = sys::active() else {
        return 4;
    };
    match Cap::mint(CapGrant::new(secret, ctx, Protections::READ), &sk) {
        Ok(forged) => check(23, sys::revoke_cap(&forged)),
        Err(_) => sys::report(23, report::ERROR, 0),
    }
    check(
        24,
        sys::revoke_record_bytes(RecordKind::Cap.raw().into(), &[0x42; 40]),
    );
    check(25, sys::revoke_record_bytes(7, &[0; 16]));

    // Arguments out of range.
    check(
        26,
        sys::create_object(KIND_DATA, 0, Protections::READ, None),
    );
    check(
        27,
        sys::create_object(
            KIND_DATA,
            abi::MAX_OBJECT_PAGES + 1,
            Protections::READ,
            None,
        ),
    );
    // SAFETY: creating an object writes no user memory.
    let bad_prots = unsafe { sys::raw(abi::SYS_CREATE_OBJECT, [KIND_DATA, 1, 0xffff, 0, 0]) };
    sys::report(28, report::ERROR, bad_prots.0);
    check(
        29,
        sys::create_object(KIND_DATA, 1, Protections::READ, Some(secret)),
    );
    check(30, sys::create_object(9, 1, Protections::READ, None));
    // SAFETY: an unknown number does nothing.
    let nosys = unsafe { sys::raw(999, [0; 5]) };
    sys::report(31, report::ERROR, nosys.0);
    check(
        32,
        sys::set_recovery(KERNEL_ADDR, KERNEL_ADDR + 16, KERNEL_ADDR),
    );

    check(35, sys::advance_clock(1_000));

    // Contexts through memory: a boot context it may not write (nor read), and one of its
    // own it may (the kernel's copy into it goes through the context write protocol).
    let boot_ctx_base = sys::map(boot_ctx).unwrap_or(0);
    check(36, entropy_raw(boot_ctx_base + PAGE, 8));
    probe(37, boot_ctx_base + PAGE);
    let own = sys::create_object(
        KIND_CONTEXT,
        1,
        Protections::READ | Protections::WRITE,
        None,
    );
    let own_base = own.and_then(sys::map).unwrap_or(0);
    // Past the empty context's bytes: the context stays valid.
    check(38, entropy_raw(own_base + 2 * PAGE - 64, 16));
    check(
        39,
        own.and_then(|c| sys::attach(c).and_then(|()| sys::attach(c))),
    );
    check(40, sys::unmap(public).and_then(|()| sys::unmap(public)));

    // Its own key and objects (`SYS_SELF`) copied to kernel memory, or into too few bytes.
    let self_len = (abi::self_info::WORDS * 8) as u64;
    check(41, self_raw(KERNEL_ADDR, self_len));
    check(42, self_raw(scratch, 8));

    // Another program's heap, stack and context, by the ids on the board.
    let on_board = |i: u64| -> Result<ObjID, Error> {
        let page = sys::map(board)? + PAGE;
        let word = |j: u64| try_read_u64(page + 8 * j).ok_or(Error::Denied);
        Ok(abi::id_from_words(word(2 * i)?, word(2 * i + 1)?))
    };
    match on_board(0).and_then(sys::map) {
        Ok(heap) => probe(43, heap + PAGE),
        Err(e) => sys::report(43, report::ERROR, e as u64),
    }
    match on_board(1).and_then(sys::map) {
        Ok(stack) => probe(44, stack + PAGE),
        Err(e) => sys::report(44, report::ERROR, e as u64),
    }
    check(45, on_board(2).and_then(sys::attach));

    // Kernel memory and an unmapped slot, touched directly.
    probe(33, KERNEL_ADDR);
    probe(34, UNMAPPED_ADDR);
    0
}
