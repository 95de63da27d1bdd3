//! OpenAPI 3 documents of the tiers' HTTP APIs, served by each tier at `GET /openapi.json`.
//!
//! Each tier lists its operations with [`ApiDoc::operation`]; the parts several tiers share
//! (`/sync`, `/slots/{slot}/copy`, `/healthz`, `/metrics`, the aggregators' reads and rankings,
//! the error body) are built here once, so the documents cannot drift apart. A test in each tier
//! checks that its router and its document list the same paths, and an end-to-end test sends a
//! request to every documented operation of every tier and checks it answers with one of the
//! documented statuses.

use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use serde_json::{Map, Value, json};

/// The version of the OpenAPI specification the documents follow.
pub const OPENAPI_VERSION: &str = "3.0.3";

/// One tier's API document, built operation by operation.
#[derive(Debug, Clone)]
pub struct ApiDoc {
    title: String,
    description: String,
    paths: Map<String, Value>,
}

/// One operation: a method on a path.
#[derive(Debug, Clone)]
pub struct Operation {
    summary: String,
    parameters: Vec<Value>,
    request_body: Option<Value>,
    responses: Map<String, Value>,
    /// Answered without a token even when `[auth]` tokens are configured.
    open: bool,
}

impl Operation {
    /// An operation described by `summary`, with no parameters, body or responses yet.
    pub fn new(summary: &str) -> Self {
        Self {
            summary: summary.to_owned(),
            parameters: Vec::new(),
            request_body: None,
            responses: Map::new(),
            open: false,
        }
    }

    /// Marks the operation as answered without a token (probes: health, metrics, this
    /// document).
    pub fn open(mut self) -> Self {
        self.open = true;
        self
    }

    /// Adds a parameter (see [`path_param`], [`query_param`], [`header_param`]).
    pub fn param(mut self, parameter: Value) -> Self {
        self.parameters.push(parameter);
        self
    }

    /// Adds the window parameters of a read: `window` and `at`.
    pub fn window_params(self) -> Self {
        self.param(query_param(
            "window",
            "integer",
            "count only the hits with at - window < t <= at, in seconds (at most the counter's \
             windowSeconds)",
        ))
        .param(query_param(
            "at",
            "integer",
            "the window's end, unix seconds (default: now; needs window)",
        ))
    }

    /// Adds the staleness parameters of the global aggregator's answers.
    pub fn staleness_params(self) -> Self {
        self.param(query_param(
            "max_staleness_ms",
            "integer",
            "a datacenter staler than this is stale (default: global.max_staleness_ms)",
        ))
        .param(query_param(
            "allow_partial",
            "boolean",
            "answer 200 with complete: false rather than 503 when a datacenter is stale",
        ))
    }

    /// A JSON request body following `schema`, with `example`.
    pub fn json_body(mut self, schema: Value, example: Value) -> Self {
        self.request_body = Some(json!({
            "required": true,
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

    /// A plain-text answer with `status`.
    pub fn text_answer(mut self, status: u16, description: &str) -> Self {
        self.responses.insert(
            status.to_string(),
            json!({"description": description,
                   "content": {"text/plain": {"schema": {"type": "string"}}}}),
        );
        self
    }

    /// Refusals with `{"error": "..."}`: one per `(status, why)`.
    pub fn errors(mut self, errors: &[(u16, &str)]) -> Self {
        for (status, why) in errors {
            self.responses.insert(
                status.to_string(),
                json!({"description": why,
                       "content": {"application/json": {
                           "schema": {"$ref": "#/components/schemas/Error"}}}}),
            );
        }
        self
    }

    fn into_json(mut self) -> Value {
        if !self.open {
            self = self.errors(&[
                (
                    401,
                    "[auth] tokens are configured and no valid token was given",
                ),
                (403, "the token lacks the right this operation needs"),
            ]);
        }
        let mut operation = Map::new();
        if self.open {
            operation.insert("security".into(), json!([]));
        }
        operation.insert("summary".into(), self.summary.into());
        if !self.parameters.is_empty() {
            operation.insert("parameters".into(), self.parameters.into());
        }
        if let Some(body) = self.request_body {
            operation.insert("requestBody".into(), body);
        }
        operation.insert("responses".into(), self.responses.into());
        operation.into()
    }
}

impl ApiDoc {
    /// An empty document for the API `title`.
    pub fn new(title: &str, description: &str) -> Self {
        Self {
            title: title.to_owned(),
            description: description.to_owned(),
            paths: Map::new(),
        }
    }

    /// Adds `operation` as `method` (lower case: `get`, `post`, `patch`) on `path`.
    pub fn operation(mut self, path: &str, method: &str, operation: Operation) -> Self {
        let item = self
            .paths
            .entry(path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(item) = item {
            item.insert(method.to_owned(), operation.into_json());
        }
        self
    }

    /// The paths documented, in path order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.keys().map(String::as_str)
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

    /// The document as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "openapi": OPENAPI_VERSION,
            "info": {
                "title": self.title,
                "description": self.description,
                "version": env!("CARGO_PKG_VERSION"),
            },
            "paths": self.paths,
            // Only when the topology configures `[auth]` tokens; see the README's "Access".
            "security": [{"bearer": []}],
            "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
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
            }},
        })
    }

