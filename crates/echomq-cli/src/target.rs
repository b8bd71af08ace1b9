//! Where a command connects, from the global flags: one value the commands
//! take, so that they need not know the argument parser.

use clap::parser::ValueSource;
use clap::ArgMatches;

/// The server and key prefix a command works on.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// `--url` (or `REDIS_URL`).
    pub(crate) url: String,
    /// `--prefix`.
    pub(crate) prefix: String,
    /// The connection settings of every global flag (TLS, durability).
    pub(crate) config: echomq::ConnectionConfig,
    /// Where `--url` and `--prefix` came from (`echomq work` puts its own
    /// layers between them and their defaults).
    pub(crate) sources: GlobalSources,
}

/// Where the global `--url`/`--prefix` values came from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GlobalSources {
    /// `--url` was on the command line.
    pub(crate) url_flag: bool,
    /// `--url` came from `REDIS_URL`.
    pub(crate) url_env: bool,
    /// `--prefix` was on the command line.
    pub(crate) prefix_flag: bool,
}

impl GlobalSources {
    pub(crate) fn of(m: &ArgMatches) -> Self {
        let src = |id: &str| m.value_source(id);
        Self {
            url_flag: src("url") == Some(ValueSource::CommandLine),
            url_env: src("url") == Some(ValueSource::EnvVariable),
            prefix_flag: src("prefix") == Some(ValueSource::CommandLine),
        }
    }
}
