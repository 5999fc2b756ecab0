//! Information-flow labels: sets of tags, and their canonical `TLBL` encoding.
//!
//! A **tag** is an [`ObjID`] (the id of a tag object, whose key signs the tag's ownership
//! records). A **label** is a pair of tag sets, secrecy `S` and integrity `I`, each of at most
//! [`MAX_LABEL_TAGS`] tags, held sorted and without repeats in fixed arrays (no heap), so that
//! `⊆`, `∪`, `∩` and `−` are linear merges of at most 64 compares. The empty label is what every
//! object and context has without information flow control (`docs/DIFC.md` §1.2).
//!
//! Layout (`TLBL` version 1, little-endian, [`label_len`]`(s, i)` bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TLBL` |
//! | 4 | 2 | version (1) |
//! | 6 | 1 | `s`: number of secrecy tags, 0..=32 |
//! | 7 | 1 | `i`: number of integrity tags, 0..=32 |
//! | 8 | 16·s | secrecy tags, strictly ascending as `u128` |
//! | 8 + 16·s | 16·i | integrity tags, strictly ascending as `u128` |
//!
//! Decoding is total and canonical (`encode(decode(b)) == b`): a count above 32
//! ([`DecodeError::TooManyTags`]), tags not strictly ascending
//! ([`DecodeError::TagsNotAscending`]), [`ALL_CONTEXTS`] as a tag ([`DecodeError::ReservedTag`]),
//! short input and trailing bytes are typed errors.
//!
//! # Example
//!
//! ```
//! use twizzler_capsec::{Label, ObjID, Tags};
//! # fn main() -> Result<(), twizzler_capsec::DecodeError> {
//! let (medical, vetted) = (ObjID::new(0x7a), ObjID::new(0x3e));
//! // Constructors sort and de-duplicate; the reserved id and more than 32 tags are refused.
//! let label = Label::new(
//!     Tags::from_unsorted(&[medical, medical])?,
//!     Tags::from_unsorted(&[vetted])?,
//! );
//! let bytes = label.encode();
//! assert_eq!(bytes.len(), 8 + 16 + 16);
//! assert_eq!(Label::decode(&bytes)?, label);
//! assert!(Label::EMPTY.as_ref().secrecy_subset_of(&label.as_ref()));
//! assert!(Label::decode(&bytes[..bytes.len() - 1]).is_err());
//! # Ok(())
//! # }
//! ```

use core::cmp::Ordering;
use core::fmt;
use core::ops::Deref;

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::ids::ObjID;

/// The most tags one half (secrecy or integrity) of a label holds.
pub const MAX_LABEL_TAGS: usize = 32;

/// The reserved id `u128::MAX`: never a tag, object or context. As the accessor of an
/// ownership root capability it makes the right public (every context holds it).
pub const ALL_CONTEXTS: ObjID = ObjID::new(u128::MAX);

/// Magic number of an encoded label (`"TLBL"`).
pub const LABEL_MAGIC: u32 = u32::from_le_bytes(*b"TLBL");
/// Label format version this build reads and writes.
pub const LABEL_VERSION: u16 = 1;
/// Length of the fixed part of an encoded label (magic, version, two counts).
pub const LABEL_HEADER_LEN: usize = 8;
/// Length of the largest encoded label (32 + 32 tags).
pub const MAX_LABEL_LEN: usize = LABEL_HEADER_LEN + 16 * 2 * MAX_LABEL_TAGS;

/// Encoded length of a label with `s` secrecy and `i` integrity tags.
pub const fn label_len(s: usize, i: usize) -> usize {
    LABEL_HEADER_LEN + 16 * (s + i)
}

/// A run-time name of an interned label (`docs/DIFC.md` §1.2): the kernel keeps one table row
/// per distinct label and compares ids, never label bytes, on a cache hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LabelId(pub u32);

impl LabelId {
    /// Always the empty label: objects and contexts without labels.
    pub const EMPTY: LabelId = LabelId(0);

    /// Whether this is the empty label's id.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A set of at most [`MAX_LABEL_TAGS`] tags, sorted ascending, without repeats, never
/// containing [`ALL_CONTEXTS`]. Fixed size, no heap.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tags {
    tags: [ObjID; MAX_LABEL_TAGS],
    len: u8,
}

