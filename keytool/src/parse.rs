//! Parsers for command-line values: object and record ids, protections, gates, numbers, times
//! and durations. Each returns a one-line message on bad input (clap shows it after the
//! argument's name).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use secctx::store::ObjRef;
use twizzler_capsec::{DIGEST_LEN, Expiry, Gate, ObjID, Protections, RecordId};

/// An object id: up to 32 hex digits, with or without `0x`.
pub(crate) fn obj_id(s: &str) -> Result<ObjID, String> {
    s.trim().parse::<ObjID>().map_err(|e| e.to_string())
}

/// An object named on the command line: by its id, or by a name the store gives it
/// (`keygen --name`, `obj new --name`, `ctx new --name`), resolved once the store is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IdRef {
    /// An object id.
    Id(ObjID),
    /// A name.
    Name(String),
}

/// An object id (up to 32 hex digits, 0x optional) or a name, decided by
/// [`secctx::store::parse_obj_ref`]: the function that refuses ids as names.
pub(crate) fn id_ref(s: &str) -> Result<IdRef, String> {
    let s = s.trim();
    match secctx::store::parse_obj_ref(s) {
        Ok(ObjRef::Id(id)) => Ok(IdRef::Id(id)),
        Ok(ObjRef::Name(n)) => Ok(IdRef::Name(n.to_owned())),
        Err(_) => Err(format!(
            "{s:?} is neither an object id (up to 32 hex digits) nor a name (a letter or digit, then letters, digits and -_.@+)"
        )),
    }
}

/// A name for a new object (see [`secctx::store::check_name`]).
pub(crate) fn name(s: &str) -> Result<String, String> {
    secctx::store::check_name(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// Protections as an `rwx` string: each of `r`, `w`, `x` at most once, `-` for a missing
/// right (`rw-`, `r-x`, `---`; `rw` works too).
pub(crate) fn prots(s: &str) -> Result<Protections, String> {
    if s.is_empty() {
        return Err("protections are empty: write them as rwx, r--, ... (--- for none)".into());
    }
    let p = s.parse::<Protections>().map_err(|e| e.to_string())?;
    for c in ['r', 'w', 'x'] {
        if s.chars().filter(|d| d.eq_ignore_ascii_case(&c)).count() > 1 {
            return Err(format!("protections name {c:?} twice"));
        }
    }
    if s.len() > 3 {
        return Err("protections are at most three letters (rwx)".into());
    }
    Ok(p)
}

/// A number: decimal or `0x` hex, `_` allowed between digits, with an optional binary suffix
/// `k` (KiB), `m` (MiB) or `g` (GiB).
pub(crate) fn number(s: &str) -> Result<u64, String> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    let bad = || format!("{s:?} is not a number (decimal, 0x hex, optional k/m/g suffix)");
    let (digits, radix) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (t.as_str(), 10),
    };
    // A hex number has no suffix: `b`... are digits there.
    let (digits, mult) = if radix == 10 {
        match digits.char_indices().last() {
            Some((i, 'k' | 'K')) => (&digits[..i], 1u64 << 10),
            Some((i, 'm' | 'M')) => (&digits[..i], 1 << 20),
            Some((i, 'g' | 'G')) => (&digits[..i], 1 << 30),
            _ => (digits, 1),
        }
    } else {
        (digits, 1)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let v = u64::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is too large"))?;
    v.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A gate: `OFFSET:LENGTH[:ALIGN]` (numbers as [`number`]; align defaults to 1), or `whole`.
pub(crate) fn gate(s: &str) -> Result<Gate, String> {
    if s.trim().eq_ignore_ascii_case("whole") {
        return Ok(Gate::WHOLE);
    }
    let parts: Vec<&str> = s.split(':').collect();
    let (off, len, align) = match parts.as_slice() {
        [o, l] => (number(o)?, number(l)?, 1),
        [o, l, a] => (number(o)?, number(l)?, number(a)?),
        _ => return Err(format!("{s:?} is not a gate: write OFFSET:LENGTH[:ALIGN]")),
    };
    Gate::new(off, len, align).map_err(|e| format!("invalid gate {s:?}: {e}"))
}

/// A record id: 64 hex digits.
pub(crate) fn record_id(s: &str) -> Option<RecordId> {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() != 2 * DIGEST_LEN || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; DIGEST_LEN];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(RecordId(out))
}

/// A record named by its id (64 hex digits) or by a file holding it.
#[derive(Clone, Debug)]
pub(crate) enum RecordRef {
    /// By id.
    Id(RecordId),
    /// By file.
    File(PathBuf),
}

/// Parses a [`RecordRef`]: 64 hex digits are an id, anything else a file name.
pub(crate) fn record_ref(s: &str) -> Result<RecordRef, String> {
    Ok(match record_id(s) {
        Some(id) => RecordRef::Id(id),
        None => RecordRef::File(PathBuf::from(s)),
    })
}

/// Now, in ns since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A signed duration in ns: `30d`, `1h30m`, `2 weeks`, `90s` or ISO 8601 (`P30D`); days are
/// 24 hours, months and years are refused (their length varies).
fn duration_ns(s: &str) -> Result<i128, String> {
    let span: jiff::Span = s
        .parse()
        .map_err(|_| format!("{s:?} is not a time or a duration (see --help: TIME)"))?;
    let d = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|_| format!("{s:?}: months and years have no fixed length; use days or weeks"))?;
    Ok(d.as_nanos())
}

