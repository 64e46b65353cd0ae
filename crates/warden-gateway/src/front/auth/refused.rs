//! Why a request was not let in, and how that is said: the caller-facing text
//! and the `WWW-Authenticate` challenge (RFC 6750). With `[oauth]` every
//! challenge also points at the protected resource metadata (RFC 9728) and names
//! the scopes to ask for, so a client can discover how to log in.

/// Why a request was not identified; each becomes a 401 with `WWW-Authenticate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `Authorization` header and no anonymous caller.
    Missing,
    /// A scheme other than `Bearer`.
    NotBearer,
    /// A credential that is neither a known key nor a valid token.
    Invalid,
    Expired,
    /// A JWT whose `nbf` is still ahead (beyond the clock-skew leeway).
    NotYetValid,
    /// A JWT whose `iat` is ahead: a token cannot have been issued later than now.
    IssuedInFuture,
    WrongAudience,
    WrongIssuer,
    /// A JWT without `aud` although an audience is required.
    NoAudience,
    /// A JWT without `iss` although an issuer is configured.
    NoIssuer,
    /// A JWT whose caller claim is missing or not a string.
    NoCaller,
    /// A JWT whose `alg` is not the one of an issuer key (`none`, HS256 against a
    /// public key): algorithm confusion.
    Algorithm,
    /// A JWT whose `kid` the issuer does not publish, after a (rate-limited) refetch.
    UnknownKey,
    /// A JWT whose signature does not verify with the key it names.
    Signature,
    /// An opaque token introspection calls inactive.
    Inactive,
    /// An opaque token the issuer could not be asked about.
    Unchecked,
}

/// What an `[oauth]` challenge adds: where the metadata is, which scopes to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The URL of the protected resource metadata (RFC 9728 §5.1).
    pub resource_metadata: String,
    /// Space-separated scopes to ask for, if any are known.
    pub scope: Option<String>,
}

impl Refused {
    /// The caller-facing text (the JSON-RPC error message of the 401).
    pub fn text(self) -> &'static str {
        use crate::texts as answer;
        match self {
            Refused::Missing => answer::HTTP_NO_CREDENTIAL,
            Refused::NotBearer => answer::HTTP_NOT_BEARER,
            Refused::Invalid => answer::HTTP_BAD_CREDENTIAL,
            Refused::Expired => answer::HTTP_TOKEN_EXPIRED,
            Refused::NotYetValid => answer::HTTP_TOKEN_NOT_YET_VALID,
            Refused::IssuedInFuture => answer::HTTP_TOKEN_ISSUED_IN_FUTURE,
            Refused::WrongAudience => answer::HTTP_TOKEN_AUDIENCE,
            Refused::WrongIssuer => answer::HTTP_TOKEN_ISSUER,
            Refused::NoAudience => answer::HTTP_TOKEN_NO_AUDIENCE,
            Refused::NoIssuer => answer::HTTP_TOKEN_NO_ISSUER,
            Refused::NoCaller => answer::HTTP_TOKEN_NO_CALLER,
            Refused::Algorithm => answer::HTTP_TOKEN_ALGORITHM,
            Refused::UnknownKey => answer::HTTP_TOKEN_UNKNOWN_KEY,
            Refused::Signature => answer::HTTP_TOKEN_SIGNATURE,
            Refused::Inactive => answer::HTTP_TOKEN_INACTIVE,
            Refused::Unchecked => answer::HTTP_TOKEN_UNCHECKED,
        }
    }

    /// The `WWW-Authenticate` header value (RFC 6750 §3): no error code when no
    /// credential was shown, `invalid_token` with the reason otherwise.
    pub fn challenge(self, oauth: Option<&Challenge>) -> String {
        let mut out = "Bearer realm=\"mcp-warden\"".to_owned();
        if let Some(c) = oauth {
            out.push_str(&format!(", resource_metadata=\"{}\"", c.resource_metadata));
            if let Some(scope) = &c.scope {
                out.push_str(&format!(", scope=\"{scope}\""));
            }
        }
        if !matches!(self, Refused::Missing | Refused::NotBearer) {
            out.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{}\"",
                self.text().trim_end_matches('.')
            ));
        }
        out
    }
}

/// The challenge of a 403 for a token that lacks scopes (RFC 6750 §3.1, the MCP
/// step-up): `scope` lists everything the request needs.
pub fn insufficient_scope(oauth: &Challenge, scope: &str) -> String {
    format!(
        "Bearer realm=\"mcp-warden\", resource_metadata=\"{}\", scope=\"{scope}\", error=\"insufficient_scope\", error_description=\"{}\"",
        oauth.resource_metadata,
        crate::texts::http_insufficient_scope(scope).trim_end_matches('.')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_follow_rfc_6750_and_point_at_the_metadata() {
        assert_eq!(
            Refused::Missing.challenge(None),
            "Bearer realm=\"mcp-warden\""
        );
        assert_eq!(
            Refused::Expired.challenge(None),
            "Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"Unauthorized: the token has expired\""
        );
        let c = Challenge {
            resource_metadata: "https://mcp.example/.well-known/oauth-protected-resource/mcp"
                .into(),
            scope: Some("mcp".into()),
        };
        assert_eq!(
            Refused::Missing.challenge(Some(&c)),
            "Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\""
        );
        assert_eq!(
            Refused::UnknownKey.challenge(Some(&c)),
            "Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\", error=\"invalid_token\", error_description=\"Unauthorized: the token is signed with a key the issuer does not publish\""
        );
        assert_eq!(
            insufficient_scope(&c, "mcp notes:write"),
            "Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\", scope=\"mcp notes:write\", error=\"insufficient_scope\", error_description=\"Forbidden: the token lacks a scope this request needs; ask for: mcp notes:write\""
        );
    }
}
