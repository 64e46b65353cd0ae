//! The HTTP front's answers, built in one place: plain replies, JSON-RPC error
//! bodies with their status, the 503 written at accept, 401 with its challenge,
//! 429 with Retry-After; and the header reading the checks share.

use super::conn::OverCap;
use super::sse::{OutBody, SseBody};
use crate::front::auth::{refused, Challenge, Refused};
use crate::jsonrpc;
use crate::texts as answer;
use crate::upstream::SUPPORTED_VERSIONS;
use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// The protocol version header.
pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";

pub(super) type Reply = Response<OutBody>;

pub(super) fn reply(
    status: StatusCode,
    body: Option<Bytes>,
    content_type: Option<&'static str>,
) -> Reply {
    let mut r = Response::new(OutBody::Full(body));
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

/// A JSON-RPC message as an HTTP reply.
pub(super) fn message_reply(status: StatusCode, msg: &Value) -> Reply {
    reply(
        status,
        Some(Bytes::from(serde_json::to_vec(msg).unwrap_or_default())),
        Some("application/json"),
    )
}

/// A `/healthz` or `/readyz` answer, plain text, never cached; 405 for any
/// method but GET and HEAD.
pub(super) fn health_reply(method: &hyper::Method, probe: crate::gateway::Probe) -> Reply {
    use hyper::Method;
    let (status, body) = if method == Method::GET || method == Method::HEAD {
        let status = StatusCode::from_u16(probe.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        (status, probe.body)
    } else {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            answer::HEALTH_METHOD.to_owned(),
        )
    };
    let mut r = reply(
        status,
        Some(Bytes::from(body)),
        Some("text/plain; charset=utf-8"),
    );
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        h.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    r
}

/// An HTTP error with a JSON-RPC error body naming what is wrong.
pub(super) fn refuse(status: StatusCode, code: i64, message: &str) -> Reply {
    message_reply(status, &jsonrpc::error(Value::Null, code, message))
}

/// The 503 for a connection over a cap, as the bytes of a whole HTTP/1.1
/// response: it is written straight to the socket at accept, before hyper reads
/// anything, and the connection is closed after it.
pub(super) fn connection_refusal(over: OverCap) -> Vec<u8> {
    let text = match over {
        OverCap::Total => answer::HTTP_TOO_MANY_CONNECTIONS,
        OverCap::PerClient => answer::HTTP_TOO_MANY_CLIENT_CONNECTIONS,
    };
    let r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        jsonrpc::INTERNAL_ERROR,
        text,
    );
    let body = match r.body() {
        OutBody::Full(Some(b)) => b.clone(),
        _ => Bytes::new(),
    };
    let status = r.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or_default()
    )
    .into_bytes();
    for (name, value) in r.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
    out
}

pub(super) fn json_reply(status: StatusCode, data: Bytes) -> Reply {
    reply(status, Some(data), Some("application/json"))
}

pub(super) fn sse_reply(body: SseBody) -> Reply {
    let mut r = Response::new(OutBody::Sse(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub(super) fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether an Accept header lists a media type (or a wildcard covering it).
pub(super) fn accepts(headers: &HeaderMap, media: &str) -> bool {
    let (kind, _) = media.split_once('/').unwrap_or((media, ""));
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().unwrap_or_default().split(',').any(|part| {
            let t = part.split(';').next().unwrap_or_default().trim();
            t.eq_ignore_ascii_case(media)
                || t == "*/*"
                || t.eq_ignore_ascii_case(&format!("{kind}/*"))
        })
    })
}

pub(super) fn is_loopback_name(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    h == "localhost" || h == "127.0.0.1" || h == "[::1]" || h == "::1"
}

/// The host part of `host[:port]` (brackets kept for IPv6).
pub(super) fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |i| &authority[..=i]);
    }
    authority.split(':').next().unwrap_or(authority)
}

pub(super) fn check_version(headers: &HeaderMap) -> Result<(), Box<Reply>> {
    match headers.get(VERSION_HEADER) {
        None => Ok(()),
        Some(v) => {
            let v = v.to_str().unwrap_or("?");
            if SUPPORTED_VERSIONS.contains(&v) {
                Ok(())
            } else {
                Err(Box::new(refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    &answer::http_bad_version(v, &SUPPORTED_VERSIONS[..3]),
                )))
            }
        }
    }
}

/// 429 for a caller at `gateway.max_sessions_per_caller`; Retry-After says when its
/// longest-unused session would idle out (ending one with DELETE is sooner).
pub(super) fn too_many_sessions(open: usize, retry_after: Duration) -> Reply {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        jsonrpc::INVALID_REQUEST,
        &answer::http_caller_sessions(open),
    );
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    r
}

/// 429 for a caller over `gateway.http_caller_rate` (Q5); Retry-After is when
/// its next request fits, in whole seconds rounded up.
pub(super) fn too_many_requests(wait_ms: f64) -> Reply {
    let secs = ((wait_ms / 1000.0).ceil() as u64).max(1);
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        jsonrpc::INVALID_REQUEST,
        &answer::http_caller_rate(secs),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// 401 with its challenge; under `[oauth]` the challenge points at the metadata.
pub(super) fn unauthorized(why: Refused, oauth: Option<&Challenge>) -> Reply {
    let mut r = refuse(
        StatusCode::UNAUTHORIZED,
        jsonrpc::INVALID_REQUEST,
        why.text(),
    );
    if let Ok(v) = HeaderValue::from_str(&why.challenge(oauth)) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// 403 for an `[oauth]` token without the scopes a request needs: the challenge
/// names all of them, so the client can ask the issuer again (step-up).
pub(super) fn insufficient_scope(oauth: &Challenge, scope: &str, id: Value) -> Reply {
    let mut r = message_reply(
        StatusCode::FORBIDDEN,
        &jsonrpc::error(
            id,
            jsonrpc::INVALID_REQUEST,
            &answer::http_insufficient_scope(scope),
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&refused::insufficient_scope(oauth, scope)) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_and_hosts() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream;q=0.9"),
        );
        assert!(accepts(&h, "application/json") && accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(accepts(&h, "text/event-stream"));
        assert_eq!(host_part("[::1]:8931"), "[::1]");
        assert_eq!(host_part("localhost:8931"), "localhost");
        assert!(is_loopback_name("LOCALHOST"));
        assert!(!is_loopback_name("evil.example"));
    }

    #[test]
    fn a_connection_over_a_cap_gets_a_whole_503() {
        let raw = String::from_utf8(connection_refusal(OverCap::Total)).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Service unavailable: too many open connections; retry later."}}"#;
        assert_eq!(
            raw,
            format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
        );
        let raw = String::from_utf8(connection_refusal(OverCap::PerClient)).unwrap();
        assert!(raw.ends_with(r#""message":"Service unavailable: too many open connections from this address; close idle ones or retry later."}}"#), "{raw}");
    }

    #[test]
    fn a_caller_at_its_session_cap_hears_when_to_retry() {
        let r = too_many_sessions(2, Duration::from_millis(1500));
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = too_many_sessions(2, Duration::ZERO);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
