//! CSRF tokens for the console's forms. A browser sends HTTP Basic credentials
//! (and, later, a session cookie) with any form post, wherever the form came
//! from; so every state-changing form carries a token only the console's own
//! pages hold, and a post without the right one is refused. A token is an HMAC,
//! under a key this process draws at start, of who the page was made for: it
//! needs no storage, and a token made for one admin is no good to another.

use base64::Engine as _;
use ring::hmac;

/// The form field that carries the token.
pub const FIELD: &str = "csrf";

pub(super) struct Csrf {
    key: hmac::Key,
}

impl Csrf {
    /// A new key, drawn from the operating system's generator.
    pub(super) fn new() -> Result<Csrf, String> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| format!("cannot draw the console's CSRF key: {e}"))?;
        Ok(Csrf {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
        })
    }

    /// The token for pages made for `who` (an admin's name, or their session).
    pub(super) fn token(&self, who: &str) -> String {
        let tag = hmac::sign(&self.key, who.as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    /// Whether `token` is the one made for `who` (compared in constant time).
    pub(super) fn verify(&self, who: &str, token: &str) -> bool {
        let Ok(tag) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        hmac::verify(&self.key, who.as_bytes(), &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_good_for_whom_it_was_made_and_in_this_process_only() {
        let (csrf, other) = (Csrf::new().unwrap(), Csrf::new().unwrap());
        let t = csrf.token("alice");
        assert!(csrf.verify("alice", &t));
        assert!(!csrf.verify("bob", &t));
        assert!(!other.verify("alice", &t));
        assert!(!csrf.verify("alice", ""));
        assert!(!csrf.verify("alice", "!!"));
        assert_eq!(t.len(), 43, "32 bytes, base64url without padding");
    }
}
