//! The emulator's errors: a bad configuration file ([`ConfigError`]), a failure to start
//! ([`WanError`]), and the control API's refusals with their HTTP statuses ([`ControlError`]).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use geocount_net::{BodyError, HttpError};
use hyper::{Method, StatusCode};

/// A configuration that could not be read or is inconsistent. Displays as one line:
/// `<file>: <key>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {key}: {message}", file.display())]
pub struct ConfigError {
    /// The configuration file.
    pub file: PathBuf,
    /// The offending key, e.g. `links[1].delay_ms`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

/// Why the emulator could not run.
#[derive(Debug, thiserror::Error)]
pub enum WanError {
    /// The configuration is bad.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A link's address cannot be listened on.
    #[error("link {link}: cannot listen on {address}: {source}")]
    Bind {
        /// The link's name.
        link: String,
        /// Its `listen` address.
        address: SocketAddr,
        /// Why binding failed.
        source: io::Error,
    },
}

/// What the control API refuses. Every refusal is answered `{"error": "<message>"}`.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A path no route matches.
    #[error("no such endpoint: {0}")]
    NoRoute(String),
    /// A known path with a method it does not take.
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed {
        /// The method used.
        method: Method,
        /// The path.
        path: String,
    },
    /// No link has that name.
    #[error("no link named {name:?} (known: {known})")]
    UnknownLink {
        /// The name asked for.
        name: String,
        /// The names of the links, comma-separated.
        known: String,
    },
    /// A body that is not a valid change.
    #[error("{0}")]
    BadRequest(String),
    /// The body could not be read or is too large.
    #[error(transparent)]
    Body(#[from] BodyError),
}

impl HttpError for ControlError {
    fn status(&self) -> StatusCode {
        match self {
            ControlError::NoRoute(_) | ControlError::UnknownLink { .. } => StatusCode::NOT_FOUND,
            ControlError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ControlError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ControlError::Body(refusal) => refusal.status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_status() {
        let cases = [
            (ControlError::NoRoute("/x".into()), 404),
            (
                ControlError::UnknownLink {
                    name: "x".into(),
                    known: "a, b".into(),
                },
                404,
            ),
            (
                ControlError::MethodNotAllowed {
                    method: Method::DELETE,
                    path: "/links".into(),
                },
                405,
            ),
            (ControlError::BadRequest("bad".into()), 400),
            (ControlError::Body(BodyError::TooLarge { limit: 1 }), 413),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
        }
    }

    #[test]
    fn a_config_error_is_one_line_naming_file_and_key() {
        let error = ConfigError {
            file: "wan.toml".into(),
            key: "links[0].delay_ms".into(),
            message: "invalid type".into(),
        };
        assert_eq!(
            error.to_string(),
            "wan.toml: links[0].delay_ms: invalid type"
        );
    }
}