impl Default for Tags {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.as_slice()).finish()
    }
}

impl Tags {
    /// The empty set.
    pub const EMPTY: Tags = Tags {
        tags: [ObjID::new(0); MAX_LABEL_TAGS],
        len: 0,
    };

    /// A set from tags already strictly ascending (checked).
    pub fn from_sorted(tags: &[ObjID]) -> Result<Self, DecodeError> {
        check_tags(tags)?;
        let mut out = Self::EMPTY;
        for &t in tags {
            out.push_unchecked(t);
        }
        Ok(out)
    }

    /// A set from tags in any order, repeats allowed: sorts and de-duplicates. More than
    /// [`MAX_LABEL_TAGS`] distinct tags, or [`ALL_CONTEXTS`], are errors.
    pub fn from_unsorted(tags: &[ObjID]) -> Result<Self, DecodeError> {
        let mut out = Self::EMPTY;
        for &t in tags {
            out.insert(t)?;
        }
        Ok(out)
    }

    /// Adds `tag` (no change if present). Errors if the set is full or `tag` is reserved.
    pub fn insert(&mut self, tag: ObjID) -> Result<(), DecodeError> {
        if tag == ALL_CONTEXTS {
            return Err(DecodeError::ReservedTag);
        }
        let len = usize::from(self.len);
        let pos = match self.as_slice().binary_search(&tag) {
            Ok(_) => return Ok(()),
            Err(pos) => pos,
        };
        if len >= MAX_LABEL_TAGS {
            return Err(DecodeError::TooManyTags(MAX_LABEL_TAGS + 1));
        }
        // Shift the tail up by one; `len < MAX_LABEL_TAGS`, so `len + 1` is in bounds.
        if let Some(window) = self.tags.get_mut(pos..=len) {
            window.rotate_right(1);
            if let Some(slot) = window.first_mut() {
                *slot = tag;
            }
        }
        self.len = self.len.saturating_add(1);
        Ok(())
    }

    /// Removes `tag`; returns whether it was present.
    pub fn remove(&mut self, tag: ObjID) -> bool {
        let len = usize::from(self.len);
        match self.as_slice().binary_search(&tag) {
            Ok(pos) => {
                if let Some(window) = self.tags.get_mut(pos..len) {
                    window.rotate_left(1);
                }
                self.len = self.len.saturating_sub(1);
                true
            }
            Err(_) => false,
        }
    }

    fn push_unchecked(&mut self, tag: ObjID) {
        if let Some(slot) = self.tags.get_mut(usize::from(self.len)) {
            *slot = tag;
            self.len = self.len.saturating_add(1);
        }
    }

    /// The tags, ascending.
    pub fn as_slice(&self) -> &[ObjID] {
        self.tags.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// How many tags.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `tag` is in the set.
    pub fn contains(&self, tag: ObjID) -> bool {
        self.as_slice().binary_search(&tag).is_ok()
    }

    /// `a ∪ b`; errors if it has more than [`MAX_LABEL_TAGS`] tags.
    pub fn union(a: &[ObjID], b: &[ObjID]) -> Result<Self, DecodeError> {
        let mut out = Self::EMPTY;
        let mut n = 0usize;
        for t in merge(a, b).map(|m| match m {
            Merged::Left(t) | Merged::Right(t) | Merged::Both(t) => t,
        }) {
            n += 1;
            if n > MAX_LABEL_TAGS {
                return Err(DecodeError::TooManyTags(a.len() + b.len()));
            }
            out.push_unchecked(t);
        }
        Ok(out)
    }

    /// `a ∩ b` (never larger than either).
    pub fn intersection(a: &[ObjID], b: &[ObjID]) -> Self {
        let mut out = Self::EMPTY;
        for m in merge(a, b) {
            if let Merged::Both(t) = m {
                out.push_unchecked(t);
            }
        }
        out
    }

    /// `a − b` (never larger than `a`).
    pub fn difference(a: &[ObjID], b: &[ObjID]) -> Self {
        let mut out = Self::EMPTY;
        for t in tags_difference(a, b) {
            out.push_unchecked(t);
        }
        out
    }
}

impl Deref for Tags {
    type Target = [ObjID];
    fn deref(&self) -> &[ObjID] {
        self.as_slice()
    }
}

/// Checks that `tags` is a valid half of a label: at most 32, strictly ascending, none reserved.
fn check_tags(tags: &[ObjID]) -> Result<(), DecodeError> {
    if tags.len() > MAX_LABEL_TAGS {
        return Err(DecodeError::TooManyTags(tags.len()));
    }
    let mut prev: Option<ObjID> = None;
    for (index, &t) in tags.iter().enumerate() {
        if t == ALL_CONTEXTS {
            return Err(DecodeError::ReservedTag);
        }
        if prev.is_some_and(|p| p >= t) {
            return Err(DecodeError::TagsNotAscending { index });
        }
        prev = Some(t);
    }
    Ok(())
}

/// One step of a merge of two ascending slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Merged {
    Left(ObjID),
    Right(ObjID),
    Both(ObjID),
}

