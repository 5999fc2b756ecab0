//! Where [`Owner::export`](crate::Owner::export) finds the verifying key of an object's `kuid`.
//!
//! [`KeyLookup`] is the one question export asks; three sources answer it: any
//! [`twizzler_capsec::Authority`] ([`AuthorityKeys`], e.g. the kernel's or a test's key map),
//! a `secctx` [`ObjectStore`] ([`StoreKeys`]: the object's `kuid`, the store's revocation list,
//! the verifying-key object), and a plain map ([`MapKeys`]).

use std::collections::HashMap;
use std::fmt;

use secctx::ObjectStore;
use secctx::keypair::{self, KeyError};
use secctx::revocations::RevocationList;
use secctx::store::StoreError;
use twizzler_capsec::{Authority, KeyLookupError, ObjID, RecordId, VerifyingKey};

/// Why no verifying key could be found for an object.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeySourceError {
    /// No `kuid`, an unknown key, or a revoked key.
    Lookup(KeyLookupError),
    /// The store failed or holds a damaged key object.
    Store(KeyError),
}

impl fmt::Display for KeySourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lookup(e) => e.fmt(f),
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeySourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Lookup(e) => Some(e),
            Self::Store(e) => Some(e),
        }
    }
}

/// A verifying key, and the id of the key object it was read from when the source knows it.
#[derive(Debug, Clone)]
pub struct KuidKey {
    /// The key.
    pub key: VerifyingKey,
    /// The key object's id (the object's `kuid`): what a store's revocation list names when
    /// the key is revoked. `None` for sources without key objects ([`AuthorityKeys`],
    /// [`MapKeys`]).
    pub kuid: Option<ObjID>,
}

/// The verifying keys (and record revocations) export checks capabilities against.
pub trait KeyLookup {
    /// The verifying key named by `object`'s `kuid`. An object without a `kuid`, a `kuid`
    /// naming no key and a revoked key are errors.
    fn kuid_key(&self, object: ObjID) -> Result<VerifyingKey, KeySourceError>;

    /// [`KeyLookup::kuid_key`] with the key object's id, which
    /// [`Owner::export`](crate::Owner::export) records in the guard so that a later
    /// revocation of the key reaches it. The default knows no id.
    fn kuid_key_named(&self, object: ObjID) -> Result<KuidKey, KeySourceError> {
        Ok(KuidKey {
            key: self.kuid_key(object)?,
            kuid: None,
        })
    }

    /// Whether the record with this id has been revoked.
    fn is_record_revoked(&self, _id: &RecordId) -> bool {
        false
    }
}

/// Keys from any [`Authority`].
#[derive(Debug, Clone, Copy)]
pub struct AuthorityKeys<'a, A>(pub &'a A);

impl<A: Authority> KeyLookup for AuthorityKeys<'_, A> {
    fn kuid_key(&self, object: ObjID) -> Result<VerifyingKey, KeySourceError> {
        self.0
            .key_for(object)
            .cloned()
            .map_err(KeySourceError::Lookup)
    }

    fn is_record_revoked(&self, id: &RecordId) -> bool {
        self.0.is_revoked(id)
    }
}

/// Keys from a map of object → verifying key (tests, small deployments).
#[derive(Debug, Clone, Default)]
pub struct MapKeys(pub HashMap<ObjID, VerifyingKey>);

impl KeyLookup for MapKeys {
    fn kuid_key(&self, object: ObjID) -> Result<VerifyingKey, KeySourceError> {
        self.0
            .get(&object)
            .cloned()
            .ok_or(KeySourceError::Lookup(KeyLookupError::NoKuid(object)))
    }
}

/// Keys from a `secctx` object store: the object's `kuid`, checked against the store's
/// revocation list (read once, when this is made), then the verifying-key object it names.
#[derive(Debug)]
pub struct StoreKeys<'a, S> {
    store: &'a S,
    revoked: RevocationList,
}

