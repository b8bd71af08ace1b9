//! The command line: the global flags, and the subcommand.

use std::path::PathBuf;

use clap::{ArgMatches, Parser};

use crate::commands::Command;
use crate::target::{GlobalSources, Target};

/// Inspect, feed and operate EchoMQ queues (BullMQ-compatible, prefix `emq`).
#[derive(Debug, Parser)]
#[command(name = "echomq", version, about)]
pub(crate) struct Cli {
    /// Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Key prefix of the queues.
    #[arg(long, default_value = "emq", global = true)]
    prefix: String,
    /// PEM file of the CA that signs the server's TLS certificate (with a
    /// rediss:// URL). Default: the system's root certificates.
    #[arg(long, env = "ECHOMQ_TLS_CA_FILE", global = true, value_name = "PEM")]
    tls_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate, for servers that require mutual TLS.
    #[arg(
        long,
        env = "ECHOMQ_TLS_CERT_FILE",
        global = true,
        value_name = "PEM",
        requires = "tls_key_file"
    )]
    tls_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(
        long,
        env = "ECHOMQ_TLS_KEY_FILE",
        global = true,
        value_name = "PEM",
        requires = "tls_cert_file"
    )]
    tls_key_file: Option<PathBuf>,
    /// DANGEROUS: accept any server certificate. The traffic is encrypted but
    /// the server is not authenticated, so anyone on the path can read every
    /// password and job. Only for a throwaway test server.
    #[arg(long, env = "ECHOMQ_TLS_INSECURE", global = true)]
    pub(crate) tls_insecure: bool,
    /// Durability mode: after every write, wait (up to 500 ms) until this many
    /// replicas have it, else report an error, so an acknowledged write
    /// survives the loss of its primary. Default: off.
    #[arg(long, env = "ECHOMQ_WAIT_REPLICAS", global = true, value_name = "N")]
    wait_replicas: Option<u32>,
    /// How long a command waits for Redis's reply, ms. A write whose reply
    /// does not come in time has an unknown outcome (exit code 5). Default
    /// 10 000.
    #[arg(long, env = "ECHOMQ_COMMAND_TIMEOUT", global = true, value_name = "MS")]
    command_timeout: Option<u64>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Where the command connects; `m` are the matches this was parsed from.
    pub(crate) fn target(&self, m: &ArgMatches) -> Target {
        Target {
            url: self.url.clone(),
            prefix: self.prefix.clone(),
            config: self.connection_config(),
            sources: GlobalSources::of(m),
        }
    }

    /// The connection settings of the global flags.
    fn connection_config(&self) -> echomq::ConnectionConfig {
        let mut c = echomq::ConnectionConfig::with_url(&self.url);
        c.prefix = self.prefix.clone();
        c.tls = echomq::connection::TlsOptions {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
            insecure: self.tls_insecure,
        };
        c.durability = self
            .wait_replicas
            .map(|replicas| echomq::connection::Durability {
                replicas,
                ..Default::default()
            });
        if let Some(ms) = self.command_timeout {
            c.command_timeout = std::time::Duration::from_millis(ms.max(1));
        }
        c
    }
}
