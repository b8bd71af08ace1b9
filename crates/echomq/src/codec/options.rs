//! The codec settings of a queue handle, and the encode and decode steps.

use std::borrow::Cow;
use std::io::{Read as _, Write as _};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom as _, SystemRandom};
use serde_json::Value;

use super::envelope::{self, Codec};
use super::error::CodecError;
use super::keys::{CodecKey, Keyring};
use super::offload::{self, OffloadOptions};

/// The default cap on a payload's decoded size: 512 MiB (Redis's own limit on
/// a string), so a small envelope cannot make a worker allocate without end.
pub const DEFAULT_MAX_DECODED_BYTES: usize = 512 * 1024 * 1024;

/// Under `gzip`, a JSON text shorter than this many bytes is stored plain:
/// its envelope (35 bytes, a 20-byte gzip frame, base64's third) would not
/// be smaller, and compressing it costs a writer a deflate state per value.
/// Every runtime's writer keeps this rule (docs/protocol.md §Payload
/// envelope); a sealed codec never stores plain.
pub const GZIP_MIN_BYTES: usize = 256;

/// How a queue handle stores payloads. A producer encodes new jobs' data with
/// `encode`; a worker decodes any envelope it meets (with `keys` when it is
/// encrypted) and encodes its return values with `encode`. Data that is not an
/// envelope is read as plain JSON whatever the settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CodecOptions {
    /// The codec new data and return values are stored with. Default: none
    /// (plain JSON, as BullMQ stores it).
    pub encode: Option<Codec>,
    /// Keys for `aes256gcm+gzip`, the current one sealing. Default: empty.
    pub keys: Keyring,
    /// The largest decoded payload accepted, in bytes. Default
    /// [`DEFAULT_MAX_DECODED_BYTES`].
    pub max_decoded_bytes: usize,
    /// Where payloads over a threshold are offloaded (docs/operations.md
    /// §Memory). Default: none, every payload stays in Redis.
    pub offload: Option<OffloadOptions>,
}

impl Default for CodecOptions {
    fn default() -> Self {
        Self {
            encode: None,
            keys: Keyring::default(),
            max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES,
            offload: None,
        }
    }
}

impl CodecOptions {
    /// The codec new payloads are stored with (`None`: plain JSON).
    pub fn encode(mut self, codec: Option<Codec>) -> Self {
        self.encode = codec;
        self
    }

    /// The keys, the current one sealing.
    pub fn keys(mut self, keys: Keyring) -> Self {
        self.keys = keys;
        self
    }

    /// The cap on a payload's decoded size.
    pub fn max_decoded_bytes(mut self, bytes: usize) -> Self {
        self.max_decoded_bytes = bytes;
        self
    }

    /// Offloads payloads over `offload.threshold` bytes to its store.
    pub fn offload(mut self, offload: Option<OffloadOptions>) -> Self {
        self.offload = offload;
        self
    }

    /// The plain value of stored data, reading an offloaded payload from the
    /// blob store: `None` when `data` is neither a reference nor an envelope
    /// (read it as it is).
    pub async fn load(&self, data: &Value) -> Option<Result<Value, CodecError>> {
        match offload::reference(data) {
            None => self.decode(data),
            Some(Err(e)) => Some(Err(e)),
            Some(Ok(r)) => Some(self.load_reference(&r).await),
        }
    }

