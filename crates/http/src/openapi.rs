//! OpenAPI 3 documents of the tiers' HTTP APIs, served by each tier at `GET /openapi.json`.
//!
//! Each tier lists its operations with [`ApiDoc::operation`]; the parts several tiers share
//! (`/sync`, `/slots/{slot}/copy`, `/healthz`, `/metrics`, the aggregators' reads, rankings and
//! sums: `parts`; parameters and the error body: here) are built once, so the documents cannot
//! drift apart. A document is
//! rendered for the process serving it ([`ApiDoc::to_json`]): security requirements and their
//! 401 and 403 answers appear only where its `[auth]` asks for a credential. A test in each
//! tier checks that its router and its document list the same paths, methods and callers
//! ([`ApiDoc::assert_routes`]), an
//! end-to-end test sends a request to every documented operation of every tier and checks it
//! answers with one of the documented statuses, and `scripts/openapi-check.sh` runs
//! schemathesis against every tier.

use std::collections::BTreeMap;

use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use serde_json::{Map, Value, json};

use crate::access::{Access, Need};
use crate::roles::{PROCESS_HEADER, PROCESS_KEY_HEADER};
use crate::routing::Endpoint;

mod parts;

/// The version of the OpenAPI specification the documents follow.
pub const OPENAPI_VERSION: &str = "3.0.3";

/// The longest counter id, in bytes of UTF-8.
const MAX_ID_BYTES: u64 = 256;

/// One tier's API document, built operation by operation.
#[derive(Debug, Clone)]
pub struct ApiDoc {
    title: String,
    description: String,
    /// Path, then method (lower case), then its operation.
    paths: BTreeMap<String, BTreeMap<String, Operation>>,
}

/// Who may call an operation, which decides the credential its document asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callers {
    /// Clients: a bearer token with a right, when `[[auth.tokens]]` are configured.
    Clients,
    /// Only the tiers: a proven process, when a cluster secret is configured.
    Tiers,
    /// Anyone: probes and this document.
    Anyone,
}

impl Callers {
    /// Who may call a route that needs `need`.
    pub fn of(need: &Need) -> Self {
        match need {
            Need::Right(_) => Callers::Clients,
            Need::Tier(_) => Callers::Tiers,
            Need::Open => Callers::Anyone,
        }
    }
}

/// One operation: a method on a path.
#[derive(Debug, Clone)]
pub struct Operation {
    summary: String,
    parameters: Vec<Value>,
    request_body: Option<Value>,
    responses: Map<String, Value>,
    callers: Callers,
}

impl Operation {
    /// A client operation described by `summary`, with no parameters, body or responses yet.
    pub fn new(summary: &str) -> Self {
        Self {
            summary: summary.to_owned(),
            parameters: Vec::new(),
            request_body: None,
            responses: Map::new(),
            callers: Callers::Clients,
        }
    }

    /// Marks the operation as answered without a credential (probes: health, metrics, this
    /// document).
    pub fn open(mut self) -> Self {
        self.callers = Callers::Anyone;
        self
    }

    /// Marks the operation as called only by the tiers (replication, restores).
    pub fn between_tiers(mut self) -> Self {
        self.callers = Callers::Tiers;
        self
    }

    /// Who may call it.
    pub fn callers(&self) -> Callers {
        self.callers
    }

    /// Adds a parameter (see [`path_param`], [`query_param`], [`header_param`]).
    pub fn param(mut self, parameter: Value) -> Self {
        self.parameters.push(parameter);
        self
    }

    /// Adds the window parameters of a read: `window`, at most `max_window_seconds`, and `at`.
    pub fn window_params(self, max_window_seconds: u32) -> Self {
        self.param(query_param(
            "window",
            integer(1, u64::from(max_window_seconds)),
            "count only the hits with at - window < t <= at, in seconds (at most the counter's \
             windowSeconds: a longer window is refused with 400)",
        ))
        .param(query_param(
            "at",
            integer(0, u64::MAX),
            "the window's end, unix seconds (default: now; only with window, else 400)",
        ))
    }

