//! The checks. Each drives the host through its [`Harness`] from an engine with nothing
//! cached and says, when it fails, what the host did against what the contract says.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use twizzler_capsec::{
    AccessKind::{Exec, Read, Write},
    MAX_OBJECT_SIZE, PAGE_SIZE, Protections,
};

use super::world::{DATA_PAGES, GATE_ENTRY, World, page};
use super::{Check, Harness};
use crate::fault::{Decision, Fault};
use crate::host::{Host, ObjectInfo, UnmapGranularity};
use crate::mgr::SecCtxMgr;

/// The reason a race check gives when the harness cannot race.
const SKIP_NO_RACE: &str = "the harness cannot run two things at once";
/// The reason the interrupt check gives when the harness cannot make an interrupt land inside
/// the engine (a host that takes none there, or one whose timer cannot be aimed).
const SKIP_NO_INTERRUPTS: &str = "the harness cannot make a timer interrupt land inside the engine";
/// The reason the kernel-access check gives when the host has no kernel copy path.
const SKIP_NO_KERNEL_ACCESS: &str = "the host has no kernel access to user memory";
/// The reason the clock check gives when the world's capability expired before the host
/// reached the check or finished its first fault ([`super::EXPIRY_AFTER_NS`] after building it).
const SKIP_TOO_SLOW: &str =
    "the world's capability expired before the host reached the check or finished its first fault";
/// Every reason a check may give for a skip.
pub(super) const SKIPS: [&str; 4] = [
    SKIP_NO_RACE,
    SKIP_NO_INTERRUPTS,
    SKIP_NO_KERNEL_ACCESS,
    SKIP_TOO_SLOW,
];

const R: Protections = Protections::READ;

fn ensure(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

fn show(p: Option<Protections>) -> String {
    match p {
        Some(p) => format!("{p}"),
        None => String::from("nothing"),
    }
}

pub(super) fn all<T: Harness>() -> Vec<Check<T>> {
    vec![
        (
            "one clock: expire() at the deadline unmaps, not before",
            one_clock::<T>,
        ),
        (
            "write-protection restores only what was granted",
            write_protect::<T>,
        ),
        (
            "exec fault decided at its byte offset (gate entry 0x1010)",
            exec_offset::<T>,
        ),
        (
            "the metadata page is not shifted by the null page",
            metadata_page::<T>,
        ),
        (
            "a hit that never expires: no host call, not even the clock",
            hit_calls::<T>,
        ),
        ("unmap granularity as declared", unmap_granularity::<T>),
        (
            "revocation racing a fault leaves no mapping",
            revoke_race::<T>,
        ),
        (
            "an interrupt inside the engine calls nothing of it",
            interrupt::<T>,
        ),
        (
            "a kernel access to user memory is decided as the thread's",
            kernel_access::<T>,
        ),
    ]
}

/// Deadlines are on the host's clock: a grant that expires is mapped until `expire()` runs at
/// its deadline, and gone after.
fn one_clock<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let e = h.engine();
    let t = SecCtxMgr::new(w.ids.ctx_a);
    let expires = w
        .expires
        .at()
        .ok_or("the world's capability does not expire")?;
    let deadline = expires.saturating_sub(e.wall_clock_offset());
    // A host that reaches this check, or finishes its first fault, only after the world's
    // capability expired (a slow or loaded machine, a clock running fast) leaves nothing
    // here to check: the check is skipped, not failed, whatever the fault returned.
    let started = h.now();
    let got = h.fault(&t, w.ids.expiring, page(1), Read);
    let now = h.now();
    if started >= deadline || now >= deadline {
        return Err(String::from(SKIP_TOO_SLOW));
    }
    let got = got?;
    ensure(got == R, || {
        format!("the expiring read-only grant mapped {got}")
    })?;
    let next = e.next_deadline();
    ensure(next == Some(deadline), || {
        format!(
            "next_deadline() is {next:?}; the capability expires at {deadline} on the host's \
             monotonic clock"
        )
    })?;
    // The one relative wait a host arms its timer with, from the same clock reading.
    let wait = e.next_deadline_in(now);
    ensure(wait == Some(deadline - now), || {
        format!(
            "next_deadline_in({now}) is {wait:?}, not the {} ns left",
            deadline - now
        )
    })?;
    h.expire();
    let before = h.mapped(w.ids.ctx_a, w.ids.expiring, page(1));
    ensure(before == Some(R), || {
        format!("before the deadline, expire() left {} mapped", show(before))
    })?;
    h.wait_until(now + wait.unwrap_or(0));
    h.expire();
    let after = h.mapped(w.ids.ctx_a, w.ids.expiring, page(1));
    ensure(after.is_none(), || {
        format!(
            "after expire() at the deadline the page is still mapped {}",
            show(after)
        )
    })?;
    ensure(h.fault(&t, w.ids.expiring, page(1), Read).is_err(), || {
        String::from("a fault after the deadline was granted")
    })
}

