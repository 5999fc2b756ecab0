//! Reading a context inside the host's scope.
//!
//! The host lends the context's bytes for the duration of [`Host::with_ctx`]. The engine
//! reads the header, works on copies of the rows and records it needs, and reads the header
//! again before it trusts anything: if the two headers differ, or a writer flagged a rewrite
//! in progress (the generation's [`twizzler_capsec::WRITING`] bit), the read was torn and is
//! redone, up to [`TORN_RETRIES`] times, after which the fault is denied with
//! [`Violation::ContextChanging`]. Under the host contract (bytes kept still while lent) the
//! first read always succeeds; the check is what keeps a host that breaks it from ever
//! getting a decision made from half of one version and half of another written by a writer
//! that follows the format's rewrite protocol.

use core::sync::atomic::{Ordering, fence};

use twizzler_capsec::{CtxError, CtxHeader, ObjID, SecCtx, Validated};

use super::Engine;
use crate::ctx_bytes::CtxBytes;
use crate::fault::Violation;
use crate::host::Host;
use crate::stats::Counters;

/// How often a torn read of a context is redone before the fault is denied.
pub(super) const TORN_RETRIES: usize = 8;

/// Contexts whose full validation the engine remembers.
const VALIDATED_SLOTS: usize = 16;

/// Contexts validated in full, by generation and length, so misses can reopen them in
/// constant time.
pub(super) struct ValidatedCtxs {
    slots: [Option<(ObjID, Validated)>; VALIDATED_SLOTS],
    victim: u8,
}

impl ValidatedCtxs {
    pub(super) const EMPTY: ValidatedCtxs = ValidatedCtxs {
        slots: [None; VALIDATED_SLOTS],
        victim: 0,
    };

    fn get(&self, ctx: ObjID) -> Option<Validated> {
        self.slots
            .iter()
            .flatten()
            .find(|(c, _)| *c == ctx)
            .map(|(_, v)| *v)
    }

    fn put(&mut self, ctx: ObjID, v: Validated) {
        let slot = self
            .slots
            .iter()
            .position(|s| s.is_some_and(|(c, _)| c == ctx))
            .or_else(|| self.slots.iter().position(Option::is_none))
            .unwrap_or_else(|| {
                let i = usize::from(self.victim) % VALIDATED_SLOTS;
                self.victim = self.victim.wrapping_add(1);
                i
            });
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some((ctx, v));
        }
    }

    pub(super) fn forget(&mut self, ctx: ObjID) {
        for s in &mut self.slots {
            if s.is_some_and(|(c, _)| c == ctx) {
                *s = None;
            }
        }
    }
}

/// The outcome of one read of a context.
enum Read<R> {
    Done(R),
    Torn,
    Malformed(CtxError),
}

impl<H: Host> Engine<H> {
    /// Runs `f` over context `ctx_id`, validated, inside the host's scope; redoes torn reads.
    pub(super) fn read_ctx<R>(
        &self,
        ctx_id: ObjID,
        mut f: impl FnMut(&SecCtx<'_, CtxBytes<'_>>) -> R,
    ) -> Result<R, Violation> {
        for _ in 0..TORN_RETRIES {
            let read = self
                .host
                .with_ctx(ctx_id, |mem| self.read_once(ctx_id, &mem, &mut f))
                .ok_or(Violation::ContextMissing(ctx_id))?;
            match read {
                Read::Done(r) => return Ok(r),
                Read::Malformed(error) => {
                    return Err(Violation::MalformedContext { ctx: ctx_id, error });
                }
                Read::Torn => Counters::bump(&self.counters.torn_reads),
            }
        }
        Err(Violation::ContextChanging(ctx_id))
    }

    fn read_once<R>(
        &self,
        ctx_id: ObjID,
        mem: &CtxBytes<'_>,
        f: &mut impl FnMut(&SecCtx<'_, CtxBytes<'_>>) -> R,
    ) -> Read<R> {
        let before = match CtxHeader::read(mem) {
            Ok(h) => h,
            Err(CtxError::WriteInProgress) => return Read::Torn,
            Err(e) => return Read::Malformed(e),
        };
        // Seqlock order: the body is read after the first header (acquire), and the second
        // header after the body (the fence keeps the body's loads before it), so a writer
        // that marks WRITING before its body stores and writes the new generation last
        // (release) is always caught.
        fence(Ordering::Acquire);
        let still = |mem: &CtxBytes<'_>| {
            fence(Ordering::Acquire);
            matches!(CtxHeader::read(mem), Ok(h) if h == before)
        };
        let ctx = match self.open_ctx(ctx_id, mem) {
            Ok(ctx) if ctx.header() == before => ctx,
            Ok(_) => return Read::Torn,
            // A table that looked out of order or out of bounds may have been caught half
            // rewritten: only an unchanged header makes the error the context's own.
            Err(e) if still(mem) => return Read::Malformed(e),
            Err(_) => return Read::Torn,
        };
        let r = f(&ctx);
        if still(mem) {
            Read::Done(r)
        } else {
            Read::Torn
        }
    }

    /// The context's bytes as a validated view: reopened in constant time if this generation
    /// was validated before, else validated in full.
    fn open_ctx<'b, 'm>(
        &self,
        ctx_id: ObjID,
        mem: &'b CtxBytes<'m>,
    ) -> Result<SecCtx<'b, CtxBytes<'m>>, CtxError> {
        let known = self.validated.lock().get(ctx_id);
        if let Some(v) = known
            && let Ok(ctx) = SecCtx::reopen_mem(mem, v)
        {
            return Ok(ctx);
        }
        let ctx = SecCtx::parse_mem(mem)?;
        self.validated.lock().put(ctx_id, ctx.validated());
        Ok(ctx)
    }
}