    /// Adds the staleness parameters of the global aggregator's answers.
    pub fn staleness_params(self) -> Self {
        self.param(query_param(
            "max_staleness_ms",
            integer(0, u64::MAX),
            "a datacenter staler than this is stale (default: global.max_staleness_ms)",
        ))
        .param(query_param(
            "allow_partial",
            json!({"type": "boolean"}),
            "answer 200 with complete: false rather than 503 when a datacenter is stale",
        ))
    }

    /// An optional JSON request body following `schema`, with `example`: an empty body takes
    /// every field's default.
    pub fn json_body(mut self, schema: Value, example: Value) -> Self {
        self.request_body = Some(json!({
            "required": false,
            "content": {"application/json": {"schema": schema, "example": example}},
        }));
        self
    }

    /// A postcard request body: the Rust type `message` of `geocount_model::wire`.
    pub fn postcard_body(mut self, message: &str) -> Self {
        self.request_body = Some(json!({
            "required": true,
            "content": {POSTCARD_CONTENT_TYPE: {
                "schema": {"type": "string", "format": "binary",
                           "description": format!("postcard-encoded geocount_model::wire::{message}")},
            }},
        }));
        self
    }

    /// A JSON answer with `status`, described by `description` and following `schema`.
    pub fn json_answer(mut self, status: u16, description: &str, schema: Value) -> Self {
        self.responses.insert(
            status.to_string(),
            json!({"description": description,
                   "content": {"application/json": {"schema": schema}}}),
        );
        self
    }

    /// A postcard answer with `status`: the Rust type `message` of `geocount_model::wire`.
    pub fn postcard_answer(mut self, status: u16, message: &str) -> Self {
        self.responses.insert(
            status.to_string(),
            json!({"description": format!("postcard-encoded geocount_model::wire::{message}"),
                   "content": {POSTCARD_CONTENT_TYPE: {
                       "schema": {"type": "string", "format": "binary"}}}}),
        );
        self
    }

    /// A text answer in any of `media_types`, as the request's `Accept` chooses.
    pub fn text_answers(mut self, status: u16, description: &str, media_types: &[&str]) -> Self {
        let content: Map<String, Value> = media_types
            .iter()
            .map(|media| ((*media).to_owned(), json!({"schema": {"type": "string"}})))
            .collect();
        self.responses.insert(
            status.to_string(),
            json!({"description": description, "content": content}),
        );
        self
    }

    /// Refusals with `{"error": "..."}`: one per `(status, why)`.
    pub fn errors(mut self, errors: &[(u16, &str)]) -> Self {
        for (status, why) in errors {
            self.responses.insert(status.to_string(), error_answer(why));
        }
        self
    }

    /// The operation as the process with `access` serves it: a client operation needs a
    /// token (and may be refused 401 or 403) only when tokens are configured, an operation
    /// between tiers a proven process (else 403) only with a cluster secret.
    fn to_json(&self, access: &Access) -> Value {
        let mut responses = self.responses.clone();
        let security = match self.callers {
            Callers::Clients if access.needs_tokens() => {
                let mut unauthorized = error_answer("a token is needed and none valid was given");
                unauthorized["headers"] = json!({"WWW-Authenticate": {
                    "required": true, "schema": {"type": "string"},
                    "description": "the scheme to authenticate with: Bearer"}});
                responses.insert("401".into(), unauthorized);
                responses.insert(
                    "403".into(),
                    error_answer("the token lacks the right this operation needs"),
                );
                // The document's own requirement: a bearer token.
                None
            }
            Callers::Tiers if access.checks_processes() => {
                responses.insert(
                    "403".into(),
                    error_answer("the caller proved no process this route accepts"),
                );
                Some(json!([{"process": [], "processKey": []}]))
            }
            _ if access.needs_tokens() => Some(json!([])),
            _ => None,
        };
        let mut operation = Map::new();
        if let Some(security) = security {
            operation.insert("security".into(), security);
        }
        operation.insert("summary".into(), self.summary.clone().into());
        if !self.parameters.is_empty() {
            operation.insert("parameters".into(), self.parameters.clone().into());
        }
        if let Some(body) = &self.request_body {
            operation.insert("requestBody".into(), body.clone());
        }
        operation.insert("responses".into(), responses.into());
        operation.into()
    }
}