    /// Adds `/sync` and, with `slot_copies`, `/slots/{slot}/copy`: the replication routes a tier
    /// serves to the tiers that pull it and to shard nodes restoring a lost slot.
    pub fn replication(self, slot_copies: bool) -> Self {
        let doc = self.operation(
            "/sync",
            "post",
            Operation::new("a page of changes from a cursor (replication between tiers)")
                .postcard_body("SyncRequest")
                .postcard_answer(200, "SyncPage")
                .errors(&[(400, "a malformed request"), (413, "a request too large")]),
        );
        if !slot_copies {
            return doc;
        }
        doc.operation(
            "/slots/{slot}/copy",
            "get",
            Operation::new(
                "a page of the records this tier holds of one slot (restoring a shard node): the \
                 counters from table index `from` (0), at most `limit` (sync.page_entries) looked \
                 at; says whether this tier has held the slot whole since it started, and where \
                 the next page starts",
            )
            .param(path_param("slot", "a slot name, DC_<DATACENTER>_VAL_<n>"))
            .param(query_param("from", "integer", "where the page starts (0)"))
            .param(query_param(
                "limit",
                "integer",
                "how many counters the page looks at",
            ))
            .postcard_answer(200, "SlotCopy")
            .errors(&[(404, "a slot this tier does not hold")]),
        )
    }

    /// Adds `/healthz` and `/metrics`.
    pub fn health_and_metrics(self, health: &str) -> Self {
        self.operation(
            "/healthz",
            "get",
            Operation::new(health)
                .open()
                .json_answer(200, "serving", json!({"type": "object"}))
                .json_answer(503, "not able to serve", json!({"type": "object"})),
        )
        .operation(
            "/metrics",
            "get",
            Operation::new("Prometheus metrics")
                .open()
                .text_answer(200, "the text exposition format"),
        )
        .operation(
            "/openapi.json",
            "get",
            Operation::new("this document").open().json_answer(
                200,
                "the OpenAPI document",
                json!({"type": "object"}),
            ),
        )
    }

    /// Adds an aggregator's `GET /counter/{id}` (the datacenter's or, when `global`, the
    /// world's value, with each part's staleness).
    pub fn aggregator_read(self, global: bool) -> Self {
        let (scope, parts) = if global {
            ("the world's value: the sum over datacenters", "datacenters")
        } else {
            ("the datacenter's value: the sum over its slots", "slots")
        };
        let mut read = Operation::new(scope).param(id_param()).window_params();
        let mut errors = vec![
            (400, "a bad id or query (window on a unique counter too)"),
            (404, "a counter no part has reported"),
        ];
        if global {
            read = read.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
        }
        let answer = json!({"type": "object", "properties": {
            "id": {"type": "string"},
            "value": {"type": "integer", "description": "the sum, or a unique counter's estimate"},
            "standard_error": {"type": "number", "description": "unique counters only"},
            "window": {"$ref": "#/components/schemas/Window"},
            "staleness_ms": {"type": "integer", "nullable": true,
                             "description": "the stalest part's; null if one was never complete"},
            "complete": {"type": "boolean"},
            parts: {"type": "object", "description": "each part's value and staleness"},
        }});
        self.operation(
            "/counter/{id}",
            "get",
            read.json_answer(200, "the value and how fresh it is", answer)
                .errors(&errors),
        )
    }

