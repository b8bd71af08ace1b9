//! The payload codec flags shared by `add`, `add-bulk` and `job`, and the
//! one place the codec settings are built from flags, a keys file and
//! `ECHOMQ_CODEC_KEYS` (docs/operations.md §Memory). Keys are never shown.

use std::path::{Path, PathBuf};

use echomq::codec::{BlobStore, Codec, CodecOptions, Keyring, OffloadOptions, KEYS_ENV};

/// `--codec` and the decoding flags (`add`, `add-bulk`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct CodecArgs {
    /// Store the data through this payload codec: gzip | aes256gcm+gzip
    /// [default: none, plain JSON].
    #[arg(long, value_name = "CODEC")]
    codec: Option<String>,
    #[command(flatten)]
    keys: KeyArgs,
}

/// `--codec-keys-file` and `--max-decoded-bytes`: what decoding needs (`job`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct KeyArgs {
    /// Keys as `id:base64` lines, the last one current [default: the
    /// ECHOMQ_CODEC_KEYS variable, `id:base64,id:base64`].
    #[arg(long, env = "ECHOMQ_CODEC_KEYS_FILE", value_name = "FILE")]
    codec_keys_file: Option<PathBuf>,
    /// The largest decoded payload accepted, in bytes [default: 512 MiB].
    #[arg(long, value_name = "BYTES")]
    max_decoded_bytes: Option<usize>,
    #[command(flatten)]
    offload: OffloadArgs,
}

/// `--offload` and `--offload-threshold`: where large payloads go.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OffloadArgs {
    /// Offload payloads over the threshold to a blob store: `dir:/path` or
    /// `s3://bucket/prefix?endpoint=URL&region=R` (credentials from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) [default: none].
    #[arg(long, env = "ECHOMQ_OFFLOAD", value_name = "STORE")]
    pub(crate) offload: Option<String>,
    /// Payloads larger than this many bytes (as stored, after the codec) are
    /// offloaded [default: 262144].
    #[arg(long, env = "ECHOMQ_OFFLOAD_THRESHOLD", value_name = "BYTES")]
    pub(crate) offload_threshold: Option<usize>,
}

impl OffloadArgs {
    /// The offload settings, `None` without a store.
    pub(crate) fn options(&self) -> Result<Option<OffloadOptions>, String> {
        let Some(spec) = self.offload.as_deref() else {
            if self.offload_threshold.is_some() {
                return Err("--offload-threshold needs --offload".into());
            }
            return Ok(None);
        };
        let store = BlobStore::from_spec(spec).map_err(|e| format!("--offload: {e}"))?;
        let mut o = OffloadOptions::new(store);
        if let Some(t) = self.offload_threshold {
            if t == 0 {
                return Err("--offload-threshold must be at least 1".into());
            }
            o = o.threshold(t);
        }
        Ok(Some(o))
    }
}

impl CodecArgs {
    /// The codec settings these flags and the environment give.
    pub(crate) fn options(&self) -> Result<CodecOptions, String> {
        Ok(options(
            self.codec.as_deref(),
            self.keys.codec_keys_file.as_deref(),
            self.keys.max_decoded_bytes,
            |k| std::env::var(k).ok(),
        )?
        .offload(self.keys.offload.options()?))
    }
}

impl KeyArgs {
    /// The decoding settings (no codec to encode with).
    pub(crate) fn options(&self) -> Result<CodecOptions, String> {
        Ok(options(
            None,
            self.codec_keys_file.as_deref(),
            self.max_decoded_bytes,
            |k| std::env::var(k).ok(),
        )?
        .offload(self.offload.options()?))
    }
}

/// Codec settings from a codec name, a keys file (else the keys variable
/// `env` gives) and a decoded-size cap; an encrypting codec without a key is
/// refused here, before anything is sent.
pub(crate) fn options(
    codec: Option<&str>,
    keys_file: Option<&Path>,
    max_decoded_bytes: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<CodecOptions, String> {
    let encode = codec
        .map(str::parse::<Codec>)
        .transpose()
        .map_err(|e| format!("--codec: {e} (gzip or aes256gcm+gzip)"))?;
    let keys = match (keys_file, env(KEYS_ENV)) {
        (Some(path), _) => {
            Keyring::from_file(path).map_err(|e| format!("--codec-keys-file: {e}"))?
        }
        (None, Some(spec)) => Keyring::parse(&spec).map_err(|e| format!("{KEYS_ENV}: {e}"))?,
        (None, None) => Keyring::default(),
    };
    if encode == Some(Codec::Aes256GcmGzip) && keys.current_id().is_none() {
        return Err(format!(
            "--codec aes256gcm+gzip needs a key: --codec-keys-file or {KEYS_ENV}"
        ));
    }
    let mut o = CodecOptions::default().encode(encode).keys(keys);
    if let Some(max) = max_decoded_bytes {
        if max == 0 {
            return Err("--max-decoded-bytes must be at least 1".into());
        }
        o = o.max_decoded_bytes(max);
    }
    Ok(o)
}
