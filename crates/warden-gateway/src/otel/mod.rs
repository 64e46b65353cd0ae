//! OpenTelemetry traces (OTLP over HTTP), off by default.
//!
//! Where spans go: `traces.endpoint` in the config, else the standard environment
//! variables — `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL, used as it is)
//! or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` appended). Setting
//! one turns export on; `OTEL_SDK_DISABLED=true` turns it off whatever is set.
//! The service is named by `traces.service_name`, else `OTEL_SERVICE_NAME`, else
//! `mcp-warden`. Headers every export request carries (a hosted collector's API
//! key) come from `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else
//! `OTEL_EXPORTER_OTLP_HEADERS`, in the conventions' form `name=value,name=value`
//! with values percent-encoded; they are never written to the log, and an entry
//! that is not a valid header is warned about by name and left out.
//!
//! Sampling is parent-based: a request whose client sent a `traceparent` follows
//! its sampled flag; a new trace is recorded with `traces.sampling_ratio`
//! (compared against the trace id, so every hop decides alike). Without a ratio
//! in the config, `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` choose, as
//! the OpenTelemetry conventions name the samplers: `always_on`, `always_off`,
//! `traceidratio` and their `parentbased_` forms (the default is
//! `parentbased_always_on`); the ones without `parentbased_` ignore the
//! client's sampled flag.
//!
//! Spans wait at most `OTEL_BSP_SCHEDULE_DELAY` milliseconds (500 unless set)
//! for others to fill a batch. [`Tracer::flush`] sends whatever is queued at
//! once: the gateway calls it when it shuts down, so what it recorded is
//! exported before the process ends.
//!
//! Off, a [`Tracer`] is a `None`: every place that would record a span does
//! nothing past one branch. On, spans end into a bounded queue that a background
//! task batches to the collector ([`otlp`]); a full queue drops spans and counts
//! them (`warden_trace_spans_dropped_total`), never waits.

pub mod logs;
pub mod otlp;
mod proto;
pub mod span;

pub use span::{Attr, Kind, Parent, Span, SpanContext};

use crate::config::TracesConfig;
use crate::net::target::HttpTarget;
use serde_json::{Map, Value};
use span::Sink;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Finished spans waiting for export at most; more are dropped.
pub const QUEUE: usize = 4096;
/// How long one export request may take.
const EXPORT_TIMEOUT_MS: u64 = 10_000;
/// How long a shutting-down gateway waits for its last spans to be exported.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spans go and how many are recorded, resolved from the config and the
/// environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The full URL spans are POSTed to.
    pub url: String,
    pub service_name: String,
    /// The share of new traces recorded (0.0 to 1.0).
    pub ratio: f64,
    /// A client's sampled flag decides for its trace (else only `ratio` does).
    pub parent_based: bool,
    /// How long a span may wait for others to fill its batch.
    pub delay: Duration,
    /// Headers sent with every export (from the environment only).
    pub headers: ExportHeaders,
}

/// Headers for the collector: often a secret, so their values are never shown.
#[derive(Clone, Default, PartialEq)]
pub struct ExportHeaders(pub Vec<(String, String)>);

impl std::fmt::Debug for ExportHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| format!("{name}: <hidden>")))
            .finish()
    }
}

impl ExportHeaders {
    /// Reads `name=value,…` (values percent-encoded). `from` names the variable
    /// in warnings, which name a bad entry's header but never show a value.
    pub(crate) fn parse(text: &str, from: &str) -> ExportHeaders {
        let mut out = Vec::new();
        for (i, entry) in text.split(',').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            // Only a name that is a valid header token before an '=' is ever
            // shown: an entry written `Authorization: Bearer …` is all secret.
            let name = entry
                .split_once('=')
                .map(|(n, _)| n.trim())
                .filter(|n| hyper::header::HeaderName::from_bytes(n.as_bytes()).is_ok());
            let value = entry
                .split_once('=')
                .and_then(|(_, v)| percent_decoded(v.trim()))
                .filter(|v| hyper::header::HeaderValue::from_str(v).is_ok());
            match (name, value) {
                (Some(n), _) if RESERVED.contains(&n.to_ascii_lowercase().as_str()) => {
                    tracing::warn!(
                        "{from}: entry {} names '{n}', which the export request sets itself; it is left out",
                        i + 1
                    );
                }
                (Some(n), Some(v)) => out.push((n.to_ascii_lowercase(), v)),
                (Some(n), None) => tracing::warn!(
                    "{from}: entry {} ('{n}') has a value that is not percent-encoded text; it is left out",
                    i + 1
                ),
                (None, _) => tracing::warn!(
                    "{from}: entry {} is not name=value with a valid header name; it is left out",
                    i + 1
                ),
            }
        }
        ExportHeaders(out)
    }
}

