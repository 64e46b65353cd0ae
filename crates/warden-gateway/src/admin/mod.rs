//! The admin listener (`[admin] listen`, formerly `[metrics] listen`): Prometheus
//! `/metrics`, the health probes `/healthz` and `/readyz` (as on the HTTP front),
//! the operator console (HTML pages at `/`, `/charts`, `/approvals`, `/catalogue`, `/calls`,
//! `/calls/<id>`, `/pins`, `/quotas`) and the admin API (the same data as JSON
//! under `/api/`).
//!
//! Its connections are bounded as the MCP front's are, with caps and timeouts
//! of their own (`[admin] max_connections`, …; see [`listen`]), so the admin
//! port can never take the front's file descriptors.
//!
//! The console and the API answer only the Host and Origin values the MCP front
//! answers (loopback names, the listen address, `gateway.allowed_hosts` and
//! `allowed_origins`): 403 otherwise, so a page on a rebinding domain reads
//! nothing. Closed by default: with no `[admin] callers`, only loopback clients get the
//! console and the API (403 otherwise). With admin callers configured, every
//! console and API request must authenticate as one of them, with the
//! credentials of the HTTP front (an API key or a JWT) as a bearer token or as
//! the password of HTTP Basic (which browsers ask for): 401 without, 403 for a
//! caller who is no admin. Loopback alone is then not enough. `/metrics` keeps the
//! access it always had (anyone who can reach the listener, whatever the Host),
//! so scrapers that reach it by the pod's address need no change; so do the
//! health probes.

mod act;
mod approvals;
mod chart;
mod csrf;
mod dashboard;
pub mod data;
mod gate;
pub mod html;
mod listen;
mod login;
mod pins;
mod stats;

use crate::front::http::hosts::HostCheck;
use crate::gateway::Gateway;
use bytes::Bytes;
use gate::{Gate, Refusal};
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
pub use listen::serve;
use serde_json::Value;
use std::net::IpAddr;

/// What every admin request is answered from.
struct Site {
    gw: std::sync::Arc<Gateway>,
    gate: Gate,
    hosts: HostCheck,
    csrf: csrf::Csrf,
    /// `[admin] login`: console sessions opened by logging in at the issuer (O9).
    login: Option<login::Login>,
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Pages hold operational data: never cached, never framed by another site.
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ),
    );
    r
}

/// `/healthz` and `/readyz`, as the HTTP front answers them.
fn health(method: &Method, probe: crate::gateway::Probe) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            crate::texts::HEALTH_METHOD.to_owned(),
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let status = StatusCode::from_u16(probe.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    reply(status, TEXT, probe.body)
}

const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";

fn json_reply(status: StatusCode, v: &Value) -> Reply {
    let body = serde_json::to_string_pretty(v).unwrap_or_default();
    reply(status, JSON, body + "\n")
}

impl Site {
    /// Every request: the probes and `/metrics` first, then Host and Origin, then
    /// who asks; then a page (GET) or an action (POST, [`act`]).
    async fn respond(&self, peer: IpAddr, req: Request<hyper::body::Incoming>) -> Reply {
        let gw = &self.gw;
        // Health probes, like /metrics, need no credentials and no listed Host.
        if let Some(probe) = gw.probe(req.uri().path()).await {
            return health(req.method(), probe);
        }
        let path = req.uri().path().to_owned();
        if path == "/metrics" {
            return reply(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                gw.metrics_text(),
            );
        }
        let api = path.starts_with("/api/");
        if let Some(text) = self.hosts.refusal(req.headers()) {
            tracing::debug!(client = %peer, "an admin request with a Host or Origin that is not allowed was refused");
            return refusal(StatusCode::FORBIDDEN, text, api);
        }
        if let Some(r) = self.login_route(&req, &path).await {
            return r;
        }
        let (who, session) = match self.who(peer, &req).await {
            Ok(who) => who,
            // A browser with no credential is sent to log in, when it can (O9).
            Err(Refusal::Unauthenticated) if self.login.is_some() && !api => {
                let mut r = reply(StatusCode::SEE_OTHER, HTML, String::new());
                r.headers_mut()
                    .insert(LOCATION, HeaderValue::from_static("/login"));
                return r;
            }
            Err(refused) => return refused_reply(refused, api),
        };
        // Whom the page is for, and its session: its forms' CSRF tokens are bound to both.
        let binding = match &session {
            Some(sid) => format!("{who} session:{sid}"),
            None => who.clone(),
        };
        if req.method() == Method::POST {
            return act::act(self, &who, &binding, session.as_deref(), req).await;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = reply(
                StatusCode::METHOD_NOT_ALLOWED,
                TEXT,
                crate::texts::ADMIN_METHOD.to_owned(),
            );
            r.headers_mut()
                .insert("allow", HeaderValue::from_static("GET, HEAD, POST"));
            return r;
        }
        let csrf = self.csrf.token(&binding);
        if path == "/logout" {
            return reply(StatusCode::OK, HTML, login::logout_page(&csrf));
        }
        let query = req.uri().query().unwrap_or_default().to_owned();
        page(gw, &path, &query, &csrf).await
    }

    /// Who asks: `caller:<admin>` (or `loopback`), and the console session it
    /// came with, if that is how (O9). A request's own credential comes first.
    async fn who(
        &self,
        peer: IpAddr,
        req: &Request<hyper::body::Incoming>,
    ) -> Result<(String, Option<String>), Refusal> {
        let authorization = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if authorization.is_none() {
            if let Some((admin, sid)) = self.login.as_ref().and_then(|l| l.session(req.headers())) {
                return Ok((format!("caller:{admin}"), Some(sid)));
            }
        }
        match self.gate.check(peer, authorization, &self.gw).await? {
            Some(admin) => Ok((format!("caller:{admin}"), None)),
            None => Ok(("loopback".to_owned(), None)),
        }
    }

