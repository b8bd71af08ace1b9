//! A blob store in an S3-compatible bucket: requests signed (AWS SigV4, by
//! rusty-s3) and sent with reqwest over rustls that verifies the endpoint.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use rusty_s3::{Bucket, Credentials, S3Action as _, UrlStyle};

use super::valid_key;
use crate::codec::error::CodecError;

/// How long a signed request stays valid: long enough for a slow upload of
/// the largest blob to start, short enough not to matter if a URL leaked.
const SIGNED_FOR: Duration = Duration::from_secs(300);

/// Where an [`S3Store`] writes. Credentials are never shown by `Debug`.
#[derive(Clone)]
#[non_exhaustive]
pub struct S3Config {
    /// The endpoint, e.g. `https://s3.eu-west-1.amazonaws.com` or a MinIO URL.
    pub endpoint: Url,
    /// The bucket, which must exist.
    pub bucket: String,
    /// A prefix for the objects' keys (may be empty).
    pub prefix: String,
    /// The region the requests are signed for. Default `us-east-1`.
    pub region: String,
    /// Path-style URLs (`endpoint/bucket/key`), as MinIO and most
    /// S3-compatible servers want. Default true.
    pub path_style: bool,
    credentials: Credentials,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint.as_str())
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("credentials", &"<redacted>")
            .finish()
    }
}

impl S3Config {
    /// A bucket at an endpoint, with the given access key and secret.
    pub fn new(endpoint: Url, bucket: &str, key: &str, secret: &str) -> Self {
        Self {
            endpoint,
            bucket: bucket.to_owned(),
            prefix: String::new(),
            region: "us-east-1".into(),
            path_style: true,
            credentials: Credentials::new(key, secret),
        }
    }

    /// Reads `s3://bucket/prefix?endpoint=URL&region=R&style=path|virtual`;
    /// the credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
    /// (and `AWS_SESSION_TOKEN` when set). Without `endpoint`, AWS's own for
    /// the region.
    pub fn from_url(spec: &str) -> Result<Self, CodecError> {
        let bad = |why: String| CodecError::BlobConfig(format!("blob store URL: {why}"));
        let url = Url::parse(spec).map_err(|e| bad(e.to_string()))?;
        if url.scheme() != "s3" || !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "expected s3://bucket/prefix (credentials go in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
                    .into(),
            ));
        }
        let bucket = url
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| bad("no bucket".into()))?
            .to_owned();
        let mut region = "us-east-1".to_owned();
        let mut endpoint = None;
        let mut path_style = true;
        for (k, v) in url.query_pairs() {
            match &*k {
                "region" => region = v.into_owned(),
                "endpoint" => {
                    endpoint = Some(Url::parse(&v).map_err(|e| bad(format!("endpoint: {e}")))?)
                }
                "style" if v == "path" => path_style = true,
                "style" if v == "virtual" => path_style = false,
                other => return Err(bad(format!("unknown parameter {other:?}"))),
            }
        }
        let endpoint = match endpoint {
            Some(e) => e,
            None => Url::parse(&format!("https://s3.{region}.amazonaws.com"))
                .map_err(|e| bad(e.to_string()))?,
        };
        let credentials = Credentials::from_env()
            .ok_or_else(|| bad("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set".into()))?;
        Ok(Self {
            endpoint,
            bucket,
            prefix: url.path().trim_matches('/').to_owned(),
            region,
            path_style,
            credentials,
        })
    }

    /// The key prefix of the objects.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.trim_matches('/').to_owned();
        self
    }
}

/// Blobs as objects of one bucket.
#[derive(Clone)]
pub struct S3Store {
    config: S3Config,
    bucket: Bucket,
    client: reqwest::Client,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.config.fmt(f)
    }
}

impl S3Store {
    /// A store for `config`; an `https` endpoint is verified against the
    /// system's roots.
    pub fn new(config: S3Config) -> Result<Self, CodecError> {
        let style = if config.path_style {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let bucket = Bucket::new(
            config.endpoint.clone(),
            style,
            config.bucket.clone(),
            config.region.clone(),
        )
        .map_err(|e| CodecError::BlobConfig(format!("blob store: {e}")))?;
        let https = config.endpoint.scheme() == "https";
        let tls = crate::connection::tls::verifying_config(None, https)
            .map_err(|e| CodecError::BlobConfig(format!("blob store TLS: {e}")))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| CodecError::BlobConfig(format!("blob store client: {e}")))?;
        Ok(Self {
            config,
            bucket,
            client,
        })
    }

    fn object(&self, key: &str) -> Result<String, CodecError> {
        if !valid_key(key) {
            return Err(CodecError::MalformedEnvelope("key is not a blob key"));
        }
        Ok(if self.config.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}/{key}", self.config.prefix)
        })
    }

    pub(super) async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), CodecError> {
        let object = self.object(key)?;
        let url = self
            .bucket
            .put_object(Some(&self.config.credentials), &object)
            .sign(SIGNED_FOR);
        let r = self
            .client
            .put(url)
            .body(bytes.to_vec())
            .send()
            .await
            .map_err(transport)?;
        match r.status() {
            s if s.is_success() => Ok(()),
            s => Err(refused("PUT", s)),
        }
    }

    pub(super) async fn get(&self, key: &str, limit: usize) -> Result<Vec<u8>, CodecError> {
        let object = self.object(key)?;
        let url = self
            .bucket
            .get_object(Some(&self.config.credentials), &object)
            .sign(SIGNED_FOR);
        let mut r = self.client.get(url).send().await.map_err(transport)?;
        match r.status() {
            StatusCode::NOT_FOUND => return Err(CodecError::BlobMissing(key.to_owned())),
            s if !s.is_success() => return Err(refused("GET", s)),
            _ => {}
        }
        if r.content_length().is_some_and(|n| n > limit as u64) {
            return Err(CodecError::TooLarge { limit });
        }
        let mut out = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(transport)? {
            if out.len() + chunk.len() > limit {
                return Err(CodecError::TooLarge { limit });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    pub(super) async fn delete(&self, key: &str) -> Result<(), CodecError> {
        let object = self.object(key)?;
        let url = self
            .bucket
            .delete_object(Some(&self.config.credentials), &object)
            .sign(SIGNED_FOR);
        let r = self.client.delete(url).send().await.map_err(transport)?;
        match r.status() {
            s if s.is_success() || s == StatusCode::NOT_FOUND => Ok(()),
            s => Err(refused("DELETE", s)),
        }
    }
}

fn transport(e: reqwest::Error) -> CodecError {
    // Without the URL: it carries the request's signature.
    CodecError::BlobStore(format!("S3 request failed: {}", e.without_url()))
}

fn refused(method: &str, status: StatusCode) -> CodecError {
    CodecError::BlobStore(format!("S3 {method} answered {status}"))
}
