//! The `[tls]` section of the topology: where the CA and each process's certificate and key
//! are. Loading them is `geocount_net::tls`'s; this only names the files.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::TopologyError;

/// TLS on every listener and every call between tiers (`[tls]`): each process serves HTTPS
/// with its own certificate and verifies the processes it calls against one CA. Without the
/// section every tier speaks plain HTTP. Relative paths are relative to the working directory,
/// like `shard.data_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// The CA certificate (PEM) every tier trusts; tools (geoctl, the launcher) trust it too.
    pub ca: PathBuf,
    /// The directory of the processes' certificates: per process, `<name>.pem` (its
    /// certificate chain, PEM) and `<name>-key.pem` (its private key, PEM), where `<name>` is
    /// `global`, `aggregator_<DC>` or `DC_<DC>_VAL_<n>` (`scripts/make-certs.sh` writes them).
    /// A certificate must name the address the process is reached at (an IP address or a DNS
    /// name).
    pub cert_dir: PathBuf,
}

impl TlsSettings {
    /// The certificate chain of process `name`.
    pub fn cert(&self, name: &str) -> PathBuf {
        self.cert_dir.join(format!("{name}.pem"))
    }

    /// The private key of process `name`.
    pub fn key(&self, name: &str) -> PathBuf {
        self.cert_dir.join(format!("{name}-key.pem"))
    }

    /// The configuration error of `topology_file` for the file `file` of this section, which
    /// could not be used: keyed `tls.ca` for the CA, `tls.cert_dir` for a certificate or key.
    pub fn file_error(
        &self,
        topology_file: &Path,
        file: &Path,
        message: impl fmt::Display,
    ) -> TopologyError {
        let key = if file == self.ca {
            "tls.ca"
        } else {
            "tls.cert_dir"
        };
        TopologyError {
            file: topology_file.to_owned(),
            key: key.to_owned(),
            message: format!("{}: {message}", file.display()),
        }
    }

    /// Checks what serde cannot: no empty path.
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        for (key, path) in [("tls.ca", &self.ca), ("tls.cert_dir", &self.cert_dir)] {
            if path.as_os_str().is_empty() {
                return Err((key.to_owned(), "must not be empty".to_owned()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::{GLOBAL_PROCESS, aggregator_process};

    #[test]
    fn files_are_named_after_the_process() {
        let tls = TlsSettings {
            ca: "certs/ca.pem".into(),
            cert_dir: "certs".into(),
        };
        assert_eq!(
            tls.cert("DC_USA_0_VAL_1"),
            Path::new("certs/DC_USA_0_VAL_1.pem")
        );
        assert_eq!(
            tls.key(&aggregator_process("USA_0")),
            Path::new("certs/aggregator_USA_0-key.pem")
        );
        let error = tls.file_error(Path::new("geo.toml"), &tls.ca, "cannot read: gone");
        assert_eq!(
            error.to_string(),
            "geo.toml: tls.ca: certs/ca.pem: cannot read: gone"
        );
        let error = tls.file_error(Path::new("geo.toml"), &tls.key(GLOBAL_PROCESS), "bad PEM");
        assert_eq!(
            error.to_string(),
            "geo.toml: tls.cert_dir: certs/global-key.pem: bad PEM"
        );
    }
}
