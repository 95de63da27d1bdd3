//! The `[auth]` section of the topology: who may call the client API (bearer tokens, each with
//! its rights), the secret the tiers' process keys derive from, and whether a node without
//! tokens may listen beyond loopback.
//!
//! ```toml
//! [auth]
//! cluster_secret = "…at least 32 visible ASCII characters…"
//! [[auth.tokens]]
//! name = "web"
//! token = "…at least 32 visible ASCII characters…"
//! rights = ["read", "write"]
//! ```
//!
//! With no `[auth]` section (the default) every route is open and every node must listen on a
//! loopback address unless `insecure_public = true`; with tokens or a cluster secret, a node
//! beyond loopback needs `[tls]` unless `insecure_plaintext = true`. The checks themselves run in
//! `geocount_http::access`.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The fewest characters a token or the cluster secret may have: 32 characters of a random
/// hex string are 128 bits.
pub const MIN_SECRET_LEN: usize = 32;

/// The `[auth]` section.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The client API's bearer tokens, one per application. None (the default): the client API
    /// is open, so the nodes must listen on loopback unless `insecure_public` is set.
    pub tokens: Vec<TokenConfig>,
    /// The secret the tiers' process keys derive from: with it, `/sync`, `/slots/{slot}/copy`
    /// and forwarded writes accept only the tier processes whose roles call them, each proving
    /// its name with its key `HMAC-SHA256(secret, "geocount process key\0" ‖ name)` (and with
    /// `[tls]` its client certificate); the secret itself is never sent. Without it those routes
    /// are open. Required with `tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_secret: Option<Secret>,
    /// Lets a node without `tokens` listen on a non-loopback address (default false): anyone
    /// who can reach it may then read, write and create counters.
    pub insecure_public: bool,
    /// Lets a node with `tokens` or a `cluster_secret` listen on a non-loopback address without
    /// `[tls]` (default false): the tokens and the process keys then cross the network in clear text,
    /// for anyone on the path to read and replay.
    pub insecure_plaintext: bool,
}

/// One application's token (`[[auth.tokens]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The application's name, for logs and refusals (never the token itself).
    pub name: String,
    /// The token: at least [`MIN_SECRET_LEN`] visible ASCII characters, e.g. `openssl rand -hex
    /// 32`.
    pub token: Secret,
    /// What it may do: `read`, `write`, `admin` (admin includes read and write).
    pub rights: Vec<Right>,
}

/// A right a token may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Right {
    /// Reads: counters, top K, trending, the datacenters' state.
    Read,
    /// Writes: single writes and batches, to any counter (one not yet created gets the
    /// defaults).
    Write,
    /// Creating counters (their type, shard count and window); includes read and write.
    Admin,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::Admin => "admin",
        })
    }
}