/// Merges two ascending slices in one pass.
fn merge<'a>(a: &'a [ObjID], b: &'a [ObjID]) -> impl Iterator<Item = Merged> + 'a {
    let (mut i, mut j) = (0usize, 0usize);
    core::iter::from_fn(move || match (a.get(i), b.get(j)) {
        (Some(&x), Some(&y)) => Some(match x.cmp(&y) {
            Ordering::Less => {
                i += 1;
                Merged::Left(x)
            }
            Ordering::Greater => {
                j += 1;
                Merged::Right(y)
            }
            Ordering::Equal => {
                i += 1;
                j += 1;
                Merged::Both(x)
            }
        }),
        (Some(&x), None) => {
            i += 1;
            Some(Merged::Left(x))
        }
        (None, Some(&y)) => {
            j += 1;
            Some(Merged::Right(y))
        }
        (None, None) => None,
    })
}

/// The tags of `a` not in `b`, ascending (both ascending): one linear merge, no allocation.
pub fn tags_difference<'a>(a: &'a [ObjID], b: &'a [ObjID]) -> impl Iterator<Item = ObjID> + 'a {
    merge(a, b).filter_map(|m| match m {
        Merged::Left(t) => Some(t),
        _ => None,
    })
}

/// Whether `a ⊆ b` (both ascending).
pub fn tags_subset(a: &[ObjID], b: &[ObjID]) -> bool {
    a.len() <= b.len() && tags_difference(a, b).next().is_none()
}

/// A label: secrecy and integrity tag sets, by value (about 1 KiB, no heap).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Label {
    /// Secrecy tags `S`.
    pub secrecy: Tags,
    /// Integrity tags `I`.
    pub integrity: Tags,
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}

impl Label {
    /// The empty label `(∅, ∅)`: no information flow control.
    pub const EMPTY: Label = Label {
        secrecy: Tags::EMPTY,
        integrity: Tags::EMPTY,
    };

    /// A label from its two halves.
    pub const fn new(secrecy: Tags, integrity: Tags) -> Self {
        Self { secrecy, integrity }
    }

    /// A label from tags in any order (sorted and de-duplicated; see [`Tags::from_unsorted`]).
    pub fn from_tags(secrecy: &[ObjID], integrity: &[ObjID]) -> Result<Self, DecodeError> {
        Ok(Self {
            secrecy: Tags::from_unsorted(secrecy)?,
            integrity: Tags::from_unsorted(integrity)?,
        })
    }

    /// Whether both halves are empty.
    pub fn is_empty(&self) -> bool {
        self.secrecy.is_empty() && self.integrity.is_empty()
    }

