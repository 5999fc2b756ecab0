//! Guarded tokens: the self-contained, offline-attenuable bearer form of a guard.
//!
//! # Format (version 1, little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `DBGT` |
//! | 4 | 2 | format version (1) |
//! | 6 | 1 | caveat count `n` (0..=[`MAX_CAVEATS`]) |
//! | 7 | 1 | reserved, 0 |
//! | 8 | 8 | owner node |
//! | 16 | 8 | owner controller version |
//! | 24 | 4 | guard index |
//! | 28 | 8 | guard version |
//! | 36 | 16 | object |
//! | 52 | 26 | scope: rights (2), range offset (8), range length (8), expires (8, 0 = never) |
//! | 78 | 26 × n | caveats, each a scope in the same layout |
//! | 78 + 26n | 32 | tag |
//!
//! Bytes 8..78 are the **body**, fixed by the owner when it issues the token; the caveats are
//! appended by holders.
//!
//! # Format version 2: labels (`docs/DIFC.md` §5.9)
//!
//! Version 2 is version 1 with the body extended by what the owner's flow rule needs, in the
//! same chained tag:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 4 | 2 | format version (2) |
//! | 8 | 70 | as version 1's body |
//! | 78 | 16 | the exporting security context |
//! | 94 | 8 | its principal-label generation at export |
//! | 102 | 8 + 16·(s+i) | the object's label (`TLBL`, the shared codec) |
//! | then | 26 × n | caveats |
//! | then | 32 | tag |
//!
//! The owner issues version 2 when labels are in play (the object or the context is labelled)
//! and version 1 otherwise, so a token without labels is byte for byte what it was; both are
//! read. The labels are informative for holders: at every invocation the owner decides again
//! with the context's *current* label and ownership. A holder cannot strip them: the tag
//! covers the body's encoding, and a version-1 body has another one. The tag chains keyed BLAKE3 over both ([`crate::crypto`]): the owner
//! checks it by recomputing the whole chain.
//!
//! Decoding is total (every byte string gives a token or a [`TokenDecodeError`], never a panic)
//! and canonical (`encode(decode(b)) == b` for every accepted `b`). A decoded token is also
//! *well-formed*: its rights name known bits, its ranges are valid, and every caveat narrows
//! the scope before it (rights a subset, range inside, expiry no later). So the effective scope
//! of a token is simply its last one ([`GuardedToken::scope`]). Whether its tag is genuine only
//! the owner can tell.

mod errors;

use core::fmt;

use twizzler_capsec::codec::{Reader, VecWriter, Writer};
use twizzler_capsec::{DecodeError, Expiry, Label, ObjID};

use crate::controller::ControllerId;
use crate::crypto::{self, KEY_LEN};
use crate::rights::{ByteRange, Rights};
pub use errors::{AttenuateError, Part, TokenDecodeError, Widening};

/// Magic of an encoded token (`"DBGT"`).
pub const TOKEN_MAGIC: [u8; 4] = *b"DBGT";
/// Format version of tokens without labels (read and written).
pub const TOKEN_FORMAT: u16 = 1;
/// Format version of tokens with labels (read and written; `docs/DIFC.md` §5.9).
pub const TOKEN_FORMAT_LABELS: u16 = 2;
/// Encoded size of a version-2 body's label part without the label's tags.
pub const LABELS_FIXED_LEN: usize = 16 + 8 + twizzler_capsec::LABEL_HEADER_LEN;
/// Most caveats a token can carry.
pub const MAX_CAVEATS: usize = 8;
/// Encoded size of a scope (base or caveat).
pub const SCOPE_LEN: usize = 2 + 8 + 8 + 8;
/// Encoded size of the header (magic, format, count, reserved).
pub const HEADER_LEN: usize = 8;
/// Encoded size of the body the owner fixes.
pub const BODY_LEN: usize = 8 + 8 + 4 + 8 + 16 + SCOPE_LEN;
/// Size of the tag.
pub const TAG_LEN: usize = KEY_LEN;
/// Size of a token without caveats.
pub const MIN_TOKEN_LEN: usize = HEADER_LEN + BODY_LEN + TAG_LEN;
/// Size of a version-1 token with [`MAX_CAVEATS`] caveats.
pub const MAX_TOKEN_LEN: usize = MIN_TOKEN_LEN + MAX_CAVEATS * SCOPE_LEN;
/// Size of the largest version-2 token (the largest label, [`MAX_CAVEATS`] caveats).
pub const MAX_LABELLED_TOKEN_LEN: usize = MAX_TOKEN_LEN + 16 + 8 + twizzler_capsec::MAX_LABEL_LEN;

