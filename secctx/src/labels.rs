//! The store's label table (`docs/DIFC.md` §1.3, §7.1): object id → data label, and context id
//! → principal label, in one object of the store that only this module writes.
//!
//! `secctx` stands in for the kernel in userspace, so the table is written only where the kernel
//! writes its own: [`create_object`] (the object's data label, fixed at creation and checked as
//! a write by the creating context, §4.1), [`register`] (a context's principal label, adopted
//! from its version-3 section under §1.4's checks) and [`relabel`] (a principal-label change
//! under §4.1's checks, with the context's ownership records). Each is one store transaction:
//! the object and its row, or the row and its check, commit together or not at all, also when
//! the process is killed mid-write. Every store backend holds the table ([`crate::DbStore`],
//! [`crate::MemStore`]: it is an object of the store); the old one-file-per-object
//! [`crate::DirStore`] is not an [`ObjectStore`] and holds no labels (migrating copies the
//! table like any object).
//!
//! Layout (version 1, little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TZLT` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 4 | row count `n` |
//! | 12 | | `n` rows, ids strictly ascending |
//!
//! Row: `object id (16) | flags u32 (bit 0: the row has a principal label) | data label (TLBL)`,
//! then with bit 0 `principal label (TLBL) | generation u64` (the principal's change counter,
//! which `dist-bridge` tokens carry: §5.9). Labels are in the shared `TLBL` codec
//! ([`Label::decode_from`]), so a table has one encoding, and anything else is
//! [`LabelTableError`] (in a store: [`StoreError::Corrupt`] naming [`LABELS_ID`]).
//!
//! An object without a row has the empty label (made before DIFC). A context without a row is
//! *unregistered*: if its bytes propose no label (versions 1 and 2, or no section) it counts as
//! registered at the empty label, which is what it is today; a version-3 context proposing a
//! label must be registered ([`register`]) before it decides anything, and until then the
//! simulator refuses it with `LabelUnknown`, as the kernel does.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use twizzler_capsec::codec::{Reader, VecWriter};
use twizzler_capsec::{
    Authority, CtxOwnership, DecodeError, FlowDenial, KeyLookupError, Label, LabelError, ObjID,
    Ownership, PrincipalLabels, Record, RecordId, Right, SecCtx, Verdict, VerifyingKey,
    check_registration, check_relabel, check_write_clauses,
};

use crate::keypair::parse_verifying_key;
use crate::revocations::{REVOCATIONS_ID, RevocationList};
use crate::store::{ObjMeta, Object, ObjectStore, ReadState, StoreError, Txn};

/// The id of the label-table object.
pub const LABELS_ID: ObjID = ObjID::new(0x4c41_4245_4c53_0000_0000_0000_0000_0001);

const MAGIC: u32 = u32::from_le_bytes(*b"TZLT");
const VERSION: u16 = 1;
const FLAG_PRINCIPAL: u32 = 1;

/// A context's principal label and how often it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The label its threads run at.
    pub label: Label,
    /// Bumped by every change (0 at registration).
    pub generation: u64,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Row {
    /// The object's data label (fixed at creation).
    pub data: Label,
    /// For a registered context: its principal label.
    pub principal: Option<Principal>,
}

/// The label table.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LabelTable {
    /// Rows by object id.
    pub rows: BTreeMap<ObjID, Row>,
}

/// Why bytes are not a label table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LabelTableError {
    /// The bytes do not decode (framing, or a label that is not canonical `TLBL`).
    Decode(DecodeError),
    /// The reserved field is not zero.
    Reserved(u16),
    /// A row has flag bits other than bit 0.
    Flags(u32),
    /// Row ids are not strictly ascending.
    OutOfOrder,
}

impl fmt::Display for LabelTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => write!(f, "not a label table: {e}"),
            Self::Reserved(v) => write!(f, "reserved field is {v:#06x}, not 0"),
            Self::Flags(v) => write!(f, "row flags {v:#x}: only bit 0 is defined"),
            Self::OutOfOrder => f.write_str("row ids not in ascending order, or repeated"),
        }
    }
}

impl std::error::Error for LabelTableError {}

impl From<DecodeError> for LabelTableError {
    fn from(e: DecodeError) -> Self {
        Self::Decode(e)
    }
}

impl From<LabelTableError> for StoreError {
    fn from(e: LabelTableError) -> Self {
        StoreError::Corrupt {
            id: LABELS_ID,
            why: e.to_string(),
        }
    }
}