impl<'a, S: ObjectStore> StoreKeys<'a, S> {
    /// Reads the store's revocation list.
    ///
    /// # Example
    ///
    /// A node exports a capability for an object in its store, checked against the key the
    /// object's `kuid` names, and then decides invocations of the token; once the key is
    /// revoked in the store, the capability no longer exports:
    ///
    /// ```
    /// use dist_bridge::{
    ///     ByteRange, ControllerId, ExportError, ExportRequest, GuardTableConfig, NodeSecret, Op,
    ///     Owner, Rights, StoreKeys,
    /// };
    /// use rand_core::SeedableRng;
    /// use secctx::revocations::RevocationList;
    /// use secctx::{MemStore, ObjMeta, Object, ObjectStore, keypair};
    /// use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningScheme};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // the OS RNG in real use
    /// let store = MemStore::new(); // a node's `DbStore` in real use
    /// let kdf = keypair::KdfParams::DEFAULT;
    /// let (ids, key) = keypair::create_keypair(&store, SigningScheme::Ed25519, None, kdf, &mut rng)?;
    /// let (object, ctx) = (ObjID::new(0x1000), ObjID::new(0x2000));
    /// let meta = ObjMeta::signed_by(ids.verifying);
    /// store.create(&Object { id: object, meta, data: vec![0; 4096] })?;
    /// let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key)?;
    ///
    /// let owner = Owner::new(ControllerId::new(1, 1), NodeSecret::generate()?, GuardTableConfig::default())?;
    /// let request = ExportRequest::new(ctx, Rights::READ, ByteRange::WHOLE);
    /// let now = 1_000;
    /// let token = owner.export(&cap, &StoreKeys::new(&store)?, &request, now)?;
    /// assert!(owner.check_bytes(&token.encode(), Op::Read, 0, 512, now).is_ok());
    /// assert!(owner.check_bytes(&token.encode(), Op::Write, 0, 512, now).is_err());
    ///
    /// RevocationList::add(&store, |list| list.keys.insert(ids.verifying))?;
    /// let refused = owner.export(&cap, &StoreKeys::new(&store)?, &request, now);
    /// assert!(matches!(refused, Err(ExportError::Key(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(store: &'a S) -> Result<Self, StoreError> {
        Ok(Self {
            store,
            revoked: RevocationList::load(store)?,
        })
    }
}

impl<S: ObjectStore> KeyLookup for StoreKeys<'_, S> {
    fn kuid_key(&self, object: ObjID) -> Result<VerifyingKey, KeySourceError> {
        self.kuid_key_named(object).map(|k| k.key)
    }

    fn kuid_key_named(&self, object: ObjID) -> Result<KuidKey, KeySourceError> {
        // Only the metadata: the object itself (a large context, say) is never read.
        let info = match self.store.info(object) {
            Ok(i) => i,
            Err(StoreError::NotFound(_)) => {
                return Err(KeySourceError::Lookup(KeyLookupError::NoKuid(object)));
            }
            Err(e) => return Err(KeySourceError::Store(KeyError::Store(e))),
        };
        let kuid = info
            .meta
            .kuid
            .ok_or(KeySourceError::Lookup(KeyLookupError::NoKuid(object)))?;
        if self.revoked.keys.contains(&kuid) {
            return Err(KeySourceError::Lookup(KeyLookupError::KeyRevoked(object)));
        }
        match keypair::load_verifying_key(self.store, kuid) {
            Ok(key) => Ok(KuidKey {
                key,
                kuid: Some(kuid),
            }),
            Err(KeyError::Store(StoreError::NotFound(_))) => {
                Err(KeySourceError::Lookup(KeyLookupError::UnknownKey(object)))
            }
            Err(e) => Err(KeySourceError::Store(e)),
        }
    }

    fn is_record_revoked(&self, id: &RecordId) -> bool {
        self.revoked.records.contains(id)
    }
}
