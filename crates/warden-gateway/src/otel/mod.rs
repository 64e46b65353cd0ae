//! OpenTelemetry traces (OTLP over HTTP), off by default.
//!
//! Where spans go: `traces.endpoint` in the config, else the standard environment
//! variables — `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL, used as it is)
//! or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` appended). Setting
//! one turns export on; `OTEL_SDK_DISABLED=true` turns it off whatever is set.
//! The service is named by `traces.service_name`, else `OTEL_SERVICE_NAME`, else
//! `mcp-warden`.
//!
//! Sampling is parent-based: a request whose client sent a `traceparent` follows
//! its sampled flag; a new trace is recorded with `traces.sampling_ratio`
//! (compared against the trace id, so every hop decides alike).
//!
//! Off, a [`Tracer`] is a `None`: every place that would record a span does
//! nothing past one branch. On, spans end into a bounded queue that a background
//! task batches to the collector ([`otlp`]); a full queue drops spans and counts
//! them (`warden_trace_spans_dropped_total`), never waits.

pub mod otlp;
pub mod span;

pub use span::{Attr, Kind, Span, SpanContext};

use crate::config::TracesConfig;
use crate::net::target::HttpTarget;
use serde_json::{Map, Value};
use span::Sink;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Finished spans waiting for export at most; more are dropped.
pub const QUEUE: usize = 4096;
/// How long one export request may take.
const EXPORT_TIMEOUT_MS: u64 = 10_000;

/// Where spans go and how many are recorded, resolved from the config and the
/// environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The full URL spans are POSTed to.
    pub url: String,
    pub service_name: String,
    pub ratio: f64,
}

impl Settings {
    /// `None`: traces are off. `env` reads an environment variable (injected for tests).
    pub fn resolve(
        config: &TracesConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<Settings> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let url = match &config.endpoint {
            Some(base) => traces_url(base),
            None => match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                Some(full) => full.trim().to_owned(),
                None => traces_url(set("OTEL_EXPORTER_OTLP_ENDPOINT")?.trim()),
            },
        };
        let service_name = config
            .service_name
            .clone()
            .or_else(|| set("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "mcp-warden".to_owned());
        Some(Settings {
            url,
            service_name,
            ratio: config.sampling_ratio.unwrap_or(1.0),
        })
    }
}

/// The longest string attribute taken from a caller (a tool name, a key).
const MAX_ATTR_CHARS: usize = 256;

/// A caller's string, cut to [`MAX_ATTR_CHARS`] characters for an attribute.
pub fn bounded(s: &str) -> String {
    match s.char_indices().nth(MAX_ATTR_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The `traceparent` a request's params carry in `_meta` (MCP's place for it).
pub fn traceparent_in(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get("traceparent")?.as_str()
}

/// Names `ctx` as the parent in a request's `_meta.traceparent`, adding `_meta`
/// when the request had none. Everything else in `_meta` stays as it was.
pub fn set_traceparent(params: &mut Value, ctx: &SpanContext) {
    let Some(obj) = params.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert("traceparent".into(), Value::String(ctx.traceparent()));
    }
}

/// A base endpoint's traces URL: `<base>/v1/traces` (the OTLP/HTTP convention).
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// Records spans, or (off) nothing.
#[derive(Clone, Default)]
pub struct Tracer {
    on: Option<Arc<On>>,
}

struct On {
    sink: Arc<Sink>,
    /// New traces whose id (its last 8 bytes) is below this are recorded.
    bound: u64,
}

impl Tracer {
    /// A tracer that records nothing.
    pub fn off() -> Tracer {
        Tracer { on: None }
    }

