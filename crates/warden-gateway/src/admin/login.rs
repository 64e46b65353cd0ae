//! Single sign-on for the console (O9, `[admin] login = true`): OpenID Connect's
//! authorization code flow with PKCE (S256) at the `[oauth]` issuer, as the
//! gateway's own client. The access token the code is redeemed for must name
//! the gateway (its audience) and an admin caller, exactly as a bearer token
//! on the console must ([O4](../../docs/behaviour.md#o4)). With a `[console]
//! issuer` of its own, the login goes there instead, and it is the ID token
//! that is checked (signature, `iss`, `aud` the console's client, `exp`, and
//! the login's `nonce`) and must name an admin by its claim or a group. The browser then
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
use crate::front::auth::oauth::{ResourceServer, Verified};
use base64::Engine as _;
use hyper::header::{HeaderMap, HeaderValue, COOKIE, LOCATION, SET_COOKIE};
use hyper::StatusCode;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
pub(super) const LOGIN_ID_TOKEN: &str =
    "The issuer's ID token for this login did not pass its checks (the log says why); log in again.";
const LOGIN_NEEDS_ISSUER: &str = "admin.login needs [console] issuer and client_id, or [oauth] issuer and client_id: console users log in at that issuer, as that client";

/// What a redeemed login proves, for the gate to name the admin by.
pub(super) enum Proof {
    /// The `[oauth]` issuer's access token, checked as a bearer on the console is.
    Bearer(String),
    /// The identity a `[console] issuer`'s ID token names, checked already.
    Identity(Verified),
}

