//! `dist-bridge`: runs one node of the distributed capability service (see the library's
//! `node` module) from a TOML config file and flags, until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod cli;
use cli::Command;
use dist_bridge::config::{FileConfig, LogFormat, PeerEntry, TableSection, TlsSection, parse_peer};
use dist_bridge::node::{Node, NodeConfig};
use tracing::{error, info};

const AFTER_HELP: &str = "\
Flags override the config file. Logs go to stderr (RUST_LOG filters them, default `info`);
once serving, the bound address is printed to stdout as `listening on ADDR`.

Example config file (relative paths are relative to the file):

  node_id = 1
  listen = \"127.0.0.1:7401\"
  store_dir = \"store\"
  version_file = \"controller.version\"
  log_format = \"text\"            # or \"json\"
  metrics_listen = \"127.0.0.1:9401\"  # Prometheus metrics; omit for none
  max_io_bytes = 1048576         # per invocation
  max_object_bytes = 67108864    # writes grow objects to at most this
  maintenance_interval_ms = 1000

  [tls]                          # mutual TLS; or `insecure = true` (tests only)
  ca = \"certs/ca.crt\"
  cert = \"certs/node-1.crt\"      # must name node 1
  key = \"certs/node-1.key\"

  [guard_table]
  capacity = 8192
  batch_size = 64
  ranges = 16
  # max_version = 1000000        # omit for the full 64-bit version space

  [[peers]]                      # broadcast-baseline peers
  id = 2
  addr = \"127.0.0.1:7402\"

Certificates for a development cluster (a CA, then one per party):

  dist-bridge certs ca --dir certs
  dist-bridge certs issue --dir certs node:1 node:2 operator:ops client:app

An operator's view of a running node, and a check that its peers answer over mTLS:

  dist-bridge status --addr 127.0.0.1:7401 --node 1 --certs certs --as operator-ops
  dist-bridge probe-peers --addr 127.0.0.1:7401 --node 1 --certs certs

A token's life (`dist-bridge export --help` has the token file format and exit codes):

  dist-bridge export --addr 127.0.0.1:7401 --node 1 --certs certs \\
      --cap rw.cap --context CTX --context-key ctx.pem --out app.token
  dist-bridge read --addr 127.0.0.1:7401 --node 1 --certs certs --token app.token --len 6
  dist-bridge revoke --addr 127.0.0.1:7401 --node 1 --certs certs --token app.token

Example: dist-bridge --config node1.toml --listen 0.0.0.0:7401";

/// Runs a dist-bridge node: exports signed capabilities as guarded tokens, serves
/// invocations on its object store, revokes in one round trip.
#[derive(Debug, Parser)]
#[command(
    name = "dist-bridge",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The TOML config file.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The node id.
    #[arg(long, value_name = "N")]
    node_id: Option<u64>,
    /// Listen address (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Object store directory.
    #[arg(long, value_name = "DIR")]
    store_dir: Option<PathBuf>,
    /// Controller version file.
    #[arg(long, value_name = "FILE")]
    version_file: Option<PathBuf>,
    /// Guard table entries.
    #[arg(long, value_name = "N")]
    guard_capacity: Option<u32>,
    /// Freed guard entries per batch.
    #[arg(long, value_name = "N")]
    batch_size: Option<u32>,
    /// Largest guard version.
    #[arg(long, value_name = "N")]
    max_version: Option<u64>,
    /// Guard version ranges.
    #[arg(long, value_name = "N")]
    ranges: Option<u32>,
    /// Guards derivable from one exported guard (all generations together)
    #[arg(long, value_name = "N")]
    max_derived: Option<u32>,
    /// A broadcast-baseline peer (repeatable; replaces the file's peers).
    #[arg(long = "peer", value_name = "ID=ADDR", value_parser = parse_peer)]
    peers: Vec<PeerEntry>,
    /// The cluster CA's certificate (PEM), for mutual TLS (with --tls-cert, --tls-key).
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM); it must name this node id.
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    tls_key: Option<PathBuf>,
    /// The revocation file: certificates whose handshakes and requests are refused (one SHA-256
    /// fingerprint per line; `dist-bridge certs revoke` writes it). Read again when it
    /// changes.
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    tls_revoked: Option<PathBuf>,
    /// Serve plaintext without any authentication (tests only; logged loudly).
    #[arg(long, conflicts_with = "tls_ca")]
    insecure: bool,
    /// Serve Prometheus metrics here (plain HTTP, GET /metrics).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Most bytes one invocation may move.
    #[arg(long, value_name = "N")]
    max_io_bytes: Option<u64>,
    /// Log format.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Check the configuration and print the effective one as a TOML config file (every
    /// default written out, paths absolute), then exit.
    #[arg(long)]
    check_config: bool,
}