    /// Starts exporting to `settings` (inside a Tokio runtime); `dropped` counts
    /// the spans lost to a full queue or a failed export.
    pub fn start(settings: &Settings, dropped: Arc<AtomicU64>) -> Result<Tracer, String> {
        let target = HttpTarget::parse(&settings.url, EXPORT_TIMEOUT_MS)
            .map_err(|e| format!("traces: the OTLP endpoint {e}"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(otlp::export(
            rx,
            target,
            settings.service_name.clone(),
            dropped.clone(),
        ));
        let bound = if settings.ratio >= 1.0 {
            u64::MAX
        } else {
            (settings.ratio.max(0.0) * u64::MAX as f64) as u64
        };
        Ok(Tracer {
            on: Some(Arc::new(On {
                sink: Arc::new(Sink::new(tx, dropped)),
                bound,
            })),
        })
    }

    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// The span of one request: under `parent` (the client's context) when there
    /// is one, else a new trace; `None` when off or not sampled.
    pub fn root(
        &self,
        name: impl FnOnce() -> String,
        kind: Kind,
        parent: Option<SpanContext>,
    ) -> Option<Span> {
        let on = self.on.as_ref()?;
        let (trace_id, parent_id) = match parent {
            Some(p) if !p.sampled => return None,
            Some(p) => (p.trace_id, Some(p.span_id)),
            None => {
                let id = on.sink.trace_id();
                let low = u64::from_be_bytes(id[8..].try_into().expect("8 bytes"));
                if on.bound != u64::MAX && low >= on.bound {
                    return None;
                }
                (id, None)
            }
        };
        Some(Span::start(
            on.sink.clone(),
            name(),
            kind,
            trace_id,
            parent_id,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(config: &TracesConfig, vars: &[(&str, &str)]) -> Option<Settings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::resolve(config, |k| vars.get(k).cloned())
    }

    #[test]
    fn endpoints_come_from_the_config_then_the_otel_variables() {
        let none = TracesConfig::default();
        assert_eq!(resolve(&none, &[]), None, "off by default");
        let s = resolve(&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]).unwrap();
        assert_eq!(
            (s.url.as_str(), s.service_name.as_str(), s.ratio),
            ("http://c:4318/v1/traces", "mcp-warden", 1.0)
        );
        let s = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
                ("OTEL_SERVICE_NAME", "gw-eu"),
            ],
        )
        .unwrap();
        assert_eq!(
            (s.url.as_str(), s.service_name.as_str()),
            ("http://t:1/custom", "gw-eu")
        );
        let config = TracesConfig {
            endpoint: Some("http://cfg:4318".into()),
            service_name: Some("from-config".into()),
            sampling_ratio: Some(0.25),
        };
        let s = resolve(
            &config,
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
                ("OTEL_SERVICE_NAME", "gw-eu"),
            ],
        )
        .unwrap();
        assert_eq!(
            (s.url.as_str(), s.service_name.as_str(), s.ratio),
            ("http://cfg:4318/v1/traces", "from-config", 0.25)
        );
        assert_eq!(resolve(&config, &[("OTEL_SDK_DISABLED", "TRUE")]), None);
        assert_eq!(
            resolve(&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
            None,
            "an empty variable is unset"
        );
    }

    #[test]
    fn the_upstream_gets_the_context_in_meta_and_nothing_else_changes() {
        let ctx =
            SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let mut p = serde_json::json!({"name": "t", "_meta": {"a": 1, "traceparent": "x", "tracestate": "k=v"}});
        set_traceparent(&mut p, &ctx);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"name":"t","_meta":{"a":1,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"k=v"}}"#
        );
        let mut p = serde_json::json!({"name": "t"});
        set_traceparent(&mut p, &ctx);
        assert_eq!(traceparent_in(Some(&p)), Some(ctx.traceparent().as_str()));
        assert_eq!(bounded(&"é".repeat(300)).chars().count(), 257);
    }

    #[tokio::test]
    async fn sampling_follows_the_client_then_the_ratio() {
        let settings = |ratio| Settings {
            url: "http://127.0.0.1:9/v1/traces".into(),
            service_name: "t".into(),
            ratio,
        };
        let dropped = Arc::new(AtomicU64::new(0));
        let never = Tracer::start(&settings(0.0), dropped.clone()).unwrap();
        let always = Tracer::start(&settings(1.0), dropped).unwrap();
        let sampled = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let unsampled =
            SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(never.root(String::new, Kind::Server, None).is_none());
        assert!(never.root(String::new, Kind::Server, sampled).is_some());
        assert!(always.root(String::new, Kind::Server, unsampled).is_none());
        let span = always.root(String::new, Kind::Server, sampled).unwrap();
        assert_eq!(span.context().trace_id, sampled.unwrap().trace_id);
        assert!(Tracer::off()
            .root(String::new, Kind::Server, sampled)
            .is_none());
    }
}