/// A secret string (a token, the cluster secret): its `Debug` never shows it, so a logged
/// configuration does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `secret`.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, to send or compare.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Why it is not a usable secret: too short, or not visible ASCII (it travels in a header).
    fn problem(&self) -> Option<String> {
        if self.0.len() < MIN_SECRET_LEN {
            Some(format!(
                "must be at least {MIN_SECRET_LEN} characters (e.g. `openssl rand -hex 32`), got {}",
                self.0.len()
            ))
        } else if !self.0.bytes().all(|b| b.is_ascii_graphic()) {
            Some("must be visible ASCII characters only, without spaces".into())
        } else {
            None
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl AuthConfig {
    /// Whether client tokens are configured (the client API then needs one).
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Refuses a node listening on `addr` beyond loopback without tokens (unless
    /// `insecure_public`), or with tokens or the cluster secret but without TLS (`tls`: whether
    /// the topology has `[tls]`; unless `insecure_plaintext`). The message says what to do.
    pub fn check_listen(&self, addr: SocketAddr, tls: bool) -> Result<(), String> {
        if addr.ip().is_loopback() {
            return Ok(());
        }
        if !self.has_tokens() && !self.insecure_public {
            return Err(format!(
                "{addr} is not a loopback address and [auth] has no tokens: add [[auth.tokens]], \
                 listen on 127.0.0.1, or set auth.insecure_public = true"
            ));
        }
        let credentials = self.has_tokens() || self.cluster_secret.is_some();
        if credentials && !tls && !self.insecure_plaintext {
            return Err(format!(
                "{addr} is not a loopback address and there is no [tls]: the tokens and the \
                 process keys would cross the network in clear text; add [tls], listen on \
                 127.0.0.1, or set auth.insecure_plaintext = true"
            ));
        }
        Ok(())
    }

    /// Checks what serde cannot; the error is the offending key (below `auth`) and a message.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if let Some(secret) = &self.cluster_secret
            && let Some(problem) = secret.problem()
        {
            return Err(("auth.cluster_secret".into(), problem));
        }
        if self.has_tokens() && self.cluster_secret.is_none() {
            return Err((
                "auth.cluster_secret".into(),
                "is required with auth.tokens: without it /sync, slot copies and forwarded \
                 writes would be open"
                    .into(),
            ));
        }
        for (i, token) in self.tokens.iter().enumerate() {
            let key = |field: &str| format!("auth.tokens[{i}].{field}");
            if token.name.is_empty() {
                return Err((key("name"), "must not be empty".into()));
            }
            if let Some(problem) = token.token.problem() {
                return Err((key("token"), problem));
            }
            if token.rights.is_empty() {
                return Err((key("rights"), "needs read, write or admin".into()));
            }
            if self.cluster_secret.as_ref() == Some(&token.token) {
                return Err((key("token"), "must differ from auth.cluster_secret".into()));
            }
            let earlier = &self.tokens[..i];
            if let Some(first) = earlier.iter().position(|t| t.name == token.name) {
                return Err((
                    key("name"),
                    format!(
                        "duplicate name {:?} (also auth.tokens[{first}])",
                        token.name
                    ),
                ));
            }
            if let Some(first) = earlier.iter().position(|t| t.token == token.token) {
                return Err((
                    key("token"),
                    format!("the same token as auth.tokens[{first}]"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, token: &str, rights: &[Right]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            token: Secret::new(token),
            rights: rights.to_vec(),
        }
    }

    fn secret(c: char) -> String {
        std::iter::repeat_n(c, MIN_SECRET_LEN).collect()
    }

    /// A valid section: one read token `ttt…`, the secret `sss…`.
    fn good() -> AuthConfig {
        AuthConfig {
            tokens: vec![token("web", &secret('t'), &[Right::Read])],
            cluster_secret: Some(Secret::new(secret('s'))),
            insecure_public: false,
            insecure_plaintext: false,
        }
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let config = good();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("tttt") && !shown.contains("ssss"),
            "{shown}"
        );
        assert!(shown.contains("web"), "{shown}");
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn bad_sections_name_the_key() {
        let good = good();
        let key_of = |config: &AuthConfig| config.validate().unwrap_err().0;
        let mut c = good.clone();
        c.cluster_secret = None;
        assert_eq!(key_of(&c), "auth.cluster_secret");
        let mut c = good.clone();
        c.cluster_secret = Some(Secret::new("short"));
        assert_eq!(key_of(&c), "auth.cluster_secret");
        let mut c = good.clone();
        c.tokens[0].token = Secret::new(format!("{} x", secret('t')));
        assert_eq!(key_of(&c), "auth.tokens[0].token");
        let mut c = good.clone();
        c.tokens[0].rights.clear();
        assert_eq!(key_of(&c), "auth.tokens[0].rights");
        let mut c = good.clone();
        c.tokens.push(token("web", &secret('u'), &[Right::Write]));
        assert_eq!(key_of(&c), "auth.tokens[1].name");
        let mut c = good.clone();
        c.tokens.push(token("app", &secret('t'), &[Right::Write]));
        assert_eq!(key_of(&c), "auth.tokens[1].token");
        let mut c = good;
        c.tokens[0].token = Secret::new(secret('s'));
        assert_eq!(key_of(&c), "auth.tokens[0].token");
        let secret_only = AuthConfig {
            cluster_secret: Some(Secret::new(secret('s'))),
            ..AuthConfig::default()
        };
        assert_eq!(secret_only.validate(), Ok(()));
    }

    #[test]
    fn only_loopback_without_tokens_unless_insecure_public() {
        let open = AuthConfig::default();
        let (loopback, public_addr) = (
            "127.0.0.1:7000".parse().unwrap(),
            "0.0.0.0:7000".parse().unwrap(),
        );
        assert_eq!(open.check_listen(loopback, false), Ok(()));
        assert_eq!(
            open.check_listen("[::1]:7000".parse().unwrap(), false),
            Ok(())
        );
        let error = open.check_listen(public_addr, true).unwrap_err();
        assert!(error.contains("auth.insecure_public"), "{error}");
        let public = AuthConfig {
            insecure_public: true,
            ..AuthConfig::default()
        };
        assert_eq!(public.check_listen(public_addr, false), Ok(()));
    }

    #[test]
    fn credentials_beyond_loopback_need_tls_unless_insecure_plaintext() {
        let public_addr = "10.0.0.5:7000".parse().unwrap();
        let with_tokens = AuthConfig {
            tokens: vec![TokenConfig {
                name: "web".into(),
                token: Secret::new("0123456789abcdef0123456789abcdef"),
                rights: vec![Right::Write],
            }],
            cluster_secret: Some(Secret::new("fedcba9876543210fedcba9876543210")),
            ..AuthConfig::default()
        };
        let error = with_tokens.check_listen(public_addr, false).unwrap_err();
        assert!(error.contains("auth.insecure_plaintext"), "{error}");
        assert_eq!(with_tokens.check_listen(public_addr, true), Ok(()));
        assert_eq!(
            with_tokens.check_listen("127.0.0.1:7000".parse().unwrap(), false),
            Ok(())
        );
        let said_so = AuthConfig {
            insecure_plaintext: true,
            ..with_tokens
        };
        assert_eq!(said_so.check_listen(public_addr, false), Ok(()));
    }
}
