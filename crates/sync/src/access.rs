//! Who may call what: the checks of the topology's `[auth]` section ([`AuthConfig`]), run by
//! every tier's handler right after its route is matched and before anything else
//! ([`crate::http::answer`]), so a refused request changes nothing.
//!
//! - The client API needs `Authorization: Bearer <token>` when tokens are configured: a missing
//!   or unknown token is 401 ([`AccessError::MissingToken`], [`AccessError::InvalidToken`], with
//!   `WWW-Authenticate: Bearer`), a known one without the route's right is 403
//!   ([`AccessError::Forbidden`]).
//! - The routes between tiers (`/sync`, `/slots/{slot}/copy`, a shard node's forwarded writes)
//!   need the cluster secret in [`CLUSTER_SECRET_HEADER`] when one is configured: missing or
//!   wrong is 403, logged with the peer's address. Every tier sends it on every request to
//!   another ([`Access::cluster_client`]).
//! - `/healthz`, `/metrics` and `/openapi.json` stay open: probes and scrapers need no
//!   credential, and they tell nothing about counters.
//!
//! Tokens and the secret are compared in constant time (`subtle`).

use geocount_model::{AuthConfig, Right, Secret};
use geocount_net::{HttpClient, HttpError, Response, error_response};
use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use subtle::ConstantTimeEq;

/// The header carrying the cluster secret on every request one tier sends another.
pub const CLUSTER_SECRET_HEADER: &str = "x-geocount-cluster-secret";

/// What a route asks of a request before it runs: each tier's `api.rs` says it per route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: health, metrics, the OpenAPI document.
    Open,
    /// A client token with this right (when tokens are configured).
    Right(Right),
    /// The cluster secret (when one is configured): routes only other tiers call.
    Cluster,
}

/// Why a request was refused before its route ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No `Authorization: Bearer` header.
    #[error("a token is needed: send Authorization: Bearer <token>")]
    MissingToken,
    /// A bearer token that is not configured.
    #[error("the bearer token is not valid")]
    InvalidToken,
    /// A valid token without the right the route needs.
    #[error("token {name:?} lacks the {right} right this request needs")]
    Forbidden {
        /// The token's name.
        name: String,
        /// The right the route needs.
        right: Right,
    },
    /// A route between tiers called without the cluster secret.
    #[error("only geocount's own tiers may call this: the cluster secret is missing")]
    MissingSecret,
    /// A route between tiers called with a wrong cluster secret.
    #[error("only geocount's own tiers may call this: the cluster secret is wrong")]
    WrongSecret,
}

impl HttpError for AccessError {
    fn status(&self) -> StatusCode {
        match self {
            AccessError::MissingToken | AccessError::InvalidToken => StatusCode::UNAUTHORIZED,
            AccessError::Forbidden { .. }
            | AccessError::MissingSecret
            | AccessError::WrongSecret => StatusCode::FORBIDDEN,
        }
    }

    /// `{"error"}` with the status; a 401 says the scheme the client must use.
    fn to_response(&self) -> Response {
        let mut response = error_response(self.status(), &self.to_string());
        if self.status() == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"geocount\""),
            );
        }
        response
    }
}

/// One configured token.
#[derive(Debug, Clone)]
struct Token {
    name: String,
    token: Secret,
    rights: Vec<Right>,
}

impl Token {
    /// Whether it holds `right` (admin holds every right).
    fn grants(&self, right: Right) -> bool {
        self.rights
            .iter()
            .any(|r| *r == right || *r == Right::Admin)
    }
}

/// A tier's access rules, from the topology's `[auth]`. The default lets everything through.
#[derive(Debug, Clone, Default)]
pub struct Access {
    tokens: Vec<Token>,
    cluster_secret: Option<Secret>,
}

impl Access {
    /// The rules `config` describes.
    pub fn new(config: &AuthConfig) -> Self {
        Self {
            tokens: config
                .tokens
                .iter()
                .map(|t| Token {
                    name: t.name.clone(),
                    token: t.token.clone(),
                    rights: t.rights.clone(),
                })
                .collect(),
            cluster_secret: config.cluster_secret.clone(),
        }
    }

    /// Lets a request with `headers` through for a route that needs `need`, or says why not;
    /// the name of the token it was let through with, if one.
    pub fn check(&self, need: Need, headers: &HeaderMap) -> Result<Option<&str>, AccessError> {
        match need {
            Need::Open => Ok(None),
            Need::Right(_) if self.tokens.is_empty() => Ok(None),
            Need::Right(right) => {
                let given = bearer(headers).ok_or(AccessError::MissingToken)?;
                // Every token is compared, so the time taken does not say which one matched.
                let mut found = None;
                for token in &self.tokens {
                    if bool::from(token.token.expose().as_bytes().ct_eq(given)) {
                        found = Some(token);
                    }
                }
                let token = found.ok_or(AccessError::InvalidToken)?;
                if token.grants(right) {
                    Ok(Some(token.name.as_str()))
                } else {
                    Err(AccessError::Forbidden {
                        name: token.name.clone(),
                        right,
                    })
                }
            }
            Need::Cluster => {
                let Some(secret) = &self.cluster_secret else {
                    return Ok(None);
                };
                let given = headers
                    .get(CLUSTER_SECRET_HEADER)
                    .ok_or(AccessError::MissingSecret)?;
                if bool::from(secret.expose().as_bytes().ct_eq(given.as_bytes())) {
                    Ok(None)
                } else {
                    Err(AccessError::WrongSecret)
                }
            }
        }
    }