/// A reference to one life of a guard-table entry: its index and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuardRef {
    /// Index in the owner's guard table.
    pub index: u32,
    /// Version of the entry when the guard was created (or last upgraded).
    pub version: u64,
}

impl fmt::Display for GuardRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "guard {} v{}", self.index, self.version)
    }
}

/// What a token (or a guard, or a caveat) allows: rights over a byte range until an expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The rights.
    pub rights: Rights,
    /// The byte range.
    pub range: ByteRange,
    /// When it stops granting.
    pub expires: Expiry,
}

impl Scope {
    /// A scope.
    pub const fn new(rights: Rights, range: ByteRange, expires: Expiry) -> Self {
        Self {
            rights,
            range,
            expires,
        }
    }

    /// The same scope with other rights.
    pub const fn with_rights(mut self, rights: Rights) -> Self {
        self.rights = rights;
        self
    }

    /// The same scope with another range.
    pub const fn with_range(mut self, range: ByteRange) -> Self {
        self.range = range;
        self
    }

    /// The same scope with another expiry.
    pub const fn with_expiry(mut self, expires: Expiry) -> Self {
        self.expires = expires;
        self
    }

    /// Checks that this scope allows nothing `parent` does not.
    pub fn within(&self, parent: &Scope) -> Result<(), Widening> {
        if !parent.rights.contains(self.rights) {
            return Err(Widening::Rights);
        }
        if !parent.range.contains(&self.range) {
            return Err(Widening::Range);
        }
        if !self.expires.within(parent.expires) {
            return Err(Widening::Expiry);
        }
        Ok(())
    }

    fn encode_into(&self, w: &mut VecWriter) {
        w.bytes(&self.encode());
    }

    fn encode(&self) -> [u8; SCOPE_LEN] {
        let mut out = [0u8; SCOPE_LEN];
        Writer::new(&mut out)
            .u16(self.rights.bits())
            .u64(self.range.offset())
            .u64(self.range.len())
            .u64(self.expires.raw());
        out
    }

    fn decode_from(r: &mut Reader<'_>, which: Part) -> Result<Self, TokenDecodeError> {
        let bits = r.u16()?;
        let rights =
            Rights::from_raw(bits).ok_or(TokenDecodeError::UnknownRights { which, bits })?;
        let offset = r.u64()?;
        let len = r.u64()?;
        let range =
            ByteRange::new(offset, len).map_err(|err| TokenDecodeError::BadRange { which, err })?;
        let expires = Expiry::from_raw(r.u64()?);
        Ok(Self {
            rights,
            range,
            expires,
        })
    }
}

/// The labels a version-2 token carries (`docs/DIFC.md` §5.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenLabels {
    /// The security context the token was exported for: the owner decides each invocation
    /// under its current principal label and ownership.
    pub context: ObjID,
    /// The context's principal-label generation at export (the owner's label table bumps it
    /// at every change).
    pub generation: u64,
    /// The object's label (fixed at the object's creation).
    pub label: Label,
}

/// What the owner fixes when it issues a token (bytes 8..78 of the encoding, and with labels
/// the version-2 part).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBody {
    /// The owner's controller.
    pub owner: ControllerId,
    /// The guard.
    pub guard: GuardRef,
    /// The object the guard grants access to.
    pub object: ObjID,
    /// The guard's scope.
    pub scope: Scope,
    /// The labels, for a version-2 token.
    pub labels: Option<TokenLabels>,
}

impl TokenBody {
    /// The format version this body is encoded in.
    pub fn format(&self) -> u16 {
        if self.labels.is_some() {
            TOKEN_FORMAT_LABELS
        } else {
            TOKEN_FORMAT
        }
    }