impl LabelTable {
    /// Parses the table's bytes.
    pub fn decode(d: &[u8]) -> Result<Self, LabelTableError> {
        let mut r = Reader::new(d);
        r.magic(MAGIC)?;
        r.version(VERSION)?;
        let reserved = r.u16()?;
        if reserved != 0 {
            return Err(LabelTableError::Reserved(reserved));
        }
        let n = r.u32()?;
        let mut rows = BTreeMap::new();
        for _ in 0..n {
            let id = ObjID::new(r.u128()?);
            if rows.last_key_value().is_some_and(|(last, _)| *last >= id) {
                return Err(LabelTableError::OutOfOrder);
            }
            let flags = r.u32()?;
            if flags & !FLAG_PRINCIPAL != 0 {
                return Err(LabelTableError::Flags(flags));
            }
            let data = Label::decode_from(&mut r)?;
            let principal = if flags & FLAG_PRINCIPAL != 0 {
                let label = Label::decode_from(&mut r)?;
                let generation = r.u64()?;
                Some(Principal { label, generation })
            } else {
                None
            };
            rows.insert(id, Row { data, principal });
        }
        r.finish()?;
        Ok(Self { rows })
    }

    /// The table's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = VecWriter::new();
        // Rows are added one by one by this module: a count beyond u32 cannot arise, and
        // saturating keeps the encoder total (the decoder would then refuse the length).
        w.u32(MAGIC)
            .u16(VERSION)
            .u16(0)
            .u32(u32::try_from(self.rows.len()).unwrap_or(u32::MAX));
        for (id, row) in &self.rows {
            w.u128(id.raw());
            w.u32(if row.principal.is_some() {
                FLAG_PRINCIPAL
            } else {
                0
            });
            w.bytes(&row.data.encode());
            if let Some(p) = &row.principal {
                w.bytes(&p.label.encode());
                w.u64(p.generation);
            }
        }
        w.into_vec()
    }

    /// The store's table (empty if it has none).
    pub fn load<S: ObjectStore>(store: &S) -> Result<Self, StoreError> {
        match store.get(LABELS_ID) {
            Ok(obj) => Ok(Self::decode(&obj.data)?),
            Err(StoreError::NotFound(_)) => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// The table as transaction `tx` sees it.
    pub fn load_in(tx: &mut dyn Txn) -> Result<Self, StoreError> {
        match tx.get(LABELS_ID) {
            Ok(obj) => Ok(Self::decode(&obj.data)?),
            Err(StoreError::NotFound(_)) => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Writes the table within `tx` (creating its object if the store has none).
    fn save_in(&self, tx: &mut dyn Txn) -> Result<(), StoreError> {
        let obj = Object {
            id: LABELS_ID,
            meta: ObjMeta::plain(),
            data: self.encode(),
        };
        match tx.info(LABELS_ID) {
            Ok(_) => tx.put(&obj),
            Err(StoreError::NotFound(_)) => tx.create(&obj),
            Err(e) => Err(e),
        }
    }

    /// Object `id`'s data label (empty without a row).
    pub fn data_label(&self, id: ObjID) -> Label {
        self.rows.get(&id).map(|r| r.data).unwrap_or_default()
    }

    /// Context `id`'s principal, if it has a row with one.
    pub fn principal(&self, id: ObjID) -> Option<&Principal> {
        self.rows.get(&id).and_then(|r| r.principal.as_ref())
    }
}

/// Why a labelled operation was refused or failed. Nothing was written.
#[derive(Debug)]
#[non_exhaustive]
pub enum DifcError {
    /// The store failed, or an object is missing or corrupt.
    Store(StoreError),
    /// The creator may not write an object at this label (§4.1: the write clauses).
    Create {
        /// The creating context.
        creator: ObjID,
        /// Why.
        denial: FlowDenial,
    },
    /// Registration or a label change was refused (§1.4, §4.1).
    Label {
        /// The context.
        ctx: ObjID,
        /// Why.
        error: LabelError,
    },
    /// The context proposes a label (version 3) but has not been registered.
    Unregistered(ObjID),
    /// The context already has a principal label (registration happens once).
    AlreadyRegistered(ObjID),
    /// The object is not a valid security context.
    NotAContext {
        /// The object.
        id: ObjID,
        /// Why.
        why: String,
    },
}

impl fmt::Display for DifcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::Create { creator, denial } => write!(
                f,
                "context {creator} may not create an object at that label: {denial}"
            ),
            Self::Label { ctx, error } => write!(f, "context {ctx}: {error}"),
            Self::Unregistered(c) => write!(
                f,
                "context {c} proposes a label but is not registered: register it first"
            ),
            Self::AlreadyRegistered(c) => write!(f, "context {c} is registered already"),
            Self::NotAContext { id, why } => write!(f, "{id} is not a security context: {why}"),
        }
    }
}

