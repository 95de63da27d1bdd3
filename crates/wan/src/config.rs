//! The emulator's configuration file: where its control API listens, and its links.
//!
//! ```toml
//! control = "127.0.0.1:9000"
//!
//! [[links]]
//! name = "global-to-asia"          # letters, digits, `_`, `-` and `.`: it appears in URLs
//! listen = "127.0.0.1:9200"        # the proxy listens here...
//! target = "127.0.0.1:7200"        # ...and forwards every connection here
//! delay_ms = 100                   # one-way, each direction (optional, 0)
//! jitter_ms = 10                   # uniform ± per chunk (optional, 0)
//! bandwidth_bytes_per_sec = 0      # each direction, 0 = no cap (optional, 0)
//! ```
//!
//! Read with figment; every error names the file and the key, as the topology's do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Toml};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::shaping::Shaping;

/// The whole emulator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanConfig {
    /// Where the control API listens.
    pub control: SocketAddr,
    /// The links, each one TCP proxy.
    #[serde(default)]
    pub links: Vec<LinkConfig>,
}

/// One link: a proxy from `listen` to `target` with its shaping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Its name, used in the control API's paths: letters, digits, `_`, `-` and `.`.
    pub name: String,
    /// Where the proxy listens; port 0 picks a free port (`GET /links` shows which).
    pub listen: SocketAddr,
    /// Where it forwards each connection.
    pub target: SocketAddr,
    /// One-way delay in each direction, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// Uniform jitter of each chunk's delay, ± milliseconds.
    #[serde(default)]
    pub jitter_ms: u64,
    /// The cap of each direction in bytes per second; 0 is none.
    #[serde(default)]
    pub bandwidth_bytes_per_sec: u64,
}

impl LinkConfig {
    /// The link's initial shaping.
    pub fn shaping(&self) -> Shaping {
        Shaping {
            delay_ms: self.delay_ms,
            jitter_ms: self.jitter_ms,
            bandwidth_bytes_per_sec: self.bandwidth_bytes_per_sec,
        }
    }
}

impl WanConfig {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        // figment treats a missing file as empty; a missing configuration must be an error.
        std::fs::metadata(file).map_err(|e| ConfigError {
            file: file.to_owned(),
            key: "(file)".to_owned(),
            message: format!("cannot read: {e}"),
        })?;
        Self::extract(file, Figment::from(Toml::file_exact(file)))
    }

    /// Parses TOML text, reporting errors under the file name `name`, for tools and tests.
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        Self::extract(Path::new(name), Figment::from(Toml::string(text)))
    }

    fn extract(file: &Path, figment: Figment) -> Result<Self, ConfigError> {
        let error = |key: String, message: String| ConfigError {
            file: PathBuf::from(file),
            key,
            message,
        };
        let config: WanConfig = figment.extract().map_err(|e| {
            // A missing key is reported at its table: name the key itself.
            let mut path = e.path.clone();
            if let figment::error::Kind::MissingField(field) = &e.kind {
                path.push(field.to_string());
            }
            error(describe_path(&path), one_line(&e.kind.to_string()))
        })?;
        config
            .validate()
            .map_err(|(key, message)| error(key, message))?;
        Ok(config)
    }

    /// Checks what serde cannot: names, duplicates, bounds.
    fn validate(&self) -> Result<(), (String, String)> {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut addresses: HashMap<SocketAddr, String> = HashMap::new();
        addresses.insert(self.control, "control".to_owned());
        for (i, link) in self.links.iter().enumerate() {
            let key = |field: &str| format!("links[{i}].{field}");
            if let Err(message) = check_name(&link.name) {
                return Err((key("name"), message));
            }
            if let Some(first) = names.insert(&link.name, i) {
                return Err((
                    key("name"),
                    format!("duplicate link {:?} (also links[{first}])", link.name),
                ));
            }
            // Port 0 asks for any free port, so two of them never collide.
            if link.listen.port() != 0
                && let Some(first) = addresses.insert(link.listen, key("listen"))
            {
                return Err((
                    key("listen"),
                    format!("duplicate address {} (also at {first})", link.listen),
                ));
            }
            if link.target == link.listen {
                return Err((
                    key("target"),
                    format!("{} is the link's own listen address", link.target),
                ));
            }
            if link.target.port() == 0 {
                return Err((key("target"), "port 0 cannot be connected to".to_owned()));
            }
            link.shaping()
                .validate()
                .map_err(|(field, message)| (key(field), message))?;
        }
        Ok(())
    }
}

/// Checks a link name: 1 to 64 letters, digits, `_`, `-`, `.` and `@` (the launcher names the
/// link of a replica `<link>@<replica>`), so it is one path segment.
pub fn check_name(name: &str) -> Result<(), String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"_-.@".contains(&b);
    if name.is_empty() || name.len() > 64 || !name.bytes().all(allowed) {
        return Err(format!(
            "{name:?} must be 1 to 64 letters, digits, _, -, . and @"
        ));
    }
    Ok(())
}

