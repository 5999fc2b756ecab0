//! The conformance suite of `kernel-hooks` (`kernel_hooks::conformance`), run on this kernel
//! at boot: its world is built into the object table with the scenarios' ([`add_world`]),
//! and [`KernelHarness`] drives the real fault path (`task::fault_as`), the page tables, the
//! TSC clock, the expiry timer's handler and the revocation calls. Each check prints one
//! line, `conformance: <check>: pass` (or `FAIL: <why>`, or `skipped: <why>`), then a
//! summary line; `cargo xtask test`'s boot steps read them.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use kernel_hooks::conformance::{
    self, Body as WorldBody, Calls, Harness, Interrupted, Outcome, World,
};
use kernel_hooks::{Engine, SecCtxMgr};
use twizzler_capsec::{AccessKind, ObjID, Protections, RecordId};

use crate::objects::{self, Body, CtxObject, ENGINE, KernelHost, Object, PAGING, table};
use crate::paging::{PAGE, PageTables, pte_prots, pte_tag};
use crate::{clock, println, task, timer};

/// The slots the suite's data objects are presented in (free between the several-CPU
/// objects and the cache-pressure ones).
const FIRST_DATA_SLOT: u64 = 57;

/// How long the interrupt check waits for the timer interrupt to be pending.
const PENDING_TIMEOUT_NS: u64 = 1_000_000_000;

/// The suite's world, built at boot (its capability's expiry is relative to then).
static WORLD: spin::Once<World> = spin::Once::new();

/// Builds the suite's world at the engine's current time and adds its objects to `objects`:
/// data objects in slots from [`FIRST_DATA_SLOT`], contexts in the next context slots
/// (`next_ctx_slot`), keys parsed.
pub fn add_world(
    pt: &mut PageTables,
    next_ctx_slot: &mut u64,
    objects: &mut Vec<Object>,
) -> Result<(), String> {
    let world = World::build(ENGINE.now()).map_err(|e| format!("conformance world: {e:?}"))?;
    let mut data_slot = FIRST_DATA_SLOT;
    for o in &world.objects {
        let body = match &o.body {
            WorldBody::Data => {
                let mut frames = Vec::new();
                for _ in 0..conformance::DATA_PAGES {
                    frames.push(pt.alloc_frame().map_err(|e| format!("{e}"))?);
                }
                Body::Frames(frames)
            }
            WorldBody::Context(bytes) => {
                let pages = bytes.len().div_ceil(PAGE as usize).max(1);
                let frames = pt.alloc_contiguous(1 + pages).map_err(|e| format!("{e}"))?;
                Body::Context(CtxObject::new(frames, bytes).ok_or("context frames")?)
            }
            WorldBody::Key(k) => Body::Key(k.clone()),
        };
        let slot = match body {
            Body::Frames(_) => {
                data_slot += 1;
                Some(data_slot - 1)
            }
            Body::Context(_) => {
                *next_ctx_slot += 1;
                Some(*next_ctx_slot - 1)
            }
            Body::Key(_) => None,
        };
        objects.push(Object {
            id: o.id,
            kuid: o.kuid,
            default_prots: o.default_prots,
            slot,
            label: twizzler_capsec::LabelId::EMPTY,
            body,
        });
    }
    WORLD.call_once(|| world);
    Ok(())
}

/// The kernel as a conformance harness.
pub struct KernelHarness;

impl Harness for KernelHarness {
    type Host = KernelHost;

    fn engine(&self) -> &Engine<KernelHost> {
        &ENGINE
    }

    fn fault(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Result<Protections, String> {
        let addr = task::addr_of(target, offset).ok_or("the object has no slot")?;
        task::fault_as(thread, addr, kind).map_err(|o| format!("{o}"))?;
        task::mapped_prots(addr).ok_or_else(|| String::from("nothing was installed"))
    }

    fn mapped(&self, ctx: ObjID, target: ObjID, offset: u64) -> Option<Protections> {
        let addr = task::addr_of(target, offset)?;
        let tag = table()?.tag_of(ctx);
        let mut paging = PAGING.lock();
        let pte = paging.as_mut()?.user_entry(addr);
        let prots = pte_prots(pte);
        (!prots.is_empty() && pte_tag(pte) == tag).then_some(prots)
    }

    fn write_protect(&self, target: ObjID) {
        let Some(slot) = table().and_then(|t| t.get(target)).and_then(|o| o.slot) else {
            return;
        };
        let mut paging = PAGING.lock();
        if let Some(pt) = paging.as_mut()
            && pt.write_protect_slot(slot) > 0
        {
            crate::smp::shootdown();
        }
    }

    fn now(&self) -> u64 {
        clock::monotonic_ns()
    }

    fn wait_until(&self, t: u64) {
        while clock::monotonic_ns() < t {
            core::hint::spin_loop();
        }
    }

    fn expire(&self) {
        ENGINE.expire();
        timer::rearm();
    }

    fn revoke_key(&self, kuid: ObjID) {
        objects::revoke_key(kuid);
    }

    fn revoke_record(&self, id: RecordId) {
        objects::revoke_record(id);
    }

    fn race(&self, a: &(dyn Fn() + Sync), b: &(dyn Fn() + Sync)) -> bool {
        crate::smp::race(a, b)
    }

    fn interrupt_in_engine(&self, during: &dyn Fn()) -> Option<Interrupted> {
        let (_, in_engine, in_interrupt, deferred) = timer::kernel_counts();
        // The shortest one-shot the timer takes, waited for with interrupts masked until the
        // interrupt is pending: it is then delivered as the fault path enables interrupts
        // for the engine, so it lands inside the engine, every time.
        ENGINE.flush();
        crate::apic::arm_in(0);
        let give_up = clock::monotonic_ns().saturating_add(PENDING_TIMEOUT_NS);
        while !crate::apic::pending(crate::trap::TIMER_VECTOR) {
            if clock::monotonic_ns() > give_up {
                // Reported as no interrupt inside the engine.
                break;
            }
            core::hint::spin_loop();
        }
        during();
        // On the way back to user mode the kernel runs what the interrupt deferred.
        timer::run_deferred();
        let (_, in_engine2, in_interrupt2, deferred2) = timer::kernel_counts();
        Some(Interrupted {
            in_engine: in_engine2 - in_engine,
            engine_calls_in_interrupt: in_interrupt2 - in_interrupt,
            deferred_expiries: deferred2 - deferred,
        })
    }

    fn kernel_access(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Option<Result<(), String>> {
        let addr = task::addr_of(target, offset)?;
        Some(
            task::kernel_access(thread, addr, kind, 0)
                .map(|_| ())
                .map_err(|o| format!("{o}")),
        )
    }

    fn calls(&self) -> Calls {
        let c = objects::host_calls();
        Calls {
            clock: c.clock,
            // The fault path reads no metadata of its own (`Fault::lazy`).
            metadata: c.object,
            other: c.with_ctx + c.with_key + c.unmap,
        }
    }
}

/// Runs the suite and prints its lines; `true` when no check failed. Leaves the engine
/// flushed and user space empty for the scenarios.
pub fn run() -> bool {
    let Some(world) = WORLD.get() else {
        println!("conformance: FAIL: the world was not built");
        return false;
    };
    let reports = conformance::run(&KernelHarness, world);
    for r in &reports {
        println!("{r}");
    }
    println!("{}", conformance::summary(&reports));
    ENGINE.flush();
    task::clear_user_space();
    reports
        .iter()
        .all(|r| !matches!(r.outcome, Outcome::Fail(_)))
}
