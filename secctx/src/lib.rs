//! Userspace side of Twizzler's capability security: an object store, key-pair objects,
//! security-context editing and an access simulator that runs the kernel's own decision.
//!
//! - [`store`]: the [`ObjectStore`] trait (objects with a `kuid`, default protections and
//!   bytes, ranged reads and writes, names, multi-object transactions), [`DbStore`] (pages in
//!   an embedded transactional database, shared by processes) and [`MemStore`];
//!   [`DirStore`] is the previous one-file-per-object format, kept to migrate from;
//! - [`keypair`]: key-pair objects, the signing key optionally sealed under a passphrase
//!   (Argon2id + XChaCha20-Poly1305);
//! - [`context`]: security-context objects: create, add capabilities and delegations, remove,
//!   masks, flags, each one transaction that bumps the generation; [`context_append`] adds a
//!   record in place (format version 2's overflow table), whatever the context's size;
//! - [`revocations`]: the store's list of revoked keys and records;
//! - [`labels`]: the label table (DIFC, `docs/DIFC.md` §7.1): object and principal labels,
//!   written only by labelled creation, registration and relabelling, each one transaction;
//! - [`sim`]: the [`AccessSimulator`], which runs `kernel_hooks`' decision over the store and
//!   explains it.
//!
//! # Example
//!
//! ```
//! use secctx::*;
//! use twizzler_capsec::SigningScheme;
//! # use rand_core::SeedableRng;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // use the OS RNG in real code
//! let store = MemStore::new();
//! let (ids, key) = keypair::create_keypair(&store, SigningScheme::Ed25519, None, keypair::KdfParams::DEFAULT, &mut rng)?;
//! let vk = keypair::load_verifying_key(&store, ids.verifying)?;
//! assert_eq!(vk, key.verifying_key());
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod context;
pub mod context_append;
pub mod db_store;
pub mod dir_store;
pub mod keypair;
pub mod labels;
pub mod mem_store;
pub mod out_file;
pub mod revocations;
pub mod sim;
pub mod store;

pub use db_store::{CacheLimits, DbStore, SnapshotReader, SnapshotView};
pub use dir_store::DirStore;
pub use mem_store::MemStore;
pub use sim::{AccessSimulator, SimAccess, Simulation};
pub use store::{ObjInfo, ObjMeta, Object, ObjectStore, ReadState, StoreError, Txn};
