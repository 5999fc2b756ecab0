//! The `dist-bridge` binary's configuration: a TOML file ([`FileConfig`]), overridable by
//! flags, resolved into a [`NodeConfig`](crate::node::NodeConfig).
//!
//! ```toml
//! node_id = 1
//! listen = "127.0.0.1:7401"              # default 127.0.0.1:7400
//! store_dir = "store"                    # relative paths: relative to this file
//! version_file = "controller.version"
//! log_format = "text"                    # or "json"
//! metrics_listen = "127.0.0.1:9401"      # Prometheus metrics (plain HTTP); omit for none
//! handshake_timeout_ms = 10000           # a TLS handshake must finish within this
//! export_skew_ms = 60000                 # export proofs within this of the node's clock
//! export_nonces = 65536                  # export nonces remembered within that window
//! export_nonces_per_key = 4096           # of which one context key may hold at most
//! max_io_bytes = 1048576                 # per invocation
//! max_object_bytes = 67108864            # writes grow objects to at most this
//! read_cache_bytes = 1048576             # small objects' bytes kept per store snapshot; 0: none
//! read_cache_object_bytes = 4096         # larger objects are never kept
//! maintenance_interval_ms = 1000
//! peer_timeout_ms = 5000
//! shutdown_deadline_ms = 10000           # then open connections are cut
//! request_timeout_ms = 30000             # reading the request included
//! max_streams_per_connection = 32
//! keepalive_interval_ms = 30000          # ping idle connections; drop dead ones
//! keepalive_timeout_ms = 10000
//! max_message_bytes = 4194304            # larger requests are refused unread
//! max_pending_request_bytes = 134217728  # held for messages still arriving, all connections
//! max_connections = 256                  # further connections are closed at once
//! max_connection_age_ms = 3600000        # then GOAWAY (clients reconnect)
//! max_connection_idle_ms = 300000        # no request in flight this long: GOAWAY
//!
//! [tls]                                  # mutual TLS (or `insecure = true`, tests only)
//! ca = "certs/ca.crt"                    # the cluster CA: the only trust anchor
//! cert = "certs/node-1.crt"              # must name node 1 (1.node.dist-bridge)
//! key = "certs/node-1.key"
//! revoked = "certs/revoked.txt"          # optional: certificates no longer accepted
//!
//! [guard_table]
//! capacity = 8192
//! batch_size = 64
//! ranges = 16
//! max_derived = 64                       # guards derivable from one exported guard
//! # max_version = 1000000                # omit for the full 64-bit version space
//!
//! [difc]                                 # information flow control (docs/DIFC.md §5.9)
//! # tag id -> the nodes trusted to keep its data labelled; a tag not listed trusts no node,
//! # so its secret data is read, and its high-integrity objects written, by no remote caller
//! trusted_nodes = { "58b20638bfa5eb44bb0d8e2ed01289f9" = [2, 3] }
//!
//! [[peers]]                              # broadcast-baseline peers
//! id = 2
//! addr = "127.0.0.1:7402"
//! ```
//!
//! Unknown keys are errors, so a misspelt key cannot silently fall back to a default.

mod effective;
mod resolve;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The default listen address of the binary.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7400,
));

/// How logs are written (to stderr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `[guard_table]` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TableSection {
    /// Entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Freed entries per batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Largest guard version (TOML integers stop at 2^63 - 1: omit for the full space).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_version: Option<u64>,
    /// Version ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges: Option<u32>,
    /// Guards derivable from one exported guard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_derived: Option<u32>,
}

/// The `[tls]` section: the node's certificate, key, and the cluster CA (PEM files).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The node's certificate.
    pub cert: PathBuf,
    /// The node's private key.
    pub key: PathBuf,
    /// The revocation file: certificates whose handshakes and requests are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked: Option<PathBuf>,
}

/// The `[difc]` section: information flow control across nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DifcSection {
    /// Tag id (hex) → the nodes trusted with its data.
    #[serde(default)]
    pub trusted_nodes: std::collections::BTreeMap<String, Vec<u64>>,
}

/// A `[[peers]]` entry (or a `--peer ID=ADDR` flag).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// The peer's node id.
    pub id: u64,
    /// Its address.
    pub addr: String,
}

