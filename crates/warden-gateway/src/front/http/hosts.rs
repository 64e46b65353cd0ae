//! DNS rebinding protection, for every listener that serves a browser something
//! worth reading (the MCP front, and the admin listener's console and API): the
//! `Host` header must be a loopback name, the listen address's host or one of
//! `gateway.allowed_hosts` (`*`: any); an `Origin`, when sent, must be loopback
//! or one of `gateway.allowed_origins`. A page on a rebinding domain sends its
//! own name as `Host`, so it is refused before anything is read or answered.

use super::reply::{header_str, host_part, is_loopback_name};
use crate::config::GatewayConfig;
use crate::texts as answer;
use hyper::header::{self, HeaderMap};

/// The Host and Origin values one listener answers.
pub(crate) struct HostCheck {
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
}

impl HostCheck {
    /// The rules of `[gateway]`, for a listener bound to `listen` (whose host is
    /// allowed too, unless it is the unspecified address).
    pub(crate) fn new(gateway: &GatewayConfig, listen: &str) -> HostCheck {
        let mut hosts: Vec<String> = gateway
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let listen_host = host_part(listen).to_ascii_lowercase();
        let any_host = hosts.iter().any(|h| h == "*");
        if !listen_host.is_empty() && !matches!(listen_host.as_str(), "0.0.0.0" | "[::]") {
            hosts.push(listen_host);
        }
        let origins = gateway
            .allowed_origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
            .collect();
        HostCheck {
            hosts,
            any_host,
            origins,
        }
    }

    /// Why a request with these headers is refused (403): the standard text for
    /// a host or an origin that is not allowed; `None` when it may be answered.
    pub(crate) fn refusal(&self, headers: &HeaderMap) -> Option<&'static str> {
        if !self.any_host {
            let host = header_str(headers, header::HOST).unwrap_or_default();
            let name = host_part(host).to_ascii_lowercase();
            let ok = is_loopback_name(&name)
                || self
                    .hosts
                    .iter()
                    .any(|h| *h == name || *h == host.to_ascii_lowercase());
            if !ok {
                return Some(answer::HTTP_BAD_HOST);
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            let loopback = authority.is_some_and(|a| is_loopback_name(host_part(a)));
            if !loopback && !self.origins.contains(&origin) {
                return Some(answer::HTTP_BAD_ORIGIN);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn loopback_listed_and_listen_hosts_pass_others_are_refused() {
        let g = GatewayConfig {
            allowed_hosts: vec!["Warden.Example".into()],
            allowed_origins: vec!["https://app.example/".into()],
            ..GatewayConfig::default()
        };
        let check = HostCheck::new(&g, "10.0.0.5:9464");
        for host in [
            "localhost:9464",
            "127.0.0.1",
            "[::1]:1",
            "warden.example",
            "10.0.0.5:9464",
        ] {
            assert_eq!(
                check.refusal(&headers(&[(header::HOST, host)])),
                None,
                "{host}"
            );
        }
        let evil = headers(&[(header::HOST, "evil.example")]);
        assert_eq!(check.refusal(&evil), Some(answer::HTTP_BAD_HOST));
        assert_eq!(
            check.refusal(&HeaderMap::new()),
            Some(answer::HTTP_BAD_HOST)
        );
        let origin = |o| headers(&[(header::HOST, "localhost"), (header::ORIGIN, o)]);
        assert_eq!(check.refusal(&origin("https://app.example")), None);
        assert_eq!(check.refusal(&origin("http://localhost:3000")), None);
        assert_eq!(
            check.refusal(&origin("https://evil.example")),
            Some(answer::HTTP_BAD_ORIGIN)
        );
        // Bound to every interface: that address is no host name anyone sends.
        let any = HostCheck::new(&GatewayConfig::default(), "0.0.0.0:9464");
        let zero = headers(&[(header::HOST, "0.0.0.0:9464")]);
        assert_eq!(any.refusal(&zero), Some(answer::HTTP_BAD_HOST));
    }
}