    /// Adds an aggregator's `/topk` and `/trending`; `global` adds the global aggregator's
    /// staleness parameters and refusals.
    pub fn rankings(self, global: bool) -> Self {
        let mut top = Operation::new(
            "the K highest counters by all-time total, or by hits in a window (sum counters \
             only; highest first, ties by id ascending)",
        )
        .param(query_param(
            "k",
            "integer",
            "how many, 1..=1000 (default 10)",
        ))
        .param(query_param(
            "prefix",
            "string",
            "only ids starting with this (default: any)",
        ))
        .window_params();
        let mut trending = Operation::new(
            "every counter with a configured prefix whose hits in the [trending] window ending \
             now reach the prefix's threshold",
        )
        .param(required_query_param(
            "prefix",
            "string",
            "one of the configured prefixes",
            "#",
        ));
        let mut errors = vec![
            (400, "a bad or unknown query key"),
            (
                429,
                "a ranking that scans every counter while http.max_concurrent_scans are under way (Retry-After)",
            ),
        ];
        if global {
            top = top.staleness_params();
            trending = trending.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
        }
        let ranked = json!({"type": "array", "items": {"$ref": "#/components/schemas/Ranked"}});
        let top_answer = json!({"type": "object", "properties": {
            "top": ranked, "k": {"type": "integer"}, "prefix": {"type": "string"},
            "window": {"$ref": "#/components/schemas/Window"},
            "staleness_ms": {"type": "integer", "nullable": true},
            "complete": {"type": "boolean"},
            "datacenters": {"type": "object", "description": "global: each datacenter's own"},
        }});
        let trending_answer = json!({"type": "object", "properties": {
            "prefix": {"type": "string"}, "threshold": {"type": "integer"},
            "window": {"$ref": "#/components/schemas/Window"}, "trending": ranked,
            "staleness_ms": {"type": "integer", "nullable": true},
            "complete": {"type": "boolean"},
            "datacenters": {"type": "object", "description": "global: each datacenter's own"},
        }});
        let mut trending_errors = errors.clone();
        trending_errors.push((404, "a prefix with no configured threshold"));
        self.operation(
            "/topk",
            "get",
            top.json_answer(200, "the ranking", top_answer)
                .errors(&errors),
        )
        .operation(
            "/trending",
            "get",
            trending
                .json_answer(200, "the trending counters", trending_answer)
                .errors(&trending_errors),
        )
    }
}

/// The `{id}` path parameter: a counter id.
pub fn id_param() -> Value {
    path_param(
        "id",
        "a counter id: 1-256 bytes of UTF-8 without control characters, percent-encoded",
    )
}

/// A required path parameter.
pub fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string"}})
}

/// An optional query parameter of type `kind` (`integer`, `string`, `boolean`).
pub fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": {"type": kind}})
}

/// A required query parameter of type `kind`, with an example value.
pub fn required_query_param(name: &str, kind: &str, description: &str, example: &str) -> Value {
    json!({"name": name, "in": "query", "required": true, "description": description,
           "schema": {"type": kind}, "example": example})
}

/// An optional header parameter.
pub fn header_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "header", "required": false, "description": description,
           "schema": {"type": "string"}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_list_operations_with_their_answers_and_shared_parts() {
        let doc = ApiDoc::new("t", "d")
            .operation(
                "/counter/{id}",
                "get",
                Operation::new("read")
                    .param(id_param())
                    .json_answer(200, "ok", json!({"type": "object"}))
                    .errors(&[(404, "unknown")]),
            )
            .replication(true)
            .health_and_metrics("health");
        let json = doc.to_json();
        assert_eq!(json["openapi"], OPENAPI_VERSION);
        let read = &json["paths"]["/counter/{id}"]["get"];
        assert_eq!(read["parameters"][0]["name"], "id");
        assert!(read["responses"]["404"]["content"]["application/json"].is_object());
        assert!(read["responses"]["401"].is_object() && read["responses"]["403"].is_object());
        // Postcard bodies are documented with the content type the tiers send.
        let sync = &json["paths"]["/sync"]["post"];
        assert!(sync["requestBody"]["content"]["application/x-postcard"].is_object());
        assert!(sync["responses"]["200"]["content"]["application/x-postcard"].is_object());
        let health = &json["paths"]["/healthz"]["get"];
        assert_eq!(health["security"], json!([]), "probes need no token");
        assert!(health["responses"]["401"].is_null());
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
        let global = ApiDoc::new("t", "d").rankings(true).to_json();
        assert!(global["paths"]["/trending"]["get"]["responses"]["503"].is_object());
        assert!(global["paths"]["/trending"]["get"]["responses"]["404"].is_object());
    }
}
