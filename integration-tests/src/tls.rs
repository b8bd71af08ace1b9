//! A TLS-only `redis-server` for the TLS tests, with certificates made at
//! test time by the `openssl` command: a CA, a server certificate for
//! `127.0.0.1`/`localhost` signed by it, a client certificate signed by it
//! (mutual TLS), and an unrelated CA that must never be trusted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::launch::{self, Probe, ServerArgs};

/// Certificates in PEM files, in a temporary directory kept while this lives.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// Makes a fresh CA, server and client certificates, and a second CA.
    ///
    /// Panics with one line saying to install `openssl` when it is missing.
    pub fn generate() -> Certs {
        let dir = tempfile::tempdir().expect("temp dir for certificates");
        let d = dir.path();
        for ca in ["ca", "other-ca"] {
            openssl(
                d,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=echomq test {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.pem"),
                ],
            );
        }
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n")
            .expect("write client.ext");
        for who in ["server", "client"] {
            openssl(
                d,
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    &format!("/CN=echomq test {who}"),
                    "-keyout",
                    &format!("{who}.key"),
                    "-out",
                    &format!("{who}.csr"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{who}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{who}.ext"),
                    "-out",
                    &format!("{who}.pem"),
                ],
            );
        }
        Certs { dir }
    }

    /// A file of the set: `ca.pem`, `other-ca.pem`, `server.pem`,
    /// `server.key`, `client.pem`, `client.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A CA that signed nothing here.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }

    /// The client certificate chain (mutual TLS).
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.pem")
    }

    /// The client's private key.
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run openssl ({e}): install it (Debian/Ubuntu: `apt-get install openssl`)"
            )
        });
    assert!(
        out.status.success(),
        "openssl {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `redis-server` that speaks TLS only (`--port 0 --tls-port P`), killed
/// when dropped.
pub struct TlsRedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl TlsRedisServer {
    /// Starts a TLS-only server with `certs`; with `require_client_cert` it
    /// refuses clients without a certificate signed by the CA
    /// (`--tls-auth-clients yes`).
    pub fn start(certs: &Certs, require_client_cert: bool) -> TlsRedisServer {
        let dir = tempfile::tempdir().expect("temp dir for redis-server");
        let path = |p: PathBuf| p.to_str().expect("utf-8 temp path").to_owned();
        let probe = Probe::Tls(vec![
            "--tls".into(),
            "--cacert".into(),
            path(certs.ca()),
            "--cert".into(),
            path(certs.client_cert()),
            "--key".into(),
            path(certs.client_key()),
        ]);
        let (child, port) = launch::start_on_free_port("TLS redis-server", &probe, |port| {
            ServerArgs::new(port, dir.path())
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--tls-cert-file", &path(certs.path("server.pem"))])
                .args(["--tls-key-file", &path(certs.path("server.key"))])
                .args(["--tls-ca-cert-file", &path(certs.ca())])
                .args([
                    "--tls-auth-clients",
                    if require_client_cert { "yes" } else { "no" },
                ])
        });
        TlsRedisServer {
            child,
            port,
            _dir: dir,
        }
    }

    /// The TLS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsRedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