    /// A borrowed view.
    pub fn as_ref(&self) -> LabelRef<'_> {
        LabelRef {
            secrecy: self.secrecy.as_slice(),
            integrity: self.integrity.as_slice(),
        }
    }

    /// Encoded length in bytes.
    pub fn encoded_len(&self) -> usize {
        self.as_ref().encoded_len()
    }

    /// The canonical `TLBL` encoding.
    pub fn encode(&self) -> LabelBytes {
        self.as_ref().encode()
    }

    /// Decodes exactly one label (total and canonical).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let label = Self::decode_from(&mut r)?;
        r.finish()?;
        Ok(label)
    }

    /// Decodes one label from `r`, leaving what follows.
    pub fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic(LABEL_MAGIC)?;
        r.version(LABEL_VERSION)?;
        let s = usize::from(r.u8()?);
        let i = usize::from(r.u8()?);
        if s > MAX_LABEL_TAGS {
            return Err(DecodeError::TooManyTags(s));
        }
        if i > MAX_LABEL_TAGS {
            return Err(DecodeError::TooManyTags(i));
        }
        Ok(Self {
            secrecy: decode_half(r, s)?,
            integrity: decode_half(r, i)?,
        })
    }
}

fn decode_half(r: &mut Reader<'_>, n: usize) -> Result<Tags, DecodeError> {
    let mut out = Tags::EMPTY;
    for index in 0..n {
        let t = ObjID::new(r.u128()?);
        if t == ALL_CONTEXTS {
            return Err(DecodeError::ReservedTag);
        }
        if out.as_slice().last().is_some_and(|&p| p >= t) {
            return Err(DecodeError::TagsNotAscending { index });
        }
        out.push_unchecked(t);
    }
    Ok(out)
}

/// A borrowed label: two ascending, repeat-free slices of at most [`MAX_LABEL_TAGS`] tags
/// (the invariant every constructor checks). This is what the rule reads, so a kernel can lend
/// an interned label without copying it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LabelRef<'a> {
    secrecy: &'a [ObjID],
    integrity: &'a [ObjID],
}

impl fmt::Debug for LabelRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Label")
            .field("secrecy", &self.secrecy)
            .field("integrity", &self.integrity)
            .finish()
    }
}

impl<'a> LabelRef<'a> {
    /// The empty label.
    pub const EMPTY: LabelRef<'static> = LabelRef {
        secrecy: &[],
        integrity: &[],
    };

    /// A view of two slices, checked: each at most 32 tags, strictly ascending, none reserved.
    pub fn new(secrecy: &'a [ObjID], integrity: &'a [ObjID]) -> Result<Self, DecodeError> {
        check_tags(secrecy)?;
        check_tags(integrity)?;
        Ok(Self { secrecy, integrity })
    }

    /// Secrecy tags, ascending.
    pub fn secrecy(&self) -> &'a [ObjID] {
        self.secrecy
    }

    /// Integrity tags, ascending.
    pub fn integrity(&self) -> &'a [ObjID] {
        self.integrity
    }

    /// Whether both halves are empty.
    pub fn is_empty(&self) -> bool {
        self.secrecy.is_empty() && self.integrity.is_empty()
    }

    /// `S_self ⊆ S_other`.
    pub fn secrecy_subset_of(&self, other: &LabelRef<'_>) -> bool {
        tags_subset(self.secrecy, other.secrecy)
    }

    /// `I_self ⊆ I_other`.
    pub fn integrity_subset_of(&self, other: &LabelRef<'_>) -> bool {
        tags_subset(self.integrity, other.integrity)
    }

    /// An owned copy.
    pub fn to_label(&self) -> Label {
        let mut out = Label::EMPTY;
        for &t in self.secrecy {
            out.secrecy.push_unchecked(t);
        }
        for &t in self.integrity {
            out.integrity.push_unchecked(t);
        }
        out
    }

    /// Encoded length in bytes.
    pub fn encoded_len(&self) -> usize {
        label_len(self.secrecy.len(), self.integrity.len())
    }

    /// Writes the canonical encoding into `w`.
    pub fn encode_into(&self, w: &mut Writer<'_>) {
        // Both lengths are at most 32 (the type's invariant), so they fit a byte.
        w.u32(LABEL_MAGIC)
            .u16(LABEL_VERSION)
            .u8(self.secrecy.len() as u8)
            .u8(self.integrity.len() as u8);
        for t in self.secrecy.iter().chain(self.integrity) {
            w.u128(t.raw());
        }
    }

    /// The canonical `TLBL` encoding.
    pub fn encode(&self) -> LabelBytes {
        let mut out = LabelBytes {
            buf: [0u8; MAX_LABEL_LEN],
            len: self.encoded_len(),
        };
        self.encode_into(&mut Writer::new(&mut out.buf));
        out
    }
}

