//! The system calls of user programs (`int 0x80`), modelled on Twizzler's for what a security
//! policy needs. The ABI (numbers, registers, error codes) is `kernel-hooks/user/src/abi.rs`,
//! included here as [`crate::user_abi`]; `kernel-hooks/README.md` documents it.
//!
//! **Nothing from user space is trusted.** Every pointer and length is checked before use:
//! the length against [`MAX_COPY`], the range for wrap-around and against the user slots,
//! each byte against the objects the task has mapped, and then each byte is copied through
//! the fault path as the task's own access ([`crate::task::kernel_access`]): the engine decides
//! it with the task's contexts and the kernel never maps, on the task's behalf, more than they
//! grant. A failed check is an error in `rax`; the kernel never faults on a user pointer (it
//! copies through its identity map of the object's frames, never through the user address).

use alloc::vec::Vec;

use kernel_hooks::{AttachError, DetachError, SwitchResult, Unmap};
use twizzler_capsec::{
    AccessKind, CtxFlags, Label, LabelError, ObjID, Protections, Record, RecordKind, SecCtx,
    VerifyingKey,
};

use crate::difc::{self, RefusedLabel};

use crate::objects::{self, Body, ENGINE, table};
use crate::paging::{MAX_SLOTS, SLOT_SIZE};
use crate::program::{self, Delivered, StepReport, Task};
use crate::task::{Denial, Outcome};
use crate::trap::UserFrame;
use crate::user_abi::{
    self as abi, Error, MAX_COPY, MAX_OBJECT_PAGES, id_from_words as id, id_words as halves,
};
use crate::{clock, rng};

/// The lowest and one past the highest user address.
const USER_START: u64 = SLOT_SIZE;
const USER_END: u64 = (MAX_SLOTS + 1) * SLOT_SIZE;

/// Handles the system call in `frame`: writes its result registers, or returns the exit
/// value when the task exits.
pub fn handle(task: &mut Task, frame: &mut UserFrame) -> Option<u64> {
    let args = [frame.rdi, frame.rsi, frame.rdx, frame.r10, frame.r8];
    if frame.rax == abi::SYS_EXIT {
        return Some(frame.rsi);
    }
    let (rax, rdx, r8) = match dispatch(task, frame.rax, args) {
        Ok((a, b)) => (0, a, b),
        Err(e) => (e as u64, 0, 0),
    };
    frame.rax = rax;
    frame.rdx = rdx;
    frame.r8 = r8;
    None
}

fn dispatch(task: &mut Task, n: u64, a: [u64; 5]) -> Result<(u64, u64), Error> {
    match n {
        abi::SYS_REPORT => {
            let denials: Vec<Delivered> = core::mem::take(&mut task.pending);
            let now = (task.faults, ENGINE.stats());
            let (faults, before) = core::mem::replace(&mut task.at_last_report, now);
            task.reports.push(StepReport {
                step: a[0],
                code: a[1],
                detail: a[2],
                denials,
                faults: task.faults - faults,
                misses_verifies: (
                    now.1.misses.wrapping_sub(before.misses),
                    now.1.verifies.wrapping_sub(before.verifies),
                ),
            });
            Ok((0, 0))
        }
        abi::SYS_CLOCK => Ok((ENGINE.now(), clock::tsc_hz())),
        abi::SYS_ENTROPY => entropy(task, a[0], a[1]),
        abi::SYS_YIELD => Ok((0, 0)),
        abi::SYS_CREATE_OBJECT => create_object(task, a, None),
        abi::SYS_CREATE_LABELLED => create_labelled(task, a),
        abi::SYS_SCTX_LABEL => sctx_label(task, a[0], a[1]),
        abi::SYS_CREATE_KEY => create_key(task, a[0], a[1]),
        abi::SYS_MAP => map(task, id(a[0], a[1])),
        abi::SYS_UNMAP => unmap(task, id(a[0], a[1])),
        abi::SYS_ATTACH => attach(task, id(a[0], a[1])),
        abi::SYS_DETACH => detach(task, id(a[0], a[1])),
        abi::SYS_SWITCH => switch(task, id(a[0], a[1])),
        abi::SYS_ACTIVE => Ok(halves(task.thread.active_id())),
        abi::SYS_REVOKE_KEY => revoke_key(task, id(a[0], a[1])),
        abi::SYS_REVOKE_RECORD => revoke_record(task, a[0], a[1], a[2]),
        abi::SYS_SET_RECOVERY => set_recovery(task, a[0], a[1], a[2]),
        abi::SYS_ADVANCE_CLOCK => advance_clock(task, a[0]),
        abi::SYS_SELF => self_info(task, a[0], a[1]),
        _ => Err(Error::NoSys),
    }
}

