//! Security-context objects in a store: create, edit, read.
//!
//! Every edit is one transaction reading, changing and writing the context object
//! ([`ObjectStore::update`]): the bytes are validated with the kernel's reader, loaded into a
//! [`SecCtxEditor`], changed, and written back in the `twizzler-security` layout with the
//! generation bumped, laid out so that the store rewrites only the pages that changed
//! ([`SecCtxEditor::encode_for_update`]: the heap stays where it was). Two
//! editors of one context never lose each other's change, and a failed edit writes nothing.

use std::fmt;

use twizzler_capsec::{
    BuildError, Cap, CtxError, CtxFlags, Del, ObjID, Protections, Record, RecordId, RecordKind,
    SecCtx, SecCtxEditor,
};

use crate::store::{ObjMeta, Object, ObjectStore, StoreError};

/// Why a context could not be created, read or edited.
#[derive(Debug)]
#[non_exhaustive]
pub enum ContextError {
    /// The store failed.
    Store(StoreError),
    /// The object's bytes are not a valid context.
    Malformed {
        /// The context.
        id: ObjID,
        /// What is wrong.
        error: CtxError,
    },
    /// The edited context cannot be written.
    Build {
        /// The context.
        id: ObjID,
        /// Why.
        error: BuildError,
    },
    /// A record added to the context is not for it (its accessor or receiver is another
    /// context): it could never grant anything there.
    NotForThisContext {
        /// The context.
        id: ObjID,
        /// The context the record is for.
        holder: ObjID,
    },
    /// Nothing matched what was to be removed.
    NothingToRemove {
        /// The context.
        id: ObjID,
    },
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::Malformed { id, error } => write!(f, "context {id} is malformed: {error}"),
            Self::Build { id, error } => write!(f, "context {id}: {error}"),
            Self::NotForThisContext { id, holder } => write!(
                f,
                "the record is for context {holder}, not {id}: it would grant nothing here"
            ),
            Self::NothingToRemove { id } => write!(f, "context {id} holds nothing that matches"),
        }
    }
}

impl std::error::Error for ContextError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            Self::Malformed { error, .. } => Some(error),
            Self::Build { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<StoreError> for ContextError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Creates an empty context object `id`. `kuid` names the key pair the context signs
/// delegations with (it is the context's own `kuid`).
pub fn create<S: ObjectStore>(
    store: &S,
    id: ObjID,
    kuid: Option<ObjID>,
) -> Result<(), ContextError> {
    store.create(&empty(id, kuid)?)?;
    Ok(())
}

/// An empty context object `id` with `kuid` (for [`create`], or to create it within a larger
/// transaction).
pub fn empty(id: ObjID, kuid: Option<ObjID>) -> Result<Object, ContextError> {
    // With room for its tables to grow in place (see `edit`).
    let data = SecCtxEditor::new()
        .encode_for_update(None)
        .map_err(|error| ContextError::Build { id, error })?;
    Ok(Object {
        id,
        meta: ObjMeta {
            kuid,
            ..ObjMeta::plain()
        },
        data,
    })
}

/// Loads the context object `obj` into an editor, validating it first.
pub fn editor_of(obj: &Object) -> Result<SecCtxEditor, ContextError> {
    let ctx =
        SecCtx::parse(&obj.data).map_err(|error| ContextError::Malformed { id: obj.id, error })?;
    Ok(SecCtxEditor::from_ctx(&ctx))
}

/// Reads context `id`.
pub fn read<S: ObjectStore>(store: &S, id: ObjID) -> Result<SecCtxEditor, ContextError> {
    editor_of(&store.get(id)?)
}

/// Applies `change` to context `id` under its lock and writes the result; returns the new
/// generation. Nothing is written when `change` fails.
pub fn edit<S: ObjectStore>(
    store: &S,
    id: ObjID,
    change: impl FnOnce(&mut SecCtxEditor) -> Result<(), ContextError>,
) -> Result<u64, ContextError> {
    let mut generation = 0;
    store.update(id, |obj| {
        let ctx = SecCtx::parse(&obj.data)
            .map_err(|error| ContextError::Malformed { id: obj.id, error })?;
        let heap_offset = ctx.heap_offset();
        let mut ed = SecCtxEditor::from_ctx(&ctx);
        change(&mut ed)?;
        // Laid out so that the store rewrites only what changed: the heap stays where it was.
        obj.data = ed
            .encode_for_update(Some(heap_offset))
            .map_err(|error| ContextError::Build { id, error })?;
        generation = ed.generation();
        Ok::<(), ContextError>(())
    })?;
    Ok(generation)
}

/// Whether `cap` is a public ownership record: a `TAG` root whose accessor is
/// [`twizzler_capsec::ALL_CONTEXTS`].
pub fn is_public_ownership(cap: &Cap) -> bool {
    cap.is_ownership() && cap.accessor() == twizzler_capsec::ALL_CONTEXTS
}

fn check_holder(id: ObjID, holder: ObjID) -> Result<(), ContextError> {
    if holder == id {
        Ok(())
    } else {
        Err(ContextError::NotForThisContext { id, holder })
    }
}

/// Adds a capability to context `id` (it must be for `id`): in place when the context allows
/// it ([`crate::context_append`]), else by a full edit.
///
/// # Example
///
/// ```
/// use rand_core::SeedableRng;
/// use secctx::{DbStore, ObjMeta, Object, ObjectStore, context, keypair};
/// use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningScheme};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // the OS RNG in real use
/// let dir = tempfile::tempdir()?;
/// let store = DbStore::open(dir.path())?;
///
/// // A key pair, an object it signs for, and a context.
/// let kdf = keypair::KdfParams::DEFAULT; // (used only with a passphrase)
/// let (ids, key) = keypair::create_keypair(&store, SigningScheme::Ed25519, None, kdf, &mut rng)?;
/// let (doc, ctx) = (keypair::random_id(&mut rng), keypair::random_id(&mut rng));
/// let meta = ObjMeta::signed_by(ids.verifying);
/// store.create(&Object { id: doc, meta, data: vec![7; 8192] })?;
/// context::create(&store, ctx, None)?;
///
/// // The object's owner grants the context read access.
/// let cap = Cap::mint(CapGrant::new(doc, ctx, Protections::READ), &key)?;
/// let before = context::read(&store, ctx)?.generation();
/// let generation = context::add_cap(&store, ctx, &cap)?;
/// assert!(generation > before);
///
/// let ctx_now = context::read(&store, ctx)?;
/// assert_eq!(ctx_now.len(), 1);
/// assert!(ctx_now.records().any(|(target, _, _)| target == doc));
///
/// // A capability for another context is refused.
/// let other = Cap::mint(CapGrant::new(doc, ObjID::new(0x99), Protections::READ), &key)?;
/// assert!(context::add_cap(&store, ctx, &other).is_err());
/// # Ok(())
/// # }
/// ```
pub fn add_cap<S: ObjectStore>(store: &S, id: ObjID, cap: &Cap) -> Result<u64, ContextError> {
    // A public ownership record (accessor ALL_CONTEXTS, `docs/DIFC.md` §2.1) is for anyone
    // to copy into their context.
    if !is_public_ownership(cap) {
        check_holder(id, cap.accessor())?;
    }
    let item = cap.encode();
    if let Some(generation) = store.transact(|tx| {
        crate::context_append::append(tx, id, cap.target(), RecordKind::Cap, &item)
    })? {
        return Ok(generation);
    }
    edit(store, id, |ed| {
        ed.add_cap(cap);
        Ok(())
    })
}

/// Adds a delegation to context `id` (its receiver must be `id`): in place when the context
/// allows it, else by a full edit.
pub fn add_del<S: ObjectStore>(store: &S, id: ObjID, del: &Del) -> Result<u64, ContextError> {
    check_holder(id, del.receiver())?;
    let item = del.encode();
    if let Some(generation) = store.transact(|tx| {
        crate::context_append::append(tx, id, del.target(), RecordKind::Del, &item)
    })? {
        return Ok(generation);
    }
    edit(store, id, |ed| {
        ed.add_del(del);
        Ok(())
    })
}

/// Adds a record of either kind.
pub fn add_record<S: ObjectStore>(
    store: &S,
    id: ObjID,
    record: &Record,
) -> Result<u64, ContextError> {
    match record {
        Record::Cap(c) => add_cap(store, id, c),
        Record::Del(d) => add_del(store, id, d),
    }
}

/// What to remove from a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The record with this id, filed under this target.
    Record(ObjID, RecordId),
    /// Every record filed under this target.
    Target(ObjID),
    /// The mask of this target.
    Mask(ObjID),
}