/// Headers the export request sets itself, which the variables may not add to.
const RESERVED: [&str; 5] = [
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// `%XX` sequences decoded (the OpenTelemetry header values' encoding); `None`
/// for a broken sequence or a result that is not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
        // `OTEL_TRACES_EXPORTER=none`: no trace exporter, whatever else is set.
        if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none") {
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
        let (ratio, parent_based) = match config.sampling_ratio {
            Some(r) => (r, true),
            None => sampler(set("OTEL_TRACES_SAMPLER"), set("OTEL_TRACES_SAMPLER_ARG")),
        };
        let delay = schedule_delay(&set, "OTEL_BSP_SCHEDULE_DELAY", otlp::BATCH_DELAY);
        let headers = export_headers(&set, "OTEL_EXPORTER_OTLP_TRACES_HEADERS");
        Some(Settings {
            url,
            service_name,
            ratio,
            parent_based,
            delay,
            headers,
        })
    }
}

/// How long items wait to fill a batch: the variable `name` in milliseconds,
/// else `default` (a value that is no number is warned about).
pub(crate) fn schedule_delay(
    set: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: Duration,
) -> Duration {
    match set(name).map(|v| v.trim().parse::<u64>()) {
        None => default,
        Some(Ok(ms)) => Duration::from_millis(ms),
        Some(Err(_)) => {
            tracing::warn!(
                "{name} is not a number of milliseconds; {} ms it is",
                default.as_millis()
            );
            default
        }
    }
}

/// The headers export requests carry: the signal's own variable
/// (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`), else `OTEL_EXPORTER_OTLP_HEADERS`.
pub(crate) fn export_headers(set: &dyn Fn(&str) -> Option<String>, own: &str) -> ExportHeaders {
    match set(own) {
        Some(h) => ExportHeaders::parse(&h, own),
        None => set("OTEL_EXPORTER_OTLP_HEADERS")
            .map(|h| ExportHeaders::parse(&h, "OTEL_EXPORTER_OTLP_HEADERS"))
            .unwrap_or_default(),
    }
}