/// A point in time, in ns since the Unix epoch:
///
/// - `now`;
/// - an RFC 3339 timestamp (`2030-01-01T00:00:00Z`, `2030-01-01T02:00:00+02:00`);
/// - a duration from now (`30d`, `+12h`) or before now (`-1h`);
/// - `@NS`: nanoseconds since the epoch.
pub(crate) fn instant(s: &str) -> Result<u64, String> {
    instant_at(s, now_ns())
}

fn instant_at(s: &str, now: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(ns) = t.strip_prefix('@') {
        return ns
            .parse::<u64>()
            .map_err(|_| format!("{s:?}: @ takes nanoseconds since the Unix epoch"));
    }
    // A timestamp starts with a four-digit year and a dash; everything else is a duration.
    let looks_like_date = t.len() > 4 && t.as_bytes().get(4) == Some(&b'-');
    let ns: i128 = if looks_like_date {
        let ts: jiff::Timestamp = t.parse().map_err(|e| {
            format!(
                "{s:?} is not an RFC 3339 timestamp with an offset (like 2030-01-01T00:00:00Z): {e}"
            )
        })?;
        ts.as_nanosecond()
    } else {
        let (sign, rest) = match t.strip_prefix('-') {
            Some(r) => (-1, r),
            None => (1, t.strip_prefix('+').unwrap_or(t)),
        };
        i128::from(now) + sign * duration_ns(rest.trim())?
    };
    u64::try_from(ns).map_err(|_| format!("{s:?} is before 1970 or after 2554"))
}

/// An expiry: `never`, or a [`instant`] time (which must not be the epoch itself).
pub(crate) fn expiry(s: &str) -> Result<Expiry, String> {
    if s.trim().eq_ignore_ascii_case("never") {
        return Ok(Expiry::NEVER);
    }
    match instant(s)? {
        0 => Err("an expiry of 0 ns means never; write `never`".into()),
        ns => Ok(Expiry::from_raw(ns)),
    }
}

/// An instant as RFC 3339 (UTC), or the raw ns if out of range.
pub(crate) fn fmt_time(ns: u64) -> String {
    match jiff::Timestamp::from_nanosecond(i128::from(ns)) {
        Ok(t) => t.to_string(),
        Err(_) => format!("@{ns}"),
    }
}