/// The answer `{"error": why}`.
fn error_answer(why: &str) -> Value {
    json!({"description": why,
           "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

impl ApiDoc {
    /// An empty document for the API `title`.
    pub fn new(title: &str, description: &str) -> Self {
        Self {
            title: title.to_owned(),
            description: description.to_owned(),
            paths: BTreeMap::new(),
        }
    }

    /// Adds `operation` as `method` (lower case: `get`, `post`, `patch`) on `path`.
    pub fn operation(mut self, path: &str, method: &str, operation: Operation) -> Self {
        self.paths
            .entry(path.to_owned())
            .or_default()
            .insert(method.to_owned(), operation);
        self
    }

    /// The paths documented, in path order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.keys().map(String::as_str)
    }

    /// The operations documented on `path`: each method (upper case) and its operation.
    pub fn operations(&self, path: &str) -> Vec<(String, &Operation)> {
        self.paths.get(path).map_or_else(Vec::new, |item| {
            item.iter()
                .map(|(method, operation)| (method.to_uppercase(), operation))
                .collect()
        })
    }

    /// The paths `routed` has but the document lacks, then the paths the document has but
    /// `routed` lacks: both empty when they list the same paths.
    pub fn unmatched_paths<'a>(
        &self,
        routed: impl IntoIterator<Item = &'a str>,
    ) -> (Vec<&'a str>, Vec<String>) {
        let routed: Vec<&str> = routed.into_iter().collect();
        let undocumented = routed
            .iter()
            .filter(|path| !self.paths.contains_key(**path))
            .copied()
            .collect();
        let unrouted = self
            .paths()
            .filter(|path| !routed.contains(path))
            .map(str::to_owned)
            .collect();
        (undocumented, unrouted)
    }

    /// Panics unless the document lists exactly the paths of `routes`, each with the methods
    /// its route takes and the callers `need` says it takes: each tier's test that its router
    /// and its document agree.
    pub fn assert_routes<R: Endpoint>(&self, routes: &[(&str, R)], need: impl Fn(R) -> Need) {
        let routed = routes.iter().map(|(path, _)| *path);
        assert_eq!(self.unmatched_paths(routed), (vec![], vec![]));
        for (path, route) in routes {
            let operations = self.operations(path);
            let methods: Vec<&str> = operations.iter().map(|(m, _)| m.as_str()).collect();
            let routed: Vec<&str> = route.methods().iter().map(|m| m.as_str()).collect();
            assert_eq!(methods, routed, "{path}");
            let callers = Callers::of(&need(*route));
            for (_, operation) in operations {
                assert_eq!(operation.callers(), callers, "{path}");
            }
        }
    }

    /// The document as the process with `access` serves it: with client tokens, a bearer
    /// token is required everywhere but where an operation says otherwise; with a cluster
    /// secret, the routes between tiers require a process's name and key.
    pub fn to_json(&self, access: &Access) -> Value {
        let paths: Map<String, Value> = self
            .paths
            .iter()
            .map(|(path, item)| {
                let item: Map<String, Value> = item
                    .iter()
                    .map(|(method, operation)| (method.clone(), operation.to_json(access)))
                    .collect();
                (path.clone(), item.into())
            })
            .collect();
        let mut schemes = Map::new();
        if access.needs_tokens() {
            schemes.insert(
                "bearer".into(),
                json!({"type": "http", "scheme": "bearer",
                       "description": "a client token of the topology's [[auth.tokens]]"}),
            );
        }
        if access.checks_processes() {
            schemes.insert(
                "process".into(),
                json!({"type": "apiKey", "in": "header", "name": PROCESS_HEADER,
                       "description": "the calling tier process's name (with [tls], its client \
                                       certificate must name the same process)"}),
            );
            schemes.insert(
                "processKey".into(),
                json!({"type": "apiKey", "in": "header", "name": PROCESS_KEY_HEADER,
                       "description": "the calling process's key, derived from \
                                       auth.cluster_secret"}),
            );
        }
        let mut components = json!({"schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "string",
                                         "description": "what was wrong; nothing changed"}},
            },
            "Ranked": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "value": {"type": "integer"}},
            },
            "Window": {
                "type": "object",
                "properties": {"seconds": {"type": "integer"}, "at": {"type": "integer"}},
            },
        }});
        if !schemes.is_empty() {
            components["securitySchemes"] = schemes.into();
        }
        let mut doc = json!({
            "openapi": OPENAPI_VERSION,
            "info": {
                "title": self.title,
                "description": self.description,
                "version": env!("CARGO_PKG_VERSION"),
            },
            "paths": paths,
            "components": components,
        });
        if access.needs_tokens() {
            doc["security"] = json!([{"bearer": []}]);
        }
        doc
    }
}

