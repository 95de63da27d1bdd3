//! The control API: see each link, cut and heal it, change its shaping at run time.
//!
//! | route | does |
//! |---|---|
//! | `GET /links` | `{"links": [...]}`: each link's addresses, shaping, cut state and counters ([`LinkStatus`]) |
//! | `GET /links/{name}` | one link |
//! | `PUT /links/{name}` `{"delay_ms"?, "jitter_ms"?, "bandwidth_bytes_per_sec"?}` | changes the keys given; answers the link |
//! | `POST /links/{name}/cut` | cuts it: established connections close, new ones are closed at once; answers the link |
//! | `POST /links/{name}/heal` | heals it; answers the link |
//! | `GET /healthz` | `{"status": "ok", "links": n}` |
//!
//! Every refusal is `{"error": ...}`: 404 unknown path or link, 405 wrong method, 400 a bad
//! body, 413 a body over 64 KiB.

use std::sync::Arc;

use geocount_net::{HttpError, Response, json_response, read_body};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};

use crate::error::ControlError;
use crate::link::{Link, LinkStatus};
use crate::shaping::Shaping;

/// The largest body the control API reads.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/links`
    Links,
    /// `/links/{name}`
    Link,
    /// `/links/{name}/cut`
    Cut,
    /// `/links/{name}/heal`
    Heal,
    /// `/healthz`
    Health,
}

/// What the control API serves: the links, and the router built once.
#[derive(Debug)]
pub struct Control {
    links: Vec<Arc<Link>>,
    router: matchit::Router<Route>,
}

/// A change of a link's shaping: the keys given replace the link's, the others stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapingChange {
    /// New one-way delay, ms.
    pub delay_ms: Option<u64>,
    /// New jitter, ± ms.
    pub jitter_ms: Option<u64>,
    /// New cap, bytes per second (0: none).
    pub bandwidth_bytes_per_sec: Option<u64>,
}

impl ShapingChange {
    /// Parses a `PUT /links/{name}` body.
    pub fn parse(body: &[u8]) -> Result<Self, ControlError> {
        serde_json::from_slice(body).map_err(|e| {
            ControlError::BadRequest(format!(
                "the body must be a JSON object with delay_ms, jitter_ms or bandwidth_bytes_per_sec: {e}"
            ))
        })
    }

    /// `current` with this change applied, if the result is valid.
    pub fn apply(&self, current: Shaping) -> Result<Shaping, ControlError> {
        let shaping = Shaping {
            delay_ms: self.delay_ms.unwrap_or(current.delay_ms),
            jitter_ms: self.jitter_ms.unwrap_or(current.jitter_ms),
            bandwidth_bytes_per_sec: self
                .bandwidth_bytes_per_sec
                .unwrap_or(current.bandwidth_bytes_per_sec),
        };
        shaping
            .validate()
            .map_err(|(key, message)| ControlError::BadRequest(format!("{key}: {message}")))?;
        Ok(shaping)
    }
}

impl Control {
    /// The API over `links`.
    pub fn new(links: Vec<Arc<Link>>) -> Self {
        let mut router = matchit::Router::new();
        for (path, route) in [
            ("/links", Route::Links),
            ("/links/{name}", Route::Link),
            ("/links/{name}/cut", Route::Cut),
            ("/links/{name}/heal", Route::Heal),
            ("/healthz", Route::Health),
        ] {
            router.insert(path, route).expect("routes do not conflict");
        }
        Self { links, router }
    }