impl std::error::Error for DifcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for DifcError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// A context's principal label as the store knows it: its row, or, for a context with no row
/// whose bytes propose no label, the empty label at generation 0. `Err(Unregistered)` for a
/// version-3 context not registered yet.
pub fn principal_of(
    table: &LabelTable,
    ctx: ObjID,
    ctx_bytes: &[u8],
) -> Result<Principal, DifcError> {
    if let Some(p) = table.principal(ctx) {
        return Ok(p.clone());
    }
    let parsed = SecCtx::parse(ctx_bytes).map_err(|e| DifcError::NotAContext {
        id: ctx,
        why: e.to_string(),
    })?;
    let proposed = parsed.initial_label().map_err(|e| DifcError::NotAContext {
        id: ctx,
        why: e.to_string(),
    })?;
    if proposed.is_empty() {
        Ok(Principal {
            label: Label::EMPTY,
            generation: 0,
        })
    } else {
        Err(DifcError::Unregistered(ctx))
    }
}

/// The keys and revocations needed to judge one context's ownership records, loaded from a
/// store: the kuid and verifying key of every object its records name (tags and delegation
/// providers), and the store's revocation list.
pub struct StoreAuthority {
    kuids: HashMap<ObjID, ObjID>,
    keys: HashMap<ObjID, VerifyingKey>,
    revoked: RevocationList,
}