impl Args {
    fn flags(&self) -> FileConfig {
        let table = TableSection {
            capacity: self.guard_capacity,
            batch_size: self.batch_size,
            max_version: self.max_version,
            ranges: self.ranges,
            max_derived: self.max_derived,
        };
        FileConfig {
            node_id: self.node_id,
            listen: self.listen,
            store_dir: self.store_dir.clone(),
            version_file: self.version_file.clone(),
            insecure: self.insecure.then_some(true),
            tls: match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
                (Some(ca), Some(cert), Some(key)) => Some(TlsSection {
                    ca: ca.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                    revoked: self.tls_revoked.clone(),
                }),
                _ => None,
            },
            metrics_listen: self.metrics_listen,
            max_io_bytes: self.max_io_bytes,
            log_format: self.log_format,
            guard_table: (table != TableSection::default()).then_some(table),
            peers: self.peers.clone(),
            ..FileConfig::default()
        }
    }

    fn resolve(&self) -> Result<(NodeConfig, LogFormat), String> {
        let file = match &self.config {
            Some(path) => FileConfig::load(path).map_err(|e| e.to_string())?,
            None => FileConfig::default(),
        };
        file.overlay(self.flags())
            .resolve()
            .map_err(|e| e.to_string())
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
                    _ = term.recv() => info!("SIGTERM received"),
                }
            }
            Err(e) => {
                error!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
                info!("SIGINT received");
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        info!("interrupt received");
    }
}

/// Why the node stopped with an error.
enum RunError {
    /// It never started: one line on stderr, nothing else.
    Start(String),
    /// It failed while serving: logged, and on stderr.
    Serve(String),
}

async fn run(config: NodeConfig) -> Result<(), RunError> {
    let node = Node::start(config)
        .await
        .map_err(|e| RunError::Start(e.to_string()))?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", node.addr());
        let _ = out.flush();
    }
    let handle = node.shutdown_handle();
    tokio::spawn(async move {
        stop_signal().await;
        info!("shutting down");
        handle.shutdown();
    });
    node.wait()
        .await
        .map_err(|e| RunError::Serve(e.to_string()))
}

/// The runtime `builder` makes, or the exit code after saying why there is none.
fn runtime(mut builder: tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("dist-bridge: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    match args.command.take() {
        Some(Command::Certs(cmd)) => {
            return match cli::certs::run(cmd) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dist-bridge certs: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Ops(cmd)) => {
            let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
                Ok(r) => r,
                Err(code) => return code,
            };
            return match runtime.block_on(cli::ops::run(cmd)) {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("dist-bridge: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Holder(cmd)) => {
            let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
                Ok(r) => r,
                Err(code) => return code,
            };
            return match runtime.block_on(cli::holder::run(cmd)) {
                Ok(out) => {
                    let mut stdout = std::io::stdout().lock();
                    match stdout.write_all(&out).and_then(|()| stdout.flush()) {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => {
                            eprintln!("dist-bridge: cannot write stdout: {e}");
                            ExitCode::FAILURE
                        }
                    }
                }
                Err(cli::holder::Failure::Local(e)) => {
                    eprintln!("dist-bridge: {e}");
                    ExitCode::from(2)
                }
                Err(cli::holder::Failure::Remote(e)) => {
                    eprintln!("dist-bridge: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        None => {}
    }
    let (config, log_format) = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dist-bridge: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = config.validate() {
        eprintln!("dist-bridge: {e}");
        return ExitCode::from(2);
    }
    if args.check_config {
        // The effective configuration, defaults included, as a file an operator can reuse.
        return match FileConfig::effective(&config, log_format).to_toml() {
            Ok(text) => {
                println!("# dist-bridge: the effective configuration (every default written out)");
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dist-bridge: {e}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging(log_format);
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Start(e)) => {
            eprintln!("dist-bridge: {e}");
            ExitCode::FAILURE
        }
        Err(RunError::Serve(e)) => {
            error!(error = %e, "node failed");
            eprintln!("dist-bridge: {e}");
            ExitCode::FAILURE
        }
    }
}
