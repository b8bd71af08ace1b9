//! Payload offload: data (or a return value) larger than a threshold is put
//! in a blob store — a directory, or an S3-compatible bucket with the
//! `offload-s3` feature — and the job keeps a small reference envelope that
//! any BullMQ client parses (docs/protocol.md §Payload envelope, docs/operations.md
//! §Memory):
//!
//! ```text
//! {"emq:codec":"blob","v":1,"store":"dir","key":"<uuid>","len":123456,"sha256":"<hex>"}
//! ```
//!
//! The blob holds the text that would otherwise be stored: plain JSON, or a
//! codec envelope when the queue also compresses or seals. A reader checks
//! the length and the SHA-256 before it trusts the bytes. Blob keys are
//! random (UUID v4), never derived from names, so a key read from Redis can
//! only name a file inside the store.
//!
//! Each blob is tracked in Redis ([`refs`]): `{P}blobs` (ZSET key → the time
//! it was last found in use) and `{P}blobs:owner` (HASH key → job id). A
//! bounded sweep, [`Queue::collect_blobs`](crate::Queue::collect_blobs),
//! deletes the blobs whose job is gone or no longer refers to them, so
//! retention and removal by any client (BullMQ Node included) free the store.

mod dir;
pub(crate) mod refs;
#[cfg(feature = "offload-s3")]
mod s3;

use ring::digest::{digest, SHA256};
use serde_json::{Map, Value};

use super::envelope::{CODEC_FIELD, ENVELOPE_VERSION};
use super::error::CodecError;

pub use self::dir::DirStore;
#[cfg(feature = "offload-s3")]
pub use self::s3::{S3Config, S3Store};

/// The codec name of a reference envelope.
pub const BLOB_CODEC: &str = "blob";

/// The default threshold: payloads of more than 256 KiB are offloaded.
pub const DEFAULT_OFFLOAD_THRESHOLD: usize = 256 * 1024;

/// The largest blob written or read: 512 MiB, Redis's own limit on a string
/// (a payload that large is why offload exists; one larger is refused).
pub const MAX_BLOB_BYTES: usize = 512 * 1024 * 1024;

/// Where offloaded payloads live.
#[derive(Clone)]
#[non_exhaustive]
pub enum BlobStore {
    /// Files under a directory shared by producers and workers (a local disk
    /// for one machine, a network file system for several).
    Dir(DirStore),
    /// Objects in an S3-compatible bucket.
    #[cfg(feature = "offload-s3")]
    S3(Box<S3Store>),
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlobStore::Dir(d) => f.debug_tuple("Dir").field(&d.root()).finish(),
            #[cfg(feature = "offload-s3")]
            BlobStore::S3(s) => f.debug_tuple("S3").field(s).finish(),
        }
    }
}

impl BlobStore {
    /// The store's name in the envelope: `dir` or `s3`.
    pub fn kind(&self) -> &'static str {
        match self {
            BlobStore::Dir(_) => "dir",
            #[cfg(feature = "offload-s3")]
            BlobStore::S3(_) => "s3",
        }
    }

    /// Reads a store from its spec: `dir:/path/to/root`, or with the
    /// `offload-s3` feature `s3://bucket/prefix?endpoint=…&region=…` (credentials
    /// from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`).
    pub fn from_spec(spec: &str) -> Result<Self, CodecError> {
        if let Some(path) = spec.strip_prefix("dir:") {
            return Ok(BlobStore::Dir(DirStore::new(path)?));
        }
        if spec.starts_with("s3://") {
            #[cfg(feature = "offload-s3")]
            return Ok(BlobStore::S3(Box::new(S3Store::new(S3Config::from_url(
                spec,
            )?)?)));
            #[cfg(not(feature = "offload-s3"))]
            return Err(CodecError::BlobConfig(
                "s3:// stores need the `offload-s3` feature of echomq".into(),
            ));
        }
        Err(CodecError::BlobConfig(format!(
            "unknown blob store {:?}: expected dir:/path or s3://bucket/prefix",
            spec.split(['?', '@']).next().unwrap_or_default()
        )))
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), CodecError> {
        match self {
            BlobStore::Dir(d) => d.put(key, bytes).await,
            #[cfg(feature = "offload-s3")]
            BlobStore::S3(s) => s.put(key, bytes).await,
        }
    }

    async fn get(&self, key: &str, limit: usize) -> Result<Vec<u8>, CodecError> {
        match self {
            BlobStore::Dir(d) => d.get(key, limit).await,
            #[cfg(feature = "offload-s3")]
            BlobStore::S3(s) => s.get(key, limit).await,
        }
    }

    /// Deletes a blob; a blob already gone is not an error.
    pub(crate) async fn delete(&self, key: &str) -> Result<(), CodecError> {
        match self {
            BlobStore::Dir(d) => d.delete(key).await,
            #[cfg(feature = "offload-s3")]
            BlobStore::S3(s) => s.delete(key).await,
        }
    }
}

