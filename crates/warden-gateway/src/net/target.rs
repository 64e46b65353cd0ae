//! An HTTP endpoint the gateway talks to: where it is (`http[s]://host[:port]/path`,
//! parsed once when the configuration is checked) and one JSON POST with a timeout.
//!
//! A webhook's answer is a JSON object read up to 1 MiB; anything else (a refused
//! connection, a timeout, a non-2xx status, a body that is not JSON) is a failure
//! that the caller turns into fail-closed or degrade-to-rules behaviour.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::time::Duration;

/// The largest answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// One HTTP endpoint the gateway POSTs JSON to: a grant or hook webhook, or (for
/// its address) an upstream served over Streamable HTTP.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    url: String,
    host: String,
    port: u16,
    authority: String,
    path: String,
    timeout: Duration,
    tls: bool,
    /// Sent with every request (an OTLP collector's key), marked sensitive.
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
}

impl HttpTarget {
    /// Parses `http[s]://host[:port][/path]`; the message says what to write instead.
    pub fn parse(url: &str, timeout_ms: u64) -> Result<HttpTarget, String> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            _ => return Err(format!("'{url}' is not an http:// or https:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{url}' has an unclosed IPv6 address"))?;
            (h.to_owned(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        if host.is_empty() {
            return Err(format!("'{url}' names no host"));
        }
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("'{url}' has an invalid port"))?,
            None if tls => 443,
            None => 80,
        };
        if timeout_ms == 0 {
            return Err("timeout_ms must be more than 0".into());
        }
        Ok(HttpTarget {
            url: url.to_owned(),
            host,
            port,
            authority: authority.to_owned(),
            path: path.to_owned(),
            timeout: Duration::from_millis(timeout_ms),
            tls,
            headers: Vec::new(),
        })
    }

    /// The target with `headers` on every request; a pair that is not a valid
    /// header is left out (the callers checked them when reading them).
    pub fn with_headers(mut self, headers: &[(String, String)]) -> HttpTarget {
        self.headers = headers
            .iter()
            .filter_map(|(name, value)| {
                let name = hyper::header::HeaderName::from_bytes(name.as_bytes()).ok()?;
                let mut value = hyper::header::HeaderValue::from_str(value).ok()?;
                value.set_sensitive(true);
                Some((name, value))
            })
            .collect();
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Host and port to connect to, the Host header value, and the request path.
    pub(crate) fn target(&self) -> (&str, u16, &str, &str) {
        (&self.host, self.port, &self.authority, &self.path)
    }

    /// Whether the URL is `https://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// POSTs `body`; the JSON answer, or why there is none.
    pub async fn post(&self, body: &Value) -> Result<Value, String> {
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let answer = self.timed(self.exchange("application/json", bytes)).await?;
        serde_json::from_slice(&answer).map_err(|e| format!("answer is not JSON: {e}"))
    }

    /// POSTs `body` as `content_type` where only the status matters (an OTLP export).
    pub async fn send(&self, content_type: &'static str, body: Vec<u8>) -> Result<(), String> {
        self.timed(self.exchange(content_type, body))
            .await
            .map(drop)
    }

    async fn timed<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    async fn exchange(&self, content_type: &'static str, bytes: Vec<u8>) -> Result<Bytes, String> {
        let tls = if self.tls {
            Some(crate::net::public_tls()?)
        } else {
            None
        };
        let stream = crate::net::connect(&self.host, self.port, tls.as_ref())
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake failed: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut request = hyper::Request::post(self.path.as_str())
            .header(HOST, self.authority.as_str())
            .header(CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| e.to_string())?;
        for (name, value) in &self.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("answered HTTP {status}"));
        }
        Ok(Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("answer unreadable or over {MAX_ANSWER_BYTES} bytes: {e}"))?
            .to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn urls() {
        let w = HttpTarget::parse("http://127.0.0.1:9100/grant", 300).unwrap();
        assert_eq!(
            (
                w.host.as_str(),
                w.port,
                w.path.as_str(),
                w.authority.as_str()
            ),
            ("127.0.0.1", 9100, "/grant", "127.0.0.1:9100")
        );
        let w = HttpTarget::parse("http://[::1]:8080", 300).unwrap();
        assert_eq!(
            (w.host.as_str(), w.port, w.path.as_str()),
            ("::1", 8080, "/")
        );
        let w = HttpTarget::parse("http://hooks.local/x?y=1", 300).unwrap();
        assert_eq!((w.port, w.path.as_str()), (80, "/x?y=1"));
        let w = HttpTarget::parse("https://hooks.example/x", 300).unwrap();
        assert_eq!((w.port, w.is_tls(), w.path.as_str()), (443, true, "/x"));
        assert_eq!(
            HttpTarget::parse("ftp://x/", 300).unwrap_err(),
            "'ftp://x/' is not an http:// or https:// URL"
        );
        assert!(HttpTarget::parse("http://:80/", 300).is_err());
        assert!(HttpTarget::parse("http://x:99999/", 300).is_err());
        assert!(HttpTarget::parse("http://x/", 0).is_err());
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_failure_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let w = HttpTarget::parse(&format!("http://127.0.0.1:{port}/"), 2000).unwrap();
        let e = w.post(&json!({})).await.unwrap_err();
        assert!(e.starts_with("cannot connect"), "{e}");
    }
}
