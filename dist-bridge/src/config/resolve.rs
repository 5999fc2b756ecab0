//! Resolving a [`FileConfig`] into the [`NodeConfig`] a node runs with: defaults filled in,
//! required values and limits checked.

use std::time::Duration;

use super::{ConfigFileError, DEFAULT_LISTEN, FileConfig, LogFormat};
use crate::node::{NodeConfig, Peer};
use crate::tls::{TlsFiles, Transport};

impl FileConfig {
    /// The node configuration and the log format; missing required values are errors.
    pub fn resolve(self) -> Result<(NodeConfig, LogFormat), ConfigFileError> {
        let missing = |what: &str, flag: &str| {
            ConfigFileError(format!(
                "no {what}: set `{what}` in the config file or pass --{flag}"
            ))
        };
        let node_id = self.node_id.ok_or_else(|| missing("node_id", "node-id"))?;
        let store_dir = self
            .store_dir
            .ok_or_else(|| missing("store_dir", "store-dir"))?;
        let version_file = self
            .version_file
            .ok_or_else(|| missing("version_file", "version-file"))?;
        let mut config = NodeConfig::new(node_id, store_dir, version_file);
        config.listen = self.listen.unwrap_or(DEFAULT_LISTEN);
        if let Some(t) = self.guard_table {
            let g = &mut config.guard_table;
            g.capacity = t.capacity.unwrap_or(g.capacity);
            g.batch_size = t.batch_size.unwrap_or(g.batch_size);
            g.max_version = t.max_version.unwrap_or(g.max_version);
            g.ranges = t.ranges.unwrap_or(g.ranges);
            g.max_derived = t.max_derived.unwrap_or(g.max_derived);
        }
        config.transport = Some(match (self.tls, self.insecure.unwrap_or(false)) {
            (Some(_), true) => {
                return Err(ConfigFileError(
                    "both [tls] and insecure = true: choose one".into(),
                ));
            }
            (Some(t), false) => {
                config.revoked_certs = t.revoked;
                Transport::Tls(TlsFiles {
                    ca: t.ca,
                    cert: t.cert,
                    key: t.key,
                })
            }
            (None, true) => Transport::Insecure,
            (None, false) => {
                return Err(ConfigFileError(
                    "no [tls] section (ca, cert, key): make them with `dist-bridge certs`, \
                     or set insecure = true for a test without authentication"
                        .into(),
                ));
            }
        });
        if let Some(ms) = self.handshake_timeout_ms {
            config.handshake_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = self.export_skew_ms {
            config.export_skew = Duration::from_millis(ms);
        }
        if let Some(n) = self.export_nonces {
            config.export_nonces = n;
        }
        if let Some(n) = self.export_nonces_per_key {
            config.export_nonces_per_key = n;
        }
        config.metrics_listen = self.metrics_listen;
        if let Some(v) = self.max_io_bytes {
            config.max_io_bytes = v;
        }
        if let Some(v) = self.max_object_bytes {
            config.max_object_bytes = v;
        }
        if let Some(v) = self.read_cache_bytes {
            config.read_cache_bytes = v;
        }
        if let Some(v) = self.read_cache_object_bytes {
            config.read_cache_object_bytes = v;
        }
        if let Some(ms) = self.maintenance_interval_ms {
            if ms == 0 {
                return Err(ConfigFileError(
                    "maintenance_interval_ms must be at least 1".into(),
                ));
            }
            config.maintenance_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = self.peer_timeout_ms {
            if ms == 0 {
                return Err(ConfigFileError("peer_timeout_ms must be at least 1".into()));
            }
            config.peer_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.notice_buffer {
            config.notice_buffer = n;
        }
        if let Some(ms) = self.shutdown_deadline_ms {
            config.shutdown_deadline = Duration::from_millis(ms);
        }
        if let Some(ms) = self.request_timeout_ms {
            config.request_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.max_streams_per_connection {
            config.max_streams_per_connection = n;
        }
        if let Some(ms) = self.keepalive_interval_ms {
            config.keepalive_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = self.keepalive_timeout_ms {
            config.keepalive_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.max_message_bytes {
            config.max_message_bytes = n;
        }
        if let Some(n) = self.max_pending_request_bytes {
            config.max_pending_request_bytes = n;
        }
        if let Some(n) = self.max_connections {
            config.max_connections = n;
        }
        if let Some(ms) = self.max_connection_age_ms {
            config.max_connection_age = Duration::from_millis(ms);
        }
        if let Some(ms) = self.max_connection_idle_ms {
            config.max_connection_idle = Duration::from_millis(ms);
        }
        if let Some(d) = self.difc {
            for (tag, nodes) in d.trusted_nodes {
                let id = tag.parse::<twizzler_capsec::ObjID>().map_err(|e| {
                    ConfigFileError(format!(
                        "[difc] trusted_nodes: {tag:?} is not a tag id ({e})"
                    ))
                })?;
                config
                    .difc
                    .trusted_nodes
                    .entry(id)
                    .or_default()
                    .extend(nodes);
            }
        }
        config.peers = self
            .peers
            .into_iter()
            .map(|p| Peer {
                id: p.id,
                addr: p.addr,
            })
            .collect();
        Ok((config, self.log_format.unwrap_or_default()))
    }
}