/// In a region that allows read, write and execute, a page the engine granted read only is
/// never mapped with more, before or after the host write-protects it.
fn write_protect<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let t = SecCtxMgr::new(w.ids.ctx_a);
    let got = h.fault(&t, w.ids.rwx, page(1), Read)?;
    ensure(got == R, || {
        format!("a read-only grant in an RWX region mapped {got}")
    })?;
    let granted = h.engine().granted(w.ids.ctx_a, w.ids.rwx, page(1));
    ensure(granted == Some(R), || {
        format!(
            "Engine::granted says {}; the record grants {R}",
            show(granted)
        )
    })?;
    h.write_protect(w.ids.rwx);
    let after = h.mapped(w.ids.ctx_a, w.ids.rwx, page(1));
    ensure(after.is_none_or(|p| R.contains(p)), || {
        format!(
            "after write-protection the page is mapped {}; the engine granted {R}",
            show(after)
        )
    })?;
    let again = h.fault(&t, w.ids.rwx, page(1), Read)?;
    let mapped = h.mapped(w.ids.ctx_a, w.ids.rwx, page(1));
    ensure(again == R && mapped == Some(R), || {
        format!(
            "mapped again after write-protection: {again} (page tables: {})",
            show(mapped)
        )
    })?;
    ensure(h.fault(&t, w.ids.rwx, page(1), Exec).is_err(), || {
        String::from("an instruction fetch was granted where only read was")
    })
}

/// An instruction fetch at a code gate's entry point (0x1010, not page aligned) enters the
/// gate's context; a fetch at the start of the same page (not an entry point) does not.
fn exec_offset<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let attached = || -> Result<SecCtxMgr, String> {
        let t = SecCtxMgr::new(w.ids.ctx_a);
        t.attach(w.ids.ctx_b)
            .map_err(|e| format!("attach: {e:?}"))?;
        Ok(t)
    };
    let t = attached()?;
    ensure(h.fault(&t, w.ids.code, page(1), Exec).is_err(), || {
        String::from("a fetch at 0x1000, which is not the gate's entry point, was granted")
    })?;
    let t = attached()?;
    let got = h
        .fault(&t, w.ids.code, GATE_ENTRY, Exec)
        .map_err(|why| format!("a fetch at the gate's entry point 0x1010 was denied: {why}"))?;
    ensure(got.contains(Protections::EXEC), || {
        format!("the entry point was mapped {got}, without execute")
    })?;
    ensure(t.active_id() == w.ids.ctx_b, || {
        String::from("the thread was not switched to the gate's context")
    })?;
    let mapped = h.mapped(w.ids.ctx_b, w.ids.code, GATE_ENTRY);
    ensure(
        mapped.is_some_and(|p| p.contains(Protections::EXEC)),
        || {
            format!(
                "the gate's page is mapped {} under its context",
                show(mapped)
            )
        },
    )
}

