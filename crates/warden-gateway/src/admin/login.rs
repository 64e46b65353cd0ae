//! Single sign-on for the console (O9, `[admin] login = true`): OpenID Connect's
//! authorization code flow with PKCE (S256) at the `[oauth]` issuer, as the
//! gateway's own client. The access token the code is redeemed for must name
//! the gateway (its audience) and an admin caller, exactly as a bearer token
//! on the console must ([O4](../../docs/behaviour.md#o4)); the browser then
//! holds a session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` behind
//! https), which only names a session kept here. API keys keep working.
//!
//! A login is bound to the browser that began it: the `state` it sends the
//! issuer is also in a short-lived cookie, and the callback takes a code only
//! with both. `SameSite=Strict` keeps the session cookie off the cross-site
//! redirect back from the issuer, so the callback answers with a page that
//! continues to the console itself.

use super::html::{esc, message, page};
use super::{reply, Reply, HTML};
use crate::front::auth::oauth::ResourceServer;
use base64::Engine as _;
use hyper::header::{HeaderMap, HeaderValue, COOKIE, LOCATION, SET_COOKIE};
use hyper::StatusCode;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SESSION_COOKIE: &str = "warden_console";
const LOGIN_COOKIE: &str = "warden_login";
/// How long a console session lasts.
const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// How long a begun login may take at the issuer.
const LOGIN_TTL: Duration = Duration::from_secs(600);
/// Logins under way at most (a flood of `/login` cannot grow the map further).
const MAX_PENDING: usize = 1000;

pub(super) const LOGIN_UNKNOWN: &str = "This login is not known here or has expired; log in again.";
pub(super) const LOGIN_FAILED: &str =
    "The issuer did not complete the login (the log says why); log in again.";
pub(super) const LOGIN_UNAVAILABLE: &str =
    "The issuer cannot be reached or names no authorization endpoint; try again later.";

struct Pending {
    verifier: String,
    redirect: String,
    began: Instant,
}

struct Session {
    admin: String,
    until: Instant,
}

/// Logins under way and the sessions they opened.
pub(super) struct Login {
    client_id: String,
    pending: Mutex<HashMap<String, Pending>>,
    sessions: Mutex<HashMap<String, Session>>,
}

fn random() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| format!("cannot draw a random value: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// The PKCE S256 challenge of `verifier` (RFC 7636).
fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The value of cookie `name` in a request's headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The console's own origin as the browser reaches it: https behind a proxy
/// that says so, else http; the Host was checked already (O4).
pub(super) fn origin(headers: &HeaderMap) -> (String, bool) {
    let https = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let host = headers
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    (
        format!("{}://{host}", if https { "https" } else { "http" }),
        https,
    )
}

fn set_cookie(r: &mut Reply, name: &str, value: &str, max_age: u64, same_site: &str, secure: bool) {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite={same_site}{secure}"
    );
    if let Ok(v) = HeaderValue::from_str(&text) {
        r.headers_mut().append(SET_COOKIE, v);
    }
}

impl Login {
    /// `[admin] login`: `None` when off; an error when it cannot work.
    pub(super) fn from_config(config: &crate::config::Config) -> Result<Option<Login>, String> {
        if !config.admin.login {
            return Ok(None);
        }
        let (Some(_), Some(client_id)) = (&config.oauth.issuer, &config.oauth.client_id) else {
            return Err("admin.login needs [oauth] issuer and client_id: console users log in at that issuer, as that client".into());
        };
        if config.admin.callers.is_empty() {
            return Err("admin.login needs [admin] callers: the admins a login must name".into());
        }
        Ok(Some(Login {
            client_id: client_id.clone(),
            pending: Mutex::default(),
            sessions: Mutex::default(),
        }))
    }

