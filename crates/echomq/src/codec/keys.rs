//! Encryption keys with ids, so keys rotate: new payloads are sealed with the
//! current key, old ones open with whichever configured key their envelope
//! names.

use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::error::CodecError;

/// The environment variable the keys are read from:
/// `ECHOMQ_CODEC_KEYS=k1:<base64>,k2:<base64>` (the last one is current).
pub const KEYS_ENV: &str = "ECHOMQ_CODEC_KEYS";

/// One AES-256 key: 32 bytes. Its `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct CodecKey([u8; 32]);

impl CodecKey {
    /// A key from its 32 bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A key from standard base64 of 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, CodecError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| CodecError::InvalidKey("not standard base64".into()))?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            CodecError::InvalidKey(format!("{} bytes, AES-256 needs 32", b.len()))
        })?;
        Ok(Self(bytes))
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for CodecKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CodecKey(<redacted>)")
    }
}

/// The configured keys by id, one of them current (the one new payloads are
/// sealed with). Default: empty (gzip needs no key; encryption then fails
/// with [`CodecError::NoCurrentKey`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    keys: Vec<(String, CodecKey)>,
    current: Option<usize>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .field("current", &self.current_id())
            .finish()
    }
}

impl Keyring {
    /// Adds `key` under `id` (replacing a key of the same id) and makes it
    /// current. Ids are non-empty, without `,`, `:` or whitespace.
    pub fn with_key(mut self, id: &str, key: CodecKey) -> Result<Self, CodecError> {
        check_id(id)?;
        match self.keys.iter().position(|(k, _)| k == id) {
            Some(i) => {
                self.keys[i].1 = key;
                self.current = Some(i);
            }
            None => {
                self.keys.push((id.to_owned(), key));
                self.current = Some(self.keys.len() - 1);
            }
        }
        Ok(self)
    }

    /// Makes the key `id` current.
    pub fn with_current(mut self, id: &str) -> Result<Self, CodecError> {
        let i = self
            .keys
            .iter()
            .position(|(k, _)| k == id)
            .ok_or_else(|| CodecError::UnknownKey(id.to_owned()))?;
        self.current = Some(i);
        Ok(self)
    }

    /// Keys from `id:base64` entries separated by commas or newlines (blank
    /// lines and `#` comments skipped); the last entry is current.
    pub fn parse(spec: &str) -> Result<Self, CodecError> {
        let mut ring = Keyring::default();
        for entry in spec.split([',', '\n']).map(str::trim) {
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            let (id, key) = entry
                .split_once(':')
                .ok_or_else(|| CodecError::InvalidKey("an entry is not id:base64".into()))?;
            let key = CodecKey::from_base64(key)
                .map_err(|e| CodecError::InvalidKey(format!("key {:?}: {e}", id.trim())))?;
            ring = ring.with_key(id.trim(), key)?;
        }
        Ok(ring)
    }

    /// [`Keyring::parse`] of a file's text.
    pub fn from_file(path: &Path) -> Result<Self, CodecError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CodecError::InvalidKey(format!("cannot read {}: {}", path.display(), e.kind()))
        })?;
        Self::parse(&text)
    }

    /// [`Keyring::parse`] of [`KEYS_ENV`]; `None` when it is not set.
    pub fn from_env() -> Result<Option<Self>, CodecError> {
        match std::env::var(KEYS_ENV) {
            Ok(spec) => Self::parse(&spec).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(CodecError::InvalidKey(format!(
                "{KEYS_ENV} is not valid UTF-8"
            ))),
        }
    }

    /// The configured ids, in the order given.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(k, _)| k.as_str())
    }

    /// The id new payloads are sealed with.
    pub fn current_id(&self) -> Option<&str> {
        self.current.map(|i| self.keys[i].0.as_str())
    }

    /// No key at all.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(crate) fn current(&self) -> Option<(&str, &CodecKey)> {
        self.current
            .map(|i| (self.keys[i].0.as_str(), &self.keys[i].1))
    }

    pub(crate) fn get(&self, id: &str) -> Option<&CodecKey> {
        self.keys.iter().find(|(k, _)| k == id).map(|(_, key)| key)
    }
}

fn check_id(id: &str) -> Result<(), CodecError> {
    if id.is_empty() || id.contains([',', ':']) || id.chars().any(char::is_whitespace) {
        return Err(CodecError::InvalidKey(format!(
            "key id {id:?} must be non-empty, without ',', ':' or spaces"
        )));
    }
    Ok(())
}