    async fn load_reference(&self, r: &offload::Reference<'_>) -> Result<Value, CodecError> {
        let text = offload::fetch(self.offload.as_ref(), r, self.max_decoded_bytes).await?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| CodecError::Json(e.to_string()))?;
        // The blob holds what would have been stored inline: plain JSON or
        // a codec envelope, never another reference.
        if offload::reference(&value).is_some() {
            return Err(CodecError::MalformedEnvelope(
                "an offloaded payload refers to another blob",
            ));
        }
        match self.decode(&value) {
            None => Ok(value),
            Some(decoded) => decoded,
        }
    }

    /// The text stored for `json` (a JSON document's text): the envelope's
    /// text with a codec, `json` itself without.
    /// Under `gzip` a text under [`GZIP_MIN_BYTES`] stays as it is.
    pub fn encode_text(&self, json: String) -> Result<String, CodecError> {
        match self.encode {
            Some(codec) if !stays_plain(codec, &json) => {
                Ok(self.seal(codec, json.as_bytes())?.to_string())
            }
            _ => Ok(json),
        }
    }

    /// [`CodecOptions::encode_text`] of a value, as a value.
    pub fn encode_value(&self, value: Value) -> Result<Value, CodecError> {
        let Some(codec) = self.encode else {
            return Ok(value);
        };
        let json = value.to_string();
        if stays_plain(codec, &json) {
            return Ok(value);
        }
        self.seal(codec, json.as_bytes())
    }

    /// The plain value of `data`: `None` when it is not an envelope (read it
    /// as it is), else the decoded document or why it cannot be read.
    /// An offload reference is not read here (see [`CodecOptions::load`]):
    /// it answers [`CodecError::Offloaded`].
    pub fn decode(&self, data: &Value) -> Option<Result<Value, CodecError>> {
        match offload::reference(data) {
            Some(Ok(r)) => {
                return Some(Err(CodecError::Offloaded {
                    store: r.store.to_owned(),
                    len: r.len,
                }))
            }
            Some(Err(e)) => return Some(Err(e)),
            None => {}
        }
        let parsed = match envelope::parse(data)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(self.open(parsed))
    }

    /// The envelope of `json` under `codec`. What is compressed is `json`
    /// with every non-ASCII character written as a `\u` escape: the same
    /// document, which readers decode on their fast path (below).
    pub fn seal(&self, codec: Codec, json: &[u8]) -> Result<Value, CodecError> {
        let compressed = gzip(&ascii_json(json));
        match codec {
            Codec::Gzip => Ok(envelope::build(codec, None, None, &compressed)),
            Codec::Aes256GcmGzip => {
                let (kid, key) = self
                    .keys
                    .current()
                    .ok_or(CodecError::NoCurrentKey(codec.name()))?;
                let mut iv = [0u8; NONCE_LEN];
                SystemRandom::new()
                    .fill(&mut iv)
                    .map_err(|_| CodecError::Encrypt("no random IV"))?;
                let mut body = compressed;
                aead_key(key)
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(iv),
                        Aad::from(envelope::aad(codec, kid).as_bytes()),
                        &mut body,
                    )
                    .map_err(|_| CodecError::Encrypt("sealing refused"))?;
                Ok(envelope::build(codec, Some(kid), Some(&iv), &body))
            }
        }
    }

    fn open(&self, p: envelope::Parsed<'_>) -> Result<Value, CodecError> {
        let compressed = match p.codec {
            Codec::Gzip => p.body,
            Codec::Aes256GcmGzip => {
                let kid = p.kid.unwrap_or_default();
                let key = self
                    .keys
                    .get(kid)
                    .ok_or_else(|| CodecError::UnknownKey(kid.to_owned()))?;
                let iv: [u8; NONCE_LEN] =
                    p.iv.unwrap_or_default()
                        .try_into()
                        .map_err(|_| CodecError::MalformedEnvelope("iv is not 12 bytes"))?;
                let mut body = p.body;
                let plain_len = aead_key(key)
                    .open_in_place(
                        Nonce::assume_unique_for_key(iv),
                        Aad::from(envelope::aad(p.codec, kid).as_bytes()),
                        &mut body,
                    )
                    .map_err(|_| CodecError::AuthenticationFailed(kid.to_owned()))?
                    .len();
                body.truncate(plain_len);
                body
            }
        };
        let json = gunzip(&compressed, self.max_decoded_bytes)?;
        serde_json::from_slice(&json).map_err(|e| CodecError::Json(e.to_string()))
    }
}

/// Whether `json` is stored as it is under `codec`. A text naming the codec
/// field is always wrapped, so a plain value is never read as an envelope.
fn stays_plain(codec: Codec, json: &str) -> bool {
    codec == Codec::Gzip && json.len() < GZIP_MIN_BYTES && !json.contains(envelope::CODEC_FIELD)
}

/// `json` with each character past ASCII as `\uXXXX` (two, a surrogate
/// pair, past U+FFFF). Outside strings a JSON text is ASCII, so only string
/// contents change, and only in spelling. Why: a Node reader turns the
/// inflated bytes into a string and parses it, and one `✓` in a 15 KB order
/// sends both steps down their slow path: 73 µs per read in a loop against
/// 57 µs for the escaped twin (docs/protocol.md §Payload envelope).
fn ascii_json(json: &[u8]) -> Cow<'_, [u8]> {
    // One scan decides the common case: an ASCII text is compressed as it is.
    let Some(first) = json.iter().position(|b| !b.is_ascii()) else {
        return Cow::Borrowed(json);
    };
    // Bytes that are no UTF-8 are no JSON text either: left as they are.
    let Ok(mut rest) = std::str::from_utf8(&json[first..]) else {
        return Cow::Borrowed(json);
    };
    let mut out = Vec::with_capacity(json.len() + json.len() / 8);
    out.extend_from_slice(&json[..first]);
    // Runs of ASCII are copied whole; the first byte past ASCII starts a character.
    while let Some(at) = rest.bytes().position(|b| !b.is_ascii()) {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        let Some(c) = rest[at..].chars().next() else {
            break;
        };
        for unit in c.encode_utf16(&mut [0u16; 2]) {
            // Writing into a Vec cannot fail.
            let _ = write!(out, "\\u{unit:04x}");
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.extend_from_slice(rest.as_bytes());
    Cow::Owned(out)
}

fn aead_key(key: &CodecKey) -> LessSafeKey {
    // 32 bytes by construction: AES-256 accepts any such key.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key.bytes()).expect("a 32-byte AES-256 key"))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    // Level 1: 15 KB order documents come out 4.7x smaller in Redis (5.4x
    // at level 6) and adds got faster than plain JSON instead of 15 % slower
    // (docs/operations.md §Memory).
    let mut e = GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4 + 64),
        Compression::fast(),
    );
    // Writing into a Vec cannot fail.
    e.write_all(bytes).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

/// Decompresses at most `limit` bytes; one more is a bomb.
fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Decompress(e.to_string()))?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(out)
}