/// `Fault::in_mapping` shifts a page of a mapping without the null page by one page, except
/// the slot's last page, the object's metadata page; a fault there is decided in bounds.
fn metadata_page<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let info = ObjectInfo::new(Some(w.ids.k_targets), Protections::empty());
    let first = Fault::in_mapping(w.ids.plain, info, 0x10, true, Read);
    ensure(first.offset == PAGE_SIZE + 0x10, || {
        format!(
            "slot byte 0x10 became object byte {:#x}, not 0x1010",
            first.offset
        )
    })?;
    let meta = MAX_OBJECT_SIZE - PAGE_SIZE + 0x10;
    let last = Fault::in_mapping(w.ids.plain, info, meta, true, Read);
    ensure(last.offset == meta, || {
        format!(
            "the metadata page's byte {meta:#x} became {:#x} (shifted by the null page)",
            last.offset
        )
    })?;
    match h.engine().decide(&SecCtxMgr::new(w.ids.ctx_a), &last) {
        Decision::Map { prots, .. } if prots.contains(R) => Ok(()),
        Decision::Map { prots, .. } => Err(format!("the metadata page was granted {prots}")),
        Decision::Violation(v) => Err(format!("a read of the metadata page was denied: {v}")),
    }
}

/// A fault served from the cache on a grant that never expires calls nothing in the host:
/// no read of the object's metadata (the `kuid` is needed only on a miss) and no clock (read
/// only when an answer depends on it: a miss, or an entry that expires).
fn hit_calls<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let t = SecCtxMgr::new(w.ids.ctx_a);
    h.fault(&t, w.ids.plain, page(1), Read)?;
    let hits = h.engine().stats().hits;
    let before = h.calls();
    h.fault(&t, w.ids.plain, page(2), Read)?;
    let d = h.calls().since(&before);
    ensure(h.engine().stats().hits == hits + 1, || {
        String::from("the second fault on the object was not a cache hit")
    })?;
    ensure(d.metadata == 0, || {
        format!(
            "a hit read object metadata {} time(s) (the kuid is needed only on a miss)",
            d.metadata
        )
    })?;
    ensure(d.clock == 0 && d.other == 0, || {
        format!(
            "a hit on a grant that never expires called the host {} time(s) and read the \
             clock {} time(s); it needs neither",
            d.other, d.clock
        )
    })
}

/// A revocation that takes away one context's grant unmaps that context's pages; a host
/// that unmaps per context keeps another context's pages of the object, one that unmaps
/// per object loses them too (and they fault back in).
fn unmap_granularity<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let a = SecCtxMgr::new(w.ids.ctx_a);
    let c = SecCtxMgr::new(w.ids.ctx_c);
    h.fault(&a, w.ids.shared, page(1), Read)?;
    h.fault(&c, w.ids.shared, page(2), Read)?;
    h.revoke_record(w.shared_a);
    let gone = h.mapped(w.ids.ctx_a, w.ids.shared, page(1));
    ensure(gone.is_none(), || {
        format!(
            "A's page is still mapped {} after its record was revoked",
            show(gone)
        )
    })?;
    let other = h.mapped(w.ids.ctx_c, w.ids.shared, page(2));
    match <T::Host as Host>::UNMAP_GRANULARITY {
        UnmapGranularity::PerContext => ensure(other == Some(R), || {
            format!(
                "a per-context host left {} of C's page (its grant was not revoked)",
                show(other)
            )
        })?,
        UnmapGranularity::PerObject => ensure(other.is_none(), || {
            format!(
                "a per-object host kept C's page mapped {} through an unmap of the object",
                show(other)
            )
        })?,
    }
    ensure(h.fault(&a, w.ids.shared, page(1), Read).is_err(), || {
        String::from("A was granted the object again after its record was revoked")
    })?;
    let back = h.fault(&c, w.ids.shared, page(2), Read)?;
    ensure(back == R, || format!("C's page faulted back in as {back}"))
}

