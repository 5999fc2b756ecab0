//! `serde` support for the signed records and keys: each serializes as its canonical byte
//! encoding and deserializes through its total decoder, so a deserialized value is exactly as
//! trustworthy as a decoded one.

use core::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Cap, Del, MAX_DEL_LEN, Signature, VerifyingKey};

/// Collects bytes given as a byte string or as a sequence of `u8`, then decodes them.
struct DecodeVisitor<T>(fn(&[u8]) -> Result<T, crate::DecodeError>, &'static str);

impl<'de, T> Visitor<'de> for DecodeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the canonical encoding of {}", self.1)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        let mut buf = heapless::Vec::<u8, MAX_DEL_LEN>::new();
        while let Some(b) = seq.next_element::<u8>()? {
            buf.push(b)
                .map_err(|_| de::Error::custom("encoding is longer than any record"))?;
        }
        (self.0)(&buf).map_err(de::Error::custom)
    }
}

macro_rules! bytes_serde {
    ($ty:ty, $what:literal, |$v:ident| $encode:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let $v = self;
                s.serialize_bytes(&$encode)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_bytes(DecodeVisitor(<$ty>::decode, $what))
            }
        }
    };
}

bytes_serde!(Cap, "a capability", |c| c.encode());
bytes_serde!(Del, "a delegation", |d| d.encode());
bytes_serde!(Signature, "a signature", |s| s.encode());
bytes_serde!(VerifyingKey, "a verifying key", |k| k.encode());
