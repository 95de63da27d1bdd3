//! The `Prefer` request header (RFC 7240), as far as geocount honours it: `return=minimal` asks
//! for a short answer to a write. A server may ignore a preference, so a malformed header is not
//! an error: it only asks for nothing.

use hyper::HeaderMap;
use hyper::header::HeaderName;

/// `Prefer`.
pub const PREFER: HeaderName = HeaderName::from_static("prefer");
/// `Preference-Applied`: which preferences the answer honoured.
pub const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");
/// The value of `Prefer` and of `Preference-Applied` for the short answer.
pub const RETURN_MINIMAL: &str = "return=minimal";

/// Whether the request's `Prefer` headers ask for `return=minimal`. Names and values compare
/// case-insensitively, a value may be quoted, parameters after `;` are ignored, and when
/// `return` comes more than once the first one counts (RFC 7240, section 2).
pub fn prefers_minimal_return(headers: &HeaderMap) -> bool {
    headers
        .get_all(PREFER)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(members)
        .find_map(|member| {
            let preference = member.split(';').next().unwrap_or_default();
            let (name, value) = preference.split_once('=').unwrap_or((preference, ""));
            name.trim().eq_ignore_ascii_case("return").then(|| {
                value
                    .trim()
                    .trim_matches('"')
                    .eq_ignore_ascii_case("minimal")
            })
        })
        .unwrap_or(false)
}

/// The comma-separated members of one header value; a comma inside a quoted string does not
/// separate.
fn members(value: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut escaped = false;
    value
        .split(move |c: char| {
            if escaped {
                escaped = false;
            } else if quoted && c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = !quoted;
            } else if c == ',' && !quoted {
                return true;
            }
            false
        })
        .map(str::trim)
        .filter(|member| !member.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefers(values: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(PREFER, value.parse().unwrap());
        }
        prefers_minimal_return(&headers)
    }

    #[test]
    fn return_minimal_is_found_however_it_is_written() {
        assert!(prefers(&["return=minimal"]));
        assert!(prefers(&["Return = \"Minimal\""]));
        assert!(prefers(&[
            "respond-async, wait=10, return=minimal; foo=bar"
        ]));
        assert!(prefers(&["wait=10", "return=minimal"]));
        assert!(prefers(&[",,return=minimal,"]));
    }

    #[test]
    fn anything_else_asks_for_the_full_answer() {
        assert!(!prefers(&[]));
        assert!(!prefers(&["return=representation"]));
        assert!(!prefers(&["return"]));
        assert!(!prefers(&["returns=minimal"]));
        assert!(!prefers(&["respond-async; return=minimal"]));
        // The first `return` counts.
        assert!(!prefers(&["return=representation, return=minimal"]));
        // A comma inside a quoted parameter does not start a preference.
        assert!(!prefers(&["foo=\"a, return=minimal\""]));
        assert!(!prefers(&["foo=\"a\\\", return=minimal\""]));
    }
}