    /// `client`, sending the cluster secret (if one is configured) with every request: what a
    /// tier uses to call the others.
    pub fn cluster_client(&self, client: HttpClient) -> HttpClient {
        match &self.cluster_secret {
            Some(secret) => client
                .with_header(CLUSTER_SECRET_HEADER, secret.expose())
                .expect("the topology's validation allows only visible ASCII in the secret"),
            None => client,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::TokenConfig;

    const READER: &str = "reader-0123456789abcdef0123456789abcdef";
    const WRITER: &str = "writer-0123456789abcdef0123456789abcdef";
    const ADMIN: &str = "admin-0123456789abcdef0123456789abcdef";
    const SECRET: &str = "secret-0123456789abcdef0123456789abcdef";

    fn access() -> Access {
        let token = |name: &str, token: &str, rights: &[Right]| TokenConfig {
            name: name.into(),
            token: Secret::new(token),
            rights: rights.to_vec(),
        };
        Access::new(&AuthConfig {
            tokens: vec![
                token("dashboard", READER, &[Right::Read]),
                token("web", WRITER, &[Right::Write]),
                token("ops", ADMIN, &[Right::Admin]),
            ],
            cluster_secret: Some(Secret::new(SECRET)),
            insecure_public: false,
            insecure_plaintext: false,
        })
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn bearer_of(token: &str) -> HeaderMap {
        headers(&[("authorization", &format!("Bearer {token}"))])
    }

    #[test]
    fn tokens_grant_their_rights_and_admin_grants_all() {
        let access = access();
        let read = Need::Right(Right::Read);
        let write = Need::Right(Right::Write);
        let admin = Need::Right(Right::Admin);
        assert_eq!(
            access.check(read, &bearer_of(READER)),
            Ok(Some("dashboard"))
        );
        assert_eq!(access.check(write, &bearer_of(WRITER)), Ok(Some("web")));
        for need in [read, write, admin] {
            assert_eq!(access.check(need, &bearer_of(ADMIN)), Ok(Some("ops")));
        }
        assert_eq!(
            access.check(write, &bearer_of(READER)),
            Err(AccessError::Forbidden {
                name: "dashboard".into(),
                right: Right::Write
            })
        );
        let refusal = access.check(admin, &bearer_of(WRITER)).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            refusal.to_string(),
            "token \"web\" lacks the admin right this request needs"
        );
        let scheme_in_any_case = headers(&[("authorization", &format!("bearer  {READER} "))]);
        assert_eq!(
            access.check(read, &scheme_in_any_case),
            Ok(Some("dashboard"))
        );
    }

    #[test]
    fn missing_or_unknown_tokens_are_401_with_a_challenge() {
        let access = access();
        let read = Need::Right(Right::Read);
        assert_eq!(
            access.check(read, &HeaderMap::new()),
            Err(AccessError::MissingToken)
        );
        for bad in [
            headers(&[("authorization", READER)]),
            headers(&[("authorization", &format!("Basic {READER}"))]),
            headers(&[("authorization", "Bearer ")]),
        ] {
            assert_eq!(access.check(read, &bad), Err(AccessError::MissingToken));
        }
        let wrong = bearer_of(&READER.replace('r', "R"));
        let refusal = access.check(read, &wrong).unwrap_err();
        assert_eq!(refusal, AccessError::InvalidToken);
        let response = refusal.to_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[WWW_AUTHENTICATE],
            "Bearer realm=\"geocount\""
        );
        // The cluster secret is no client token.
        assert_eq!(
            access.check(read, &bearer_of(SECRET)),
            Err(AccessError::InvalidToken)
        );
    }

    #[test]
    fn routes_between_tiers_need_the_cluster_secret() {
        let access = access();
        let with = |secret: &str| headers(&[(CLUSTER_SECRET_HEADER, secret)]);
        assert_eq!(access.check(Need::Cluster, &with(SECRET)), Ok(None));
        assert_eq!(
            access.check(Need::Cluster, &HeaderMap::new()),
            Err(AccessError::MissingSecret)
        );
        let refusal = access.check(Need::Cluster, &with(WRITER)).unwrap_err();
        assert_eq!(refusal, AccessError::WrongSecret);
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        // A client token, even an admin's, does not open them.
        assert_eq!(
            access.check(Need::Cluster, &bearer_of(ADMIN)),
            Err(AccessError::MissingSecret)
        );
        assert_eq!(access.check(Need::Open, &HeaderMap::new()), Ok(None));
    }

    #[test]
    fn without_auth_everything_is_open() {
        let open = Access::default();
        for need in [Need::Open, Need::Right(Right::Admin), Need::Cluster] {
            assert_eq!(open.check(need, &HeaderMap::new()), Ok(None));
        }
    }
}