/// The configuration file; every field optional (flags may supply it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The node id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<u64>,
    /// The listen address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// The object store directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_dir: Option<PathBuf>,
    /// The controller version file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_file: Option<PathBuf>,
    /// Plaintext without authentication (tests only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// Mutual TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    /// TLS handshake limit, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake_timeout_ms: Option<u64>,
    /// Export proof time window, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_skew_ms: Option<u64>,
    /// Export nonces remembered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_nonces: Option<usize>,
    /// Export nonces one context key may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_nonces_per_key: Option<usize>,
    /// Where to serve metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// Most bytes per invocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_io_bytes: Option<u64>,
    /// Largest size a write may grow an object to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_object_bytes: Option<u64>,
    /// Bytes of small objects kept in memory (0: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_cache_bytes: Option<u64>,
    /// Largest object kept in that cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_cache_object_bytes: Option<u64>,
    /// Maintenance period, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_interval_ms: Option<u64>,
    /// Time limit of a request to a peer, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_timeout_ms: Option<u64>,
    /// Upgrade notices kept for `PollUpgrades`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice_buffer: Option<usize>,
    /// How long a shutdown waits for open connections before cutting them, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_deadline_ms: Option<u64>,
    /// The longest a request may take, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// Concurrent requests per connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_streams_per_connection: Option<u32>,
    /// HTTP/2 keepalive ping interval, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_interval_ms: Option<u64>,
    /// HTTP/2 keepalive timeout, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_timeout_ms: Option<u64>,
    /// The largest message, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<usize>,
    /// Bytes held for request messages still arriving, across the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_request_bytes: Option<usize>,
    /// Connections served at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// The longest a connection lives, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connection_age_ms: Option<u64>,
    /// How long a connection may have no request in flight, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connection_idle_ms: Option<u64>,
    /// The log format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// The guard table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_table: Option<TableSection>,
    /// Information flow control across nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difc: Option<DifcSection>,
    /// Broadcast-baseline peers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerEntry>,
}

/// Why the configuration is unusable. Its message is one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigFileError(pub String);

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigFileError {}

/// Line and column (1-based) of byte `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl FileConfig {
    /// Parses the file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigFileError> {
        toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', " ");
            ConfigFileError(match e.span() {
                Some(span) => {
                    let (line, col) = line_col(text, span.start);
                    format!("{origin}:{line}:{col}: {message}")
                }
                None => format!("{origin}: {message}"),
            })
        })
    }

    /// Reads and parses a file; relative paths in it are made relative to its directory.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigFileError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigFileError(format!("cannot read config file {origin}: {e}")))?;
        let mut config = Self::parse(&text, &origin)?;
        let base = path.parent().unwrap_or(Path::new(""));
        let tls = config.tls.as_mut().map(|t| {
            [
                Some(&mut t.ca),
                Some(&mut t.cert),
                Some(&mut t.key),
                t.revoked.as_mut(),
            ]
        });
        for p in [&mut config.store_dir, &mut config.version_file]
            .into_iter()
            .flatten()
            .chain(tls.into_iter().flatten().flatten())
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(config)
    }

    /// `self` with every value `over` sets replacing it (flags over the file). Peers given in
    /// `over` replace the file's list.
    pub fn overlay(self, over: FileConfig) -> FileConfig {
        let table = match (self.guard_table, over.guard_table) {
            (Some(a), Some(b)) => Some(TableSection {
                capacity: b.capacity.or(a.capacity),
                batch_size: b.batch_size.or(a.batch_size),
                max_version: b.max_version.or(a.max_version),
                ranges: b.ranges.or(a.ranges),
                max_derived: b.max_derived.or(a.max_derived),
            }),
            (a, b) => b.or(a),
        };
        FileConfig {
            node_id: over.node_id.or(self.node_id),
            listen: over.listen.or(self.listen),
            store_dir: over.store_dir.or(self.store_dir),
            version_file: over.version_file.or(self.version_file),
            insecure: over.insecure.or(self.insecure),
            tls: over.tls.or(self.tls),
            handshake_timeout_ms: over.handshake_timeout_ms.or(self.handshake_timeout_ms),
            export_skew_ms: over.export_skew_ms.or(self.export_skew_ms),
            export_nonces: over.export_nonces.or(self.export_nonces),
            export_nonces_per_key: over.export_nonces_per_key.or(self.export_nonces_per_key),
            metrics_listen: over.metrics_listen.or(self.metrics_listen),
            max_io_bytes: over.max_io_bytes.or(self.max_io_bytes),
            max_object_bytes: over.max_object_bytes.or(self.max_object_bytes),
            read_cache_bytes: over.read_cache_bytes.or(self.read_cache_bytes),
            read_cache_object_bytes: over
                .read_cache_object_bytes
                .or(self.read_cache_object_bytes),
            maintenance_interval_ms: over
                .maintenance_interval_ms
                .or(self.maintenance_interval_ms),
            peer_timeout_ms: over.peer_timeout_ms.or(self.peer_timeout_ms),
            notice_buffer: over.notice_buffer.or(self.notice_buffer),
            shutdown_deadline_ms: over.shutdown_deadline_ms.or(self.shutdown_deadline_ms),
            request_timeout_ms: over.request_timeout_ms.or(self.request_timeout_ms),
            max_streams_per_connection: over
                .max_streams_per_connection
                .or(self.max_streams_per_connection),
            keepalive_interval_ms: over.keepalive_interval_ms.or(self.keepalive_interval_ms),
            keepalive_timeout_ms: over.keepalive_timeout_ms.or(self.keepalive_timeout_ms),
            max_message_bytes: over.max_message_bytes.or(self.max_message_bytes),
            max_pending_request_bytes: over
                .max_pending_request_bytes
                .or(self.max_pending_request_bytes),
            max_connections: over.max_connections.or(self.max_connections),
            max_connection_age_ms: over.max_connection_age_ms.or(self.max_connection_age_ms),
            max_connection_idle_ms: over.max_connection_idle_ms.or(self.max_connection_idle_ms),
            log_format: over.log_format.or(self.log_format),
            guard_table: table,
            difc: over.difc.or(self.difc),
            peers: if over.peers.is_empty() {
                self.peers
            } else {
                over.peers
            },
        }
    }
}