    /// The admin a request's session cookie names, and the session's id.
    pub(super) fn session(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let id = cookie(headers, SESSION_COOKIE)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.until > now);
        sessions.get(id).map(|s| (s.admin.clone(), id.to_owned()))
    }

    /// `GET /login`: off to the issuer, with a fresh state and PKCE verifier.
    /// A `login_hint` in `query` (OIDC: whom the user means to log in as) goes on
    /// to the issuer.
    pub(super) async fn start(
        &self,
        rs: &ResourceServer,
        headers: &HeaderMap,
        query: &str,
    ) -> Reply {
        let Some((authorize, _)) = rs.login_endpoints().await else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        let (Ok(state), Ok(verifier)) = (random(), random()) else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        let (origin, secure) = origin(headers);
        let redirect = format!("{origin}/login/callback");
        let pairs = [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", redirect.as_str()),
            ("scope", "openid"),
            ("state", state.as_str()),
            ("code_challenge", &challenge(&verifier)),
            ("code_challenge_method", "S256"),
            ("resource", rs.resource()),
        ];
        let hint = super::query_pairs(query)
            .into_iter()
            .find(|(k, v)| k == "login_hint" && !v.is_empty())
            .map(|(_, v)| v);
        let mut params = crate::net::fetch::form(&pairs);
        if let Some(h) = &hint {
            params.push_str("&login_hint=");
            params.push_str(&crate::net::fetch::form_escape(h));
        }
        let sep = if authorize.url().contains('?') {
            '&'
        } else {
            '?'
        };
        let to = format!("{}{sep}{params}", authorize.url());
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.retain(|_, p| p.began.elapsed() < LOGIN_TTL);
            if pending.len() >= MAX_PENDING {
                return reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HTML,
                    message("Log in", LOGIN_UNAVAILABLE),
                );
            }
            pending.insert(
                state.clone(),
                Pending {
                    verifier,
                    redirect,
                    began: Instant::now(),
                },
            );
        }
        let mut r = reply(StatusCode::FOUND, HTML, String::new());
        if let Ok(v) = HeaderValue::from_str(&to) {
            r.headers_mut().insert(LOCATION, v);
        }
        // Lax: it must come back with the issuer's redirect, a cross-site one.
        set_cookie(
            &mut r,
            LOGIN_COOKIE,
            &state,
            LOGIN_TTL.as_secs(),
            "Lax",
            secure,
        );
        r
    }

    /// `GET /login/callback?code&state`: the code redeemed for a token, the
    /// token checked as the console checks a bearer (`check`: the admin's name,
    /// or the refusal page), and a session opened.
    pub(super) async fn callback<F, Fut>(
        &self,
        rs: &ResourceServer,
        headers: &HeaderMap,
        query: &str,
        check: F,
    ) -> Reply
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Result<String, Reply>>,
    {
        let pairs = super::query_pairs(query);
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let state = get("state").unwrap_or_default();
        let bound = cookie(headers, LOGIN_COOKIE) == Some(state.as_str()) && !state.is_empty();
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&state);
        let (Some(p), true, Some(code)) = (pending, bound, get("code")) else {
            return reply(
                StatusCode::BAD_REQUEST,
                HTML,
                message("Log in", LOGIN_UNKNOWN),
            );
        };
        if p.began.elapsed() >= LOGIN_TTL {
            return reply(
                StatusCode::BAD_REQUEST,
                HTML,
                message("Log in", LOGIN_UNKNOWN),
            );
        }
        let Some((_, token_endpoint)) = rs.login_endpoints().await else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        let form = crate::net::fetch::form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", p.redirect.as_str()),
            ("code_verifier", p.verifier.as_str()),
            ("client_id", self.client_id.as_str()),
            ("resource", rs.resource()),
        ]);
        let token = match rs.post(&token_endpoint, form).await {
            Ok(v) => v
                .get("access_token")
                .and_then(|t| t.as_str())
                .map(str::to_owned),
            Err(e) => {
                tracing::warn!(
                    "a console login failed at the issuer's token endpoint: {}",
                    crate::logged::logged(&e)
                );
                None
            }
        };
        let Some(token) = token else {
            return reply(
                StatusCode::BAD_GATEWAY,
                HTML,
                message("Log in", LOGIN_FAILED),
            );
        };
        let admin = match check(token).await {
            Ok(admin) => admin,
            Err(refused) => return refused,
        };
        let Ok(id) = random() else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        tracing::info!(admin = %crate::logged::logged(&admin), "an admin logged in to the console");
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id.clone(),
                Session {
                    admin: admin.clone(),
                    until: Instant::now() + SESSION_TTL,
                },
            );
        let body = format!(
            "<p id=\"logged-in\">Logged in as {}. <a href=\"/\">Continue to the console</a>.</p>",
            esc(&admin)
        );
        // A page of the console's own goes on to it, so the Strict cookie is sent.
        let page = page("Logged in", "/api/overview", &body).replacen(
            "<meta charset=\"utf-8\">",
            "<meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url=/\">",
            1,
        );
        let mut r = reply(StatusCode::OK, HTML, page);
        let (_, secure) = origin(headers);
        set_cookie(
            &mut r,
            SESSION_COOKIE,
            &id,
            SESSION_TTL.as_secs(),
            "Strict",
            secure,
        );
        set_cookie(&mut r, LOGIN_COOKIE, "", 0, "Lax", secure);
        r
    }

    /// Ends session `id` (a POSTed logout, its CSRF token checked already).
    pub(super) fn logout(&self, id: &str, headers: &HeaderMap) -> Reply {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        let mut r = reply(
            StatusCode::OK,
            HTML,
            message("Logged out", "You are logged out of the console."),
        );
        let (_, secure) = origin(headers);
        set_cookie(&mut r, SESSION_COOKIE, "", 0, "Strict", secure);
        r
    }
}

/// `GET /logout`: the form that logs out (a POST, with its CSRF token).
pub(super) fn logout_page(csrf: &str) -> String {
    page(
        "Log out",
        "/api/overview",
        &format!(
            "<form method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Log out</button></form>",
            esc(csrf)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_is_rfc_7636s() {
        // RFC 7636 appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn cookies_are_read_by_name() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1; warden_console=abc"));
        h.append(COOKIE, HeaderValue::from_static("warden_login=xyz"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, LOGIN_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "nope"), None);
    }

    #[test]
    fn the_session_cookie_is_http_only_strict_and_secure_behind_https() {
        let mut r = reply(StatusCode::OK, HTML, String::new());
        set_cookie(&mut r, SESSION_COOKIE, "id", 60, "Strict", true);
        assert_eq!(
            r.headers()[SET_COOKIE],
            "warden_console=id; Path=/; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        let mut h = HeaderMap::new();
        h.insert(
            hyper::header::HOST,
            HeaderValue::from_static("console.example"),
        );
        assert_eq!(origin(&h), ("http://console.example".to_owned(), false));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(origin(&h), ("https://console.example".to_owned(), true));
    }
}
