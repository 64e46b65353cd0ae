//! Who may use the console and the admin API ([O4](../../docs/behaviour.md#o4)):
//! loopback clients when no `[admin] callers` are set, else only those callers,
//! authenticated with the HTTP front's credentials.

use crate::front::auth::Auth;
use crate::gateway::Gateway;
use base64::Engine as _;
use std::net::IpAddr;
use warden_core::CallerSelector;

/// Who may use the console and the admin API.
pub(super) struct Gate {
    pub(super) auth: Auth,
    admins: Vec<CallerSelector>,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// 401: no credential, or one that names nobody.
    Unauthenticated,
    /// 403: a caller who is no admin, or (no admins configured) a remote client.
    Forbidden(&'static str),
    /// 403 insufficient_scope: an `[oauth]` token without the `required_scopes`,
    /// refused as the MCP front refuses it; `scope` is what to ask for.
    Scope {
        challenge: crate::front::auth::Challenge,
        scope: String,
    },
}

const NOT_LOOPBACK: &str =
    "The console is open to loopback clients only; configure [admin] callers to open it to others.";
const NOT_ADMIN: &str = "This caller is not one of the [admin] callers.";

impl Gate {
    /// `[admin] callers`, with the credentials of the HTTP front.
    pub(super) fn from_config(gw: &Gateway) -> Result<Gate, String> {
        let admins = gw
            .config
            .admin
            .callers
            .iter()
            .map(|s| CallerSelector::parse(s).map_err(|e| format!("admin.callers: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Gate {
            // An `[oauth]` token's audience is the MCP front's URL (or `oauth.resource`).
            auth: Auth::from_config(&gw.config, &front_url(&gw.config))?,
            admins,
        })
    }

    /// The admin's caller name; `None` for a loopback client when no admin
    /// callers are configured.
    pub(super) async fn check(
        &self,
        peer: IpAddr,
        authorization: Option<&[u8]>,
        gw: &Gateway,
    ) -> Result<Option<String>, Refusal> {
        if self.admins.is_empty() {
            return if is_loopback(peer) {
                Ok(None)
            } else {
                Err(Refusal::Forbidden(NOT_LOOPBACK))
            };
        }
        // Never the anonymous caller: the console needs a credential.
        let header = authorization.ok_or(Refusal::Unauthenticated)?;
        let bearer = as_bearer(header).ok_or(Refusal::Unauthenticated)?;
        self.admin_of(&bearer, gw).await.map(Some)
    }

    /// The admin caller `bearer` (`Bearer <token>`) names, checked as every
    /// console request's credential is (a login's token too, O9).
    pub(super) async fn admin_of(&self, bearer: &str, gw: &Gateway) -> Result<String, Refusal> {
        let identity = self
            .auth
            .identify(Some(bearer.as_bytes()), &gw.current_config())
            .await
            .map_err(|_| Refusal::Unauthenticated)?;
        if let (Some(rs), Some(held)) = (self.auth.oauth(), &identity.scopes) {
            if let Some(scope) = rs.missing_scopes(held, None) {
                tracing::info!(caller = %crate::logged::logged(&identity.caller.name), scope = %scope, "a token lacks scopes the console needs (403 insufficient_scope)");
                return Err(Refusal::Scope {
                    challenge: rs.challenge(),
                    scope,
                });
            }
        }
        if self.admins.iter().any(|s| s.matches(&identity.caller)) {
            Ok(identity.caller.name)
        } else {
            Err(Refusal::Forbidden(NOT_ADMIN))
        }
    }
}

impl Gate {
    /// The admin an ID token of the console's own issuer names (O9): its
    /// caller claim, or one of its groups (the token's, and those `[[caller]]`
    /// gives that name), among `[admin] callers`.
    pub(super) fn admin_named(
        &self,
        who: &crate::front::auth::oauth::Verified,
        gw: &Gateway,
    ) -> Result<String, Refusal> {
        let mut caller = warden_core::Caller::new(&who.name);
        caller.groups = who.groups.clone();
        let config = gw.current_config();
        for c in config.caller.iter().filter(|c| c.name == who.name) {
            caller.groups.extend(c.groups.iter().cloned());
        }
        if self.admins.iter().any(|s| s.matches(&caller)) {
            Ok(caller.name)
        } else {
            Err(Refusal::Forbidden(NOT_ADMIN))
        }
    }
}

/// `Bearer X` as it is; `Basic base64(user:X)` as `Bearer X` (the user name is not read).
fn as_bearer(header: &[u8]) -> Option<String> {
    let header = std::str::from_utf8(header).ok()?.trim();
    let (scheme, credential) = header.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(format!("Bearer {}", credential.trim()));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credential.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (_, password) = decoded.split_once(':')?;
    (!password.is_empty()).then(|| format!("Bearer {password}"))
}

/// The MCP front's own URL, as the configuration names it.
fn front_url(config: &crate::config::Config) -> String {
    let scheme = if config.gateway.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{}/mcp", config.gateway.listen)
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_passwords_and_bearer_tokens_are_both_credentials() {
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:s3cret")
        );
        assert_eq!(
            as_bearer(basic.as_bytes()).as_deref(),
            Some("Bearer s3cret")
        );
        assert_eq!(as_bearer(b"bearer tok").as_deref(), Some("Bearer tok"));
        let empty = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:")
        );
        assert_eq!(as_bearer(empty.as_bytes()), None);
        assert_eq!(as_bearer(b"Digest x"), None);
        assert_eq!(as_bearer(b"Basic !!"), None);
    }

    #[test]
    fn loopback_includes_mapped_addresses() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("10.0.0.1".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
    }
}
