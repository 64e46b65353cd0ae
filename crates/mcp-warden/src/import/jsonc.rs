//! Client config files as the clients read them: JSON with comments and
//! trailing commas (VS Code's `mcp.json` is JSONC), and no name given twice.
//! serde_json keeps the last of two equal keys without a word; a server named
//! twice would quietly lose one, so duplicates are looked for first.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// The text as plain JSON: comments become spaces and a comma before `}` or
/// `]` goes, so every line and column stays where it was.
pub fn strip(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let (mut i, mut in_string) = (0, false);
    // Where the last comma outside strings is, while only blanks follow it.
    let mut comma: Option<usize> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match (b, bytes.get(i + 1)) {
            (b'"', _) => {
                in_string = true;
                comma = None;
            }
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            (b'/', Some(b'*')) => {
                let end = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |e| i + 2 + e + 2);
                for o in &mut out[i..end] {
                    if *o != b'\n' {
                        *o = b' ';
                    }
                }
                i = end;
                continue;
            }
            (b',', _) => comma = Some(i),
            (b'}' | b']', _) => {
                if let Some(c) = comma.take() {
                    out[c] = b' ';
                }
            }
            (b' ' | b'\t' | b'\r' | b'\n', _) => {}
            _ => comma = None,
        }
        i += 1;
    }
    // Only ASCII bytes were replaced, by ASCII spaces: still UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// Parses JSON, refusing an object that names a key twice; the error names
/// the key and the object it is in (`mcpServers.github`).
pub fn parse(text: &str) -> Result<Value, String> {
    // A repeated name is a data error of the walk's own; the rest is syntax.
    let said = |e: serde_json::Error| match e.classify() {
        serde_json::error::Category::Data => e.to_string(),
        _ => format!("not valid JSON: {e}"),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Walk(String::new()).deserialize(&mut de).map_err(said)?;
    de.end().map_err(said)?;
    Ok(value)
}

/// A value at a path, read while checking its objects for repeated keys.
struct Walk(String);

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // With arbitrary_precision, serde_json hands a number over as this one-key map.
            if key == "$serde_json::private::Number" && out.is_empty() {
                let digits: String = map.next_value()?;
                let n = digits.parse().map_err(serde::de::Error::custom)?;
                return Ok(Value::Number(n));
            }
            let at = if self.0.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.0)
            };
            let value = map.next_value_seed(Walk(at.clone()))?;
            if out.insert(key, value).is_some() {
                return Err(serde::de::Error::custom(format!(
                    "'{at}' is given twice; each name may appear once"
                )));
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Walk(format!("{}[{}]", self.0, out.len())))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_read_as_blanks() {
        let text =
            "{\n  // a server\n  \"a\": [1, 2.50,], /* x */\n  \"b\": \"// not a comment,\",\n}\n";
        let plain = strip(text);
        assert_eq!(plain.len(), text.len());
        assert_eq!(
            parse(&plain).unwrap(),
            serde_json::from_str::<Value>("{\"a\": [1, 2.50], \"b\": \"// not a comment,\"}")
                .unwrap()
        );
    }

    #[test]
    fn a_name_given_twice_is_refused_with_its_path() {
        let e = parse("{\"mcpServers\": {\"a\": {}, \"a\": {}}}").unwrap_err();
        assert!(
            e.starts_with(
                "'mcpServers.a' is given twice; each name may appear once at line 1 column"
            ),
            "{e}"
        );
        let e = parse("{\"a\": 1,}").unwrap_err();
        assert_eq!(e, "not valid JSON: trailing comma at line 1 column 9");
    }
}
