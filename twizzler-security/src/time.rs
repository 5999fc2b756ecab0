//! Expiry times.

use core::fmt;

/// When a record stops granting: nanoseconds since the Unix epoch, `0` meaning never.
///
/// Ordering follows "expires sooner": [`Expiry::NEVER`] is the greatest value, so `min` of two
/// expiries is the one that ends first.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Expiry(u64);

impl Expiry {
    /// Never expires.
    pub const NEVER: Expiry = Expiry(0);

    /// Expires at `ns` nanoseconds since the Unix epoch; `0` means never.
    pub const fn from_raw(ns: u64) -> Self {
        Self(ns)
    }

    /// The encoded value: ns since the epoch, or `0` for never.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The instant it expires, or `None` for never.
    pub const fn at(self) -> Option<u64> {
        if self.0 == 0 { None } else { Some(self.0) }
    }

    /// Whether it has expired at time `now` (ns since the epoch): an expiry of `t` grants up to
    /// but not including `t`.
    #[inline]
    pub const fn is_expired(self, now: u64) -> bool {
        self.0 != 0 && now >= self.0
    }

    /// Whether it ends no later than `other` (so a delegation with this expiry does not outlive
    /// a parent with `other`).
    pub fn within(self, other: Expiry) -> bool {
        self <= other
    }
}

impl PartialOrd for Expiry {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Expiry {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        // Map NEVER (0) to the top of the range.
        self.0.wrapping_sub(1).cmp(&other.0.wrapping_sub(1))
    }
}

impl fmt::Debug for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at() {
            None => f.write_str("Expiry(never)"),
            Some(t) => write!(f, "Expiry({t} ns)"),
        }
    }
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at() {
            None => f.write_str("never"),
            Some(t) => write!(f, "{t} ns since the epoch"),
        }
    }
}
