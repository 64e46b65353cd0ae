//! What the headers of a request to an HTTP upstream are read from, without
//! parsing the whole message: its trace context, and for a 2026-07-28 upstream
//! the routing headers (`Mcp-Method`, `Mcp-Name`) the revision asks for.

use super::VERSION;
use serde_json::Value;

/// What `post` needs of an outgoing message: whether it is one of our requests
/// (they have numeric ids), and which.
#[derive(serde::Deserialize)]
pub(super) struct Head {
    pub(super) id: Option<u64>,
    pub(super) method: Option<serde::de::IgnoredAny>,
    pub(super) params: Option<HeadParams>,
}

/// The W3C trace context a request carries in `_meta`, which an HTTP upstream
/// also gets as headers. Params of any shape are read; only an object's `_meta`
/// is kept, the rest skipped without building a tree.
#[derive(Default)]
pub(super) struct HeadParams {
    pub(super) meta: Option<serde_json::Value>,
}

impl HeadParams {
    /// The trace headers to send: string values only.
    pub(super) fn trace_headers(&self) -> Vec<(&'static str, String)> {
        let Some(meta) = &self.meta else {
            return Vec::new();
        };
        ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|name| Some((name, meta.get(name)?.as_str()?.to_owned())))
            .collect()
    }
}

impl<'de> serde::Deserialize<'de> for HeadParams {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ParamsVisitor)
    }
}

pub(super) struct ParamsVisitor;

impl<'de> serde::de::Visitor<'de> for ParamsVisitor {
    type Value = HeadParams;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<HeadParams, A::Error> {
        let mut params = HeadParams::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "_meta" {
                params.meta = Some(map.next_value()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(params)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<HeadParams, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(HeadParams::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
    fn visit_unit<E>(self) -> Result<HeadParams, E> {
        Ok(HeadParams::default())
    }
}

/// What the 2026-07-28 headers of an outgoing message are read from: its method,
/// the name or URI it is about, and the version its envelope names. Parsed
/// without building a tree (the arguments are skipped).
#[derive(serde::Deserialize)]
pub(super) struct Routing {
    pub(super) method: Option<String>,
    pub(super) params: Option<RoutingParams>,
}

#[derive(serde::Deserialize)]
pub(super) struct RoutingParams {
    pub(super) name: Option<Value>,
    pub(super) uri: Option<Value>,
    #[serde(rename = "_meta")]
    pub(super) meta: Option<RoutingMeta>,
}

#[derive(serde::Deserialize)]
pub(super) struct RoutingMeta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    pub(super) version: Option<Value>,
}

/// The headers a 2026-07-28 request carries beside its body (the body's version,
/// method and name, so servers and proxies route without parsing it); none for a
/// message of an older revision.
pub(super) fn stateless_headers(line: &[u8]) -> Vec<(String, String)> {
    let Ok(r) = serde_json::from_slice::<Routing>(line) else {
        return Vec::new();
    };
    let (Some(method), Some(params)) = (r.method, r.params) else {
        return Vec::new();
    };
    let Some(Value::String(version)) = params.meta.and_then(|m| m.version) else {
        return Vec::new();
    };
    let mut headers = vec![
        (VERSION.to_owned(), version),
        ("mcp-method".to_owned(), method.clone()),
    ];
    let named = match method.as_str() {
        "tools/call" | "prompts/get" => params.name,
        "resources/read" => params.uri,
        _ => None,
    };
    if let Some(Value::String(name)) = named {
        headers.push(("mcp-name".to_owned(), header_value(&name)));
    }
    headers
}

/// A name as a header value: verbatim when HTTP can carry it as it is, else
/// `=?base64?…?=`.
pub(super) fn header_value(name: &str) -> String {
    let plain = !name.is_empty()
        && name.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !name.starts_with(' ')
        && !name.ends_with(' ');
    if plain {
        return name.to_owned();
    }
    use base64::Engine;
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(name)
    )
}