    /// The link named `name`, or a 404 naming the known ones.
    pub fn link(&self, name: &str) -> Result<&Arc<Link>, ControlError> {
        self.links
            .iter()
            .find(|link| link.name() == name)
            .ok_or_else(|| ControlError::UnknownLink {
                name: name.to_owned(),
                known: self
                    .links
                    .iter()
                    .map(|link| link.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Answers one request; every refusal becomes its `{"error"}` answer.
    pub async fn handle(&self, request: Request<Incoming>) -> Response {
        self.dispatch(request)
            .await
            .unwrap_or_else(|error| error.to_response())
    }

    async fn dispatch(&self, request: Request<Incoming>) -> Result<Response, ControlError> {
        let path = request.uri().path().to_owned();
        let matched = self
            .router
            .at(&path)
            .map_err(|_| ControlError::NoRoute(path.clone()))?;
        let route = *matched.value;
        let name = matched.params.get("name").map(str::to_owned);
        let link = || self.link(name.as_deref().unwrap_or_default());
        let ok = |status: LinkStatus| Ok(json_response(StatusCode::OK, &status));
        match (route, request.method().clone()) {
            (Route::Links, Method::GET) => {
                #[derive(Serialize)]
                struct Links {
                    links: Vec<LinkStatus>,
                }
                let links = self.links.iter().map(|link| link.status()).collect();
                Ok(json_response(StatusCode::OK, &Links { links }))
            }
            (Route::Link, Method::GET) => ok(link()?.status()),
            (Route::Link, Method::PUT) => {
                let link = link()?;
                let body = read_body(request, MAX_BODY_BYTES).await?;
                let shaping = ShapingChange::parse(&body)?.apply(link.shaping())?;
                link.set_shaping(shaping);
                ok(link.status())
            }
            (Route::Cut, Method::POST) => {
                let link = link()?;
                link.cut();
                ok(link.status())
            }
            (Route::Heal, Method::POST) => {
                let link = link()?;
                link.heal();
                ok(link.status())
            }
            (Route::Health, Method::GET) => {
                #[derive(Serialize)]
                struct Health {
                    status: &'static str,
                    links: usize,
                }
                let health = Health {
                    status: "ok",
                    links: self.links.len(),
                };
                Ok(json_response(StatusCode::OK, &health))
            }
            (_, method) => Err(ControlError::MethodNotAllowed { method, path }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_replaces_only_the_keys_given() {
        let current = Shaping {
            delay_ms: 40,
            jitter_ms: 5,
            bandwidth_bytes_per_sec: 1_000,
        };
        let change = ShapingChange::parse(br#"{"delay_ms": 100}"#).unwrap();
        assert_eq!(
            change.apply(current).unwrap(),
            Shaping {
                delay_ms: 100,
                ..current
            }
        );
        let change =
            ShapingChange::parse(br#"{"jitter_ms": 0, "bandwidth_bytes_per_sec": 0}"#).unwrap();
        assert_eq!(
            change.apply(current).unwrap(),
            Shaping {
                delay_ms: 40,
                jitter_ms: 0,
                bandwidth_bytes_per_sec: 0
            }
        );
        assert_eq!(
            ShapingChange::parse(b"{}").unwrap().apply(current).unwrap(),
            current
        );
    }

    #[test]
    fn bad_changes_are_refused_with_400() {
        for body in [
            &b""[..],
            b"[]",
            br#"{"delay_ms": -1}"#,
            br#"{"delay_ms": "slow"}"#,
            br#"{"delay": 10}"#,
        ] {
            let error = ShapingChange::parse(body).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{error}");
        }
        let error = ShapingChange::parse(br#"{"delay_ms": 60001}"#)
            .unwrap()
            .apply(Shaping::default())
            .unwrap_err();
        assert!(error.to_string().starts_with("delay_ms: "), "{error}");
    }

    #[test]
    fn an_unknown_link_names_the_known_ones() {
        let config = |name: &str| crate::config::LinkConfig {
            name: name.into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            target: "127.0.0.1:1".parse().unwrap(),
            delay_ms: 0,
            jitter_ms: 0,
            bandwidth_bytes_per_sec: 0,
        };
        let addr = "127.0.0.1:2".parse().unwrap();
        let control = Control::new(vec![
            Arc::new(Link::new(&config("a"), addr)),
            Arc::new(Link::new(&config("b"), addr)),
        ]);
        assert_eq!(control.link("b").unwrap().name(), "b");
        let error = control.link("c").unwrap_err();
        assert_eq!(error.to_string(), "no link named \"c\" (known: a, b)");
        assert_eq!(error.status(), StatusCode::NOT_FOUND);
    }
}
