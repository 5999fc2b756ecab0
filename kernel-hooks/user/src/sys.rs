//! The system calls (`int 0x80`; see [`crate::abi`] for the ABI).

use core::arch::asm;

use twizzler_capsec::{Cap, ObjID, Protections, RecordKind};

use crate::abi::{self, Error};

/// A raw system call: `n` with arguments `a` (`rdi`, `rsi`, `rdx`, `r10`, `r8`); returns
/// (`rax`, `rdx`, `r8`).
///
/// # Safety
///
/// The kernel writes user memory for some calls (`SYS_ENTROPY`): the pointers passed must be
/// valid for those writes.
pub unsafe fn raw(n: u64, a: [u64; 5]) -> (u64, u64, u64) {
    let rax: u64;
    let rdx: u64;
    let r8: u64;
    // SAFETY: `int 0x80` enters the kernel, which preserves every register but rax, rdx and
    // r8 (declared as outputs) and writes only memory the caller named (its contract).
    unsafe {
        asm!(
            "int 0x80",
            inlateout("rax") n => rax,
            in("rdi") a[0],
            in("rsi") a[1],
            inlateout("rdx") a[2] => rdx,
            in("r10") a[3],
            inlateout("r8") a[4] => r8,
            options(nostack),
        );
    }
    (rax, rdx, r8)
}