    /// The encoding the root tag covers.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = VecWriter::with_capacity(BODY_LEN);
        self.encode_into(&mut w);
        w.into_vec()
    }

    fn encode_into(&self, w: &mut VecWriter) {
        w.bytes(&self.owner.encode())
            .u32(self.guard.index)
            .u64(self.guard.version)
            .u128(self.object.raw());
        self.scope.encode_into(w);
        if let Some(l) = &self.labels {
            w.u128(l.context.raw()).u64(l.generation);
            w.bytes(&l.label.encode());
        }
    }

    /// The encoded length of the body.
    fn encoded_len(&self) -> usize {
        BODY_LEN + self.labels.map_or(0, |l| 16 + 8 + l.label.encoded_len())
    }

    fn decode_from(r: &mut Reader<'_>, format: u16) -> Result<Self, TokenDecodeError> {
        let owner = ControllerId::decode_from(r)?;
        let guard = GuardRef {
            index: r.u32()?,
            version: r.u64()?,
        };
        let object = ObjID::new(r.u128()?);
        let scope = Scope::decode_from(r, Part::Body)?;
        let labels = if format == TOKEN_FORMAT_LABELS {
            let context = ObjID::new(r.u128()?);
            let generation = r.u64()?;
            let label = Label::decode_from(r).map_err(|e| match e {
                DecodeError::Truncated { .. } => TokenDecodeError::from(e),
                other => TokenDecodeError::BadLabel(other),
            })?;
            Some(TokenLabels {
                context,
                generation,
                label,
            })
        } else {
            None
        };
        Ok(Self {
            owner,
            guard,
            object,
            scope,
            labels,
        })
    }
}

/// A guarded token: a self-contained reference to a guard at its owner, with the scope the
/// owner issued, the caveats holders appended, and the chained tag.
///
/// Holders can inspect it ([`GuardedToken::body`], [`GuardedToken::scope`]), attenuate it
/// offline ([`GuardedToken::attenuate`]) and send it on ([`GuardedToken::encode`]); only the
/// owner can tell whether it is genuine and still valid ([`Owner::check`](crate::Owner::check)).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct GuardedToken {
    body: TokenBody,
    caveats: Vec<Scope>,
    tag: [u8; TAG_LEN],
}

impl GuardedToken {
    /// Issues a token: the body with a tag chain started from `root_tag` over `caveats`
    /// (already checked to narrow).
    pub(crate) fn issue(body: TokenBody, caveats: Vec<Scope>, root_tag: [u8; TAG_LEN]) -> Self {
        let tag = chain(root_tag, &caveats);
        Self { body, caveats, tag }
    }

    /// What the owner issued.
    pub fn body(&self) -> &TokenBody {
        &self.body
    }

    /// The owner's controller.
    pub fn owner(&self) -> ControllerId {
        self.body.owner
    }

    /// The guard this token refers to.
    pub fn guard(&self) -> GuardRef {
        self.body.guard
    }

    /// The object.
    pub fn object(&self) -> ObjID {
        self.body.object
    }

    /// The caveats appended to the body, oldest first.
    pub fn caveats(&self) -> &[Scope] {
        &self.caveats
    }

    /// The tag.
    pub fn tag(&self) -> &[u8; TAG_LEN] {
        &self.tag
    }

    /// The effective scope: the last caveat's, or the body's (each caveat narrows the one
    /// before, so the last is the intersection of all).
    pub fn scope(&self) -> Scope {
        self.caveats.last().copied().unwrap_or(self.body.scope)
    }

    /// A token that allows only `narrower`, made offline: appends a caveat and extends the tag
    /// chain. Nobody can undo it, not even this holder with the result alone.
    pub fn attenuate(&self, narrower: Scope) -> Result<GuardedToken, AttenuateError> {
        if self.caveats.len() >= MAX_CAVEATS {
            return Err(AttenuateError::TooManyCaveats);
        }
        narrower
            .within(&self.scope())
            .map_err(AttenuateError::Widens)?;
        let index = caveat_number(self.caveats.len());
        let mut caveats = self.caveats.clone();
        caveats.push(narrower);
        Ok(GuardedToken {
            body: self.body,
            caveats,
            tag: crypto::caveat_tag(&self.tag, index, &narrower.encode()),
        })
    }

    /// Shorthand: attenuate to `rights`, keeping range and expiry.
    pub fn with_rights(&self, rights: Rights) -> Result<GuardedToken, AttenuateError> {
        self.attenuate(self.scope().with_rights(rights))
    }

    /// Shorthand: attenuate to `range`, keeping rights and expiry.
    pub fn with_range(&self, range: ByteRange) -> Result<GuardedToken, AttenuateError> {
        self.attenuate(self.scope().with_range(range))
    }

    /// Shorthand: attenuate to expire at `expires`, keeping rights and range.
    pub fn with_expiry(&self, expires: Expiry) -> Result<GuardedToken, AttenuateError> {
        self.attenuate(self.scope().with_expiry(expires))
    }

