//! The status page both tiers serve at `GET /`: one HTML document with its style and script
//! (`index.html`, `page.css`, `page.js`, shipped inside the binary; nothing is fetched from
//! elsewhere). The script reads only this process's own routes (`/status`, the reads and
//! rankings, `/counter/{id}/rights`), with the token typed into the page when `[auth]` asks
//! for one.

use bytes::Bytes;
use geocount_net::{Response, bytes_response};
use hyper::StatusCode;
use hyper::header::{CACHE_CONTROL, HeaderValue};

use crate::error::AggregatorError;

const HTML: &str = include_str!("index.html");
const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The content type of the page.
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// What the page may load and call: itself, and this origin only.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
     script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page of the tier `tier` (`global` or `datacenter`), titled `name`.
pub fn document(tier: &str, name: &str) -> Response {
    let html = HTML
        .replace("/*PAGE_CSS*/", CSS)
        .replace("/*PAGE_JS*/", JS)
        .replace("{{TIER}}", tier)
        .replace("{{NAME}}", &escape(name));
    let mut response = bytes_response(StatusCode::OK, HTML_CONTENT_TYPE, Bytes::from(html));
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the trending lists of this cluster are configured with, for the page's choice of
/// prefix.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrendingSettings {
    /// The prefixes `GET /trending` takes.
    pub prefixes: Vec<String>,
    /// The window their hits are counted over.
    pub window_seconds: u32,
}

impl TrendingSettings {
    /// The settings of `[trending]`.
    pub fn of(trending: &geocount_model::TrendingConfig) -> Self {
        Self {
            prefixes: trending.thresholds.keys().cloned().collect(),
            window_seconds: trending.window_seconds,
        }
    }
}

/// Refuses any query key: the status routes take none.
pub fn no_query(query: Option<&str>) -> Result<(), AggregatorError> {
    let query = query.unwrap_or("");
    match form_urlencoded::parse(query.as_bytes()).next() {
        Some((key, _)) => Err(AggregatorError::NoQuery(key.into_owned())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_its_style_and_script_and_nothing_from_elsewhere() {
        let response = document("datacenter", "USA_0<x>");
        assert_eq!(response.headers()["content-type"], HTML_CONTENT_TYPE);
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        let body = String::from_utf8(body_of(response)).unwrap();
        assert!(body.contains("USA_0&lt;x&gt;") && !body.contains("USA_0<x>"));
        assert!(!body.contains("/*PAGE_JS*/") && !body.contains("{{TIER}}"));
        for marker in [
            "src=\"http",
            "href=\"http",
            "src=\"//",
            "url(http",
            "@import",
        ] {
            assert!(!body.contains(marker), "the page loads {marker}");
        }
    }

    fn body_of(response: Response) -> Vec<u8> {
        use hyper::body::Body;
        let mut body = response.into_body();
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut bytes = Vec::new();
        while let std::task::Poll::Ready(Some(Ok(frame))) =
            std::pin::Pin::new(&mut body).poll_frame(&mut context)
        {
            bytes.extend_from_slice(&frame.into_data().unwrap());
        }
        bytes
    }

    #[test]
    fn status_routes_take_no_query() {
        assert!(no_query(None).is_ok());
        assert!(no_query(Some("")).is_ok());
        assert!(matches!(no_query(Some("x=1")), Err(AggregatorError::NoQuery(k)) if k == "x"));
    }
}
