//! JSON-RPC 2.0 over newline-delimited streams: framing with a size bound, telling
//! requests from notifications from responses, and building the few messages the
//! gateway writes itself. Messages stay `serde_json::Value` with key order kept.

use crate::texts as answer;
use serde_json::{json, Value};
use std::io;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// -32021 (2026-07-28): the request needs a client capability the client did not declare.
pub const MISSING_CAPABILITY: i64 = -32021;
pub const INTERNAL_ERROR: i64 = -32603;

/// What one line of input held.
#[derive(Debug)]
pub enum Line {
    /// A complete line, without its newline.
    Message(Vec<u8>),
    /// A line longer than the bound; it was read and discarded up to its newline.
    TooLong(usize),
}

/// Reads one line of at most `max` bytes. `Ok(None)` at end of input. A longer
/// line is consumed and reported, never buffered whole.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> io::Result<Option<Line>> {
    let mut buf = Vec::new();
    let mut seen = 0usize;
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (seen, too_long) {
                (0, _) => None,
                (n, true) => Some(Line::TooLong(n)),
                (_, false) => Some(Line::Message(buf)),
            });
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        seen += chunk.len();
        if !too_long {
            if seen > max {
                too_long = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            if too_long {
                return Ok(Some(Line::TooLong(seen)));
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(Line::Message(buf)));
        }
    }
}

/// The kind of a parsed message.
#[derive(Debug, PartialEq)]
pub enum Kind<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
    },
    Notification {
        method: &'a str,
    },
    Response {
        id: &'a Value,
    },
    /// Not a JSON-RPC 2.0 message; the text says why.
    Invalid(&'static str),
}

pub fn classify(msg: &Value) -> Kind<'_> {
    let Some(obj) = msg.as_object() else {
        return Kind::Invalid(if msg.is_array() {
            answer::NOT_A_BATCH
        } else {
            answer::NOT_AN_OBJECT
        });
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Kind::Invalid(answer::NO_VERSION);
    }
    let id = obj.get("id").filter(|id| id.is_string() || id.is_number());
    match (obj.get("method"), id) {
        (Some(Value::String(method)), Some(id)) => Kind::Request { id, method },
        (Some(Value::String(method)), None) if !obj.contains_key("id") => {
            Kind::Notification { method }
        }
        (Some(Value::String(_)), None) => Kind::Invalid(answer::BAD_ID),
        (Some(_), _) => Kind::Invalid(answer::BAD_METHOD),
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            Kind::Response { id }
        }
        (None, _) => Kind::Invalid(answer::NO_KIND),
    }
}

/// The id to answer an invalid message with: its own when usable, else null.
pub fn usable_id(msg: &Value) -> Value {
    msg.get("id")
        .filter(|i| i.is_string() || i.is_number())
        .cloned()
        .unwrap_or(Value::Null)
}

/// A map key for an id (`1` and `"1"` stay distinct).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

/// A JSON object from owned parts, in order. (`json!` would copy each value
/// through serialisation; these are moved.)
pub fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn version() -> Value {
    Value::String("2.0".to_owned())
}

pub fn response(id: Value, result: Value) -> Value {
    object([("jsonrpc", version()), ("id", id), ("result", result)])
}

/// A response carrying an error object as it came (an upstream's, passed through).
pub fn error_response(id: Value, error: Value) -> Value {
    object([("jsonrpc", version()), ("id", id), ("error", error)])
}

pub fn error(id: Value, code: i64, message: &str) -> Value {
    error_response(id, json!({"code": code, "message": message}))
}

pub fn request(id: Value, method: &str, params: Option<Value>) -> Value {
    let mut m = object([
        ("jsonrpc", version()),
        ("id", id),
        ("method", Value::String(method.to_owned())),
    ]);
    if let (Some(p), Value::Object(map)) = (params, &mut m) {
        map.insert("params".to_owned(), p);
    }
    m
}

pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut m = object([
        ("jsonrpc", version()),
        ("method", Value::String(method.to_owned())),
    ]);
    if let (Some(p), Value::Object(map)) = (params, &mut m) {
        map.insert("params".to_owned(), p);
    }
    m
}

/// Serialises a message as one line (no embedded newline is possible in compact JSON).
pub fn to_line(msg: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(msg).unwrap_or_default();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], max: usize) -> Vec<String> {
        let mut r = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut r, max).await.unwrap() {
            out.push(match line {
                Line::Message(m) => String::from_utf8_lossy(&m).into_owned(),
                Line::TooLong(n) => format!("<too long: {n}>"),
            });
        }
        out
    }

    #[tokio::test]
    async fn framing() {
        assert_eq!(lines(b"a\nbb\r\n\nccc", 10).await, ["a", "bb", "", "ccc"]);
        assert_eq!(
            lines(b"short\nthis line is long\nok\n", 8).await,
            ["short", "<too long: 17>", "ok"]
        );
        assert_eq!(lines(b"", 8).await, Vec::<String>::new());
    }

    #[test]
    fn kinds() {
        let req = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
        assert_eq!(
            classify(&req),
            Kind::Request {
                id: &json!(1),
                method: "ping"
            }
        );
        let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        assert_eq!(
            classify(&note),
            Kind::Notification {
                method: "notifications/initialized"
            }
        );
        let resp = json!({"jsonrpc":"2.0","id":"a","result":{}});
        assert_eq!(classify(&resp), Kind::Response { id: &json!("a") });
        assert!(matches!(classify(&json!([1])), Kind::Invalid(m) if m.contains("batches")));
        assert!(matches!(
            classify(&json!({"id":1,"method":"x"})),
            Kind::Invalid(_)
        ));
        assert!(matches!(
            classify(&json!({"jsonrpc":"2.0","id":null,"method":"x"})),
            Kind::Invalid(_)
        ));
        assert!(matches!(
            classify(&json!({"jsonrpc":"2.0","id":[1],"method":"x"})),
            Kind::Invalid(_)
        ));
    }

    #[test]
    fn built_messages() {
        assert_eq!(
            serde_json::to_string(&error(json!(3), INVALID_PARAMS, "Unknown tool 'x'.")).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool 'x'."}}"#
        );
        assert_eq!(id_key(&json!(1)), "1");
        assert_eq!(id_key(&json!("1")), "\"1\"");
    }
}
