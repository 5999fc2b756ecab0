//! A development certificate authority and the certificates of a cluster's parties
//! (`dist-bridge certs`), with `rcgen`.
//!
//! [`DevCa::generate`] makes a CA (ECDSA P-256, ten years, may sign end-entity certificates
//! only); [`DevCa::issue`] makes a party's certificate and key for one
//! [`PeerIdentity`] (one year): nodes may act as TLS servers and clients, operators and
//! clients only as clients. Files are written in the layout [`TlsFiles::in_dir`] reads:
//! `ca.crt`, `ca.key`, and `<stem>.crt`, `<stem>.key` with [`file_stem`]. Keys are written
//! with mode 0600, whole or not at all ([`secctx::out_file`]): a crash never leaves half a
//! key, and an existing file is never replaced unless asked.
//!
//! For production, issue certificates from your own CA with the same identity names.
//!
//! ```
//! use dist_bridge::certs::DevCa;
//! use dist_bridge::identity::PeerIdentity;
//! # let dir = std::env::temp_dir().join(format!("dist-bridge-certs-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let ca = DevCa::generate().unwrap();
//! ca.save(&dir, false).unwrap();
//! let files = DevCa::load(&dir).unwrap().issue(&PeerIdentity::Node(1), &[]).unwrap()
//!     .save(&dir, false).unwrap();
//! assert_eq!(files.load().unwrap().identity(), &PeerIdentity::Node(1));
//! # let _ = std::fs::remove_dir_all(&dir);
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use secctx::out_file::{self, OutFileError};
use time::{Duration, OffsetDateTime};

use crate::identity::PeerIdentity;
use crate::tls::TlsFiles;

/// The CA's common name (its issued certificates name it as their issuer).
pub const CA_COMMON_NAME: &str = "dist-bridge development CA";

/// Why certificates could not be made or written.
#[derive(Debug)]
#[non_exhaustive]
pub enum CertError {
    /// rcgen refused.
    Generate(rcgen::Error),
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file exists (pass `force` to replace it).
    Exists(PathBuf),
    /// A host name for a certificate is not usable.
    BadHost(String),
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Generate(e) => write!(f, "cannot make the certificate: {e}"),
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Exists(path) => write!(
                f,
                "{} exists; not replacing it (--force replaces it)",
                path.display()
            ),
            Self::BadHost(h) => write!(f, "{h:?} is not a DNS name or IP address"),
        }
    }
}

impl std::error::Error for CertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Generate(e) => Some(e),
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<rcgen::Error> for CertError {
    fn from(e: rcgen::Error) -> Self {
        Self::Generate(e)
    }
}

/// A development CA: its key and certificate.
pub struct DevCa {
    key: KeyPair,
    cert_pem: String,
}

impl fmt::Debug for DevCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevCa").finish_non_exhaustive()
    }
}

/// What a CA's issued certificates need of it: its name, key usages and key-id method.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    dn.push(DnType::OrganizationName, "dist-bridge");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(days);
}

impl DevCa {
    /// A new CA.
    pub fn generate() -> Result<DevCa, CertError> {
        let key = KeyPair::generate()?;
        let mut params = ca_params();
        validity(&mut params, 3650);
        let cert = params.self_signed(&key)?;
        Ok(DevCa {
            key,
            cert_pem: cert.pem(),
        })
    }

    /// The CA in `dir` (`ca.crt`, `ca.key`), as [`DevCa::save`] wrote it.
    pub fn load(dir: impl AsRef<Path>) -> Result<DevCa, CertError> {
        let dir = dir.as_ref();
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| CertError::Io { path, source })
        };
        let key = KeyPair::from_pem(&read("ca.key")?)?;
        Ok(DevCa {
            key,
            cert_pem: read("ca.crt")?,
        })
    }

    /// The CA certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca.crt` and `ca.key` (mode 0600) in `dir`, creating it.
    pub fn save(&self, dir: impl AsRef<Path>, force: bool) -> Result<(), CertError> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        write_file(
            &dir.join("ca.key"),
            self.key.serialize_pem().as_bytes(),
            0o600,
            force,
        )?;
        write_file(&dir.join("ca.crt"), self.cert_pem.as_bytes(), 0o644, force)
    }

    /// A certificate and key for `identity`. `hosts` are extra DNS names or IP addresses the
    /// certificate is also valid for (for other tools that check a node by its address).
    pub fn issue(&self, identity: &PeerIdentity, hosts: &[String]) -> Result<Issued, CertError> {
        let mut sans = vec![SanType::DnsName(
            identity
                .dns_name()
                .try_into()
                .map_err(|_| CertError::BadHost(identity.dns_name()))?,
        )];
        for h in hosts {
            let san = match h.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => {
                    // Never a second identity name: that would make the certificate ambiguous.
                    if PeerIdentity::parse_dns(h).is_some() || h.contains('*') {
                        return Err(CertError::BadHost(h.clone()));
                    }
                    SanType::DnsName(
                        h.as_str()
                            .try_into()
                            .map_err(|_| CertError::BadHost(h.clone()))?,
                    )
                }
            };
            sans.push(san);
        }
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, identity.dns_name());
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match identity {
            PeerIdentity::Node(_) => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, 365);
        let key = KeyPair::generate()?;
        let issuer = Issuer::new(ca_params(), &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            stem: file_stem(identity),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The file name (without extension) of an identity's certificate and key: `node-7`,
/// `operator-NAME`, `client-NAME`.
pub fn file_stem(identity: &PeerIdentity) -> String {
    match identity {
        PeerIdentity::Node(id) => format!("node-{id}"),
        PeerIdentity::Operator(n) => format!("operator-{n}"),
        PeerIdentity::Client(n) => format!("client-{n}"),
    }
}

/// An issued certificate and its key.
pub struct Issued {
    stem: String,
    cert_pem: String,
    key_pem: String,
}

impl fmt::Debug for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issued")
            .field("stem", &self.stem)
            .finish_non_exhaustive()
    }
}

impl Issued {
    /// Writes `<stem>.crt` and `<stem>.key` (mode 0600) in `dir`, next to the CA's
    /// `ca.crt`; returns the files.
    pub fn save(&self, dir: impl AsRef<Path>, force: bool) -> Result<TlsFiles, CertError> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        let files = TlsFiles::in_dir(dir, &self.stem);
        write_file(&files.key, self.key_pem.as_bytes(), 0o600, force)?;
        write_file(&files.cert, self.cert_pem.as_bytes(), 0o644, force)?;
        Ok(files)
    }
}

fn create_dir(dir: &Path) -> Result<(), CertError> {
    std::fs::create_dir_all(dir).map_err(|source| CertError::Io {
        path: dir.to_owned(),
        source,
    })
}

/// Writes `bytes` to `path` whole or not at all ([`secctx::out_file::write_new`]).
fn write_file(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<(), CertError> {
    out_file::write_new(path, bytes, mode, force).map_err(|e| match e {
        OutFileError::Exists(p) => CertError::Exists(p),
        OutFileError::Io { path, source, .. } => CertError::Io { path, source },
        OutFileError::NoName(p) => CertError::Io {
            path: p,
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        },
        other => CertError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(other.to_string()),
        },
    })
}
