//! The stored shape of an encoded payload: a JSON object any BullMQ client
//! parses, naming its codec (docs/protocol.md §Payload envelope).
//!
//! ```text
//! {"emq:codec":"gzip","v":1,"b64":"<gzip of the JSON text>"}
//! {"emq:codec":"aes256gcm+gzip","v":1,"kid":"k2","iv":"<12 bytes>","b64":"<ciphertext and tag>"}
//! ```

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::error::CodecError;

/// The field naming the codec; its presence makes an object an envelope.
pub const CODEC_FIELD: &str = "emq:codec";
/// The envelope format version this build writes and reads.
pub const ENVELOPE_VERSION: u64 = 1;

/// A payload codec, by the name its envelope carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    /// `gzip`: the JSON text gzip-compressed (RFC 1952), as Node's
    /// `zlib.gunzipSync` and Python's `gzip.decompress` read it.
    Gzip,
    /// `aes256gcm+gzip`: gzip, then AES-256-GCM under the current key, with a
    /// random 96-bit IV and `aes256gcm+gzip:1:<kid>` as associated data.
    Aes256GcmGzip,
}

impl Codec {
    /// The name stored in the envelope and taken by `--codec`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Aes256GcmGzip => "aes256gcm+gzip",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Codec {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gzip" => Ok(Codec::Gzip),
            "aes256gcm+gzip" => Ok(Codec::Aes256GcmGzip),
            other => Err(CodecError::UnknownCodec(other.to_owned())),
        }
    }
}

/// True when `data` is an envelope (an object with [`CODEC_FIELD`]); any other
/// value is plain JSON (old jobs, BullMQ producers).
pub fn is_envelope(data: &Value) -> bool {
    data.as_object()
        .is_some_and(|o| o.contains_key(CODEC_FIELD))
}

/// The associated data AES-GCM authenticates with the ciphertext: a sealed
/// payload cannot be passed off under another codec, version or key id.
pub(crate) fn aad(codec: Codec, kid: &str) -> String {
    format!("{}:{ENVELOPE_VERSION}:{kid}", codec.name())
}

/// An envelope read from a job's data.
pub(crate) struct Parsed<'a> {
    pub codec: Codec,
    pub kid: Option<&'a str>,
    pub iv: Option<Vec<u8>>,
    pub body: Vec<u8>,
}

/// Reads an envelope; `None` when `data` is not one.
pub(crate) fn parse(data: &Value) -> Option<Result<Parsed<'_>, CodecError>> {
    let o = data.as_object()?;
    let name = o.get(CODEC_FIELD)?;
    Some(parse_fields(o, name))
}

fn parse_fields<'a>(o: &'a Map<String, Value>, name: &'a Value) -> Result<Parsed<'a>, CodecError> {
    let name = name
        .as_str()
        .ok_or(CodecError::MalformedEnvelope("emq:codec is not a string"))?;
    let codec: Codec = name.parse()?;
    match o.get("v").map(|v| v.as_u64()) {
        Some(Some(ENVELOPE_VERSION)) => {}
        Some(Some(other)) => return Err(CodecError::UnsupportedVersion(other)),
        _ => {
            return Err(CodecError::MalformedEnvelope(
                "v is missing or not a number",
            ))
        }
    }
    let body = base64_field(o, "b64")?;
    let (kid, iv) = match codec {
        Codec::Gzip => (None, None),
        Codec::Aes256GcmGzip => {
            let kid = o
                .get("kid")
                .and_then(Value::as_str)
                .ok_or(CodecError::MalformedEnvelope(
                    "kid is missing or not a string",
                ))?;
            (Some(kid), Some(base64_field(o, "iv")?))
        }
    };
    Ok(Parsed {
        codec,
        kid,
        iv,
        body,
    })
}

fn base64_field(o: &Map<String, Value>, field: &'static str) -> Result<Vec<u8>, CodecError> {
    let text = o
        .get(field)
        .and_then(Value::as_str)
        .ok_or(CodecError::MalformedEnvelope(match field {
            "iv" => "iv is missing or not a string",
            _ => "b64 is missing or not a string",
        }))?;
    STANDARD.decode(text).map_err(|_| CodecError::Base64(field))
}

/// Builds an envelope, its fields in a fixed order.
pub(crate) fn build(codec: Codec, kid: Option<&str>, iv: Option<&[u8]>, body: &[u8]) -> Value {
    let mut o = Map::new();
    o.insert(CODEC_FIELD.into(), codec.name().into());
    o.insert("v".into(), ENVELOPE_VERSION.into());
    if let Some(kid) = kid {
        o.insert("kid".into(), kid.into());
    }
    if let Some(iv) = iv {
        o.insert("iv".into(), STANDARD.encode(iv).into());
    }
    o.insert("b64".into(), STANDARD.encode(body).into());
    Value::Object(o)
}
