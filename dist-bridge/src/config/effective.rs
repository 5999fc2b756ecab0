//! The effective configuration: the [`FileConfig`] that configures exactly a given
//! [`NodeConfig`], written out as TOML (`dist-bridge --check-config`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    ConfigFileError, DifcSection, FileConfig, LogFormat, PeerEntry, TableSection, TlsSection,
};
use crate::node::NodeConfig;
use crate::tls::Transport;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `p` made absolute against the current directory (without touching the file system), so
/// that the printed configuration means the same files wherever it is saved: a file's
/// relative paths are read relative to the file.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl FileConfig {
    /// The file that configures exactly `config` and `log_format`: every setting written
    /// out, defaults included, paths absolute. Read back and resolved, it gives the same
    /// configuration; `dist-bridge --check-config` prints it.
    pub fn effective(config: &NodeConfig, log_format: LogFormat) -> FileConfig {
        let g = &config.guard_table;
        let (insecure, tls) = match &config.transport {
            Some(Transport::Tls(files)) => (
                None,
                Some(TlsSection {
                    ca: absolute(&files.ca),
                    cert: absolute(&files.cert),
                    key: absolute(&files.key),
                    revoked: config.revoked_certs.as_deref().map(absolute),
                }),
            ),
            Some(Transport::Insecure) => (Some(true), None),
            None => (None, None),
        };
        FileConfig {
            node_id: Some(config.node_id),
            listen: Some(config.listen),
            store_dir: Some(absolute(&config.store_dir)),
            version_file: Some(absolute(&config.version_file)),
            insecure,
            tls,
            handshake_timeout_ms: Some(millis(config.handshake_timeout)),
            export_skew_ms: Some(millis(config.export_skew)),
            export_nonces: Some(config.export_nonces),
            export_nonces_per_key: Some(config.export_nonces_per_key),
            metrics_listen: config.metrics_listen,
            max_io_bytes: Some(config.max_io_bytes),
            max_object_bytes: Some(config.max_object_bytes),
            read_cache_bytes: Some(config.read_cache_bytes),
            read_cache_object_bytes: Some(config.read_cache_object_bytes),
            maintenance_interval_ms: Some(millis(config.maintenance_interval)),
            peer_timeout_ms: Some(millis(config.peer_timeout)),
            notice_buffer: Some(config.notice_buffer),
            shutdown_deadline_ms: Some(millis(config.shutdown_deadline)),
            request_timeout_ms: Some(millis(config.request_timeout)),
            max_streams_per_connection: Some(config.max_streams_per_connection),
            keepalive_interval_ms: Some(millis(config.keepalive_interval)),
            keepalive_timeout_ms: Some(millis(config.keepalive_timeout)),
            max_message_bytes: Some(config.max_message_bytes),
            max_pending_request_bytes: Some(config.max_pending_request_bytes),
            max_connections: Some(config.max_connections),
            max_connection_age_ms: Some(millis(config.max_connection_age)),
            max_connection_idle_ms: Some(millis(config.max_connection_idle)),
            log_format: Some(log_format),
            guard_table: Some(TableSection {
                capacity: Some(g.capacity),
                batch_size: Some(g.batch_size),
                // Past 2^63 - 1 as well: the `toml` crate writes and reads the whole u64
                // range (as it does for `node_id`), so the printed file configures this bound.
                max_version: Some(g.max_version),
                ranges: Some(g.ranges),
                max_derived: Some(g.max_derived),
            }),
            difc: (!config.difc.trusted_nodes.is_empty()).then(|| DifcSection {
                trusted_nodes: config
                    .difc
                    .trusted_nodes
                    .iter()
                    .map(|(t, n)| (t.to_string(), n.iter().copied().collect()))
                    .collect(),
            }),
            peers: config
                .peers
                .iter()
                .map(|p| PeerEntry {
                    id: p.id,
                    addr: p.addr.clone(),
                })
                .collect(),
        }
    }

    /// This configuration as TOML, in the file's own keys, that [`FileConfig::parse`] reads
    /// back.
    pub fn to_toml(&self) -> Result<String, ConfigFileError> {
        toml::to_string(self)
            .map_err(|e| ConfigFileError(format!("cannot write the configuration as TOML: {e}")))
    }
}