impl Operation {
    /// Adds the paging parameters of a copy of `what`: `from` and `limit`.
    pub fn page_params(self, what: &str) -> Self {
        self.param(query_param(
            "from",
            integer(0, u64::MAX),
            "where the page starts (0)",
        ))
        .param(query_param(
            "limit",
            integer(0, u64::MAX),
            &format!("how many {what} the page looks at (at most sync.page_entries, at least 1)"),
        ))
    }
}

/// The schema of a whole number from `minimum` to `maximum`.
pub fn integer(minimum: u64, maximum: u64) -> Value {
    json!({"type": "integer", "minimum": minimum, "maximum": maximum})
}

/// The schema of a counter id: 1-256 bytes of UTF-8 without control characters.
pub fn id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": MAX_ID_BYTES,
           "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"})
}

/// The `{id}` path parameter: a counter id.
pub fn id_param() -> Value {
    let mut param = path_param(
        "id",
        "a counter id: 1-256 bytes of UTF-8 without control characters, percent-encoded",
    );
    param["schema"] = id_schema();
    param
}

/// A required path parameter.
pub fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string"}})
}

/// An optional query parameter following `schema`.
pub fn query_param(name: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": schema})
}

/// A required query parameter following `schema`, with an example value.
pub fn required_query_param(name: &str, schema: Value, description: &str, example: &str) -> Value {
    json!({"name": name, "in": "query", "required": true, "description": description,
           "schema": schema, "example": example})
}

