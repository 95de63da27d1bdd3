//! TLS for end-to-end tests: one CA per test process, made in memory, that issues a
//! certificate to every process of a [`TestTopology`](crate::TestTopology), and the clients
//! that trust it.
//!
//! With `E2E_TLS=1` every test topology has a `[tls]` section and every [`Api`]
//! speaks TLS: `scripts/test.sh` runs end-to-end suites a second time that way. A test may also
//! turn TLS on for its whole process with [`force`].
//!
//! [`Api`]: crate::Api

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use geocount_net::tls::{client_config_trusting, tls_connector};
use geocount_net::{Connector, tcp_connector};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, Ia5String, IsCa, KeyPair, SanType,
};

/// The environment variable that turns TLS on for every test topology and client (not
/// `GEOCOUNT_*`: the tiers read those as overrides of the topology).
pub const TLS_ENV: &str = "E2E_TLS";

static FORCED: AtomicBool = AtomicBool::new(false);

/// Whether this test process runs with TLS: [`TLS_ENV`] is `1`, or a test called [`force`].
pub fn enabled() -> bool {
    FORCED.load(Ordering::Relaxed) || std::env::var(TLS_ENV).is_ok_and(|v| v == "1")
}

/// Turns TLS on for the rest of this test process (every test topology and client made from
/// then on), whatever [`TLS_ENV`] says.
pub fn force() {
    FORCED.store(true, Ordering::Relaxed);
}

/// A certificate authority, for tests.
pub struct TestCa {
    certificate: Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// The CA of this test process, made on first use.
pub fn test_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("geocount test CA"))
}

impl TestCa {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let certificate = params.self_signed(&key).expect("self-signed CA");
        Self { certificate, key }
    }

    /// Writes the CA certificate to `file` (PEM).
    pub fn write_ca(&self, file: &Path) {
        std::fs::write(file, self.certificate.pem()).expect("write CA certificate");
    }

    /// Issues process `name` a certificate for `127.0.0.1` and `localhost` that names it with
    /// the URI `geocount:<name>` (as `scripts/make-certs.sh` does), written (PEM) to
    /// `<dir>/<name>.pem` with its key in `<dir>/<name>-key.pem`, as `[tls] cert_dir` expects.
    pub fn issue(&self, dir: &Path, name: &str) {
        let key = KeyPair::generate().expect("node key");
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("node parameters");
        let uri = Ia5String::try_from(format!("geocount:{name}")).expect("an ASCII URI");
        params.subject_alt_names.push(SanType::URI(uri));
        params.distinguished_name.push(DnType::CommonName, name);
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("sign node certificate");
        std::fs::write(dir.join(format!("{name}.pem")), certificate.pem()).expect("write cert");
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem())
            .expect("write key");
    }

    /// A connector that speaks TLS and trusts this CA only.
    pub fn connector(&self) -> Connector {
        self.connector_over(tcp_connector())
    }

    /// Like [`TestCa::connector`], over the connections `inner` opens.
    pub fn connector_over(&self, inner: Connector) -> Connector {
        let config = client_config_trusting(vec![self.certificate.der().clone()])
            .expect("client configuration");
        tls_connector(inner, config)
    }
}

/// Writes the test CA and a certificate for each of `names` into `<dir>/certs`, and gives the
/// `[tls]` section that uses them.
pub fn write_certificates(dir: &Path, names: &[String]) -> String {
    let certs: PathBuf = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("create certs directory");
    let ca = test_ca();
    let ca_file = certs.join("ca.pem");
    ca.write_ca(&ca_file);
    for name in names {
        ca.issue(&certs, name);
    }
    format!(
        "[tls]\nca = \"{}\"\ncert_dir = \"{}\"\n",
        ca_file.display(),
        certs.display()
    )
}