/// A system call that reads no user memory the caller does not own and writes none.
fn call(n: u64, a: [u64; 5]) -> Result<(u64, u64), Error> {
    // SAFETY: only called for system calls that write no user memory.
    let (rax, rdx, r8) = unsafe { raw(n, a) };
    match rax {
        0 => Ok((rdx, r8)),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

fn id_of((lo, hi): (u64, u64)) -> ObjID {
    abi::id_from_words(lo, hi)
}

/// Ends the task with `value`.
pub fn exit(value: u64) -> ! {
    // SAFETY: exit writes no memory.
    unsafe { raw(abi::SYS_EXIT, [0, value, 0, 0, 0]) };
    loop {
        core::hint::spin_loop();
    }
}

/// Reports step `step` with `code` (an [`abi::report`] code) and `detail`.
pub fn report(step: u64, code: u64, detail: u64) {
    let _ = call(abi::SYS_REPORT, [step, code, detail, 0, 0]);
}

/// (the engine's time in Unix ns, TSC Hz).
pub fn clock() -> (u64, u64) {
    call(abi::SYS_CLOCK, [0; 5]).unwrap_or((0, 0))
}

/// The processor's time-stamp counter.
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: rdtsc reads a counter into edx:eax and touches nothing else.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Fills `buf` with entropy from the kernel.
pub fn entropy(buf: &mut [u8]) -> Result<(), Error> {
    // SAFETY: the kernel writes at most `buf.len()` bytes at `buf`, which we own mutably.
    let (rax, _, _) = unsafe {
        raw(
            abi::SYS_ENTROPY,
            [buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0],
        )
    };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}

/// Yields the processor.
pub fn yield_now() {
    let _ = call(abi::SYS_YIELD, [0; 5]);
}

/// Creates an object of `kind` with `pages` pages, default protections `prots`, signed for by
/// key object `kuid`.
pub fn create_object(
    kind: u64,
    pages: u64,
    prots: Protections,
    kuid: Option<ObjID>,
) -> Result<ObjID, Error> {
    let (lo, hi) = kuid.map_or((0, 0), abi::id_words);
    call(
        abi::SYS_CREATE_OBJECT,
        [kind, pages, u64::from(prots.bits()), lo, hi],
    )
    .map(id_of)
}

/// Changes the principal label of the active context to `label` (`abi::SYS_SCTX_LABEL`).
pub fn sctx_label(label: &twizzler_capsec::Label) -> Result<(), Error> {
    let bytes = label.encode();
    call(
        abi::SYS_SCTX_LABEL,
        [bytes.as_ptr() as u64, bytes.len() as u64, 0, 0, 0],
    )
    .map(|_| ())
}

/// Creates an object with data label `label` (`None`: the creator's principal label), as
/// [`create_object`] otherwise (`abi::SYS_CREATE_LABELLED`).
pub fn create_labelled(
    kind: u64,
    pages: u64,
    prots: Protections,
    kuid: Option<ObjID>,
    label: Option<&twizzler_capsec::Label>,
) -> Result<ObjID, Error> {
    let mut buf = [0u8; 16 + twizzler_capsec::MAX_LABEL_LEN];
    let kuid = kuid.map_or(0, ObjID::raw);
    let mut len = 16;
    if let Some(head) = buf.get_mut(..16) {
        head.copy_from_slice(&kuid.to_le_bytes());
    }
    if let Some(l) = label {
        let bytes = l.encode();
        len += bytes.len();
        if let Some(tail) = buf.get_mut(16..len) {
            tail.copy_from_slice(&bytes);
        }
    }
    call(
        abi::SYS_CREATE_LABELLED,
        [
            kind,
            pages,
            u64::from(prots.bits()),
            buf.as_ptr() as u64,
            len as u64,
        ],
    )
    .map(id_of)
}

/// Creates a key object from the encoded verifying key `key`.
pub fn create_key(key: &[u8]) -> Result<ObjID, Error> {
    call(
        abi::SYS_CREATE_KEY,
        [key.as_ptr() as u64, key.len() as u64, 0, 0, 0],
    )
    .map(id_of)
}

/// Maps `id`; returns the address of its byte 0.
pub fn map(id: ObjID) -> Result<u64, Error> {
    let (lo, hi) = abi::id_words(id);
    call(abi::SYS_MAP, [lo, hi, 0, 0, 0]).map(|(base, _)| base)
}

/// Unmaps `id`.
pub fn unmap(id: ObjID) -> Result<(), Error> {
    let (lo, hi) = abi::id_words(id);
    call(abi::SYS_UNMAP, [lo, hi, 0, 0, 0]).map(|_| ())
}

fn on_id(n: u64, id: ObjID) -> Result<(), Error> {
    let (lo, hi) = abi::id_words(id);
    call(n, [lo, hi, 0, 0, 0]).map(|_| ())
}

/// Attaches context `id`.
pub fn attach(id: ObjID) -> Result<(), Error> {
    on_id(abi::SYS_ATTACH, id)
}

/// Detaches context `id`.
pub fn detach(id: ObjID) -> Result<(), Error> {
    on_id(abi::SYS_DETACH, id)
}

/// Switches to attached context `id`.
pub fn switch(id: ObjID) -> Result<(), Error> {
    on_id(abi::SYS_SWITCH, id)
}

/// The active context.
pub fn active() -> Result<ObjID, Error> {
    call(abi::SYS_ACTIVE, [0; 5]).map(id_of)
}

/// Revokes key object `kuid`.
pub fn revoke_key(kuid: ObjID) -> Result<(), Error> {
    on_id(abi::SYS_REVOKE_KEY, kuid)
}

/// Revokes capability `cap` (encoded and passed whole: the kernel checks who signs for its
/// target).
pub fn revoke_cap(cap: &Cap) -> Result<(), Error> {
    revoke_record_bytes(RecordKind::Cap.raw().into(), &cap.encode())
}

/// Revokes the record of `kind` encoded as `bytes`.
pub fn revoke_record_bytes(kind: u64, bytes: &[u8]) -> Result<(), Error> {
    call(
        abi::SYS_REVOKE_RECORD,
        [kind, bytes.as_ptr() as u64, bytes.len() as u64, 0, 0],
    )
    .map(|_| ())
}

/// Test-only: moves the engine's clock forward by `ns`; returns the new time.
pub fn advance_clock(ns: u64) -> Result<u64, Error> {
    call(abi::SYS_ADVANCE_CLOCK, [ns, 0, 0, 0, 0]).map(|(t, _)| t)
}

/// Sets the fault-recovery range (see [`crate::rt`]).
pub fn set_recovery(start: u64, end: u64, landing: u64) -> Result<(), Error> {
    call(abi::SYS_SET_RECOVERY, [start, end, landing, 0, 0]).map(|_| ())
}

/// The program's own key and objects (`SYS_SELF`), as `u64` words ([`abi::self_info`]).
pub fn self_info(words: &mut [u64; abi::self_info::WORDS]) -> Result<(), Error> {
    let len = core::mem::size_of_val(words) as u64;
    // SAFETY: the kernel writes at most `len` bytes at `words`, which the caller owns.
    let (rax, _, _) = unsafe { raw(abi::SYS_SELF, [words.as_mut_ptr() as u64, len, 0, 0, 0]) };
    match rax {
        0 => Ok(()),
        code => Err(Error::from_code(code).unwrap_or(Error::NoSys)),
    }
}