/// An optional header parameter following `schema`.
pub fn header_param(name: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": "header", "required": false, "description": description,
           "schema": schema})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::METRICS_CONTENT_TYPE;
    use geocount_model::{AuthConfig, Right, Secret, TokenConfig};

    /// The access of a process whose topology has `[auth]` with a token and a cluster secret.
    fn with_auth() -> Access {
        let config = AuthConfig {
            tokens: vec![TokenConfig {
                name: "ops".into(),
                token: Secret::new("admin-0123456789abcdef0123456789abcdef"),
                rights: vec![Right::Admin],
            }],
            cluster_secret: Some(Secret::new("secret-0123456789abcdef0123456789abcdef")),
            insecure_public: false,
            insecure_plaintext: false,
        };
        Access::new(&config, "DC_A_VAL_0", false)
    }

    fn doc() -> ApiDoc {
        ApiDoc::new("t", "d")
            .operation(
                "/counter/{id}",
                "get",
                Operation::new("read")
                    .param(id_param())
                    .window_params(300)
                    .json_answer(200, "ok", json!({"type": "object"}))
                    .errors(&[(404, "unknown")]),
            )
            .replication(true)
            .health_and_metrics("health")
    }

    #[test]
    fn documents_list_operations_with_their_answers_and_shared_parts() {
        let doc = doc();
        let json = doc.to_json(&Access::default());
        assert_eq!(json["openapi"], OPENAPI_VERSION);
        let read = &json["paths"]["/counter/{id}"]["get"];
        assert_eq!(read["parameters"][0]["name"], "id");
        assert_eq!(read["parameters"][0]["schema"]["maxLength"], 256);
        // Bounds the server enforces.
        assert_eq!(read["parameters"][1]["name"], "window");
        assert_eq!(read["parameters"][1]["schema"]["minimum"], 1);
        assert_eq!(read["parameters"][1]["schema"]["maximum"], 300);
        assert!(read["responses"]["404"]["content"]["application/json"].is_object());
        // Postcard bodies are documented with the content type the tiers send.
        let sync = &json["paths"]["/sync"]["post"];
        assert!(sync["requestBody"]["content"]["application/x-postcard"].is_object());
        assert!(sync["responses"]["200"]["content"]["application/x-postcard"].is_object());
        let metrics = &json["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        assert!(metrics[METRICS_CONTENT_TYPE].is_object(), "{metrics}");
        let text = crate::exposition::TEXT_CONTENT_TYPE;
        assert!(metrics[text].is_object(), "{metrics}");
        assert_eq!(
            doc.paths().collect::<Vec<_>>(),
            [
                "/counter/{id}",
                "/healthz",
                "/metrics",
                "/openapi.json",
                "/slots/{slot}/copy",
                "/sync",
            ]
        );
        assert_eq!(doc.operations("/sync")[0].0, "POST");
        assert_eq!(doc.operations("/sync")[0].1.callers(), Callers::Tiers);
        assert_eq!(
            doc.unmatched_paths(["/sync", "/extra"]),
            (
                vec!["/extra"],
                [
                    "/counter/{id}",
                    "/healthz",
                    "/metrics",
                    "/openapi.json",
                    "/slots/{slot}/copy",
                ]
                .map(str::to_owned)
                .to_vec()
            )
        );
        let without = ApiDoc::new("t", "d").replication(false);
        assert_eq!(without.paths().collect::<Vec<_>>(), ["/sync"]);
        let global = ApiDoc::new("t", "d")
            .rankings(true)
            .to_json(&Access::default());
        assert!(global["paths"]["/trending"]["get"]["responses"]["503"].is_object());
        assert!(global["paths"]["/trending"]["get"]["responses"]["404"].is_object());
    }

    #[test]
    fn credentials_are_documented_only_where_the_process_asks_for_them() {
        let open = doc().to_json(&Access::default());
        assert!(open["security"].is_null(), "{}", open["security"]);
        assert!(open["components"]["securitySchemes"].is_null());
        for (path, method) in [("/counter/{id}", "get"), ("/sync", "post")] {
            let operation = &open["paths"][path][method];
            assert!(operation["security"].is_null(), "{path}");
            assert!(operation["responses"]["401"].is_null(), "{path}");
            assert!(operation["responses"]["403"].is_null(), "{path}");
        }

        let guarded = doc().to_json(&with_auth());
        assert_eq!(guarded["security"], json!([{"bearer": []}]));
        let schemes = &guarded["components"]["securitySchemes"];
        assert_eq!(schemes["bearer"]["scheme"], "bearer");
        assert_eq!(schemes["process"]["name"], PROCESS_HEADER);
        let read = &guarded["paths"]["/counter/{id}"]["get"];
        assert!(
            read["security"].is_null(),
            "the document's bearer requirement holds"
        );
        assert!(read["responses"]["401"]["headers"]["WWW-Authenticate"].is_object());
        assert!(read["responses"]["403"].is_object());
        let sync = &guarded["paths"]["/sync"]["post"];
        assert_eq!(sync["security"], json!([{"process": [], "processKey": []}]));
        assert!(sync["responses"]["401"].is_null() && sync["responses"]["403"].is_object());
        let health = &guarded["paths"]["/healthz"]["get"];
        assert_eq!(health["security"], json!([]), "probes need no token");
        assert!(health["responses"]["401"].is_null());
    }
}