    /// Whether the tag is the chain from `root_tag` (computed by the owner) over the caveats.
    pub(crate) fn tag_matches(&self, root_tag: [u8; TAG_LEN]) -> bool {
        crypto::tags_equal(&chain(root_tag, &self.caveats), &self.tag)
    }

    /// The encoded length.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body.encoded_len() + self.caveats.len() * SCOPE_LEN + TAG_LEN
    }

    /// The labels a version-2 token carries.
    pub fn labels(&self) -> Option<&TokenLabels> {
        self.body.labels.as_ref()
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = VecWriter::with_capacity(self.encoded_len());
        w.bytes(&TOKEN_MAGIC)
            .u16(self.body.format())
            .u8(u8::try_from(self.caveats.len()).unwrap_or(u8::MAX))
            .u8(0);
        self.body.encode_into(&mut w);
        for c in &self.caveats {
            c.encode_into(&mut w);
        }
        w.bytes(&self.tag);
        w.into_vec()
    }

    /// Decodes a token (total and canonical; see the [module docs](self)).
    pub fn decode(bytes: &[u8]) -> Result<GuardedToken, TokenDecodeError> {
        let mut r = Reader::new(bytes);
        let magic = r.array::<4>()?;
        if magic != TOKEN_MAGIC {
            return Err(TokenDecodeError::BadMagic(magic));
        }
        let format = r.u16()?;
        if format != TOKEN_FORMAT && format != TOKEN_FORMAT_LABELS {
            return Err(TokenDecodeError::UnsupportedFormat(format));
        }
        let count = r.u8()?;
        if usize::from(count) > MAX_CAVEATS {
            return Err(TokenDecodeError::TooManyCaveats(count));
        }
        let reserved = r.u8()?;
        if reserved != 0 {
            return Err(TokenDecodeError::NonZeroReserved(reserved));
        }
        let scopes = usize::from(count) * SCOPE_LEN;
        let body = if format == TOKEN_FORMAT_LABELS {
            // The label's length is in its own header: read the body first.
            at_least(bytes.len(), MIN_TOKEN_LEN + scopes + LABELS_FIXED_LEN)?;
            let body = TokenBody::decode_from(&mut r, format)?;
            exactly(
                bytes.len(),
                HEADER_LEN + body.encoded_len() + scopes + TAG_LEN,
            )?;
            body
        } else {
            // Version 1: the length is known before the body is read.
            exactly(bytes.len(), MIN_TOKEN_LEN + scopes)?;
            TokenBody::decode_from(&mut r, format)?
        };
        let mut caveats = Vec::with_capacity(usize::from(count));
        let mut last = body.scope;
        for n in 1..=count {
            let c = Scope::decode_from(&mut r, Part::Caveat(n))?;
            c.within(&last)
                .map_err(|what| TokenDecodeError::CaveatWidens { caveat: n, what })?;
            caveats.push(c);
            last = c;
        }
        let tag = r.array::<TAG_LEN>()?;
        r.finish()?;
        Ok(GuardedToken { body, caveats, tag })
    }
}

impl fmt::Debug for GuardedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedToken")
            .field("owner", &self.body.owner)
            .field("guard", &self.body.guard)
            .field("object", &self.body.object)
            .field("scope", &self.body.scope)
            .field("labels", &self.body.labels)
            .field("caveats", &self.caveats)
            .finish_non_exhaustive()
    }
}

/// The 1-based number of the caveat after `len` caveats (`len` is at most [`MAX_CAVEATS`]).
fn caveat_number(len: usize) -> u8 {
    u8::try_from(len).unwrap_or(u8::MAX).saturating_add(1)
}

fn chain(root_tag: [u8; TAG_LEN], caveats: &[Scope]) -> [u8; TAG_LEN] {
    let mut tag = root_tag;
    for (i, c) in caveats.iter().enumerate() {
        tag = crypto::caveat_tag(&tag, caveat_number(i), &c.encode());
    }
    tag
}

/// `got` bytes are at least the `needed` ones.
fn at_least(got: usize, needed: usize) -> Result<(), TokenDecodeError> {
    if got < needed {
        return Err(TokenDecodeError::Truncated { needed, got });
    }
    Ok(())
}

/// `got` bytes are exactly the `expected` ones.
fn exactly(got: usize, expected: usize) -> Result<(), TokenDecodeError> {
    at_least(got, expected)?;
    if got > expected {
        return Err(TokenDecodeError::TrailingBytes { expected, got });
    }
    Ok(())
}
