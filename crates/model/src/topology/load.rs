//! Reading a topology: TOML through figment with `GEOCOUNT_*` environment overrides, then
//! validation; every error becomes one line naming the file and the key.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Provider};

use super::{Topology, TopologyError};

impl Topology {
    /// Reads `file`, applies `GEOCOUNT_*` environment overrides, and validates the result.
    pub fn load(file: &Path) -> Result<Self, TopologyError> {
        Self::load_with_env(file, Env::prefixed("GEOCOUNT_").split("__"))
    }

    pub(super) fn load_with_env(file: &Path, env: impl Provider) -> Result<Self, TopologyError> {
        let error = |key: &str, message: String| TopologyError {
            file: file.to_owned(),
            key: key.to_owned(),
            message,
        };
        // figment treats a missing file as empty; a missing topology must be an error.
        std::fs::metadata(file).map_err(|e| error("(file)", format!("cannot read: {e}")))?;
        let topology: Topology = Figment::from(Toml::file_exact(file))
            .merge(env)
            .extract()
            .map_err(|e| {
                let (key, message) = describe_figment_error(&e);
                error(&key, message)
            })?;
        topology
            .validate()
            .map_err(|(key, message)| error(&key, message))?;
        Ok(topology)
    }

    /// Parses a topology from TOML text (no environment overrides), for tools and tests.
    pub fn from_toml(name: &str, text: &str) -> Result<Self, TopologyError> {
        let error = |key: String, message: String| TopologyError {
            file: PathBuf::from(name),
            key,
            message,
        };
        let topology: Topology = Figment::from(Toml::string(text)).extract().map_err(|e| {
            let (key, message) = describe_figment_error(&e);
            error(key, message)
        })?;
        topology
            .validate()
            .map_err(|(key, message)| error(key, message))?;
        Ok(topology)
    }
}

/// The key and a one-line message for a figment error, naming the environment variable when the
/// bad value came from one.
fn describe_figment_error(e: &figment::Error) -> (String, String) {
    let key = if e.path.is_empty() {
        "(file)".to_owned()
    } else {
        e.path.join(".")
    };
    let mut message = one_line(&e.kind.to_string());
    let from_environment = e
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    if from_environment && !e.path.is_empty() {
        let variable = format!("GEOCOUNT_{}", e.path.join("__").to_uppercase());
        message.push_str(&format!(" (from environment variable {variable})"));
    }
    (key, message)
}

/// Folds a multi-line message (TOML syntax errors carry a source excerpt) into one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