struct Pending {
    verifier: String,
    /// OpenID Connect's `nonce`: the ID token must carry it back.
    nonce: String,
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
    /// `[console] issuer`: where users log in instead of the `[oauth]` issuer.
    own: Option<Arc<ResourceServer>>,
    /// `openid`, and `[console] scopes`.
    scope: String,
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
        let own = ResourceServer::for_console(config)?;
        let o = &config.oauth;
        let client_id = match (&own, &config.console.client_id, &o.issuer, &o.client_id) {
            (Some(_), Some(id), _, _) | (None, _, Some(_), Some(id)) => id.clone(),
            _ => return Err(LOGIN_NEEDS_ISSUER.into()),
        };
        if config.admin.callers.is_empty() {
            return Err("admin.login needs [admin] callers: the admins a login must name".into());
        }
        let mut scope = "openid".to_owned();
        if own.is_some() {
            for s in config.console.scopes.iter().filter(|s| *s != "openid") {
                scope.push(' ');
                scope.push_str(s);
            }
        }
        Ok(Some(Login {
            client_id,
            own,
            scope,
            pending: Mutex::default(),
            sessions: Mutex::default(),
        }))
    }

    /// The issuer users log in at: the console's own, else the `[oauth]` one.
    pub(super) fn issuer<'a>(
        &'a self,
        oauth: Option<&'a Arc<ResourceServer>>,
    ) -> Option<&'a Arc<ResourceServer>> {
        self.own.as_ref().or(oauth)
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
        let (Ok(state), Ok(verifier), Ok(nonce)) = (random(), random(), random()) else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        let (origin, secure) = origin(headers);
        let redirect = format!("{origin}/login/callback");
        let mut pairs = vec![
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", redirect.as_str()),
            ("scope", self.scope.as_str()),
            ("state", state.as_str()),
            ("nonce", nonce.as_str()),
        ];
        let challenge = challenge(&verifier);
        pairs.extend([
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ]);
        // The gateway's resource names what the `[oauth]` access token is for;
        // a console issuer's ID token names the console's client instead.
        if self.own.is_none() {
            pairs.push(("resource", rs.resource()));
        }
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
                    nonce,
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
    /// token checked as the console checks a bearer, or a console issuer's ID
    /// token checked here (`check`: the admin's name, or the refusal page),
    /// and a session opened.
    pub(super) async fn callback<F, Fut>(
        &self,
        rs: &Arc<ResourceServer>,
        headers: &HeaderMap,
        query: &str,
        check: F,
    ) -> Reply
    where
        F: FnOnce(Proof) -> Fut,
        Fut: std::future::Future<Output = Result<String, Reply>>,
    {
        let Some((p, code)) = self.pending_login(headers, query) else {
            return reply(
                StatusCode::BAD_REQUEST,
                HTML,
                message("Log in", LOGIN_UNKNOWN),
            );
        };
        let Some((_, token_endpoint)) = rs.login_endpoints().await else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                HTML,
                message("Log in", LOGIN_UNAVAILABLE),
            );
        };
        let proof = match self.redeem(rs, &token_endpoint, &code, &p).await {
            Ok(proof) => proof,
            Err(r) => return r,
        };
        let admin = match check(proof).await {
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
        self.logged_in(headers, admin, id)
    }

    /// The login a callback's `state` names, begun in this browser (its login
    /// cookie holds the state) and not too long ago, with the callback's `code`;
    /// taken out of the logins pending either way.
    fn pending_login(&self, headers: &HeaderMap, query: &str) -> Option<(Pending, String)> {
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
            return None;
        };
        (p.began.elapsed() < LOGIN_TTL).then_some((p, code))
    }

    /// Opens the console session `id` for `admin`: the page that goes on to the
    /// console, with the session cookie set and the login cookie cleared.
    fn logged_in(&self, headers: &HeaderMap, admin: String, id: String) -> Reply {
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

    /// The code redeemed at the token endpoint: the `[oauth]` issuer's access
    /// token, or the identity a console issuer's ID token names. An ID token in
    /// the answer is checked whichever issuer sent it (a console issuer must
    /// send one); else the page that says the login failed.
    async fn redeem(
        &self,
        rs: &Arc<ResourceServer>,
        token_endpoint: &crate::net::target::HttpTarget,
        code: &str,
        p: &Pending,
    ) -> Result<Proof, Reply> {
        let mut pairs = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", p.redirect.as_str()),
            ("code_verifier", p.verifier.as_str()),
            ("client_id", self.client_id.as_str()),
        ];
        if self.own.is_none() {
            pairs.push(("resource", rs.resource()));
        }
        let answer = match rs
            .post(token_endpoint, crate::net::fetch::form(&pairs))
            .await
        {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(
                    "a console login failed at the issuer's token endpoint: {}",
                    crate::logged::logged(&e)
                );
                None
            }
        };
        let field = |k: &str| {
            let v = answer.as_ref()?.get(k)?.as_str()?;
            Some(v.to_owned())
        };
        let failed = || {
            reply(
                StatusCode::BAD_GATEWAY,
                HTML,
                message("Log in", LOGIN_FAILED),
            )
        };
        // The ID token, where there is one, must be this login's; a console
        // issuer's is the proof itself, so it must be there.
        let id_token = field("id_token");
        let who = match &id_token {
            Some(t) => Some(self.check_id_token(rs, t, &p.nonce).await?),
            None if self.own.is_some() => return Err(failed()),
            None => None,
        };
        match (who, field("access_token")) {
            (Some(who), _) if self.own.is_some() => Ok(Proof::Identity(who)),
            (_, Some(token)) if self.own.is_none() => Ok(Proof::Bearer(token)),
            _ => Err(failed()),
        }
    }

    /// An ID token checked for this login (signature, `iss`, `aud` this
    /// client, `exp`, `nonce`); else the page that says it did not pass.
    async fn check_id_token(
        &self,
        rs: &Arc<ResourceServer>,
        token: &str,
        nonce: &str,
    ) -> Result<Verified, Reply> {
        match rs.verify_id_token(token, nonce, &self.client_id).await {
            Ok(who) => Ok(who),
            Err(refused) => {
                tracing::warn!(why = ?refused, "a console login's ID token did not pass its checks (signature, iss, aud, exp, nonce)");
                let page = message("Log in", LOGIN_ID_TOKEN);
                Err(reply(StatusCode::FORBIDDEN, HTML, page))
            }
        }
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
    fn the_login_texts_are_exact() {
        assert_eq!(
            LOGIN_ID_TOKEN,
            "The issuer's ID token for this login did not pass its checks (the log says why); log in again."
        );
    }

    #[test]
    fn a_login_needs_an_issuer_and_a_client_the_consoles_own_first() {
        let login = |extra: &str| {
            let text = format!("[admin]\ncallers = [\"alice\"]\nlogin = true\n{extra}");
            let config = crate::config::Config::parse(&text, "t.toml").unwrap();
            Login::from_config(&config).map(|l| l.map(|l| (l.client_id, l.scope, l.own.is_some())))
        };
        let needs = "admin.login needs [console] issuer and client_id, or [oauth] issuer and client_id: console users log in at that issuer, as that client";
        assert_eq!(login("").err().as_deref(), Some(needs));
        assert_eq!(
            login("[console]\nissuer = \"https://idp.example\"\n").err().as_deref(),
            Some("console.client_id: the console logs in at [console] issuer as a client of it; name that client")
        );
        assert_eq!(
            login("[console]\nclient_id = \"console\"\n").err().as_deref(),
            Some("console.issuer: console.client_id is a client of the console's own issuer; name that issuer")
        );
        let both = "[oauth]\nissuer = \"https://as.example\"\nclient_id = \"gw\"\nclient_secret_env = \"UNSET\"\n\
                    [console]\nissuer = \"https://idp.example\"\nclient_id = \"console\"\nscopes = [\"openid\", \"groups\"]\n";
        assert_eq!(
            login(both),
            Ok(Some(("console".into(), "openid groups".into(), true)))
        );
        let oauth = "[oauth]\nissuer = \"https://as.example\"\nclient_id = \"gw\"\nclient_secret_env = \"UNSET\"\n";
        assert_eq!(
            login(oauth),
            Ok(Some(("gw".into(), "openid".into(), false)))
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