/// `OTEL_TRACES_SAMPLER` and its argument → (ratio, parent-based). A sampler
/// the gateway does not know, or a ratio that is not one, is warned about and
/// the convention's default taken (`parentbased_always_on`, ratio 1.0).
fn sampler(name: Option<String>, arg: Option<String>) -> (f64, bool) {
    let ratio = || match arg.as_deref().map(|a| a.trim().parse::<f64>()) {
        None => 1.0,
        Some(Ok(r)) if (0.0..=1.0).contains(&r) => r,
        Some(_) => {
            tracing::warn!("OTEL_TRACES_SAMPLER_ARG is not a ratio between 0.0 and 1.0; 1.0 it is");
            1.0
        }
    };
    match name.as_deref().map(str::trim) {
        None | Some("parentbased_always_on") => (1.0, true),
        Some("always_on") => (1.0, false),
        Some("always_off") => (0.0, false),
        Some("parentbased_always_off") => (0.0, true),
        Some("traceidratio") => (ratio(), false),
        Some("parentbased_traceidratio") => (ratio(), true),
        Some(other) => {
            tracing::warn!(sampler = %crate::logged::logged(other), "OTEL_TRACES_SAMPLER names a sampler the gateway does not have (always_on, always_off, traceidratio, or one of those with parentbased_); parentbased_always_on it is");
            (1.0, true)
        }
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
    /// A client's sampled flag decides for its trace.
    parent_based: bool,
    /// Where flush requests go to the exporter.
    flushes: mpsc::Sender<oneshot::Sender<()>>,
}

impl On {
    /// Whether the ratio records a trace with this id (its last 8 bytes against
    /// the bound, so every hop with the same ratio decides alike).
    fn recorded(&self, trace_id: &[u8; 16]) -> bool {
        let low = u64::from_be_bytes(trace_id[8..].try_into().expect("8 bytes"));
        self.bound == u64::MAX || low < self.bound
    }
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
            .map_err(|e| format!("traces: the OTLP endpoint {e}"))?
            .with_headers(&settings.headers.0);
        let (tx, rx) = mpsc::channel(QUEUE);
        let (flushes, flush_rx) = mpsc::channel(4);
        let service_name = settings.service_name.clone();
        let signal = otlp::Signal {
            what: "spans",
            encode: Box::new(move |spans: &[span::SpanData]| otlp::encode(&service_name, spans)),
        };
        tokio::spawn(otlp::export(
            rx,
            flush_rx,
            target,
            signal,
            settings.delay,
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
                parent_based: settings.parent_based,
                flushes,
            })),
        })
    }

    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Exports every span that has ended by now, waiting at most `within` for
    /// the collector (spans still open are not waited for). Off: returns at once.
    pub async fn flush(&self, within: Duration) {
        let Some(on) = &self.on else { return };
        let (done, answered) = oneshot::channel();
        if on.flushes.send(done).await.is_err() {
            return;
        }
        if tokio::time::timeout(within, answered).await.is_err() {
            tracing::warn!(
                "spans were still being exported after {within:?}; the rest are dropped"
            );
        }
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
            Some(p) if on.parent_based && !p.sampled => return None,
            Some(p) if on.parent_based => (p.trace_id, Some(p.span_id)),
            // Not parent-based: the ratio decides on the client's trace id.
            Some(p) if !on.recorded(&p.trace_id) => return None,
            Some(p) => (p.trace_id, Some(p.span_id)),
            None => {
                let id = on.sink.trace_id();
                if !on.recorded(&id) {
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
    fn export_headers_come_from_the_otel_variables_and_never_show_their_values() {
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        let none = TracesConfig::default();
        assert_eq!(resolve(&none, &on).unwrap().headers, ExportHeaders(vec![]));
        let general = (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "X-Api-Key=s3cr%3Dt%2C1 , x-tenant=acme,",
        );
        let s = resolve(&none, &[on[0], general]).unwrap();
        let pairs = |v: &[(&str, &str)]| {
            ExportHeaders(
                v.iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert_eq!(
            s.headers,
            pairs(&[("x-api-key", "s3cr=t,1"), ("x-tenant", "acme")])
        );
        assert_eq!(
            format!("{:?}", s.headers),
            r#"["x-api-key: <hidden>", "x-tenant: <hidden>"]"#
        );
        assert!(!format!("{s:?}").contains("s3cr"));
        // The traces variable wins; broken entries are left out, the rest kept.
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "bad name=1,nokey,k=%zz,k2=a%0Ab,Authorization: Bearer sk,host=x,authorization=Bearer%20t",
        );
        let s = resolve(&none, &[on[0], general, traces]).unwrap();
        assert_eq!(s.headers, pairs(&[("authorization", "Bearer t")]));
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
        let full = resolve(
            &none,
            &[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://t:1/v1/traces/",
            )],
        )
        .unwrap();
        assert_eq!(full.url, "http://t:1/v1/traces/", "used as it is");
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
        let settings = |ratio, parent_based| Settings {
            url: "http://127.0.0.1:9/v1/traces".into(),
            service_name: "t".into(),
            ratio,
            parent_based,
            delay: otlp::BATCH_DELAY,
            headers: ExportHeaders::default(),
        };
        let dropped = Arc::new(AtomicU64::new(0));
        let never = Tracer::start(&settings(0.0, true), dropped.clone()).unwrap();
        let always = Tracer::start(&settings(1.0, true), dropped.clone()).unwrap();
        let off = Tracer::start(&settings(0.0, false), dropped.clone()).unwrap();
        let on = Tracer::start(&settings(1.0, false), dropped).unwrap();
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
        // Not parent-based: the sampler decides whatever the client's flag says.
        assert!(off.root(String::new, Kind::Server, sampled).is_none());
        let span = on.root(String::new, Kind::Server, unsampled).unwrap();
        assert_eq!(span.context().trace_id, unsampled.unwrap().trace_id);
        assert!(on.root(String::new, Kind::Server, None).is_some());
    }

    #[tokio::test]
    async fn a_flush_sends_what_is_queued_without_waiting_for_the_batch_delay() {
        let settings = Settings {
            // Nothing listens there: the export is tried and fails at once.
            url: "http://127.0.0.1:9/v1/traces".into(),
            service_name: "t".into(),
            ratio: 1.0,
            parent_based: true,
            delay: Duration::from_secs(3600),
            headers: ExportHeaders::default(),
        };
        let dropped = Arc::new(AtomicU64::new(0));
        let tracer = Tracer::start(&settings, dropped.clone()).unwrap();
        for _ in 0..3 {
            drop(tracer.root(String::new, Kind::Server, None));
        }
        tracer.flush(Duration::from_secs(60)).await;
        // Exported (and, with no collector, counted as dropped) before the hour is up.
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        tracer.flush(Duration::from_secs(60)).await;
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        Tracer::off().flush(Duration::from_secs(60)).await;
    }

    #[test]
    fn the_otel_samplers_and_the_batch_delay_are_read_from_the_environment() {
        let none = TracesConfig::default();
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        let sampled = |vars: &[(&str, &str)]| {
            let mut vars = vars.to_vec();
            vars.push(endpoint);
            let s = resolve(&none, &vars).unwrap();
            (s.ratio, s.parent_based)
        };
        assert_eq!(
            sampled(&[]),
            (1.0, true),
            "parentbased_always_on by default"
        );
        for (name, arg, want) in [
            ("always_on", "", (1.0, false)),
            ("always_off", "", (0.0, false)),
            ("traceidratio", "0.25", (0.25, false)),
            ("traceidratio", "", (1.0, false)),
            ("parentbased_always_on", "", (1.0, true)),
            ("parentbased_always_off", "", (0.0, true)),
            ("parentbased_traceidratio", "0.5", (0.5, true)),
            ("parentbased_traceidratio", "2", (1.0, true)),
            ("parentbased_traceidratio", "half", (1.0, true)),
            ("jaeger_remote", "", (1.0, true)),
        ] {
            let got = sampled(&[
                ("OTEL_TRACES_SAMPLER", name),
                ("OTEL_TRACES_SAMPLER_ARG", arg),
            ]);
            assert_eq!(got, want, "{name} {arg}");
        }
        // The config's ratio wins over the variables.
        let config = TracesConfig {
            sampling_ratio: Some(0.1),
            ..TracesConfig::default()
        };
        let s = resolve(&config, &[endpoint, ("OTEL_TRACES_SAMPLER", "always_off")]).unwrap();
        assert_eq!((s.ratio, s.parent_based), (0.1, true));
        let delay = |v: &str| {
            resolve(&none, &[endpoint, ("OTEL_BSP_SCHEDULE_DELAY", v)])
                .unwrap()
                .delay
        };
        assert_eq!(delay("60000"), Duration::from_secs(60));
        assert_eq!(delay("soon"), otlp::BATCH_DELAY);
        assert_eq!(
            resolve(&none, &[endpoint]).unwrap().delay,
            otlp::BATCH_DELAY
        );
        assert_eq!(
            resolve(&none, &[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            None
        );
        assert!(resolve(&none, &[endpoint, ("OTEL_TRACES_EXPORTER", "otlp")]).is_some());
    }
}
