//! Where a command connects, from the global flags: one value the commands
//! take, so that they need not know the argument parser.

/// The server and key prefix a command works on.
#[derive(Clone, Debug)]
pub struct Target {
    /// `--url` (or `REDIS_URL`).
    pub url: String,
    /// `--prefix`.
    pub prefix: String,
    /// The connection settings of every global flag (TLS, durability).
    pub config: echomq::ConnectionConfig,
}
