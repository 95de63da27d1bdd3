//! Who may call what: the checks of the topology's `[auth]` section ([`AuthConfig`]), run by
//! every tier's handler right after its route is matched and before anything else
//! ([`crate::routing::answer`]), so a refused request changes nothing.
//!
//! - The client API needs `Authorization: Bearer <token>` when tokens are configured: a missing
//!   or unknown token is 401 ([`AccessError::MissingToken`], [`AccessError::InvalidToken`], with
//!   `WWW-Authenticate: Bearer`), a known one without the route's right is 403
//!   ([`AccessError::Forbidden`]).
//! - The routes between tiers (`/sync`, `/slots/{slot}/copy`, a shard node's forwarded writes)
//!   need, when a cluster secret is configured, a process that proves its name (its client
//!   certificate with `[tls]`, its process key in any case: [`crate::roles`]) and whose role
//!   the route accepts ([`Need::Tier`]); anything else is 403 naming the caller's process and
//!   the route ([`AccessError::Tier`]), logged as a warning. Every tier proves itself on every
//!   request to another ([`Access::cluster_client`]).
//! - `/healthz`, `/metrics` and `/openapi.json` stay open: probes and scrapers need no
//!   credential, and they tell nothing about counters.
//!
//! Without a cluster secret (a loopback cluster without `[auth]`) the routes between tiers are
//! open. Tokens are compared in constant time (`subtle`), process keys too (`ring`).

use geocount_model::{AuthConfig, Right, Role, Secret};
use geocount_net::{HttpClient, HttpError, Response, error_response, json_response};
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, StatusCode};
use serde::Serialize;
use subtle::ConstantTimeEq;

use crate::roles::{Allow, PROCESS_HEADER, PROCESS_KEY_HEADER, ProcessKeys};

/// What a route asks of a request before it runs: each tier's `api.rs` says it per route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Nothing: health, metrics, the OpenAPI document.
    Open,
    /// A client token with this right (when tokens are configured).
    Right(Right),
    /// A tier process of one of these kinds (when a cluster secret is configured): routes
    /// only other tiers call. An empty list accepts no process.
    Tier(Vec<Allow>),
}

/// Why a route between tiers refused its caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierRefusal {
    /// No process named (no process header, and no client certificate).
    #[error("only geocount's own tiers may call it, and the caller named no process")]
    Unnamed,
    /// With `[tls]`: no client certificate of the cluster CA naming a process.
    #[error("it needs a client certificate of the cluster CA naming the process")]
    NoCertificate,
    /// With `[tls]`: the process header names another process than the certificate.
    #[error("the request names process {claimed:?}, its certificate another")]
    NotTheCertificate {
        /// The name the header claimed.
        claimed: String,
    },
    /// A name that is no process of a cluster.
    #[error("it names no process of the cluster")]
    NoSuchProcess,
    /// A missing or wrong process key.
    #[error("its process key is missing or wrong")]
    WrongKey,
    /// A proven process whose role the route does not accept.
    #[error("{allowed} may call it")]
    Role {
        /// Whom the route accepts.
        allowed: String,
    },
    /// A proven shard node announcing a slot in its pull that is not its own.
    #[error("it announced slot {slot:?}, and a node may announce only its own slot")]
    NotItsSlot {
        /// The slot announced.
        slot: String,
    },
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
    /// A route between tiers refused its caller.
    #[error("{route} refused to process {}: {why}", process.as_deref().unwrap_or("(none)"))]
    Tier {
        /// The process the caller proved or claimed to be, if any.
        process: Option<String>,
        /// The route: method and path.
        route: String,
        /// Why.
        why: TierRefusal,
    },
}

/// The JSON of a refused call between tiers.
#[derive(Serialize)]
struct TierRefused<'a> {
    error: String,
    process: Option<&'a str>,
    route: &'a str,
}

