//! An upstream's message read as its members' text, without building a tree of
//! it: a `tools/list` page of thousands of tools is megabytes of JSON and ten
//! times that as a tree of values (issue 25). What is read here reads as a
//! `serde_json::Value` of the same bytes would: a member given twice counts as
//! its last, and a message nested deeper than serde_json parses is no message.

use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;

/// A message's members, each as the upstream wrote it.
pub type Members = HashMap<String, Box<RawValue>>;

/// The deepest nesting serde_json parses into a value: a message nested deeper
/// is skipped as not JSON, so it is not read here either.
const MAX_DEPTH: usize = 127;

/// The members of the JSON object `bytes` holds, borrowed; `None` when they hold
/// no object, or one a `Value` could not be parsed from.
pub fn read(bytes: &[u8]) -> Option<HashMap<String, &RawValue>> {
    let members = serde_json::from_slice(bytes).ok()?;
    nests_within(bytes, MAX_DEPTH).then_some(members)
}

/// The members of `raw` when it is an object.
pub fn object(raw: &RawValue) -> Option<HashMap<String, &RawValue>> {
    serde_json::from_str(raw.get()).ok()
}

/// The elements of `raw` when it is an array.
pub fn array(raw: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str(raw.get()).ok()
}

/// One member, parsed (what is read of it is small: an id, a cursor, an error).
pub fn value(raw: &RawValue) -> Value {
    // The text is JSON within the nesting a value takes, so it parses.
    serde_json::from_str(raw.get()).unwrap_or(Value::Null)
}

/// Borrowed members, owned.
pub fn owned(members: HashMap<String, &RawValue>) -> Members {
    members
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect()
}

/// A message's members, from a tree of values (`{}` for anything but an object).
pub fn of_value(message: Value) -> Members {
    let Value::Object(members) = message else {
        return Members::new();
    };
    members
        .into_iter()
        .filter_map(|(k, v)| Some((k, serde_json::value::to_raw_value(&v).ok()?)))
        .collect()
}

/// The message as a tree of values (its members in no particular order).
pub fn to_value(members: &Members) -> Value {
    Value::Object(members.iter().map(|(k, v)| (k.clone(), value(v))).collect())
}

/// The id of a response to one of the gateway's own requests: a message that
/// `jsonrpc::classify` takes for a response, whose id is a whole number.
pub fn response_id(members: &HashMap<String, &RawValue>) -> Option<u64> {
    let version = members.get("jsonrpc").map(|v| value(v));
    let answers = members.contains_key("result") || members.contains_key("error");
    if version.as_ref().and_then(Value::as_str) != Some("2.0")
        || members.contains_key("method")
        || !answers
    {
        return None;
    }
    value(members.get("id")?).as_u64()
}

/// Whether the JSON text `bytes` nests arrays and objects at most `limit` deep.
fn nests_within(bytes: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{}"x]"{}}}"#,
            "[".repeat(depth - 1),
            "]".repeat(depth - 1)
        )
    }

    #[test]
    fn reads_what_a_value_reads_and_nothing_deeper() {
        for depth in [2, 126, 127, 128, 200] {
            let text = nested(depth);
            let as_value = serde_json::from_str::<Value>(&text).is_ok();
            assert_eq!(read(text.as_bytes()).is_some(), as_value, "depth {depth}");
        }
        assert!(read(nested(127).as_bytes()).is_some());
        assert!(read(nested(128).as_bytes()).is_none());
    }

    #[test]
    fn a_member_given_twice_counts_as_its_last() {
        let text = br#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"result":{"b":2}}"#;
        let members = read(text).unwrap();
        let as_value: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(value(members["result"]), as_value["result"]);
    }

    #[test]
    fn only_a_response_with_a_whole_number_id_has_one() {
        let id = |t: &str| response_id(&read(t.as_bytes()).unwrap());
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), Some(7));
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"error":{}}"#), Some(7));
        assert_eq!(
            id(r#"{"jsonrpc":"2.\u0030","id":7,"result":null}"#),
            Some(7)
        );
        assert_eq!(id(r#"{"jsonrpc":"1.0","id":7,"result":{}}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7.5,"result":{}}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7}"#), None);
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"x","result":{}}"#),
            None
        );
        assert!(read(b"[1]").is_none());
        assert!(read(b"{\"a\":").is_none());
    }

    #[test]
    fn members_turn_back_into_the_message() {
        let text = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"}]}}"#;
        let members = owned(read(text).unwrap());
        let as_value: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(to_value(&members), as_value);
    }
}
