//! The boundary to the host kernel: what the engine asks of it.
//!
//! The same engine runs in Twizzler's kernel, in the QEMU test kernel and in host tests; each
//! implements [`Host`] over its own object table, key cache, clock and page tables.

use twizzler_security::{ObjID, Protections, VerifyingKey};

/// What the engine needs to know about an object that is being faulted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The object whose verifying key signs for this object, if it has one. An object without
    /// a `kuid` can be granted only its default protections.
    pub kuid: Option<ObjID>,
    /// Rights every context has on the object, before masks.
    pub default_prots: Protections,
}

/// Mappings that a revocation, an invalidation or a cache eviction took the grant away from.
/// The host removes them from the page tables (and shoots down TLBs) before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unmap {
    /// Every page of `target` mapped under context `ctx`.
    Object {
        /// The security context the pages were granted under.
        ctx: ObjID,
        /// The object.
        target: ObjID,
    },
    /// Every page mapped under context `ctx`.
    Context(ObjID),
}

/// Services the host kernel provides to the engine.
///
/// Implementations must not call back into the engine: the engine may hold a cache lock
/// while it calls [`Host::unmap`].
pub trait Host {
    /// The object `id`: its `kuid` and default protections, or `None` if there is no such
    /// object.
    fn object(&self, id: ObjID) -> Option<ObjectInfo>;

    /// The bytes of security-context object `ctx`, as the kernel maps them (read-only), or
    /// `None` if there is no such object. Every byte is untrusted: the engine validates it.
    fn ctx_bytes(&self, ctx: ObjID) -> Option<&[u8]>;

    /// The verifying key stored in key object `kuid`, parsed once by the host and kept
    /// parsed, or `None` if `kuid` holds no valid key.
    fn verifying_key(&self, kuid: ObjID) -> Option<&VerifyingKey>;

    /// The current time, in nanoseconds since the Unix epoch.
    fn now(&self) -> u64;

    /// Removes the mappings `what` describes.
    fn unmap(&self, what: Unmap);
}
