//! The requests a tier's OpenAPI document describes, one per operation: its path parameters
//! filled, its required query parameters and JSON body taken from the document's examples.

use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use hyper::Method;
use serde_json::Value;

/// One documented operation, as a request.
#[derive(Debug, Clone)]
pub struct Documented<'d> {
    /// Its method.
    pub method: Method,
    /// Its path as documented (`/counter/{id}`).
    pub path: &'d str,
    /// The path with `{id}` and `{slot}` filled and the required query parameters added.
    pub url: String,
    /// The document's example body, when it takes JSON.
    pub json: Option<Value>,
    /// The operation itself (its responses, its `security`).
    pub operation: &'d Value,
}

impl Documented<'_> {
    /// The `geocount_model::wire` message its postcard body is, when it takes one.
    pub fn postcard_message(&self) -> Option<&str> {
        let content = &self.operation["requestBody"]["content"][POSTCARD_CONTENT_TYPE];
        let description = content["schema"]["description"].as_str()?;
        description.rsplit("wire::").next()
    }

    /// The `content-type` header and body of its JSON example (none without one).
    pub fn json_body(&self) -> (Vec<(&'static str, &'static str)>, Vec<u8>) {
        match &self.json {
            Some(example) => (
                vec![("content-type", "application/json")],
                serde_json::to_vec(example).expect("JSON encodes"),
            ),
            None => (Vec::new(), Vec::new()),
        }
    }
}

/// Every operation of `doc` (a tier's `/openapi.json`), in the document's order, with `{id}`
/// as `id` and `{slot}` as `slot`.
pub fn operations<'d>(doc: &'d Value, id: &str, slot: &str) -> Vec<Documented<'d>> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut operations = Vec::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("path item") {
            let mut url = path.replace("{id}", id).replace("{slot}", slot);
            let query: Vec<String> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| {
                    let example = p["example"]
                        .as_str()
                        .expect("required params have examples");
                    let encoded: String =
                        form_urlencoded::byte_serialize(example.as_bytes()).collect();
                    format!("{}={encoded}", p["name"].as_str().unwrap())
                })
                .collect();
            if !query.is_empty() {
                url = format!("{url}?{}", query.join("&"));
            }
            let example = &operation["requestBody"]["content"]["application/json"]["example"];
            operations.push(Documented {
                method: Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method"),
                path,
                url,
                json: (!example.is_null()).then(|| example.clone()),
                operation,
            });
        }
    }
    operations
}