/// Removes records or a mask; an error if nothing matched (nothing is written then).
pub fn remove<S: ObjectStore>(store: &S, id: ObjID, what: Removal) -> Result<u64, ContextError> {
    edit(store, id, |ed| {
        let removed = match what {
            Removal::Record(target, rid) => ed.remove(target, &rid) > 0,
            Removal::Target(target) => ed.remove_target(target) > 0,
            Removal::Mask(target) => ed.remove_mask(target),
        };
        if removed {
            Ok(())
        } else {
            Err(ContextError::NothingToRemove { id })
        }
    })
}

/// Sets the per-object mask of `target`.
///
/// # Example
///
/// A mask limits what a context's records can grant for one object (here to read-only),
/// whatever the records say; [`remove`] takes it away again:
///
/// ```
/// use secctx::context::{self, Removal};
/// use secctx::{MemStore, ObjectStore};
/// use twizzler_capsec::{ObjID, Protections, SecCtx};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemStore::new();
/// let (ctx, object) = (ObjID::new(0x20), ObjID::new(0x10));
/// context::create(&store, ctx, None)?;
///
/// context::set_mask(&store, ctx, object, Protections::READ, Protections::empty())?;
/// let bytes = store.get(ctx)?.data;
/// let mask = SecCtx::parse(&bytes)?.mask(object);
/// assert_eq!(mask.map(|m| m.permmask), Some(Protections::READ));
///
/// context::remove(&store, ctx, Removal::Mask(object))?;
/// assert!(context::remove(&store, ctx, Removal::Mask(object)).is_err()); // nothing left
/// # Ok(())
/// # }
/// ```
pub fn set_mask<S: ObjectStore>(
    store: &S,
    id: ObjID,
    target: ObjID,
    permmask: Protections,
    ovrmask: Protections,
) -> Result<u64, ContextError> {
    edit(store, id, |ed| {
        ed.set_mask(target, permmask, ovrmask);
        Ok(())
    })
}

/// Sets the global mask.
pub fn set_global_mask<S: ObjectStore>(
    store: &S,
    id: ObjID,
    mask: Protections,
) -> Result<u64, ContextError> {
    edit(store, id, |ed| {
        ed.set_global_mask(mask);
        Ok(())
    })
}

/// Sets the flags.
pub fn set_flags<S: ObjectStore>(
    store: &S,
    id: ObjID,
    flags: CtxFlags,
) -> Result<u64, ContextError> {
    edit(store, id, |ed| {
        ed.set_flags(flags);
        Ok(())
    })
}
