//! Why a pull failed or a pulled page was refused ([`SyncError`]). Its text is what a source's
//! `last_error` reports.

use geocount_net::ClientError;
use hyper::StatusCode;

/// A failed pull, or a pulled page refused whole.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The sync request could not be encoded.
    #[error("cannot encode a sync request: {0}")]
    Encode(postcard::Error),
    /// No answer: the source is unreachable, or did not answer in time.
    #[error(transparent)]
    Unanswered(#[from] ClientError),
    /// The source answered with a failure status.
    #[error("{url}: answered {status}: {body}")]
    Refused {
        /// What was pulled.
        url: String,
        /// The status it answered.
        status: StatusCode,
        /// Its body, as text.
        body: String,
    },
    /// The source's answer is not a sync page.
    #[error("{url}: undecodable sync page: {error}")]
    Undecodable {
        /// What was pulled.
        url: String,
        /// Why it does not decode.
        error: postcard::Error,
    },
    /// The page was answered under another name than the source's: a process configured for
    /// another slot or datacenter listens at the address pulled.
    #[error(
        "answered as {answered:?}, not {expected:?}: a process configured for another slot or datacenter listens there; its pages are refused"
    )]
    WrongSource {
        /// The name the page carries.
        answered: String,
        /// The name the source's pages must carry.
        expected: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source's `last_error` says what the operator must fix: which name answered.
    #[test]
    fn a_page_under_another_name_says_which() {
        let error = SyncError::WrongSource {
            answered: "DC_A_VAL_1".to_owned(),
            expected: "DC_A_VAL_0".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "answered as \"DC_A_VAL_1\", not \"DC_A_VAL_0\": a process configured for another slot or datacenter listens there; its pages are refused"
        );
        let refused = SyncError::Refused {
            url: "http://127.0.0.1:1/sync".to_owned(),
            status: StatusCode::FORBIDDEN,
            body: "no".to_owned(),
        };
        assert_eq!(
            refused.to_string(),
            "http://127.0.0.1:1/sync: answered 403 Forbidden: no"
        );
    }
}
