//! N3: the bounded `_meta` every stage and hook reads.
//!
//! `_meta` is client-supplied and of any shape. Before anything reads it, it is cut
//! down to a size a hook can afford to look at: entries nesting too deep, too long
//! once encoded, or past a count are dropped. Keys the MCP specification reserves
//! always survive, because their values belong to the protocol, not to us. Values
//! are never interpreted: a reader must check the type of every entry it uses.

use serde_json::{Map, Value};
use std::io;

/// Limits applied to `_meta` (configurable; defaults from docs/behaviour.md N3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaLimits {
    /// Deepest nesting an entry's value may have (`{"a":{"b":1}}` nests 2 levels).
    pub max_depth: usize,
    /// Longest encoded entry value, in characters.
    pub max_encoded_chars: usize,
    /// Entries kept, reserved keys aside.
    pub max_entries: usize,
}

impl Default for MetaLimits {
    fn default() -> Self {
        Self {
            max_depth: 4,
            max_encoded_chars: 4096,
            max_entries: 32,
        }
    }
}

/// `_meta` after bounding. Read it with [`Meta::get`]; every value is untrusted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta(Map<String, Value>);

impl Meta {
    /// Bounds a raw `_meta` value. A non-object becomes empty.
    pub fn bound(raw: Option<&Value>, limits: &MetaLimits) -> Meta {
        let Some(Value::Object(entries)) = raw else {
            return Meta::default();
        };
        let mut kept = Map::new();
        let mut counted = 0usize;
        for (key, value) in entries {
            if is_reserved(key) {
                kept.insert(key.clone(), value.clone());
                continue;
            }
            if counted == limits.max_entries {
                continue;
            }
            counted += 1;
            if depth_exceeds(value, limits.max_depth)
                || encoded_exceeds(value, limits.max_encoded_chars)
            {
                continue;
            }
            kept.insert(key.clone(), value.clone());
        }
        Meta(kept)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// A string entry, or `None` when absent or of another type.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Keys the MCP specification reserves: `progressToken`, W3C trace context, and any
/// key whose prefix has `modelcontextprotocol` or `mcp` as its second label.
pub fn is_reserved(key: &str) -> bool {
    if matches!(
        key,
        "progressToken" | "traceparent" | "tracestate" | "baggage"
    ) {
        return true;
    }
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    matches!(
        prefix.split('.').nth(1),
        Some("modelcontextprotocol" | "mcp")
    )
}

/// Whether `value` nests deeper than `max`; looks no deeper than `max + 1` levels,
/// so a pathological value costs nothing extra and recursion stays bounded.
fn depth_exceeds(value: &Value, max: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values()),
        _ => return false,
    };
    if max == 0 {
        return true;
    }
    let mut children = children;
    children.any(|child| depth_exceeds(child, max - 1))
}

/// Whether the JSON encoding of `value` is longer than `max` characters; stops
/// encoding as soon as it is.
fn encoded_exceeds(value: &Value, max: usize) -> bool {
    struct Counter {
        chars: usize,
        max: usize,
    }
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            // Count characters, not bytes: UTF-8 continuation bytes do not start one.
            self.chars += buf.iter().filter(|b| (**b & 0xC0) != 0x80).count();
            if self.chars > self.max {
                return Err(io::Error::other("too long"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { chars: 0, max };
    serde_json::to_writer(&mut counter, value).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bound(v: Value) -> Meta {
        Meta::bound(Some(&v), &MetaLimits::default())
    }

    #[test]
    fn non_object_becomes_empty() {
        for v in [json!(null), json!([1, 2]), json!("x"), json!(3)] {
            assert!(bound(v).is_empty());
        }
        assert!(Meta::bound(None, &MetaLimits::default()).is_empty());
    }

    #[test]
    fn keeps_small_entries_in_order() {
        let m = bound(json!({"b": 1, "a": {"x": [1, 2]}, "c": "s"}));
        let keys: Vec<_> = m.as_map().keys().cloned().collect();
        assert_eq!(keys, ["b", "a", "c"]);
    }

    #[test]
    fn drops_deep_entries() {
        let m = bound(json!({
            "ok": {"a": {"b": {"c": 1}}},
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}}
        }));
        assert!(m.get("ok").is_some());
        assert!(m.get("deep").is_none());
        // exactly four levels is allowed, five is not
        let four = bound(json!({"k": [[[[1]]]]}));
        assert!(four.get("k").is_some());
        let five = bound(json!({"k": [[[[[1]]]]]}));
        assert!(five.get("k").is_none());
    }

    #[test]
    fn drops_long_entries_counting_characters() {
        let ok = "é".repeat(4094); // plus two quotes: 4096 characters, 8190 bytes
        let long = "x".repeat(4095);
        let m = bound(json!({"ok": ok, "long": long}));
        assert!(m.get("ok").is_some());
        assert!(m.get("long").is_none());
    }

    #[test]
    fn drops_entries_past_the_32nd_but_keeps_reserved() {
        let mut raw = Map::new();
        for i in 0..40 {
            raw.insert(format!("k{i}"), json!(i));
        }
        raw.insert("progressToken".into(), json!("t"));
        raw.insert(
            "io.modelcontextprotocol/related".into(),
            json!({"deep": {"a": {"b": {"c": {"d": 1}}}}}),
        );
        raw.insert("traceparent".into(), json!("00-abc"));
        let m = bound(Value::Object(raw));
        assert_eq!(m.len(), 35);
        assert!(m.get("k31").is_some());
        assert!(m.get("k32").is_none());
        assert_eq!(m.get_str("progressToken"), Some("t"));
        assert!(m.get("io.modelcontextprotocol/related").is_some());
    }

    #[test]
    fn reserved_keys() {
        assert!(is_reserved("progressToken"));
        assert!(is_reserved("io.modelcontextprotocol/protocolVersion"));
        assert!(is_reserved("dev.mcp/x"));
        assert!(is_reserved("tracestate"));
        assert!(!is_reserved("warden/idempotencyKey"));
        assert!(!is_reserved("modelcontextprotocol/x"));
        assert!(!is_reserved("progresstoken"));
    }

    #[test]
    fn pathologically_deep_value_is_dropped_without_deep_recursion() {
        let mut v = json!(1);
        for _ in 0..10_000 {
            v = Value::Array(vec![v]);
        }
        let mut raw = Map::new();
        raw.insert("deep".into(), v);
        let raw = Value::Object(raw);
        let m = Meta::bound(Some(&raw), &MetaLimits::default());
        assert!(m.is_empty());
        // dropping a 10,000-level value must not overflow either
        drop(raw);
    }
}