/// Parses a `--peer ID=ADDR` flag.
pub fn parse_peer(s: &str) -> Result<PeerEntry, String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("expected ID=ADDR, got {s:?}"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|e| format!("bad peer id {id:?}: {e}"))?;
    let addr = addr.trim();
    if addr.is_empty() {
        return Err("empty peer address".into());
    }
    Ok(PeerEntry {
        id,
        addr: addr.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{TlsFiles, Transport};

    #[test]
    fn the_documented_example_parses() {
        let text = "node_id = 1\nlisten = \"127.0.0.1:7401\"\nstore_dir = \"s\"\n\
                    version_file = \"v\"\nlog_format = \"json\"\nshutdown_deadline_ms = 2500\n\
                    metrics_listen = \"127.0.0.1:9401\"\n\
                    max_connection_idle_ms = 1500\n\
                    max_pending_request_bytes = 8388608\n\
                    read_cache_bytes = 0\nread_cache_object_bytes = 512\n\
                    [tls]\nca = \"c/ca.crt\"\ncert = \"c/node-1.crt\"\nkey = \"c/node-1.key\"\n\
                    [guard_table]\ncapacity = 16\n\
                    [[peers]]\nid = 2\naddr = \"127.0.0.1:7402\"\n";
        let (c, log) = FileConfig::parse(text, "t").unwrap().resolve().unwrap();
        assert_eq!(c.node_id, 1);
        assert_eq!(c.shutdown_deadline, std::time::Duration::from_millis(2500));
        assert_eq!(
            c.max_connection_idle,
            std::time::Duration::from_millis(1500)
        );
        assert_eq!(c.listen.port(), 7401);
        assert_eq!(c.max_pending_request_bytes, 8 << 20);
        assert_eq!((c.read_cache_bytes, c.read_cache_object_bytes), (0, 512));
        assert_eq!(c.guard_table.capacity, 16);
        assert_eq!(c.guard_table.batch_size, 64);
        assert_eq!(c.peers.len(), 1);
        assert_eq!(log, LogFormat::Json);
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9401));
        assert_eq!(
            c.transport,
            Some(Transport::Tls(TlsFiles {
                ca: "c/ca.crt".into(),
                cert: "c/node-1.crt".into(),
                key: "c/node-1.key".into(),
            }))
        );
    }

    /// `--check-config` prints [`FileConfig::effective`]: read back, it configures the same
    /// node, for mutual TLS and for the test transport alike, with every default written out.
    #[test]
    fn the_effective_configuration_reads_back_as_itself() {
        let tls = "node_id = 3\nstore_dir = \"/s\"\nversion_file = \"/v\"\n\
                   max_connection_idle_ms = 1500\nmetrics_listen = \"127.0.0.1:9401\"\n\
                   [tls]\nca = \"/c/ca.crt\"\ncert = \"/c/n.crt\"\nkey = \"/c/n.key\"\n\
                   revoked = \"/c/revoked.txt\"\n\
                   [guard_table]\nmax_version = 1000\n[[peers]]\nid = 2\naddr = \"h:1\"\n";
        let insecure = "node_id = 1\nstore_dir = \"/s\"\nversion_file = \"/v\"\n\
                        insecure = true\nlog_format = \"json\"\n";
        for text in [tls, insecure] {
            let (c, log) = FileConfig::parse(text, "t").unwrap().resolve().unwrap();
            let printed = FileConfig::effective(&c, log).to_toml().unwrap();
            let again = FileConfig::parse(&printed, "printed").unwrap();
            let (c2, log2) = again.clone().resolve().unwrap();
            assert_eq!((c2, log2), (c.clone(), log), "{printed}");
            // Every setting is written out, not only those the file set.
            for key in [
                "request_timeout_ms",
                "max_pending_request_bytes",
                "read_cache_bytes",
                "read_cache_object_bytes",
                "[guard_table]",
            ] {
                assert!(printed.contains(key), "{key} missing:\n{printed}");
            }
            // And printing it again gives the same text.
            assert_eq!(
                FileConfig::effective(&c, log).to_toml().unwrap(),
                printed,
                "not stable"
            );
        }
        // Settings past TOML's signed 64-bit integers (a version bound, a node id, given by
        // a flag or written in a file) are printed as written and read back as themselves.
        let (mut c, log) = FileConfig::parse(insecure, "t").unwrap().resolve().unwrap();
        assert_eq!(c.guard_table.max_version, u64::MAX);
        for (max_version, node_id) in [
            (u64::MAX, 1),
            (u64::MAX - 1, u64::MAX),
            (1 << 63, 1 << 63),
            (i64::MAX as u64, 7),
        ] {
            c.guard_table.max_version = max_version;
            c.node_id = node_id;
            let printed = FileConfig::effective(&c, log).to_toml().unwrap();
            assert!(
                printed.contains(&format!("max_version = {max_version}")),
                "{printed}"
            );
            let again = FileConfig::parse(&printed, "printed").unwrap();
            assert_eq!(again.resolve().unwrap(), (c.clone(), log), "{printed}");
        }
    }

    /// Relative paths come out absolute, so the printed file means the same files wherever
    /// it is saved.
    #[test]
    fn the_effective_configuration_names_absolute_paths() {
        let text = "node_id = 1\nstore_dir = \"s\"\nversion_file = \"v\"\ninsecure = true\n";
        let (c, log) = FileConfig::parse(text, "t").unwrap().resolve().unwrap();
        let f = FileConfig::effective(&c, log);
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(f.store_dir, Some(cwd.join("s")));
        assert_eq!(f.version_file, Some(cwd.join("v")));
    }

    #[test]
    fn the_transport_is_chosen_explicitly_and_once() {
        let base = "node_id = 1\nstore_dir = \"s\"\nversion_file = \"v\"\n";
        let e = FileConfig::parse(base, "t").unwrap().resolve().unwrap_err();
        assert!(e.0.contains("dist-bridge certs"), "{e}");
        let both = format!("{base}insecure = true\n[tls]\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\n");
        let e = FileConfig::parse(&both, "t")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(e.0.contains("choose one"), "{e}");
        let insecure = format!("{base}insecure = true\n");
        let (c, _) = FileConfig::parse(&insecure, "t")
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.transport, Some(Transport::Insecure));
        // A [tls] section missing a file is a parse error naming it.
        let half = format!("{base}[tls]\nca = \"a\"\n");
        let e = FileConfig::parse(&half, "t").unwrap_err();
        assert!(e.0.contains("cert"), "{e}");
    }

    #[test]
    fn errors_are_one_line_and_point_at_the_problem() {
        let e = FileConfig::parse("node_id = 1\nnode_idd = 2\n", "c.toml").unwrap_err();
        assert!(!e.0.contains('\n'), "{e}");
        assert!(e.0.starts_with("c.toml:2:"), "{e}");
        let e = FileConfig::parse("node_id = \"x\"\n", "c.toml").unwrap_err();
        assert!(!e.0.contains('\n'), "{e}");
        let e = FileConfig::default().resolve().unwrap_err();
        assert!(e.0.contains("node_id"), "{e}");
    }

    #[test]
    fn flags_override_the_file() {
        let file = FileConfig::parse(
            "node_id = 1\nstore_dir = \"a\"\n[guard_table]\nranges = 4\nmax_derived = 3\n",
            "f",
        )
        .unwrap();
        let flags = FileConfig {
            node_id: Some(9),
            insecure: Some(true),
            version_file: Some("v".into()),
            guard_table: Some(TableSection {
                capacity: Some(8),
                ..TableSection::default()
            }),
            ..FileConfig::default()
        };
        let (c, _) = file.overlay(flags).resolve().unwrap();
        assert_eq!(c.node_id, 9);
        assert_eq!(c.store_dir, PathBuf::from("a"));
        assert_eq!(c.guard_table.ranges, 4);
        assert_eq!(c.guard_table.max_derived, 3);
        assert_eq!(c.guard_table.capacity, 8);
        assert_eq!(parse_peer("3=127.0.0.1:1").unwrap().id, 3);
        assert!(parse_peer("x").is_err());
    }
}