/// An encoded label in a fixed buffer (no heap); derefs to the encoded bytes.
#[derive(Clone, Copy)]
pub struct LabelBytes {
    buf: [u8; MAX_LABEL_LEN],
    len: usize,
}

impl Deref for LabelBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl fmt::Debug for LabelBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LabelBytes").field(&&**self).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(raw: &[u128]) -> [ObjID; 8] {
        let mut out = [ObjID::new(0); 8];
        for (o, &r) in out.iter_mut().zip(raw) {
            *o = ObjID::new(r);
        }
        out
    }

    #[test]
    fn set_operations_are_merges() {
        let a = Tags::from_unsorted(&ids(&[5, 1, 3, 1, 9])[..5]).unwrap();
        let b = Tags::from_unsorted(&ids(&[3, 4, 9])[..3]).unwrap();
        let raw = |t: &Tags| t.iter().map(|t| t.raw()).collect::<std::vec::Vec<_>>();
        assert_eq!(raw(&a), [1, 3, 5, 9]);
        assert_eq!(raw(&Tags::union(&a, &b).unwrap()), [1, 3, 4, 5, 9]);
        assert_eq!(raw(&Tags::intersection(&a, &b)), [3, 9]);
        assert_eq!(raw(&Tags::difference(&a, &b)), [1, 5]);
        assert!(tags_subset(&Tags::intersection(&a, &b), &a));
        assert!(!tags_subset(&a, &b));
    }

    #[test]
    fn insert_and_remove_keep_order_and_bounds() {
        let mut t = Tags::EMPTY;
        for r in (0..MAX_LABEL_TAGS as u128).rev() {
            t.insert(ObjID::new(r * 2)).unwrap();
        }
        assert_eq!(t.len(), MAX_LABEL_TAGS);
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        t.insert(ObjID::new(4)).unwrap(); // present: no change
        assert_eq!(
            t.insert(ObjID::new(3)),
            Err(DecodeError::TooManyTags(MAX_LABEL_TAGS + 1))
        );
        assert!(t.remove(ObjID::new(4)));
        assert!(!t.remove(ObjID::new(4)));
        t.insert(ObjID::new(3)).unwrap();
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(t.insert(ALL_CONTEXTS), Err(DecodeError::ReservedTag));
    }

    #[test]
    fn union_over_32_is_refused() {
        let a: std::vec::Vec<ObjID> = (0..32).map(|r| ObjID::new(r * 2)).collect();
        let b: std::vec::Vec<ObjID> = (0..1).map(|r| ObjID::new(r * 2 + 1)).collect();
        assert!(matches!(
            Tags::union(&a, &b),
            Err(DecodeError::TooManyTags(_))
        ));
        assert_eq!(Tags::union(&a, &a).unwrap().len(), 32);
    }

    #[test]
    fn decode_refuses_non_canonical() {
        let l = Label::from_tags(&ids(&[2, 1])[..2], &ids(&[7])[..1]).unwrap();
        let bytes = l.encode();
        assert_eq!(Label::decode(&bytes).unwrap(), l);
        // Swap the two secrecy tags: not ascending.
        let mut swapped = bytes.to_vec();
        swapped[8..24].copy_from_slice(&2u128.to_le_bytes());
        swapped[24..40].copy_from_slice(&1u128.to_le_bytes());
        assert_eq!(
            Label::decode(&swapped),
            Err(DecodeError::TagsNotAscending { index: 1 })
        );
        let mut reserved = bytes.to_vec();
        reserved[40..56].copy_from_slice(&u128::MAX.to_le_bytes());
        assert_eq!(Label::decode(&reserved), Err(DecodeError::ReservedTag));
        let mut many = bytes.to_vec();
        many[6] = 33;
        assert_eq!(Label::decode(&many), Err(DecodeError::TooManyTags(33)));
        let mut long = bytes.to_vec();
        long.push(0);
        assert!(matches!(
            Label::decode(&long),
            Err(DecodeError::TrailingBytes { .. })
        ));
    }
}
