//! Whose an `Idempotency-Key` is: keys are remembered per client token, so two tenants that
//! happen to pick the same key never meet.
//!
//! A key is held as `<token name><US><key>` (US, the unit separator, is a byte no key may
//! hold), the empty name when no tokens are configured. The node that takes a client's write
//! scopes its key by the token that sent it; a write forwarded between nodes carries the key
//! already scoped. Routing a keyed write to its slot hashes the key alone ([`unscoped`]), so
//! clients that route themselves from the topology keep finding the same slot.

use crate::engine::idempotency::MAX_IDEMPOTENCY_KEY_BYTES;
use crate::error::ShardError;

/// Separates an idempotency key's scope from the key.
pub(crate) const KEY_SCOPE_SEPARATOR: char = '\u{1f}';

/// Whose keys a request's idempotency keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyScope {
    /// A client's: the name of the token it sent (`""` when no tokens are configured).
    Token(String),
    /// Another node's forward: the keys come scoped already.
    Forwarded,
}

impl KeyScope {
    /// The key to remember for `key` as this request sent it, or why it is refused (400).
    pub fn key(&self, key: &str) -> Result<Box<str>, ShardError> {
        match self {
            KeyScope::Token(token) => {
                check_client_key(key)?;
                Ok(format!("{token}{KEY_SCOPE_SEPARATOR}{key}").into())
            }
            KeyScope::Forwarded => {
                if !key.contains(KEY_SCOPE_SEPARATOR) {
                    return Err(ShardError::bad_request(
                        "a forwarded write's Idempotency-Key must carry its scope".into(),
                    ));
                }
                check_client_key(unscoped(key))?;
                Ok(key.into())
            }
        }
    }
}

/// The scope (token name) of a scoped key.
pub fn scope_of(key: &str) -> &str {
    key.rsplit_once(KEY_SCOPE_SEPARATOR)
        .map_or("", |(scope, _)| scope)
}

/// Refuses a client's `Idempotency-Key` that is empty, longer than
/// [`MAX_IDEMPOTENCY_KEY_BYTES`], or holds the scope separator.
pub fn check_client_key(key: &str) -> Result<(), ShardError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(ShardError::bad_request(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
        )));
    }
    if key.contains(KEY_SCOPE_SEPARATOR) {
        return Err(ShardError::bad_request(
            "Idempotency-Key must not hold the unit separator (0x1f)".into(),
        ));
    }
    Ok(())
}

/// The client's key of a scoped key (a key no client sent whole: the part after the last
/// separator, since a client's key holds none).
pub(crate) fn unscoped(key: &str) -> &str {
    key.rsplit_once(KEY_SCOPE_SEPARATOR)
        .map_or(key, |(_, key)| key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_scoped_by_their_token_and_forwarded_as_they_are() {
        let a = KeyScope::Token("tenant-a".into()).key("1").unwrap();
        let b = KeyScope::Token("tenant-b".into()).key("1").unwrap();
        assert_ne!(a, b, "one key, two tenants");
        assert_eq!(unscoped(&a), "1");
        assert_eq!(&*KeyScope::Forwarded.key(&a).unwrap(), &*a);
        assert_eq!(&*KeyScope::Token("".into()).key("k").unwrap(), "\u{1f}k");
    }

    #[test]
    fn keys_that_could_pose_as_another_scope_are_refused() {
        assert!(KeyScope::Token("a".into()).key("b\u{1f}c").is_err());
        assert!(KeyScope::Token("a".into()).key("").is_err());
        assert!(KeyScope::Token("a".into()).key(&"k".repeat(257)).is_err());
        assert!(KeyScope::Token("a".into()).key(&"k".repeat(256)).is_ok());
        assert!(KeyScope::Forwarded.key("unscoped").is_err());
        assert!(KeyScope::Forwarded.key("a\u{1f}").is_err());
    }
}
