//! Refusing client certificates that are revoked ([`crate::revoked_certs`]): at the TLS
//! handshake ([`CertRevocations::handshake_check`]), and at every request of a connection
//! opened before its certificate was listed. The node's connections to its peers consult
//! the same list ([`CertRevocations::lists`], through `TlsMaterial::refusing_servers`).
//!
//! The node reads its revocation file at start (a bad file stops the start, in one line) and
//! again whenever the maintenance task sees it changed; a file that has become unreadable
//! or malformed is reported and the list in force is kept. Each list loaded gets a new
//! generation number.
//!
//! A handshake with a listed certificate fails (rustls sends the `certificate_revoked`
//! alert), after the CA's own checks. On a connection already open, the certificate is
//! fingerprinted once, at its first request, and its verdict
//! is kept with the generation it was reached under ([`Verdict`]); a request pays two
//! atomic loads unless the list has changed since.
//!
//! Each list loaded is also announced ([`CertRevocations::changes`]): every connection the
//! node serves ([`super::serve`]) and every connection it holds to a peer
//! ([`crate::connector`]) checks its certificate against the new list then, and the node
//! ends those whose certificate it lists. So revoking a certificate ends every connection
//! using it, both ways, at the node's next reading of the list: the maintenance tick after
//! the file changes (every [`NodeConfig::maintenance_interval`](super::NodeConfig::maintenance_interval)),
//! or [`RunningNode::reload_revoked_certs`](super::RunningNode::reload_revoked_certs).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

use prometheus_client::metrics::counter::Counter;
use rustls_pki_types::CertificateDer;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::revoked_certs::{Fingerprint, ListError, RevokedList};
use crate::tls::RefusedCerts;

/// The node's revocation list, and where it comes from.
#[derive(Debug)]
pub(super) struct CertRevocations {
    path: PathBuf,
    list: RwLock<Arc<RevokedList>>,
    /// Of the list in force; from 1 (0 is "never checked" in a [`Verdict`]).
    generation: AtomicU64,
    /// The file's modification time and length when it was last read.
    stamp: Mutex<Option<(SystemTime, u64)>>,
    /// The generation, announced each time a list is loaded.
    changes: watch::Sender<u64>,
}

impl CertRevocations {
    /// Reads the file at `path`.
    pub(super) fn load(path: PathBuf) -> Result<CertRevocations, ListError> {
        let stamp = stamp_of(&path);
        let list = RevokedList::load(&path)?;
        info!(path = %path.display(), revoked = list.len(), "certificate revocation list loaded");
        Ok(CertRevocations {
            path,
            list: RwLock::new(Arc::new(list)),
            generation: AtomicU64::new(1),
            stamp: Mutex::new(stamp),
            changes: watch::Sender::new(1),
        })
    }

    /// Reads the file again if its modification time or length changed (a file that has
    /// become unreadable or malformed is reported, and the list in force kept).
    pub(super) fn reload_if_changed(&self) {
        let stamp = stamp_of(&self.path);
        let seen = self.stamp.lock().map(|s| *s).unwrap_or(None);
        if stamp == seen {
            return;
        }
        if let Err(e) = self.reload(stamp) {
            warn!(error = %e, "revocation file not reloaded; the previous list stays in force");
        }
    }

    /// Reads the file again now, whatever its stamp; on an error the list in force stays.
    pub(super) fn reload_now(&self) -> Result<(), ListError> {
        self.reload(stamp_of(&self.path))
    }

    /// Reads the file (with no lock held), replaces the list under the lock, and announces
    /// it; `stamp` is the file's as read.
    fn reload(&self, stamp: Option<(SystemTime, u64)>) -> Result<(), ListError> {
        let loaded = RevokedList::load(&self.path);
        if let Ok(mut s) = self.stamp.lock() {
            *s = stamp;
        }
        let list = loaded?;
        let revoked = list.len();
        if let Ok(mut current) = self.list.write() {
            *current = Arc::new(list);
            let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            // After the list is in force: whoever is woken checks against it.
            self.changes.send_replace(generation);
        }
        info!(path = %self.path.display(), revoked, "certificate revocation list reloaded");
        Ok(())
    }