/// The key of a figment error path: `links[1].delay_ms` for `["links", "1", "delay_ms"]`.
fn describe_path(path: &[String]) -> String {
    if path.is_empty() {
        return "(file)".to_owned();
    }
    let mut key = String::new();
    for part in path {
        if part.bytes().all(|b| b.is_ascii_digit()) && !key.is_empty() {
            key.push_str(&format!("[{part}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
    }
    key
}

/// Folds a multi-line message (TOML syntax errors carry a source excerpt) into one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
control = "127.0.0.1:9000"

[[links]]
name = "global-to-asia"
listen = "127.0.0.1:9200"
target = "127.0.0.1:7200"
delay_ms = 100
jitter_ms = 10
bandwidth_bytes_per_sec = 1000000

[[links]]
name = "asia-to-global"
listen = "127.0.0.1:9201"
target = "127.0.0.1:7000"
"#;

    fn load(text: &str) -> Result<WanConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wan.toml");
        std::fs::write(&path, text).unwrap();
        WanConfig::load(&path)
    }

    #[test]
    fn a_good_file_loads_with_defaults() {
        let config = load(GOOD).unwrap();
        assert_eq!(config.control, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.links.len(), 2);
        assert_eq!(
            config.links[0].shaping(),
            Shaping {
                delay_ms: 100,
                jitter_ms: 10,
                bandwidth_bytes_per_sec: 1_000_000
            }
        );
        assert_eq!(config.links[1].shaping(), Shaping::default());
    }

    #[test]
    fn bad_values_name_the_file_and_the_key() {
        let err = load(&GOOD.replace("delay_ms = 100", "delay_ms = \"slow\"")).unwrap_err();
        assert_eq!(err.key, "links[0].delay_ms", "{err}");
        assert!(
            err.to_string().contains("wan.toml: links[0].delay_ms: "),
            "{err}"
        );

        let err = load(&GOOD.replace("\"127.0.0.1:7000\"", "\"nowhere\"")).unwrap_err();
        assert_eq!(err.key, "links[1].target", "{err}");

        let err = load(&GOOD.replace("jitter_ms", "jiter_ms")).unwrap_err();
        assert!(err.to_string().contains("jiter_ms"), "{err}");

        let err = load(&GOOD.replace("control =", "# control =")).unwrap_err();
        assert_eq!(err.key, "control", "{err}");

        let err = load(&GOOD.replace("target = \"127.0.0.1:7000\"", "")).unwrap_err();
        assert_eq!(err.key, "links[1].target", "{err}");

        let err = load(&GOOD.replace("delay_ms = 100", "delay_ms = 60001")).unwrap_err();
        assert_eq!(err.key, "links[0].delay_ms", "{err}");
    }

    #[test]
    fn names_and_addresses_are_checked() {
        let err = load(&GOOD.replace("asia-to-global", "global-to-asia")).unwrap_err();
        assert_eq!(err.key, "links[1].name");
        assert!(err.message.contains("links[0]"), "{err}");

        let err = load(&GOOD.replace("global-to-asia", "to asia/1")).unwrap_err();
        assert_eq!(err.key, "links[0].name");
        // A replica's link, as the launcher names it.
        assert!(load(&GOOD.replace("global-to-asia", "global-to-asia@1")).is_ok());

        let err = load(&GOOD.replace("127.0.0.1:9201", "127.0.0.1:9200")).unwrap_err();
        assert_eq!(err.key, "links[1].listen");

        let err = load(&GOOD.replace("127.0.0.1:9201", "127.0.0.1:9000")).unwrap_err();
        assert_eq!(err.key, "links[1].listen");
        assert!(err.message.contains("control"), "{err}");

        let err = load(&GOOD.replace("127.0.0.1:7200", "127.0.0.1:9200")).unwrap_err();
        assert_eq!(err.key, "links[0].target");

        // Any number of links may ask for a free port.
        let text = GOOD
            .replace("127.0.0.1:9200", "127.0.0.1:0")
            .replace("127.0.0.1:9201", "127.0.0.1:0");
        assert!(load(&text).is_ok());
    }

    #[test]
    fn errors_are_one_line() {
        let err = load("control = \n[[links]\n").unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
        assert!(err.to_string().contains("wan.toml: (file): "), "{err}");
    }

    #[test]
    fn a_missing_file_is_an_error() {
        let err = WanConfig::load(Path::new("/nonexistent/wan.toml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/wan.toml: (file): cannot read"),
            "{err}"
        );
    }

    #[test]
    fn text_parses_under_a_given_name() {
        let config = WanConfig::from_toml("inline", "control = \"127.0.0.1:1\"").unwrap();
        assert!(config.links.is_empty());
        let err = WanConfig::from_toml("inline", "control = 1").unwrap_err();
        assert!(err.to_string().starts_with("inline: control: "), "{err}");
    }
}
