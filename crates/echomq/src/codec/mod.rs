//! Payload codecs: a job's data and return value stored compressed (gzip) or
//! sealed (AES-256-GCM with key ids, over gzip) inside a JSON envelope any
//! BullMQ client still parses (docs/protocol.md §Payload envelope,
//! docs/operations.md §Memory).
//!
//! A [`Queue`](crate::Queue) whose [`QueueOptions::codec`](crate::QueueOptions)
//! names a codec encodes what it adds; a worker decodes any envelope with its
//! queue's keys before the processor sees the data, and encodes the return
//! value when its queue names a codec. A payload that cannot be decoded fails
//! its job for good, with the [`CodecError`] as reason.

mod envelope;
mod error;
mod keys;
pub(crate) mod offload;
mod options;

pub use self::envelope::{is_envelope, Codec, CODEC_FIELD, ENVELOPE_VERSION};
pub use self::error::CodecError;
pub use self::keys::{CodecKey, Keyring, KEYS_ENV};
pub use self::offload::refs::BlobSweep;
pub use self::offload::{
    BlobStore, DirStore, OffloadOptions, BLOB_CODEC, DEFAULT_OFFLOAD_THRESHOLD, MAX_BLOB_BYTES,
};
#[cfg(feature = "offload-s3")]
pub use self::offload::{S3Config, S3Store};
pub use self::options::{CodecOptions, DEFAULT_MAX_DECODED_BYTES, GZIP_MIN_BYTES};

#[cfg(test)]
mod tests;
