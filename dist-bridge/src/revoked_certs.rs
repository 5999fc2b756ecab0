//! Certificates a node no longer accepts from its callers, before they expire.
//!
//! A certificate from the cluster CA is good until it expires (a year for development
//! certificates). When one leaks (a client's, an operator's, a node's), the operator lists it
//! in the node's revocation file (`[tls] revoked`), and every node reading that file refuses
//! it from then on: its TLS handshakes, its connections already open (ended when the node
//! reads the file), and, for a node's certificate, the peer connections to it, open or new.
//! `dist-bridge certs revoke` adds a certificate to the file.
//!
//! # The file
//!
//! One certificate per line: the SHA-256 of its DER encoding, 64 hexadecimal digits, then
//! optionally white space and a note (`dist-bridge certs revoke` writes the identity the
//! certificate names). Blank lines and lines starting with `#` are ignored. Any other line
//! is an error, reported with its number, and the whole file is refused.
//!
//! ```text
//! # revoked 2026-11-24: laptop stolen
//! 3f1c…(64 hex digits)…9a  alice.operator.dist-bridge
//! ```
//!
//! The same digest as `openssl x509 -in alice.crt -outform der | sha256sum`.
//!
//! ```
//! use dist_bridge::revoked_certs::{Fingerprint, RevokedList};
//!
//! let cert_der = b"not really a certificate";
//! let fp = Fingerprint::of(cert_der);
//! let list = RevokedList::parse(&format!("# leaked\n{}  alice\n", fp.to_hex())).unwrap();
//! assert!(list.contains(&fp));
//! assert!(RevokedList::parse("not a digest\n").is_err());
//! ```

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use secctx::out_file::{self, OutFileError};
use sha2::{Digest, Sha256};

/// A certificate's SHA-256 fingerprint (of its DER encoding).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of the certificate `der`.
    pub fn of(der: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(der).into())
    }

    /// Lower-case hexadecimal, 64 digits.
    pub fn to_hex(&self) -> String {
        base16ct::lower::encode_string(&self.0)
    }

    /// Parses 64 hexadecimal digits (either case).
    pub fn from_hex(text: &str) -> Option<Fingerprint> {
        let mut out = [0u8; 32];
        // Exactly 32 bytes: a longer text does not fit in `out`, a shorter one fills less.
        let decoded = base16ct::mixed::decode(text, &mut out).ok()?.len();
        (decoded == 32).then_some(Fingerprint(out))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

/// A parsed revocation file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevokedList {
    revoked: HashSet<Fingerprint>,
}

impl RevokedList {
    /// Parses the file's text (see the module's documentation).
    pub fn parse(text: &str) -> Result<RevokedList, ListError> {
        let mut revoked = HashSet::new();
        // A byte-order mark, as some editors write, is not part of the first line.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let digest = line.split_whitespace().next().unwrap_or_default();
            let fp = Fingerprint::from_hex(digest).ok_or(ListError::Line {
                line: i + 1,
                what: "not a SHA-256 fingerprint (64 hexadecimal digits)",
            })?;
            revoked.insert(fp);
        }
        Ok(RevokedList { revoked })
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<RevokedList, ListError> {
        let text = std::fs::read_to_string(path).map_err(|source| ListError::Read {
            path: path.to_owned(),
            source,
        })?;
        RevokedList::parse_file(&text, path)
    }

    /// [`RevokedList::parse`], naming `path` in errors.
    fn parse_file(text: &str, path: &Path) -> Result<RevokedList, ListError> {
        RevokedList::parse(text).map_err(|e| match e {
            ListError::Line { line, what } => ListError::In {
                path: path.to_owned(),
                line,
                what,
            },
            other => other,
        })
    }

    /// Whether the certificate with fingerprint `fp` is revoked.
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        self.revoked.contains(fp)
    }

    /// How many certificates are listed.
    pub fn len(&self) -> usize {
        self.revoked.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.revoked.is_empty()
    }
}