impl HttpError for AccessError {
    fn status(&self) -> StatusCode {
        match self {
            AccessError::MissingToken | AccessError::InvalidToken => StatusCode::UNAUTHORIZED,
            AccessError::Forbidden { .. } | AccessError::Tier { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// `{"error"}` with the status; a 401 says the scheme the client must use; a refused call
    /// between tiers also names the caller's `process` and the `route`.
    fn to_response(&self) -> Response {
        if let AccessError::Tier { process, route, .. } = self {
            let body = TierRefused {
                error: self.to_string(),
                process: process.as_deref(),
                route,
            };
            return json_response(self.status(), &body);
        }
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

/// How the tiers prove themselves to each other (with a cluster secret).
#[derive(Debug, Clone)]
struct Tiers {
    keys: ProcessKeys,
    /// This process's name and key, sent on every call to another tier.
    own: (String, String),
    /// Whether callers must also present a client certificate (`[tls]`).
    certificates: bool,
}

/// A request as the access check sees it.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// The process its connection's client certificate names, if it presented one.
    pub certified: Option<&'a str>,
    /// Its method.
    pub method: &'a Method,
    /// Its path.
    pub path: &'a str,
}

/// A tier's access rules, from the topology's `[auth]`. The default lets everything through.
#[derive(Debug, Clone, Default)]
pub struct Access {
    tokens: Vec<Token>,
    tiers: Option<Tiers>,
}

impl Access {
    /// The rules `config` describes, for process `process` (its name: `global`,
    /// `aggregator_<DC>` or `DC_<DC>_VAL_<n>`); `certificates`: whether the topology has
    /// `[tls]`, so that callers between tiers must present their client certificate.
    pub fn new(config: &AuthConfig, process: &str, certificates: bool) -> Self {
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
            tiers: config.cluster_secret.as_ref().map(|secret| {
                let keys = ProcessKeys::new(secret);
                Tiers {
                    own: (process.to_owned(), keys.key_of(process)),
                    keys,
                    certificates,
                }
            }),
        }
    }

    /// Whether the client API needs a bearer token: `[[auth.tokens]]` are configured.
    pub fn needs_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Whether the routes between tiers need a proven process: a cluster secret is configured.
    pub fn checks_processes(&self) -> bool {
        self.tiers.is_some()
    }

    /// Lets `caller` through for a route that needs `need`, or says why not; the name of the
    /// token it was let through with, if one.
    pub fn check(&self, need: &Need, caller: Caller<'_>) -> Result<Option<&str>, AccessError> {
        match need {
            Need::Open => Ok(None),
            Need::Right(_) if self.tokens.is_empty() => Ok(None),
            Need::Right(right) => {
                let given = bearer(caller.headers).ok_or(AccessError::MissingToken)?;
                // Every token is compared, so the time taken does not say which one matched.
                let mut found = None;
                for token in &self.tokens {
                    if bool::from(token.token.expose().as_bytes().ct_eq(given)) {
                        found = Some(token);
                    }
                }
                let token = found.ok_or(AccessError::InvalidToken)?;
                if token.grants(*right) {
                    Ok(Some(token.name.as_str()))
                } else {
                    Err(AccessError::Forbidden {
                        name: token.name.clone(),
                        right: *right,
                    })
                }
            }
            Need::Tier(allowed) => match &self.tiers {
                None => Ok(None),
                Some(tiers) => tiers.check(allowed, caller).map(|()| None),
            },
        }
    }

    /// The process `caller` proved to be, once [`check`](Self::check) let it through a route
    /// that needs `need`: the name its client certificate gives (verified against the cluster
    /// CA when the connection was accepted) or, without one, the name its process key proved.
    /// `None` for any other route, or when nothing proves a name (no `[tls]`, no cluster
    /// secret).
    pub fn proven_process<'a>(&self, need: &Need, caller: Caller<'a>) -> Option<&'a str> {
        if !matches!(need, Need::Tier(_)) {
            return None;
        }
        match &self.tiers {
            Some(tiers) if !tiers.certificates => caller
                .headers
                .get(PROCESS_HEADER)
                .and_then(|name| name.to_str().ok()),
            _ => caller.certified,
        }
    }

    /// `client`, proving this process (its name and key, if a cluster secret is configured)
    /// on every request: what a tier uses to call the others. With `[tls]` its connector
    /// presents the process's certificate too.
    pub fn cluster_client(&self, client: HttpClient) -> HttpClient {
        match &self.tiers {
            Some(Tiers {
                own: (name, key), ..
            }) => client
                .with_header(PROCESS_HEADER, name)
                .and_then(|client| client.with_header(PROCESS_KEY_HEADER, key))
                .expect("process names and hex keys are valid header values"),
            None => client,
        }
    }
}

impl Tiers {
    /// Lets `caller` through if it proves a process that `allowed` accepts.
    fn check(&self, allowed: &[Allow], caller: Caller<'_>) -> Result<(), AccessError> {
        let claimed = caller
            .headers
            .get(PROCESS_HEADER)
            .and_then(|name| name.to_str().ok());
        let refuse = |process: Option<&str>, why| AccessError::Tier {
            process: process.map(str::to_owned),
            route: format!("{} {}", caller.method, caller.path),
            why,
        };
        let name = if self.certificates {
            let Some(certified) = caller.certified else {
                return Err(refuse(claimed, TierRefusal::NoCertificate));
            };
            if let Some(claimed) = claimed.filter(|claimed| *claimed != certified) {
                let claimed = claimed.to_owned();
                return Err(refuse(
                    Some(certified),
                    TierRefusal::NotTheCertificate { claimed },
                ));
            }
            certified
        } else {
            claimed.ok_or_else(|| refuse(None, TierRefusal::Unnamed))?
        };
        let role = Role::of(name).ok_or_else(|| refuse(Some(name), TierRefusal::NoSuchProcess))?;
        let key = caller
            .headers
            .get(PROCESS_KEY_HEADER)
            .map_or(&[][..], HeaderValue::as_bytes);
        if !self.keys.verify(name, key) {
            return Err(refuse(Some(name), TierRefusal::WrongKey));
        }
        if allowed.iter().any(|allow| allow.admits(&role)) {
            return Ok(());
        }
        let allowed = match allowed {
            [] => "no process".to_owned(),
            allowed => {
                let kinds: Vec<String> = allowed.iter().map(Allow::to_string).collect();
                format!("only {}", kinds.join(" and "))
            }
        };
        Err(refuse(Some(name), TierRefusal::Role { allowed }))
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
        access_of("DC_A_VAL_0", false)
    }

