//! The admin listener (`[admin] listen`, formerly `[metrics] listen`): Prometheus
//! `/metrics`, the health probes `/healthz` and `/readyz` (as on the HTTP front),
//! the operator console (HTML pages at `/`, `/catalogue`, `/calls`,
//! `/calls/<id>`, `/pins`, `/quotas`) and the admin API (the same data as JSON
//! under `/api/`).
//!
//! Closed by default: with no `[admin] callers`, only loopback clients get the
//! console and the API (403 otherwise). With admin callers configured, every
//! console and API request must authenticate as one of them, with the
//! credentials of the HTTP front (an API key or a JWT) as a bearer token or as
//! the password of HTTP Basic (which browsers ask for): 401 without, 403 for a
//! caller who is no admin. Loopback alone is then not enough. `/metrics` keeps the
//! access it always had (anyone who can reach the listener), so scrapers need no
//! change; so do the health probes.

pub mod data;
pub mod html;

use crate::front::auth::Auth;
use crate::gateway::Gateway;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpListener;
use warden_core::CallerSelector;

/// Who may use the console and the admin API.
struct Gate {
    auth: Auth,
    admins: Vec<CallerSelector>,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
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
    async fn check(
        &self,
        peer: IpAddr,
        authorization: Option<&[u8]>,
        gw: &Gateway,
    ) -> Result<(), Refusal> {
        if self.admins.is_empty() {
            return if is_loopback(peer) {
                Ok(())
            } else {
                Err(Refusal::Forbidden(NOT_LOOPBACK))
            };
        }
        // Never the anonymous caller: the console needs a credential.
        let header = authorization.ok_or(Refusal::Unauthenticated)?;
        let bearer = as_bearer(header).ok_or(Refusal::Unauthenticated)?;
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
            Ok(())
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

/// Serves the admin listener on `addr` until the process ends.
pub async fn serve(addr: &str, gw: Arc<Gateway>) -> Result<SocketAddr, String> {
    let admins = gw
        .config
        .admin
        .callers
        .iter()
        .map(|s| CallerSelector::parse(s).map_err(|e| format!("admin.callers: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let gate = Arc::new(Gate {
        // An `[oauth]` token's audience is the MCP front's URL (or `oauth.resource`).
        auth: Auth::from_config(&gw.config, &front_url(&gw.config))?,
        admins,
    });
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("admin.listen: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let (gw, gate) = (gw.clone(), gate.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (gw, gate) = (gw.clone(), gate.clone());
                    async move {
                        // Health probes, like /metrics, need no credentials.
                        if let Some(probe) = gw.probe(req.uri().path()).await {
                            return Ok(health(req.method(), probe));
                        }
                        Ok::<_, std::convert::Infallible>(answer(&gw, &gate, peer.ip(), req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(local)
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

async fn answer(
    gw: &Gateway,
    gate: &Gate,
    peer: IpAddr,
    req: Request<hyper::body::Incoming>,
) -> Reply {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    if path == "/metrics" {
        return reply(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            gw.metrics_text(),
        );
    }
    let api = path.starts_with("/api/");
    let authorization = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
    if let Err(refusal) = gate.check(peer, authorization, gw).await {
        return refused(refusal, api);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the console is read-only: GET only\n".into(),
        );
        r.headers_mut()
            .insert("allow", HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let pairs = query_pairs(&query);
    let page = path.strip_prefix("/api").unwrap_or(&path);
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
                let page = html::calls(&d, &query, older.as_deref(), newest.as_deref());
                reply(StatusCode::OK, HTML, page)
            }
        }
        "/pins" => {
            let d = data::pins(gw);
            if api {
                json_reply(StatusCode::OK, &d)
            } else {
                reply(StatusCode::OK, HTML, html::pins(&d))
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
        p => {
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
    }
}

/// The 401 or 403 of a request the gate refused, as a page or as JSON.
fn refused(refusal: Refusal, api: bool) -> Reply {
    let (status, text, challenge) = match refusal {
        Refusal::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            "Credentials are needed: an admin caller's API key or JWT, as a bearer token or as the password of HTTP Basic.".to_owned(),
            Some("Basic realm=\"mcp-warden admin\", charset=\"UTF-8\"".to_owned()),
        ),
        Refusal::Forbidden(text) => (StatusCode::FORBIDDEN, text.to_owned(), None),
        Refusal::Scope { challenge, scope } => (
            StatusCode::FORBIDDEN,
            crate::texts::http_insufficient_scope(&scope),
            Some(crate::front::auth::refused::insufficient_scope(
                &challenge, &scope,
            )),
        ),
    };
    let mut r = if api {
        json_reply(status, &serde_json::json!({"error": text}))
    } else {
        reply(status, HTML, html::message("Not allowed", &text))
    };
    // Scopes are checked to be header-safe when the configuration is read.
    if let Some(v) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    r
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

    #[test]
    fn loopback_includes_mapped_addresses() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("10.0.0.1".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
    }
}
