//! Settings of the dashboard, and the one rule checked before it binds: a
//! dashboard reachable from other hosts needs an auth token.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use subtle::ConstantTimeEq;

/// Shortest token accepted: a guessable token on a network port is no lock.
pub const MIN_TOKEN_LEN: usize = 16;

/// The secret of `--auth-token`. Its `Debug` and `Display` never show it, so
/// it cannot reach a log line by accident.
#[derive(Clone)]
pub struct AuthToken(String);

impl AuthToken {
    /// Wraps a token; refuses one shorter than [`MIN_TOKEN_LEN`] or with
    /// whitespace (it travels in a header).
    pub fn new(token: impl Into<String>) -> Result<Self, ConfigError> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN || token.chars().any(char::is_whitespace) {
            return Err(ConfigError::WeakToken);
        }
        Ok(AuthToken(token))
    }

    /// Whether `candidate` is the token, compared in constant time.
    pub fn matches(&self, candidate: &str) -> bool {
        self.0.as_bytes().ct_eq(candidate.as_bytes()).into()
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

impl fmt::Display for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl FromStr for AuthToken {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AuthToken::new(s)
    }
}

/// Why the dashboard refuses its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Bound to a non-loopback address without a token.
    #[error(
        "refusing to serve the dashboard on {bind} without authentication: \
         give --auth-token (or ECHOMQ_UI_TOKEN), or bind to 127.0.0.1"
    )]
    TokenRequired {
        /// The address asked for.
        bind: SocketAddr,
    },
    /// The token is too short or holds whitespace.
    #[error("the auth token must be at least {MIN_TOKEN_LEN} characters, without whitespace")]
    WeakToken,
    /// A numeric setting is zero where it must not be.
    #[error("{0} must be positive")]
    Zero(&'static str),
}

/// Settings of the dashboard. Plain data; every default is documented.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UiConfig {
    /// Address to listen on. Default `127.0.0.1:8080` (loopback only).
    pub bind: SocketAddr,
    /// Required when `bind` is not a loopback address. Default none.
    pub auth_token: Option<AuthToken>,
    /// Hide every action and refuse action requests. Default false.
    pub read_only: bool,
    /// How often queue counts and throughput are sampled. Default 2 s.
    pub sample_every: Duration,
    /// Samples kept per queue for the sparklines. Default 60.
    pub samples: usize,
    /// Jobs one search request may read before it answers (with a cursor to
    /// go on). Default 2000.
    pub search_budget: u64,
    /// Jobs per page in listings. Default 25; a request may ask up to 200.
    pub page_size: u64,
    /// Keys a job page decodes payloads stored through a codec with
    /// (docs/operations.md §Memory). Default: none — `gzip` is still shown
    /// decoded, a sealed payload says which key is missing.
    pub codec: echomq::codec::CodecOptions,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            auth_token: None,
            read_only: false,
            sample_every: Duration::from_secs(2),
            samples: 60,
            search_budget: 2000,
            page_size: 25,
            codec: echomq::codec::CodecOptions::default(),
        }
    }
}

impl UiConfig {
    /// Sets [`UiConfig::bind`].
    pub fn bind(mut self, bind: SocketAddr) -> Self {
        self.bind = bind;
        self
    }

    /// Sets [`UiConfig::auth_token`].
    pub fn auth_token(mut self, token: Option<AuthToken>) -> Self {
        self.auth_token = token;
        self
    }

    /// Sets [`UiConfig::codec`].
    pub fn codec(mut self, codec: echomq::codec::CodecOptions) -> Self {
        self.codec = codec;
        self
    }

    /// Sets [`UiConfig::read_only`].
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`UiConfig::sample_every`].
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.sample_every = every;
        self
    }

    /// Sets [`UiConfig::search_budget`].
    pub fn search_budget(mut self, jobs: u64) -> Self {
        self.search_budget = jobs;
        self
    }

    /// Checks the settings: a non-loopback bind needs a token.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.bind.ip().is_loopback() && self.auth_token.is_none() {
            return Err(ConfigError::TokenRequired { bind: self.bind });
        }
        if self.sample_every.is_zero() {
            return Err(ConfigError::Zero("sample_every"));
        }
        if self.samples == 0 {
            return Err(ConfigError::Zero("samples"));
        }
        if self.search_budget == 0 {
            return Err(ConfigError::Zero("search_budget"));
        }
        if self.page_size == 0 {
            return Err(ConfigError::Zero("page_size"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_bind_needs_a_token() {
        let open = UiConfig::default().bind("0.0.0.0:8080".parse().unwrap());
        assert!(matches!(
            open.validate(),
            Err(ConfigError::TokenRequired { .. })
        ));
        let locked = open.auth_token(Some(AuthToken::new("x".repeat(20)).unwrap()));
        assert!(locked.validate().is_ok());
        assert!(UiConfig::default().validate().is_ok());
        let v6 = UiConfig::default().bind("[::1]:8080".parse().unwrap());
        assert!(v6.validate().is_ok());
    }

    #[test]
    fn the_token_never_shows() {
        let secret = "s3cr3t-s3cr3t-s3cr3t";
        let c = UiConfig::default().auth_token(Some(AuthToken::new(secret).unwrap()));
        assert!(!format!("{c:?}").contains(secret));
        assert!(!format!("{}", c.auth_token.as_ref().unwrap()).contains(secret));
        assert!(c.auth_token.as_ref().unwrap().matches(secret));
        assert!(!c.auth_token.as_ref().unwrap().matches("s3cr3t"));
        assert_eq!(AuthToken::new("short").unwrap_err(), ConfigError::WeakToken);
    }
}