    /// Announces each list loaded from now on (the receiver has seen the current one).
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether the list in force names `leaf` (a list that cannot be read names everyone).
    pub(super) fn lists(&self, leaf: &CertificateDer<'_>) -> bool {
        match self.list.read() {
            Ok(list) => list.contains(&Fingerprint::of(leaf.as_ref())),
            Err(_) => true,
        }
    }

    /// The server side's check at each handshake: a listed client certificate is refused,
    /// counted in `refused` and logged.
    pub(super) fn handshake_check(self: &Arc<Self>, refused: Counter) -> RefusedCerts {
        let list = self.clone();
        RefusedCerts::new(move |cert| {
            let listed = list.lists(cert);
            if listed {
                refused.inc();
                warn!(
                    fingerprint = %Fingerprint::of(cert.as_ref()).to_hex(),
                    "refusing a TLS handshake: the client certificate is revoked"
                );
            }
            listed
        })
    }

    /// Whether the connection whose verdict is `verdict`, and whose peer presented `certs`
    /// (read only when the verdict is stale), is revoked.
    pub(super) fn is_revoked(
        &self,
        verdict: &Verdict,
        certs: impl FnOnce() -> Option<Arc<Vec<CertificateDer<'static>>>>,
    ) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        let known = verdict.known.load(Ordering::Acquire);
        if known >> 1 == generation {
            return known & 1 == 1;
        }
        let fingerprint = verdict.fingerprint.get_or_init(|| {
            certs().and_then(|c| c.first().map(|leaf| Fingerprint::of(leaf.as_ref())))
        });
        let list = match self.list.read() {
            Ok(l) => l.clone(),
            Err(_) => return true,
        };
        let revoked = fingerprint.is_some_and(|fp| list.contains(&fp));
        if revoked {
            // Once per connection and list: a security event, but not one line per request.
            warn!(
                fingerprint = %fingerprint.map(|f| f.to_hex()).unwrap_or_default(),
                "refusing the requests of a connection whose certificate is revoked"
            );
        }
        verdict
            .known
            .store(generation << 1 | u64::from(revoked), Ordering::Release);
        revoked
    }
}

fn stamp_of(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// One connection's standing: its certificate's fingerprint, once computed, and the last
/// verdict with the list generation it was reached under.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    /// `generation << 1 | revoked` of the last verdict; 0 before the first.
    known: AtomicU64,
    /// The certificate's fingerprint (`None`: it presented none).
    fingerprint: OnceLock<Option<Fingerprint>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revoked_certs::line;

    #[test]
    fn a_verdict_follows_the_list_and_fingerprints_once() {
        let dir = std::env::temp_dir().join(format!("cert-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("revoked.txt");
        let leaf = CertificateDer::from(b"leaf certificate".to_vec());
        let certs = Some(Arc::new(vec![leaf.clone()]));
        std::fs::write(&path, "# none yet\n").unwrap();
        let r = CertRevocations::load(path.clone()).unwrap();
        let v = Verdict::default();
        assert!(!r.is_revoked(&v, || certs.clone()));
        assert!(!r.lists(&leaf));
        // Known now: the certificates are not asked for again.
        assert!(!r.is_revoked(&v, || panic!("fingerprinted twice")));

        // Listed (the length changes, so the reload sees it even within one mtime tick).
        std::fs::write(&path, line(&Fingerprint::of(leaf.as_ref()), "leaked")).unwrap();
        r.reload_if_changed();
        assert!(r.is_revoked(&v, || panic!("fingerprinted twice")));
        assert!(r.lists(&leaf), "a new handshake sees the new list");

        // A malformed file keeps the list in force.
        std::fs::write(&path, "garbage\n").unwrap();
        r.reload_if_changed();
        assert!(r.is_revoked(&v, || None));

        // No certificate: nothing to revoke.
        assert!(!r.is_revoked(&Verdict::default(), || None));
        assert!(CertRevocations::load(dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