impl StoreAuthority {
    /// Loads what `ctx`'s records need, within `tx` (a transaction, or a kept read snapshot: any
    /// one consistent state). Missing or damaged objects are simply absent (their records then
    /// do not count).
    pub fn load_in<R: ReadState + ?Sized>(
        tx: &mut R,
        ctx: &SecCtx<'_>,
    ) -> Result<Self, StoreError> {
        let mut wanted = Vec::new();
        for e in ctx.entries() {
            wanted.push(e.target);
            if let Ok(Record::Del(d)) = e.record() {
                wanted.extend(d.links().map(|l| l.provider()));
            }
        }
        let mut me = Self {
            kuids: HashMap::new(),
            keys: HashMap::new(),
            revoked: match tx.object(REVOCATIONS_ID) {
                Ok(o) => RevocationList::decode(&o.data).map_err(StoreError::from)?,
                Err(StoreError::NotFound(_)) => RevocationList::default(),
                Err(e) => return Err(e),
            },
        };
        for id in wanted {
            if me.kuids.contains_key(&id) {
                continue;
            }
            let kuid = match tx.object_info(id) {
                Ok(i) => i.meta.kuid,
                Err(StoreError::NotFound(_) | StoreError::Corrupt { .. }) => None,
                Err(e) => return Err(e),
            };
            let Some(kuid) = kuid else { continue };
            me.kuids.insert(id, kuid);
            if me.keys.contains_key(&kuid) {
                continue;
            }
            match tx.object(kuid) {
                Ok(k) => {
                    if let Ok(vk) = parse_verifying_key(&k) {
                        me.keys.insert(kuid, vk);
                    }
                }
                Err(StoreError::NotFound(_) | StoreError::Corrupt { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(me)
    }
}

impl Authority for StoreAuthority {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        let kuid = self.kuids.get(&obj).ok_or(KeyLookupError::NoKuid(obj))?;
        if self.revoked.keys.contains(kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.keys.get(kuid).ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked.records.contains(id)
    }
}

/// One context's ownership, judged as the kernel judges it at `now`.
fn with_ownership<R, S: ReadState + ?Sized>(
    tx: &mut S,
    ctx: ObjID,
    now: u64,
    f: impl FnOnce(&mut dyn Ownership) -> R,
) -> Result<R, DifcError> {
    let obj = tx.object(ctx)?;
    let parsed = SecCtx::parse(&obj.data).map_err(|e| DifcError::NotAContext {
        id: ctx,
        why: e.to_string(),
    })?;
    let auth = StoreAuthority::load_in(tx, &parsed)?;
    let mut own = CtxOwnership::new(ctx, &parsed, &auth, now);
    Ok(f(&mut own))
}

/// Adapts `&mut dyn Ownership` to the rule's `impl Ownership` parameters.
struct Dyn<'a>(&'a mut dyn Ownership);

impl Ownership for Dyn<'_> {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        self.0.owns(tag, right)
    }
}

/// Whether `ctx` owns `right` of `tag` at `now`: `Ok(true)` if a record counts, `Ok(false)`
/// if none could, `Err(verdict)` if one that would have counted did not.
pub fn owns<S: ObjectStore>(
    store: &S,
    ctx: ObjID,
    tag: ObjID,
    right: Right,
    now: u64,
) -> Result<Result<bool, Verdict>, DifcError> {
    // Read from one consistent state, without a write transaction: a question, not a change.
    store.read_state(|state| with_ownership(state, ctx, now, |o| o.owns(tag, right)))?
}

/// [`owns`], judged from `state` (a kept read snapshot, say, whose one consistent state also
/// gave the caller its label table) instead of a transaction of its own: the context, the keys
/// its records name and the revocation list are all read from `state`.
pub fn owns_in<R: ReadState + ?Sized>(
    state: &mut R,
    ctx: ObjID,
    tag: ObjID,
    right: Right,
    now: u64,
) -> Result<Result<bool, Verdict>, DifcError> {
    with_ownership(state, ctx, now, |o| o.owns(tag, right))
}

/// Creates object `obj` at data label `label` (`None`: the creator's principal label), as
/// context `creator` (`None`: a creator with the empty label and no ownership), and writes its
/// row, in the transaction `tx` (§4.1). The creator must pass the two write clauses of
/// `writable(creator, label)`: carrying a secrecy tag the label lacks needs its `−`, and an
/// integrity tag the creator lacks needs its `+`. Returns the label written.
pub fn create_object_in(
    tx: &mut dyn Txn,
    obj: &Object,
    label: Option<&Label>,
    creator: Option<ObjID>,
    now: u64,
) -> Result<Label, DifcError> {
    let mut table = LabelTable::load_in(tx)?;
    let principal = match creator {
        Some(c) => {
            let bytes = tx.get(c)?.data;
            principal_of(&table, c, &bytes)?.label
        }
        None => Label::EMPTY,
    };
    let label = label.copied().unwrap_or(principal);
    let steady = PrincipalLabels::steady(principal);
    let verdict = match creator {
        Some(c) => with_ownership(tx, c, now, |o| {
            check_write_clauses(&steady.as_ref(), &label.as_ref(), &mut Dyn(o))
        })?,
        None => check_write_clauses(
            &steady.as_ref(),
            &label.as_ref(),
            &mut twizzler_capsec::NoOwnership,
        ),
    };
    verdict.map_err(|denial| DifcError::Create {
        creator: creator.unwrap_or_default(),
        denial,
    })?;
    tx.create(obj)?;
    if !label.is_empty() {
        table.rows.insert(
            obj.id,
            Row {
                data: label,
                principal: None,
            },
        );
        table.save_in(tx)?;
    }
    Ok(label)
}

/// [`create_object_in`] in a transaction of its own.
pub fn create_object<S: ObjectStore>(
    store: &S,
    obj: &Object,
    label: Option<&Label>,
    creator: Option<ObjID>,
    now: u64,
) -> Result<Label, DifcError> {
    store.transact(|tx| create_object_in(tx, obj, label, creator, now))
}

/// Registers context `ctx` (already in the store, within `tx`): adopts the initial label its
/// version-3 section proposes if registrar `registrar` (`None`: the empty label, no ownership)
/// could have reached it (§1.4): its bytes flow to it and to the registrar, and every tag it
/// adds relative to the registrar needs `+` owned by the registrar or by `ctx` itself. Writes
/// the principal row (generation 0) and returns the label adopted.
pub fn register_in(
    tx: &mut dyn Txn,
    ctx: ObjID,
    registrar: Option<ObjID>,
    now: u64,
) -> Result<Label, DifcError> {
    let mut table = LabelTable::load_in(tx)?;
    if table.principal(ctx).is_some() {
        return Err(DifcError::AlreadyRegistered(ctx));
    }
    let bytes = tx.get(ctx)?.data;
    let initial = SecCtx::parse(&bytes)
        .and_then(|c| c.initial_label())
        .map_err(|e| DifcError::NotAContext {
            id: ctx,
            why: e.to_string(),
        })?;
    let data = table.data_label(ctx);
    let r_label = match registrar {
        Some(r) => {
            let rb = tx.get(r)?.data;
            principal_of(&table, r, &rb)?.label
        }
        None => Label::EMPTY,
    };
    let r_steady = PrincipalLabels::steady(r_label);
    let result = match registrar {
        Some(r) => {
            let r_obj = tx.get(r)?;
            let r_parsed = SecCtx::parse(&r_obj.data).map_err(|e| DifcError::NotAContext {
                id: r,
                why: e.to_string(),
            })?;
            let r_auth = StoreAuthority::load_in(tx, &r_parsed)?;
            let mut own_r = CtxOwnership::new(r, &r_parsed, &r_auth, now);
            with_ownership(tx, ctx, now, |own_c| {
                check_registration(
                    &r_steady.as_ref(),
                    &initial.as_ref(),
                    &data.as_ref(),
                    &mut own_r,
                    &mut Dyn(own_c),
                )
            })?
        }
        None => with_ownership(tx, ctx, now, |own_c| {
            check_registration(
                &r_steady.as_ref(),
                &initial.as_ref(),
                &data.as_ref(),
                &mut twizzler_capsec::NoOwnership,
                &mut Dyn(own_c),
            )
        })?,
    };
    result.map_err(|error| DifcError::Label { ctx, error })?;
    if initial.is_empty() && !table.rows.contains_key(&ctx) {
        // No row is the empty principal at generation 0 (`principal_of`): a store without
        // labels stays byte for byte what it was.
        return Ok(initial);
    }
    let row = table.rows.entry(ctx).or_default();
    row.principal = Some(Principal {
        label: initial,
        generation: 0,
    });
    table.save_in(tx)?;
    Ok(initial)
}

/// [`register_in`] in a transaction of its own.
pub fn register<S: ObjectStore>(
    store: &S,
    ctx: ObjID,
    registrar: Option<ObjID>,
    now: u64,
) -> Result<Label, DifcError> {
    store.transact(|tx| register_in(tx, ctx, registrar, now))
}

/// Changes context `ctx`'s principal label to `new` with its own ownership (§4.1, as
/// `sys_sctx_label`): every tag added needs `+`, every tag dropped `−`, and the context's own
/// bytes must still flow to it. An unregistered context without a proposed label is registered
/// at the empty label first, in the same transaction. Returns the new generation.
pub fn relabel<S: ObjectStore>(
    store: &S,
    ctx: ObjID,
    new: &Label,
    now: u64,
) -> Result<u64, DifcError> {
    store.transact(|tx| {
        let mut table = LabelTable::load_in(tx)?;
        let bytes = tx.get(ctx)?.data;
        let old = principal_of(&table, ctx, &bytes)?;
        let data = table.data_label(ctx);
        let steady = PrincipalLabels::steady(old.label);
        with_ownership(tx, ctx, now, |o| {
            check_relabel(&steady.as_ref(), &new.as_ref(), &data.as_ref(), &mut Dyn(o))
        })?
        .map_err(|error| DifcError::Label { ctx, error })?;
        let generation = old.generation.saturating_add(1);
        table.rows.entry(ctx).or_default().principal = Some(Principal {
            label: *new,
            generation,
        });
        table.save_in(tx)?;
        Ok(generation)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn l(s: &[u128], i: &[u128]) -> Label {
        let ids = |v: &[u128]| v.iter().map(|&x| ObjID::new(x)).collect::<Vec<_>>();
        Label::from_tags(&ids(s), &ids(i)).unwrap()
    }

    fn sample() -> LabelTable {
        let mut t = LabelTable::default();
        t.rows.insert(
            ObjID::new(5),
            Row {
                data: l(&[1, 2], &[]),
                principal: None,
            },
        );
        t.rows.insert(
            ObjID::new(9),
            Row {
                data: Label::EMPTY,
                principal: Some(Principal {
                    label: l(&[1], &[3]),
                    generation: 7,
                }),
            },
        );
        t
    }

    #[test]
    fn round_trips() {
        let t = sample();
        assert_eq!(LabelTable::decode(&t.encode()).unwrap(), t);
        let empty = LabelTable::default();
        assert_eq!(LabelTable::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn refuses_trailing_bytes_flags_and_order() {
        let mut b = sample().encode();
        b.push(0);
        assert!(LabelTable::decode(&b).is_err());
        let mut b = sample().encode();
        // The first row's flags (at 12 + 16).
        b[28] = 2;
        assert_eq!(LabelTable::decode(&b), Err(LabelTableError::Flags(2)));
        let mut b = sample().encode();
        b[6] = 1;
        assert_eq!(LabelTable::decode(&b), Err(LabelTableError::Reserved(1)));
    }

    proptest! {
        #[test]
        fn decode_is_total_and_canonical(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(t) = LabelTable::decode(&bytes) {
                prop_assert_eq!(t.encode(), bytes);
            }
        }

        #[test]
        fn bit_flips_never_panic(pos in 0usize..200, bit in 0u8..8) {
            let mut b = sample().encode();
            if let Some(x) = b.get_mut(pos) {
                *x ^= 1 << bit;
            }
            if let Ok(t) = LabelTable::decode(&b) {
                prop_assert_eq!(t.encode(), b);
            }
        }
    }
}
