//! What can go wrong encoding or decoding a payload, and reading keys.
//!
//! No variant carries key material: a key's id is shown, never its bytes.

use thiserror::Error;

/// A payload that could not be encoded or decoded, or keys that could not be
/// read. A job whose data fails to decode is failed for good (unrecoverable):
/// none of these heals by retrying.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The envelope names a codec this build does not know.
    #[error("unknown payload codec {0:?}")]
    UnknownCodec(String),
    /// The envelope's format version is not one this build reads.
    #[error("unsupported payload envelope version {0}")]
    UnsupportedVersion(u64),
    /// The envelope lacks a field or has one of the wrong type.
    #[error("malformed payload envelope: {0}")]
    MalformedEnvelope(&'static str),
    /// A base64 field of the envelope is not base64.
    #[error("corrupt base64 in the payload envelope field {0:?}")]
    Base64(&'static str),
    /// Encrypting, but no current key is configured.
    #[error("codec {0} needs a key and none is configured (ECHOMQ_CODEC_KEYS or a keys file)")]
    NoCurrentKey(&'static str),
    /// The envelope names a key id that is not configured.
    #[error("no key with id {0:?} is configured to decrypt this payload")]
    UnknownKey(String),
    /// AES-GCM refused: the key is wrong or the envelope was tampered with.
    #[error("payload authentication failed with key {0:?}: wrong key or tampered envelope")]
    AuthenticationFailed(String),
    /// The compressed bytes are not a valid gzip stream.
    #[error("corrupt compressed payload: {0}")]
    Decompress(String),
    /// The payload decompresses to more than the configured cap.
    #[error("payload decompresses to more than {limit} bytes (a decompression bomb?)")]
    TooLarge {
        /// The cap, `CodecOptions::max_decoded_bytes`.
        limit: usize,
    },
    /// The decoded bytes are not a JSON document.
    #[error("decoded payload is not JSON: {0}")]
    Json(String),
    /// A key specification could not be read (the message never holds key bytes).
    #[error("invalid codec key: {0}")]
    InvalidKey(String),
    /// Encryption itself failed (the system random source).
    #[error("payload encryption failed: {0}")]
    Encrypt(&'static str),
    /// The blob an offload reference names is not in the store (deleted,
    /// or written to another store).
    #[error("offloaded payload {0} is missing from the blob store")]
    BlobMissing(String),
    /// The blob's length or SHA-256 differs from its reference.
    #[error("offloaded payload {0} does not match its reference (length or SHA-256)")]
    BlobCorrupt(String),
    /// The blob store could not be reached or refused (may heal: a job whose
    /// payload hits this is retried by its attempts, not failed for good).
    #[error("blob store: {0}")]
    BlobStore(String),
    /// An offload reference met by a synchronous decode, which does not read
    /// blob stores (`CodecOptions::load` does).
    #[error("offloaded payload of {len} bytes in the {store} blob store (not read here)")]
    Offloaded {
        /// The store the reference names.
        store: String,
        /// The payload's length in bytes.
        len: usize,
    },
    /// The blob store is not configured, or not the one a reference names.
    #[error("blob store configuration: {0}")]
    BlobConfig(String),
}

impl CodecError {
    /// True when retrying may help: the blob store could not be reached.
    pub fn is_transient(&self) -> bool {
        matches!(self, CodecError::BlobStore(_))
    }
}
