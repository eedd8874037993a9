//! A PostgreSQL server with TLS on, for one test: a certificate authority made at start ([`TestCa`],
//! with `rcgen`), a server certificate it signs for the host name `localhost` only, and `ssl=on`.
//! The server stops, and its files go, when the [`TlsServer`] is dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::{Server, ServerSetup, pg_binaries};

/// How long a stopping server may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A certificate authority made for a test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name` (its common name), with a fresh ECDSA P-256 key.
    ///
    /// # Panics
    /// When `rcgen` cannot make it.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).expect("a CA certificate").pem();
        TestCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// The CA's certificate, PEM (what `sslrootcert` names).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `names` (DNS names or IP addresses) signed by this CA, and its
    /// key: `(certificate PEM, key PEM)`.
    ///
    /// # Panics
    /// When `rcgen` cannot make it.
    pub fn server_certificate(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server parameters");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let certificate = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        (certificate.pem(), key.serialize_pem())
    }
}

/// A PostgreSQL server of one test's own with TLS on (`ssl=on`): its certificate, for the host name
/// `localhost` only, is signed by a [`TestCa`] made at start. It listens on `127.0.0.1` and trusts
/// every login (as the shared test server does), so what a connection proves is its TLS.
#[derive(Debug)]
pub struct TlsServer {
    /// `None` once stopped.
    server: Option<ServerHandle>,
    ca: TestCa,
    /// The CA's certificate and other files of the test (removed on drop).
    scratch: PathBuf,
    port: u16,
}

/// [`Server`] with a `Debug` that shows what matters.
struct ServerHandle(Server);

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("port", &self.0.port)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Makes a CA and a server certificate, runs `initdb`, and starts `postgres` with `ssl=on`;
    /// returns once it accepts connections. `None` without PostgreSQL binaries ([`pg_binaries`]):
    /// skip the test loudly then ([`print_skip`](super::print_skip)).
    ///
    /// # Panics
    /// When the server cannot be started (with its log).
    pub async fn start() -> Option<TlsServer> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let bin = pg_binaries()?;
        let ca = TestCa::new("noetic test CA");
        let (certificate, key) = ca.server_certificate(&["localhost"]);
        let scratch = std::env::temp_dir().join(format!(
            "noetic-pg-tls-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&scratch)
            .unwrap_or_else(|error| panic!("creating {}: {error}", scratch.display()));
        std::fs::write(scratch.join("ca.pem"), ca.pem())
            .unwrap_or_else(|error| panic!("writing the CA certificate: {error}"));
        let server = tokio::task::spawn_blocking(move || {
            let setup = ServerSetup {
                files: vec![
                    ("server.crt", certificate.as_bytes()),
                    ("server.key", key.as_bytes()),
                ],
                args: vec!["-c", "ssl=on"],
            };
            Server::start_with(&bin, &setup)
        })
        .await
        .unwrap_or_else(|error| panic!("starting PostgreSQL with TLS panicked: {error}"))
        .unwrap_or_else(|error| panic!("the PostgreSQL server with TLS did not start: {error}"));
        if let Err(error) = server.wait_ready().await {
            let _ = server.stop(STOP_TIMEOUT);
            panic!("the PostgreSQL server with TLS did not start: {error}");
        }
        let port = server.port;
        Some(TlsServer {
            server: Some(ServerHandle(server)),
            ca,
            scratch,
            port,
        })
    }

    /// The CA that signed the server's certificate.
    pub fn ca(&self) -> &TestCa {
        &self.ca
    }

    /// The file holding the CA's certificate (for `sslrootcert`).
    pub fn ca_file(&self) -> PathBuf {
        self.scratch.join("ca.pem")
    }

    /// Writes `contents` to a file `name` among this test's files (removed on drop); returns its
    /// path.
    ///
    /// # Panics
    /// When it cannot be written.
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.scratch.join(name);
        std::fs::write(&path, contents)
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        path
    }

    /// The server's port (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the maintenance database through `host` (`localhost`, which the certificate names,
    /// or `127.0.0.1`, which it does not), with `sslmode` and, when given, `sslrootcert`.
    pub fn url(&self, host: &str, sslmode: &str, root_cert: Option<&Path>) -> String {
        let mut url = format!(
            "postgres://postgres@{host}:{}/postgres?sslmode={sslmode}",
            self.port
        );
        if let Some(root_cert) = root_cert {
            url.push_str("&sslrootcert=");
            url.push_str(&root_cert.display().to_string());
        }
        url
    }
}

impl Drop for TlsServer {
    /// Stops the server (waiting at most 30 s) and removes the test's files; a failure is printed,
    /// not raised (this also runs while a failed test unwinds).
    fn drop(&mut self) {
        if let Some(ServerHandle(server)) = self.server.take()
            && let Err(error) = server.stop(STOP_TIMEOUT)
        {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "WARNING: {error}");
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