/// Checks that `addr .. addr + len` is a user range the kernel may copy: `len` at most
/// [`MAX_COPY`], no wrap-around, inside the user slots.
fn check_range(addr: u64, len: u64) -> Result<(), Error> {
    if len > MAX_COPY {
        return Err(Error::BadLength);
    }
    let end = addr.checked_add(len).ok_or(Error::BadPointer)?;
    if addr < USER_START || end > USER_END {
        return Err(Error::BadPointer);
    }
    Ok(())
}

/// Copies one byte at user address `at` on the task's behalf (`Read`), or stores `value`
/// there (`Write`): only in an object the task has mapped, decided by the engine as the
/// task's own access.
fn user_byte(task: &Task, at: u64, kind: AccessKind, value: u8) -> Result<u8, Error> {
    if task.object_at(at).is_none() {
        return Err(Error::BadPointer);
    }
    crate::task::kernel_access(&task.thread, at, kind, value).map_err(|o| match o {
        Outcome::Denied {
            why: Denial::Engine(_) | Denial::TooLittle { .. },
            ..
        } => Error::Denied,
        _ => Error::BadPointer,
    })
}

/// Copies `len` bytes from user address `addr`.
fn copy_in(task: &Task, addr: u64, len: u64) -> Result<Vec<u8>, Error> {
    check_range(addr, len)?;
    (addr..addr + len)
        .map(|at| user_byte(task, at, AccessKind::Read, 0))
        .collect()
}

/// Copies `bytes` to user address `addr`.
fn copy_out(task: &Task, addr: u64, bytes: &[u8]) -> Result<(), Error> {
    check_range(addr, bytes.len() as u64)?;
    for (at, b) in (addr..).zip(bytes) {
        user_byte(task, at, AccessKind::Write, *b)?;
    }
    Ok(())
}

fn entropy(task: &Task, addr: u64, len: u64) -> Result<(u64, u64), Error> {
    check_range(addr, len)?;
    let mut rng = rng::RdRand::new().ok_or(Error::NoSys)?;
    let mut bytes = alloc::vec![0u8; len as usize];
    let Ok(()) = rand_core::TryRng::try_fill_bytes(&mut rng, &mut bytes);
    copy_out(task, addr, &bytes)?;
    Ok((0, 0))
}

/// Copies the task's own key seed and objects out (`SYS_SELF`).
fn self_info(task: &Task, addr: u64, len: u64) -> Result<(u64, u64), Error> {
    let bytes: Vec<u8> = task.own.iter().flat_map(|w| w.to_le_bytes()).collect();
    if len < bytes.len() as u64 {
        return Err(Error::BadLength);
    }
    copy_out(task, addr, &bytes)?;
    Ok((0, 0))
}

/// `SYS_CREATE_LABELLED`: the `kuid` and the label come in one buffer.
fn create_labelled(task: &Task, a: [u64; 5]) -> Result<(u64, u64), Error> {
    let [kind, pages, prots, addr, len] = a;
    if len < 16 {
        return Err(Error::BadLength);
    }
    let bytes = copy_in(task, addr, len)?;
    let (head, tail) = bytes.split_at_checked(16).ok_or(Error::BadLength)?;
    let kuid = u128::from_le_bytes(head.try_into().map_err(|_| Error::BadLength)?);
    let label = if tail.is_empty() {
        None
    } else {
        Some(Label::decode(tail).map_err(|_| Error::Malformed)?)
    };
    create_object(
        task,
        [kind, pages, prots, kuid as u64, (kuid >> 64) as u64],
        Some(label),
    )
}

/// `SYS_SCTX_LABEL`: the active context's principal label becomes the decoded bytes.
fn sctx_label(task: &Task, addr: u64, len: u64) -> Result<(u64, u64), Error> {
    let bytes = copy_in(task, addr, len)?;
    let label = Label::decode(&bytes).map_err(|_| Error::Malformed)?;
    difc::sctx_label(task.thread.active_id(), &label)
        .map(|_| (0, 0))
        .map_err(refused)
}