    fn access_of(process: &str, certificates: bool) -> Access {
        let token = |name: &str, token: &str, rights: &[Right]| TokenConfig {
            name: name.into(),
            token: Secret::new(token),
            rights: rights.to_vec(),
        };
        Access::new(
            &AuthConfig {
                tokens: vec![
                    token("dashboard", READER, &[Right::Read]),
                    token("web", WRITER, &[Right::Write]),
                    token("ops", ADMIN, &[Right::Admin]),
                ],
                cluster_secret: Some(Secret::new(SECRET)),
                insecure_public: false,
                insecure_plaintext: false,
            },
            process,
            certificates,
        )
    }

    /// A caller with `headers` on `POST /sync`, certified as `certified` if given.
    fn caller<'a>(headers: &'a HeaderMap, certified: Option<&'a str>) -> Caller<'a> {
        Caller {
            headers,
            certified,
            method: &Method::POST,
            path: "/sync",
        }
    }

    fn check<'a>(
        access: &'a Access,
        need: &Need,
        headers: &'a HeaderMap,
    ) -> Result<Option<&'a str>, AccessError> {
        access.check(need, caller(headers, None))
    }

    /// The headers process `name` sends: its name and its key.
    fn process_headers(name: &str) -> HeaderMap {
        let key = ProcessKeys::new(&Secret::new(SECRET)).key_of(name);
        headers(&[(PROCESS_HEADER, name), (PROCESS_KEY_HEADER, &key)])
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
            check(&access, &read, &bearer_of(READER)),
            Ok(Some("dashboard"))
        );
        assert_eq!(check(&access, &write, &bearer_of(WRITER)), Ok(Some("web")));
        for need in [&read, &write, &admin] {
            assert_eq!(check(&access, need, &bearer_of(ADMIN)), Ok(Some("ops")));
        }
        assert_eq!(
            check(&access, &write, &bearer_of(READER)),
            Err(AccessError::Forbidden {
                name: "dashboard".into(),
                right: Right::Write
            })
        );
        let refusal = check(&access, &admin, &bearer_of(WRITER)).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            refusal.to_string(),
            "token \"web\" lacks the admin right this request needs"
        );
        let scheme_in_any_case = headers(&[("authorization", &format!("bearer  {READER} "))]);
        assert_eq!(
            check(&access, &read, &scheme_in_any_case),
            Ok(Some("dashboard"))
        );
    }

    #[test]
    fn missing_or_unknown_tokens_are_401_with_a_challenge() {
        let access = access();
        let read = Need::Right(Right::Read);
        assert_eq!(
            check(&access, &read, &HeaderMap::new()),
            Err(AccessError::MissingToken)
        );
        for bad in [
            headers(&[("authorization", READER)]),
            headers(&[("authorization", &format!("Basic {READER}"))]),
            headers(&[("authorization", "Bearer ")]),
        ] {
            assert_eq!(check(&access, &read, &bad), Err(AccessError::MissingToken));
        }
        let wrong = bearer_of(&READER.replace('r', "R"));
        let refusal = check(&access, &read, &wrong).unwrap_err();
        assert_eq!(refusal, AccessError::InvalidToken);
        let response = refusal.to_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[WWW_AUTHENTICATE],
            "Bearer realm=\"geocount\""
        );
        // The cluster secret is no client token.
        assert_eq!(
            check(&access, &read, &bearer_of(SECRET)),
            Err(AccessError::InvalidToken)
        );
    }

    #[test]
    fn routes_between_tiers_need_a_process_they_accept() {
        let access = access();
        let peers = Need::Tier(vec![
            Allow::ShardsOf("A".into()),
            Allow::AggregatorOf("A".into()),
        ]);
        for name in ["DC_A_VAL_1", "aggregator_A"] {
            assert_eq!(check(&access, &peers, &process_headers(name)), Ok(None));
        }
        let refusal = check(&access, &peers, &process_headers("DC_B_VAL_0")).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            refusal.to_string(),
            "POST /sync refused to process DC_B_VAL_0: only the shard nodes of A and the \
             aggregator of A may call it"
        );
        let refused = |headers: &HeaderMap| match check(&access, &peers, headers) {
            Err(AccessError::Tier { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&HeaderMap::new()), TierRefusal::Unnamed);
        // One process's key does not open another's name; the cluster secret is no key.
        let key_of_b = ProcessKeys::new(&Secret::new(SECRET)).key_of("DC_B_VAL_0");
        let posing = headers(&[
            (PROCESS_HEADER, "DC_A_VAL_1"),
            (PROCESS_KEY_HEADER, &key_of_b),
        ]);
        assert_eq!(refused(&posing), TierRefusal::WrongKey);
        let secret = headers(&[(PROCESS_HEADER, "DC_A_VAL_1"), (PROCESS_KEY_HEADER, SECRET)]);
        assert_eq!(refused(&secret), TierRefusal::WrongKey);
        let unknown = headers(&[(PROCESS_HEADER, "someone")]);
        assert_eq!(refused(&unknown), TierRefusal::NoSuchProcess);
        // A client token, even an admin's, does not open them.
        assert_eq!(refused(&bearer_of(ADMIN)), TierRefusal::Unnamed);
        assert_eq!(
            check(&access, &Need::Tier(vec![]), &process_headers("DC_A_VAL_1"))
                .map_err(|e| e.to_string()),
            Err("POST /sync refused to process DC_A_VAL_1: no process may call it".into())
        );
        assert_eq!(check(&access, &Need::Open, &HeaderMap::new()), Ok(None));
        // The refusal names the process and the route.
        let response = refusal.to_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn with_certificates_the_certificate_names_the_process() {
        let access = access_of("aggregator_A", true);
        let from_a = Need::Tier(vec![Allow::ShardsOf("A".into())]);
        let headers = process_headers("DC_A_VAL_1");
        let proven = Caller {
            headers: &headers,
            certified: Some("DC_A_VAL_1"),
            method: &Method::POST,
            path: "/sync",
        };
        assert_eq!(access.check(&from_a, proven), Ok(None));
        let refused = |caller| match access.check(&from_a, caller) {
            Err(AccessError::Tier { why, process, .. }) => (why, process),
            other => panic!("{other:?}"),
        };
        // The right key without a certificate is not enough.
        assert_eq!(
            refused(Caller {
                certified: None,
                ..proven
            }),
            (TierRefusal::NoCertificate, Some("DC_A_VAL_1".into()))
        );
        // A certificate of B with the name and key of A poses as nobody.
        assert_eq!(
            refused(Caller {
                certified: Some("DC_B_VAL_0"),
                ..proven
            }),
            (
                TierRefusal::NotTheCertificate {
                    claimed: "DC_A_VAL_1".into()
                },
                Some("DC_B_VAL_0".into())
            )
        );
    }

    #[test]
    fn the_proven_process_is_the_one_the_check_let_through() {
        let tier = Need::Tier(vec![Allow::ShardsOf("A".into())]);
        let headers = process_headers("DC_A_VAL_1");
        let keyed = access();
        assert_eq!(keyed.check(&tier, caller(&headers, None)), Ok(None));
        let proven = |access: &Access, need, certified| {
            access
                .proven_process(need, caller(&headers, certified))
                .map(str::to_owned)
        };
        assert_eq!(proven(&keyed, &tier, None).as_deref(), Some("DC_A_VAL_1"));
        // Only a route between tiers checks the name.
        let read = Need::Right(Right::Read);
        assert_eq!(proven(&keyed, &read, None), None);
        // With certificates, the certificate's name.
        let certified = access_of("aggregator_A", true);
        let name = proven(&certified, &tier, Some("DC_A_VAL_1"));
        assert_eq!(name.as_deref(), Some("DC_A_VAL_1"));
        // Without a cluster secret, only a certificate proves a name.
        let open = Access::default();
        assert_eq!(proven(&open, &tier, None), None);
        let name = proven(&open, &tier, Some("DC_A_VAL_0"));
        assert_eq!(name.as_deref(), Some("DC_A_VAL_0"));
    }

    #[test]
    fn without_auth_everything_is_open() {
        let open = Access::default();
        for need in [Need::Open, Need::Right(Right::Admin), Need::Tier(vec![])] {
            assert_eq!(check(&open, &need, &HeaderMap::new()), Ok(None));
        }
    }
}
