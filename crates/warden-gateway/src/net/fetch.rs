//! One HTTP exchange with an authorization server: a GET of a metadata or key
//! document, or a form POST (introspection, token exchange). The answer is read
//! up to a bound given by the caller and returned with its status; what went
//! wrong on the way is typed, so the caller can tell an issuer that is down (keep
//! what it has, warn) from one whose certificate is not trusted (a configuration
//! that cannot work).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio_rustls::TlsConnector;

/// Why an exchange gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Not connected, reset, or no answer within the timeout: the server is down.
    #[error("{0}")]
    Unreachable(String),
    /// The TLS handshake failed on the server's certificate: nothing here trusts it.
    #[error("{0}")]
    Untrusted(String),
    /// The answer was longer than the bound.
    #[error("the answer is longer than {0} bytes")]
    TooLarge(usize),
}

/// One request to `target` (parsed once by the caller).
pub struct Exchange<'a> {
    pub target: &'a super::target::HttpTarget,
    pub tls: Option<&'a TlsConnector>,
    pub method: Method,
    /// A form body (`application/x-www-form-urlencoded`), for POST.
    pub form: Option<String>,
    /// An `Authorization` header value (client authentication).
    pub authorization: Option<String>,
    pub timeout: Duration,
    pub max_bytes: usize,
}

impl Exchange<'_> {
    /// The status and the body, read whole up to `max_bytes`.
    pub async fn send(self) -> Result<(StatusCode, Bytes), FetchError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.exchange()).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Unreachable(format!(
                "no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    async fn exchange(self) -> Result<(StatusCode, Bytes), FetchError> {
        let (host, port, authority, path) = self.target.target();
        let stream = super::connect(host, port, self.tls).await.map_err(|e| {
            // rustls names a certificate it could not verify "invalid peer certificate".
            if e.starts_with("TLS: ") && e.contains("certificate") {
                FetchError::Untrusted(e)
            } else {
                FetchError::Unreachable(format!("cannot connect: {e}"))
            }
        })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| FetchError::Unreachable(format!("HTTP handshake failed: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::builder()
            .method(self.method)
            .uri(path)
            .header(HOST, authority)
            .header(ACCEPT, "application/json");
        if let Some(a) = &self.authorization {
            req = req.header(AUTHORIZATION, a.as_str());
        }
        let body = match self.form {
            Some(form) => {
                req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
                Bytes::from(form)
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(body))
            .map_err(|e| FetchError::Unreachable(e.to_string()))?;
        let response = sender
            .send_request(req)
            .await
            .map_err(|e| FetchError::Unreachable(format!("request failed: {e}")))?;
        let status = response.status();
        let max = self.max_bytes;
        let body = Limited::new(response.into_body(), max)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    FetchError::TooLarge(max)
                } else {
                    FetchError::Unreachable(format!("the answer could not be read: {e}"))
                }
            })?
            .to_bytes();
        Ok((status, body))
    }
}

/// `application/x-www-form-urlencoded` from pairs (RFC 6749 appendix B).
pub fn form(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&form_escape(k));
        out.push('=');
        out.push_str(&form_escape(v));
    }
    out
}

/// One form value or name, escaped.
pub fn form_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_escaped() {
        assert_eq!(
            form(&[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange"
                ),
                ("scope", "a b")
            ]),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&scope=a+b"
        );
    }
}
