//! TLS for `rediss…://` URLs: the rustls client configuration built from
//! [`TlsOptions`], and the rule that TLS options never go with a plaintext URL.
//!
//! Verification is on unless [`TlsOptions::insecure`] is set, which is the
//! only switch that turns it off.

use std::path::Path;
use std::sync::Arc;

use fred::prelude::Config;
use fred::types::config::{TlsConfig, TlsConnector, TlsHostMapping};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tracing::warn;

use super::config::{redacted_url, TlsOptions};
use crate::error::{Error, Result};

/// True for the schemes that mean TLS (`rediss`, `rediss-cluster`,
/// `rediss-sentinel`, and fred's `valkeys` spellings).
pub(crate) fn url_wants_tls(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or_default();
    let scheme = scheme.to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// Puts EchoMQ's TLS configuration on `fred_config` when the URL asks for TLS,
/// and refuses TLS options with a plaintext URL (a user who gave a CA file
/// expects encryption, and would not get it).
pub(crate) fn apply(fred_config: &mut Config, url: &str, opts: &TlsOptions) -> Result<()> {
    if !url_wants_tls(url) {
        if opts.is_set() {
            return Err(Error::Config(format!(
                "TLS options were given but {} is not a TLS URL: use rediss:// (or rediss-cluster://, rediss-sentinel://)",
                redacted_url(url)
            )));
        }
        return Ok(());
    }
    if opts.insecure {
        warn!(
            url = %redacted_url(url),
            "TLS certificate verification is OFF (tls_insecure): the server is not authenticated"
        );
    }
    fred_config.tls = Some(TlsConfig {
        connector: TlsConnector::from(client_config(opts)?),
        hostnames: TlsHostMapping::None,
    });
    Ok(())
}

/// A verifying client configuration (the system's roots, or `ca_file`) for
/// the crate's other TLS client, the HTTP processor: the same provider and
/// roots as for Redis. Without `load_roots` (a plaintext endpoint) and a CA
/// file, nothing is trusted, so that a machine without system roots can
/// still call `http://`.
#[cfg(any(feature = "http-processor", feature = "offload-s3"))]
pub(crate) fn verifying_config(ca_file: Option<&Path>, load_roots: bool) -> Result<ClientConfig> {
    let roots = if load_roots || ca_file.is_some() {
        roots(ca_file)?
    } else {
        RootCertStore::empty()
    };
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(opts: &TlsOptions) -> Result<ClientConfig> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?;
    let builder = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServer(provider)))
    } else {
        builder.with_root_certificates(roots(opts.ca_file.as_deref())?)
    };
    match (&opts.cert_file, &opts.key_file) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::Config(format!("TLS key file {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Config(format!("TLS client certificate: {e}")))
        }
        _ => Err(Error::Config(
            "TLS client authentication needs both a certificate file and a key file".into(),
        )),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::Config(format!("TLS certificate file {}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(unreadable(&"no PEM certificate in it"));
    }
    Ok(certs)
}

fn roots(ca_file: Option<&Path>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in certificates(path)? {
                store
                    .add(cert)
                    .map_err(|e| Error::Config(format!("TLS CA file {}: {e}", path.display())))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                warn!(error = %e, "a system root certificate could not be read");
            }
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::Config(
                    "TLS: no system root certificates found; give the server's CA with a CA file"
                        .into(),
                ));
            }
        }
    }
    Ok(store)
}

/// The verifier of `tls_insecure`: any certificate chain and name is
/// accepted, but the handshake signatures are still checked, so the session
/// is at least bound to the key the server presented.
#[derive(Debug)]
struct AcceptAnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::config::ConnectionConfig;

    #[test]
    fn tls_schemes() {
        for url in [
            "rediss://h:1",
            "rediss-cluster://h:1",
            "REDISS://h",
            "valkeys://h:1",
        ] {
            assert!(url_wants_tls(url), "{url}");
        }
        for url in ["redis://h:1", "redis-cluster://h:1", "redis-sentinel://h:1"] {
            assert!(!url_wants_tls(url), "{url}");
        }
    }

    #[test]
    fn tls_options_with_a_plaintext_url_are_refused() {
        let mut c = ConnectionConfig::with_url("redis://u:s3cret@127.0.0.1:1");
        c.tls.insecure = true;
        let mut fred = Config::from_url(&c.url).unwrap();
        let e = apply(&mut fred, &c.url, &c.tls).unwrap_err().to_string();
        assert!(e.contains("rediss://"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        assert!(fred.tls.is_none());
    }

    #[test]
    fn a_certificate_without_a_key_is_refused() {
        let opts = TlsOptions {
            cert_file: Some("/nonexistent/cert.pem".into()),
            insecure: true,
            ..TlsOptions::default()
        };
        let e = client_config(&opts).unwrap_err().to_string();
        assert!(e.contains("key file"), "{e}");
    }

    #[test]
    fn a_missing_ca_file_is_a_config_error() {
        let opts = TlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        assert!(matches!(client_config(&opts), Err(Error::Config(_))));
    }

    #[test]
    fn rediss_always_gets_a_verifying_tls_config() {
        let url = "rediss://127.0.0.1:1";
        let mut fred = Config::from_url(url).unwrap();
        fred.tls = None;
        // System roots may be absent on a minimal machine; a CA file is not.
        let dir = std::env::temp_dir().join(format!("emq-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, TEST_CA).unwrap();
        let opts = TlsOptions {
            ca_file: Some(ca),
            ..TlsOptions::default()
        };
        apply(&mut fred, url, &opts).unwrap();
        assert!(fred.tls.is_some());
        let _ = std::fs::remove_dir_all(dir);
    }

    // A throwaway self-signed CA (no key kept), only parsed here.
    const TEST_CA: &str = include_str!("tls_test_ca.pem");
}