/// The error code of a refused label change or labelled creation.
fn refused(r: RefusedLabel) -> Error {
    match r {
        RefusedLabel::Rule(LabelError::NotOwned { .. } | LabelError::Ownership { .. }) => {
            Error::NotOwned
        }
        RefusedLabel::Rule(LabelError::Malformed(_)) => Error::Malformed,
        RefusedLabel::Rule(_) | RefusedLabel::Flow(_) => Error::Flow,
        RefusedLabel::TableFull => Error::NoSpace,
        RefusedLabel::NotContext => Error::WrongKind,
    }
}

/// `SYS_CREATE_OBJECT` (`label` = `None`) and `SYS_CREATE_LABELLED` (`Some`: the label asked
/// for, `Some(None)` the creator's): the object's data label is fixed here (§4.1).
fn create_object(
    task: &Task,
    a: [u64; 5],
    label: Option<Option<Label>>,
) -> Result<(u64, u64), Error> {
    let [kind, pages, prots, kuid_lo, kuid_hi] = a;
    if !(1..=MAX_OBJECT_PAGES).contains(&pages) {
        return Err(Error::BadArg);
    }
    let prots = u16::try_from(prots)
        .ok()
        .and_then(Protections::from_raw)
        .ok_or(Error::BadArg)?;
    let kuid = match id(kuid_lo, kuid_hi) {
        k if k.raw() == 0 => None,
        k => match table().and_then(|t| t.get(k)).map(|o| &o.body) {
            Some(Body::Key(_)) => Some(k),
            Some(_) => return Err(Error::WrongKind),
            None => return Err(Error::NoObject),
        },
    };
    if kind != abi::KIND_DATA && kind != abi::KIND_CONTEXT {
        return Err(Error::BadArg);
    }
    let label =
        difc::creation_label(task.thread.active_id(), label.flatten().as_ref()).map_err(refused)?;
    let object = match kind {
        abi::KIND_DATA => program::new_data_object(pages, prots, kuid, label)?,
        _ => program::new_context_object(pages, prots, kuid, label)?,
    };
    Ok(halves(object.id))
}

fn create_key(task: &mut Task, addr: u64, len: u64) -> Result<(u64, u64), Error> {
    let bytes = copy_in(task, addr, len)?;
    let key = VerifyingKey::decode(&bytes).map_err(|_| Error::Malformed)?;
    let object = program::new_key_object(key)?;
    task.owned_keys.push(object.id);
    Ok(halves(object.id))
}

fn map(task: &mut Task, id: ObjID) -> Result<(u64, u64), Error> {
    let object = table().and_then(|t| t.get(id)).ok_or(Error::NoObject)?;
    let base = object.base().ok_or(Error::WrongKind)?;
    if !task.mapped.contains(&id) {
        task.mapped.push(id);
    }
    Ok((base, 0))
}

fn unmap(task: &mut Task, id: ObjID) -> Result<(u64, u64), Error> {
    let object = table().and_then(|t| t.get(id)).ok_or(Error::NoObject)?;
    let at = task
        .mapped
        .iter()
        .position(|m| *m == id)
        .ok_or(Error::NotAttached)?;
    task.mapped.swap_remove(at);
    if let Some(slot) = object.slot {
        let mut paging = objects::PAGING.lock();
        if let Some(pt) = paging.as_mut()
            && pt.unmap_slot_here(slot) > 0
        {
            crate::smp::shootdown();
        }
    }
    Ok((0, 0))
}

/// A context object's flags, as its bytes say now (`None` if they do not parse).
fn ctx_flags(id: ObjID) -> Option<CtxFlags> {
    let ctx = table()?.get(id)?.as_context()?;
    let bytes = ctx.snapshot();
    SecCtx::parse(&bytes).ok().map(|c| c.flags())
}

fn attach(task: &mut Task, id: ObjID) -> Result<(u64, u64), Error> {
    let object = table().and_then(|t| t.get(id)).ok_or(Error::NoObject)?;
    if object.as_context().is_none() {
        return Err(Error::WrongKind);
    }
    // To attach a context, the task's active context must let it read the context object.
    let perms = ENGINE
        .lookup_lazy(task.thread.active_id(), id, object.default_prots)
        .map_err(|_| Error::NotAllowed)?;
    if !(perms.everywhere - perms.restrict).contains(Protections::READ) {
        return Err(Error::NotAllowed);
    }
    // The first attach registers a context that has no principal row (docs/DIFC.md §1.4).
    difc::register(task.thread.active_id(), id).map_err(refused)?;
    task.thread.attach(id).map_err(|e| match e {
        AttachError::AlreadyAttached(_) => Error::Already,
        _ => Error::NotAllowed,
    })?;
    Ok((0, 0))
}