/// An expiry as RFC 3339, or `never`.
pub(crate) fn fmt_expiry(e: Expiry) -> String {
    match e.at() {
        None => "never".into(),
        Some(ns) => fmt_time(ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000_000_000;
    const DAY: u64 = 86_400_000_000_000;

    #[test]
    fn ids() {
        assert_eq!(obj_id("0x1f").unwrap(), ObjID::new(0x1f));
        assert_eq!(obj_id("1F").unwrap(), ObjID::new(0x1f));
        assert!(obj_id("").is_err());
        assert!(obj_id("xyz").is_err());
        assert!(obj_id(&"1".repeat(33)).is_err());
        let r = "ab".repeat(32);
        assert_eq!(record_id(&r).unwrap().0, [0xab; 32]);
        assert!(record_id(&"ab".repeat(31)).is_none());
        assert!(record_id(&"zz".repeat(32)).is_none());
    }

    #[test]
    fn protections() {
        assert_eq!(
            prots("rw-").unwrap(),
            Protections::READ | Protections::WRITE
        );
        assert_eq!(prots("r-x").unwrap(), Protections::READ | Protections::EXEC);
        assert_eq!(prots("---").unwrap(), Protections::empty());
        assert_eq!(prots("wr").unwrap(), Protections::READ | Protections::WRITE);
        assert!(prots("").is_err());
        assert!(prots("rr").is_err());
        assert!(prots("rwq").is_err());
        assert!(prots("rwx-").is_err());
    }

    #[test]
    fn numbers_and_gates() {
        assert_eq!(number("4096").unwrap(), 4096);
        assert_eq!(number("0x1000").unwrap(), 4096);
        assert_eq!(number("4k").unwrap(), 4096);
        assert_eq!(number("1_024").unwrap(), 1024);
        assert_eq!(number("1G").unwrap(), 1 << 30);
        assert_eq!(number("0xbb").unwrap(), 0xbb);
        assert!(number("").is_err());
        assert!(number("k").is_err());
        assert!(number("-1").is_err());
        assert!(number("99999999999999999999").is_err());
        assert!(number("0xffffffffffffffffff").is_err());
        assert!(number("17179869184g").is_err());
        let g = gate("0x1000:0x2000:16").unwrap();
        assert_eq!((g.offset(), g.length(), g.align()), (0x1000, 0x2000, 16));
        let g = gate("4k:8k").unwrap();
        assert_eq!((g.offset(), g.length(), g.align()), (4096, 8192, 1));
        assert_eq!(gate("whole").unwrap(), Gate::WHOLE);
        assert!(gate("1").is_err());
        assert!(gate("1:2:3:4").is_err());
        assert!(gate("0:0").is_err());
        assert!(gate("0:1:0").is_err());
        assert!(gate("0xffffffffffffffff:2").is_err());
        assert!(gate("0:2g").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(instant_at("now", NOW).unwrap(), NOW);
        assert_eq!(instant_at("30d", NOW).unwrap(), NOW + 30 * DAY);
        assert_eq!(instant_at("+1d", NOW).unwrap(), NOW + DAY);
        assert_eq!(instant_at("-1d", NOW).unwrap(), NOW - DAY);
        assert_eq!(instant_at("1h30m", NOW).unwrap(), NOW + 5_400_000_000_000);
        assert_eq!(instant_at("2w", NOW).unwrap(), NOW + 14 * DAY);
        assert_eq!(instant_at("P1D", NOW).unwrap(), NOW + DAY);
        assert_eq!(instant_at("@42", NOW).unwrap(), 42);
        assert_eq!(instant_at("1970-01-02T00:00:00Z", NOW).unwrap(), DAY);
        assert_eq!(instant_at("1970-01-02T02:00:00+02:00", NOW).unwrap(), DAY);
        assert!(instant_at("1y", NOW).is_err());
        assert!(instant_at("soon", NOW).is_err());
        assert!(instant_at("1969-12-31T00:00:00Z", NOW).is_err());
        assert!(instant_at("2030-01-01", NOW).is_err());
        assert_eq!(expiry("never").unwrap(), Expiry::NEVER);
        assert!(expiry("@0").is_err());
        assert_eq!(fmt_time(DAY), "1970-01-02T00:00:00Z");
        assert_eq!(fmt_expiry(Expiry::NEVER), "never");
    }
}