/// Offload settings of a queue handle: a store and the size above which a
/// payload goes there.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OffloadOptions {
    /// Where blobs are written and read.
    pub store: BlobStore,
    /// Payloads (as stored: after the codec) larger than this many bytes are
    /// offloaded. Default [`DEFAULT_OFFLOAD_THRESHOLD`].
    pub threshold: usize,
}

impl OffloadOptions {
    /// Offload to `store` above the default threshold.
    pub fn new(store: BlobStore) -> Self {
        Self {
            store,
            threshold: DEFAULT_OFFLOAD_THRESHOLD,
        }
    }

    /// The size above which a payload is offloaded.
    pub fn threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes;
        self
    }
}

/// A new blob key: 32 lowercase hex digits of a UUID v4.
pub(crate) fn new_key() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Writes `text` as blob `key` and answers the envelope that replaces it.
pub(crate) async fn write(
    opts: &OffloadOptions,
    key: &str,
    text: &str,
) -> Result<String, CodecError> {
    if text.len() > MAX_BLOB_BYTES {
        return Err(CodecError::TooLarge {
            limit: MAX_BLOB_BYTES,
        });
    }
    opts.store.put(key, text.as_bytes()).await?;
    let mut o = Map::new();
    o.insert(CODEC_FIELD.into(), BLOB_CODEC.into());
    o.insert("v".into(), ENVELOPE_VERSION.into());
    o.insert("store".into(), opts.store.kind().into());
    o.insert("key".into(), key.into());
    o.insert("len".into(), text.len().into());
    o.insert(
        "sha256".into(),
        hex(digest(&SHA256, text.as_bytes()).as_ref()).into(),
    );
    Ok(Value::Object(o).to_string())
}

/// A reference envelope read from a payload.
pub(crate) struct Reference<'a> {
    pub store: &'a str,
    pub key: &'a str,
    pub len: usize,
    pub sha256: &'a str,
}

/// The reference `data` holds, when it is a blob envelope.
pub(crate) fn reference(data: &Value) -> Option<Result<Reference<'_>, CodecError>> {
    let o = data.as_object()?;
    if o.get(CODEC_FIELD)?.as_str()? != BLOB_CODEC {
        return None;
    }
    Some(parse_reference(o))
}

fn parse_reference(o: &Map<String, Value>) -> Result<Reference<'_>, CodecError> {
    match o.get("v").and_then(Value::as_u64) {
        Some(ENVELOPE_VERSION) => {}
        Some(other) => return Err(CodecError::UnsupportedVersion(other)),
        None => {
            return Err(CodecError::MalformedEnvelope(
                "v is missing or not a number",
            ))
        }
    }
    let text = |f: &'static str, why: &'static str| {
        o.get(f)
            .and_then(Value::as_str)
            .ok_or(CodecError::MalformedEnvelope(why))
    };
    let store = text("store", "store is missing or not a string")?;
    let key = text("key", "key is missing or not a string")?;
    if !valid_key(key) {
        return Err(CodecError::MalformedEnvelope(
            "key is not a blob key (32 lowercase hex digits)",
        ));
    }
    let sha256 = text("sha256", "sha256 is missing or not a string")?;
    let len = o
        .get("len")
        .and_then(Value::as_u64)
        .ok_or(CodecError::MalformedEnvelope(
            "len is missing or not a number",
        ))? as usize;
    Ok(Reference {
        store,
        key,
        len,
        sha256,
    })
}

/// Reads the blob a reference names and checks it; the text it held.
pub(crate) async fn fetch(
    opts: Option<&OffloadOptions>,
    r: &Reference<'_>,
    limit: usize,
) -> Result<String, CodecError> {
    let opts = opts.ok_or_else(|| {
        CodecError::BlobConfig(format!(
            "the payload is in a {} blob store and this queue has none configured",
            r.store
        ))
    })?;
    if opts.store.kind() != r.store {
        return Err(CodecError::BlobConfig(format!(
            "the payload is in a {} blob store, this queue's store is {}",
            r.store,
            opts.store.kind()
        )));
    }
    let limit = limit.min(MAX_BLOB_BYTES);
    if r.len > limit {
        return Err(CodecError::TooLarge { limit });
    }
    let bytes = opts.store.get(r.key, limit).await?;
    if bytes.len() != r.len || hex(digest(&SHA256, &bytes).as_ref()) != r.sha256 {
        return Err(CodecError::BlobCorrupt(r.key.to_owned()));
    }
    String::from_utf8(bytes).map_err(|_| CodecError::BlobCorrupt(r.key.to_owned()))
}

/// A blob key as this build writes them.
pub(crate) fn valid_key(key: &str) -> bool {
    key.len() == 32
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