/// Lists `certs` (fingerprint, note) in the revocation file at `path`, creating it if it
/// does not exist; returns how many were not listed yet. The file is replaced whole
/// ([`secctx::out_file`]), so a node reading it sees the old list or the new one; an
/// existing file that does not parse is left untouched and refused.
pub fn add_to_file(path: &Path, certs: &[(Fingerprint, String)]) -> Result<usize, ListError> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            String::from("# Certificates no longer accepted: SHA-256 of the DER, then a note.\n")
        }
        Err(source) => {
            return Err(ListError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut list = RevokedList::parse_file(&text, path)?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let mut added = 0;
    for (fp, note) in certs {
        if list.revoked.insert(*fp) {
            text.push_str(&line(fp, note));
            added += 1;
        }
    }
    out_file::write_new(path, text.as_bytes(), 0o644, true).map_err(ListError::Write)?;
    Ok(added)
}

/// The fingerprint of the first certificate in the PEM file at `path`.
pub fn fingerprint_of_pem_file(path: &Path) -> Result<Fingerprint, ListError> {
    let pem = std::fs::read(path).map_err(|source| ListError::Read {
        path: path.to_owned(),
        source,
    })?;
    let der = CertificateDer::from_pem_slice(&pem)
        .map_err(|_| ListError::NotACertificate(path.to_owned()))?;
    Ok(Fingerprint::of(der.as_ref()))
}

/// The line that lists `fp`, with `note` after it (no line break inside).
pub fn line(fp: &Fingerprint, note: &str) -> String {
    let note: String = note.chars().filter(|c| !c.is_control()).collect();
    format!("{}  {}\n", fp.to_hex(), note.trim())
}

/// A revocation file that cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum ListError {
    /// It cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the text is not an entry.
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The file could not be written.
    Write(OutFileError),
    /// The file holds no PEM certificate.
    NotACertificate(PathBuf),
    /// A line of the file at `path` is not an entry.
    In {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => {
                write!(
                    f,
                    "cannot read revocation file {}: {source}",
                    path.display()
                )
            }
            Self::Line { line, what } => write!(f, "line {line}: {what}"),
            Self::Write(e) => e.fmt(f),
            Self::NotACertificate(path) => {
                write!(f, "{} holds no PEM certificate", path.display())
            }
            Self::In { path, line, what } => {
                write!(f, "revocation file {}, line {line}: {what}", path.display())
            }
        }
    }
}

impl std::error::Error for ListError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            Self::Write(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn comments_notes_either_case_crlf_and_a_byte_order_mark() {
        let a = Fingerprint::of(b"a");
        let b = Fingerprint::of(b"b");
        let text = format!(
            "\u{feff}# header\r\n\r\n  {}\t alice.client.dist-bridge\r\n{}\n",
            a.to_hex().to_uppercase(),
            b.to_hex()
        );
        let list = RevokedList::parse(&text).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.contains(&a) && list.contains(&b));
        assert!(!list.contains(&Fingerprint::of(b"c")));
    }

    #[test]
    fn a_bad_line_refuses_the_whole_file_and_says_where() {
        let good = Fingerprint::of(b"a").to_hex();
        for bad in [
            &good[..63],                  // short
            &format!("{good}0")[..],      // long
            &format!("{}g", &good[..63]), // not hex
            "sha256:abc",
            "ünïcödé",
        ] {
            let e = RevokedList::parse(&format!("{good}\n{bad}\n")).unwrap_err();
            assert_eq!(
                e.to_string(),
                "line 2: not a SHA-256 fingerprint (64 hexadecimal digits)",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_written_line_reads_back_whatever_the_note() {
        let fp = Fingerprint::of(b"cert");
        let text = line(&fp, "evil\nnote\r\u{7}") + &line(&fp, "");
        assert_eq!(text.lines().count(), 2);
        assert!(RevokedList::parse(&text).unwrap().contains(&fp));
    }

    proptest! {
        /// Any text parses or is refused without a panic; listed digests are found.
        #[test]
        fn parsing_never_panics(text in "\\PC{0,200}") {
            let _ = RevokedList::parse(&text);
        }

        #[test]
        fn every_listed_fingerprint_is_found(
            certs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..20),
            notes in proptest::collection::vec("\\PC{0,20}", 20),
        ) {
            let fps: Vec<_> = certs.iter().map(|c| Fingerprint::of(c)).collect();
            let text: String = fps.iter().zip(&notes).map(|(fp, n)| line(fp, n)).collect();
            let list = RevokedList::parse(&text).unwrap();
            for fp in &fps {
                prop_assert!(list.contains(fp));
                prop_assert_eq!(Fingerprint::from_hex(&fp.to_hex()), Some(*fp));
            }
        }
    }
}