fn detach(task: &mut Task, id: ObjID) -> Result<(u64, u64), Error> {
    // A task running in an UNDETACHABLE context may not leave it by detaching.
    if ctx_flags(task.thread.active_id()).is_some_and(|f| f.contains(CtxFlags::UNDETACHABLE)) {
        return Err(Error::NotAllowed);
    }
    crate::task::detach(&task.thread, id).map_err(|e| match e {
        DetachError::Active(_) => Error::Already,
        _ => Error::NotAttached,
    })?;
    Ok((0, 0))
}

fn switch(task: &mut Task, id: ObjID) -> Result<(u64, u64), Error> {
    let old = task.thread.active_id();
    if old != id && ctx_flags(old).is_some_and(|f| f.contains(CtxFlags::UNDETACHABLE)) {
        return Err(Error::NotAllowed);
    }
    // A switch is a label change (§5.4): the engine refuses one the labels do not allow.
    match ENGINE
        .switch_context(&task.thread, id)
        .map_err(|_| Error::Flow)?
    {
        SwitchResult::Switched => {
            // The pages granted under the old context leave the address space: everything
            // is decided again under the new one (Twizzler switches page tables).
            objects::unmap_pages(Unmap::Context(old));
            Ok((0, 0))
        }
        SwitchResult::NoSwitch => Ok((0, 0)),
        SwitchResult::NotAttached => Err(Error::NotAttached),
    }
}

fn revoke_key(task: &mut Task, kuid: ObjID) -> Result<(u64, u64), Error> {
    match table().and_then(|t| t.get(kuid)).map(|o| &o.body) {
        Some(Body::Key(_)) => {}
        Some(_) => return Err(Error::WrongKind),
        None => return Err(Error::NoObject),
    }
    if !task.owned_keys.contains(&kuid) {
        return Err(Error::NotOwner);
    }
    // A revocation is a write to public state (docs/DIFC.md §4.4).
    difc::check_public_write(task.thread.active_id()).map_err(refused)?;
    objects::revoke_key(kuid);
    Ok((0, 0))
}

fn revoke_record(task: &mut Task, kind: u64, addr: u64, len: u64) -> Result<(u64, u64), Error> {
    let kind = u32::try_from(kind)
        .ok()
        .and_then(|k| RecordKind::from_raw(k).ok())
        .ok_or(Error::BadArg)?;
    let bytes = copy_in(task, addr, len)?;
    let record = Record::decode(kind, &bytes).map_err(|_| Error::Malformed)?;
    // Only the owner of the key that signs for the record's target may revoke it.
    let target = table()
        .and_then(|t| t.get(record.target()))
        .ok_or(Error::NoObject)?;
    match target.kuid {
        Some(k) if task.owned_keys.contains(&k) => {}
        _ => return Err(Error::NotOwner),
    }
    difc::check_public_write(task.thread.active_id()).map_err(refused)?;
    objects::revoke_record(record.id());
    Ok((0, 0))
}

/// Test-only: moves the engine's clock forward, then expires what that made due.
fn advance_clock(task: &Task, ns: u64) -> Result<(u64, u64), Error> {
    if !task.may_set_clock {
        return Err(Error::NotAllowed);
    }
    if ns > abi::MAX_CLOCK_ADVANCE_NS {
        return Err(Error::BadArg);
    }
    ENGINE.set_wall_clock_offset(ENGINE.wall_clock_offset().saturating_add(ns));
    let _ = ENGINE.expire();
    crate::timer::rearm();
    Ok((ENGINE.now(), 0))
}

fn set_recovery(task: &mut Task, start: u64, end: u64, landing: u64) -> Result<(u64, u64), Error> {
    let user = USER_START..USER_END;
    if start >= end || !user.contains(&start) || end > USER_END || !user.contains(&landing) {
        return Err(Error::BadArg);
    }
    task.recovery = Some((start, end, landing));
    Ok((0, 0))
}