/// Faults on one CPU race a key revocation on another: once the revocation has returned and
/// the faults are done, nothing granted under the key is mapped.
fn revoke_race<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let t = SecCtxMgr::new(w.ids.ctx_a);
    h.fault(&t, w.ids.race, page(1), Read)?;
    let faults = || {
        for _ in 0..16 {
            for p in 1..DATA_PAGES {
                let _ = h.fault(&t, w.ids.race, page(p), Read);
            }
        }
    };
    let revoke = || h.revoke_key(w.ids.k_race);
    if !h.race(&faults, &revoke) {
        return Err(String::from(SKIP_NO_RACE));
    }
    for p in 1..DATA_PAGES {
        let left = h.mapped(w.ids.ctx_a, w.ids.race, page(p));
        ensure(left.is_none(), || {
            format!(
                "page {p} is still mapped {} after the key was revoked",
                show(left)
            )
        })?;
    }
    ensure(h.fault(&t, w.ids.race, page(1), Read).is_err(), || {
        String::from("a fault after the revocation was granted")
    })
}

/// A timer interrupt that lands while the engine decides a fault on the same CPU (which may
/// hold one of the engine's spin locks, which do not mask interrupts) calls nothing of the
/// engine: the expiry it would run is deferred to ordinary kernel code, and the fault is
/// decided.
fn interrupt<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let t = SecCtxMgr::new(w.ids.ctx_a);
    let got = core::cell::RefCell::new(None);
    let during = || *got.borrow_mut() = Some(h.fault(&t, w.ids.plain, page(1), Read));
    let Some(seen) = h.interrupt_in_engine(&during) else {
        return Err(String::from(SKIP_NO_INTERRUPTS));
    };
    ensure(seen.in_engine >= 1, || {
        String::from(
            "no timer interrupt landed inside the engine: the host takes none in kernel mode \
             while it decides, so this check tests nothing there",
        )
    })?;
    ensure(seen.engine_calls_in_interrupt == 0, || {
        format!(
            "the interrupt handler called the engine {} time(s): it may spin for ever on a lock \
             the interrupted code holds",
            seen.engine_calls_in_interrupt
        )
    })?;
    ensure(seen.deferred_expiries >= 1, || {
        String::from("the expiry the interrupt deferred never ran")
    })?;
    match got.into_inner() {
        Some(Ok(p)) if p.contains(R) => Ok(()),
        Some(Ok(p)) => Err(format!("the interrupted fault mapped {p}")),
        Some(Err(why)) => Err(format!("the interrupted fault was denied: {why}")),
        None => Err(String::from("the harness did not run the fault")),
    }
}

/// A kernel-mode fault on a user address (a copy from or to user memory on a thread's
/// behalf) is decided as the thread's own access: the kernel never maps, for the thread,
/// what the thread could not map itself.
fn kernel_access<T: Harness>(h: &T, w: &World) -> Result<(), String> {
    let t = SecCtxMgr::new(w.ids.ctx_a);
    // A holds nothing on CODE: a kernel read on A's behalf is refused and maps nothing.
    match h.kernel_access(&t, w.ids.code, page(1), Read) {
        None => return Err(String::from(SKIP_NO_KERNEL_ACCESS)),
        Some(Ok(())) => {
            return Err(String::from(
                "the kernel read, on the thread's behalf, a page the thread may not read",
            ));
        }
        Some(Err(_)) => {}
    }
    let code = h.mapped(w.ids.ctx_a, w.ids.code, page(1));
    ensure(code.is_none(), || {
        format!(
            "the refused kernel read left the page mapped {}",
            show(code)
        )
    })?;
    // A may read RWX, not write it: a kernel write on its behalf is refused.
    ensure(
        h.kernel_access(&t, w.ids.rwx, page(1), Write)
            .is_some_and(|r| r.is_err()),
        || String::from("the kernel wrote, on the thread's behalf, a page it may only read"),
    )?;
    let rwx = h.mapped(w.ids.ctx_a, w.ids.rwx, page(1));
    ensure(rwx.is_none_or(|p| R.contains(p)), || {
        format!("after the refused write the page is mapped {}", show(rwx))
    })?;
    // What the thread may read, the kernel reads for it.
    match h.kernel_access(&t, w.ids.plain, page(1), Read) {
        Some(Ok(())) => Ok(()),
        Some(Err(why)) => Err(format!(
            "a kernel read the thread may make was refused: {why}"
        )),
        None => Err(String::from("the harness stopped offering kernel access")),
    }
}