    /// `/login` and `/login/callback`, which need no credential (O9).
    async fn login_route(&self, req: &Request<hyper::body::Incoming>, path: &str) -> Option<Reply> {
        let login = self.login.as_ref()?;
        let rs = login.issuer(self.gate.auth.oauth())?;
        if req.method() != Method::GET {
            return None;
        }
        match path {
            "/login" => {
                let query = req.uri().query().unwrap_or_default();
                Some(login.start(rs, req.headers(), query).await)
            }
            "/login/callback" => {
                let query = req.uri().query().unwrap_or_default();
                let check = |proof: login::Proof| async move {
                    let admin = match proof {
                        login::Proof::Bearer(token) => {
                            self.gate
                                .admin_of(&format!("Bearer {token}"), &self.gw)
                                .await
                        }
                        login::Proof::Identity(who) => self.gate.admin_named(&who, &self.gw),
                    };
                    admin.map_err(|refused| refused_reply(refused, false))
                };
                Some(login.callback(rs, req.headers(), query, check).await)
            }
            _ => None,
        }
    }
}

/// How a refused request is answered: 401 (asking for Basic), or 403.
fn refused_reply(refused: Refusal, api: bool) -> Reply {
    match refused {
        Refusal::Unauthenticated => refusal(
            StatusCode::UNAUTHORIZED,
            "Credentials are needed: an admin caller's API key or JWT, as a bearer token or as the password of HTTP Basic.",
            api,
        ),
        Refusal::Forbidden(text) => refusal(StatusCode::FORBIDDEN, text, api),
        Refusal::Scope { challenge, scope } => {
            let text = crate::texts::http_insufficient_scope(&scope);
            let mut r = refusal(StatusCode::FORBIDDEN, &text, api);
            let value = crate::front::auth::refused::insufficient_scope(&challenge, &scope);
            // Scopes are checked to be header-safe when the configuration is read.
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(WWW_AUTHENTICATE, v);
            }
            r
        }
    }
}

/// A 401 or 403: JSON under `/api/`, a page elsewhere; a 401 asks for Basic.
fn refusal(status: StatusCode, text: &str, api: bool) -> Reply {
    let mut r = if api {
        json_reply(status, &serde_json::json!({"error": text}))
    } else {
        reply(status, HTML, html::message("Not allowed", text))
    };
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"mcp-warden admin\", charset=\"UTF-8\""),
        );
    }
    r
}

/// A console page or its JSON, for a request that passed every check.
async fn page(gw: &Gateway, path: &str, query: &str, csrf: &str) -> Reply {
    let api = path.starts_with("/api/");
    let pairs = query_pairs(query);
    let page = path.strip_prefix("/api").unwrap_or(path);
    let page = if page == "/overview" && api {
        "/"
    } else {
        page
    };
    match page {
        "/" => {
            let d = data::overview(gw).await;
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, html::overview(&d))
            }
        }
        "/approvals" => {
            let d = approvals::data(gw).await;
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, approvals::html(&d, csrf))
            }
        }
        "/charts" => {
            let d = data::charts(gw).await;
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, dashboard::charts(&d))
            }
        }
        "/catalogue" => {
            let chosen = pairs
                .iter()
                .find(|(k, v)| k == "caller" && !v.is_empty())
                .map(|(_, v)| v.clone());
            let d = match &chosen {
                Some(c) => Some(data::catalogue(gw, c).await),
                None => None,
            };
            if api {
                let d = d.unwrap_or_else(|| serde_json::json!({"callers": data::callers(gw)}));
                json_reply(StatusCode::OK, &d)
            } else {
                let page = html::catalogue(&data::callers(gw), chosen.as_deref(), d.as_ref());
                reply(StatusCode::OK, HTML, page)
            }
        }
        "/calls" => {
            let q = data::CallQuery::from_pairs(&pairs);
            let d = data::calls(gw, &q).await;
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                let older = d["next_before"].as_i64().map(|id| q.page(Some(id)));
                let newest = q.before.map(|_| q.page(None));
                let page = html::calls(&d, query, older.as_deref(), newest.as_deref());
                reply(StatusCode::OK, HTML, page)
            }
        }
        "/pins" => {
            let d = pins::data(gw);
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, pins::html(&d, csrf))
            }
        }
        "/quotas" => {
            let d = data::quotas(gw);
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, html::quotas(&d))
            }
        }
        p => call_page(gw, p, api).await,
    }
}

/// `/calls/<id>`, or 404 for it and for any other path.
async fn call_page(gw: &Gateway, p: &str, api: bool) -> Reply {
    let call = match p.strip_prefix("/calls/").map(str::parse::<i64>) {
        Some(Ok(id)) => data::call(gw, id).await,
        _ => None,
    };
    match (call, api) {
        (Some(d), true) => json_reply(StatusCode::OK, &d),
        (Some(d), false) => reply(StatusCode::OK, HTML, html::call(&d)),
        (None, true) => json_reply(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": "no such page or call"}),
        ),
        (None, false) => reply(
            StatusCode::NOT_FOUND,
            HTML,
            html::message("Not found", "No such page or call."),
        ),
    }
}

/// `a=1&b=x%20y` → pairs, percent- and plus-decoded.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_decoded() {
        assert_eq!(
            query_pairs("caller=a%20b&tool=x+y&bad=%zz&end=%4"),
            [
                ("caller".to_owned(), "a b".to_owned()),
                ("tool".to_owned(), "x y".to_owned()),
                ("bad".to_owned(), "%zz".to_owned()),
                ("end".to_owned(), "%4".to_owned()),
            ]
        );
    }
}
