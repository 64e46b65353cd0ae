//! `tools/list` answers kept as the bytes a client reads (issue 25).
//!
//! A listing is the same for every request of one caller (name and groups),
//! virtual server and set of tools found by search, as long as the catalogue
//! and the policy stand. So its `tools` array is serialised once and kept; the
//! next listing is those bytes with the request's id and result fields around
//! them, written as they are ([`crate::gateway::Outgoing::raw`]). A new
//! catalogue (an upstream's tools changed, a pin approved) empties the cache; a
//! reload makes a new policy, and with it a new cache.
//!
//! Not cached: listings through a grant webhook (it may decide otherwise each
//! time) and listings that description guards go over (they report what they
//! find on every listing, S7).

use crate::jsonrpc;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use warden_core::{Caller, Catalogue};

/// Listings kept per catalogue; past this the oldest catalogue's are dropped
/// whole (a gateway with more distinct callers than this rebuilds some).
const MAX_KEPT: usize = 1024;

/// Who asked, where: what one listing depends on besides the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListingKey {
    caller: Option<(String, Vec<String>)>,
    server: Option<String>,
    found: BTreeSet<String>,
}

impl ListingKey {
    pub fn new(caller: Option<&Caller>, server: Option<&str>, found: &BTreeSet<String>) -> Self {
        ListingKey {
            caller: caller.map(|c| (c.name.clone(), c.groups.clone())),
            server: server.map(str::to_owned),
            // Only a virtual server in search mode shows found tools.
            found: if server.is_some() {
                found.clone()
            } else {
                BTreeSet::new()
            },
        }
    }
}

/// The serialised `tools` arrays of one catalogue. The weak reference keeps
/// that catalogue's address from being reused while the entries stand, so an
/// address that matches is that very catalogue.
#[derive(Default)]
struct Kept {
    of: Weak<Catalogue>,
    tools: HashMap<ListingKey, Bytes>,
}

/// The listings of one policy.
#[derive(Default)]
pub struct Listings {
    kept: Mutex<Kept>,
}

impl Listings {
    /// The `tools` array kept for `key` over `catalogue`, if any.
    pub fn get(&self, catalogue: &Arc<Catalogue>, key: &ListingKey) -> Option<Bytes> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if !Weak::ptr_eq(&kept.of, &Arc::downgrade(catalogue)) {
            return None;
        }
        kept.tools.get(key).cloned()
    }

    /// Keeps `tools` for `key` over `catalogue`, forgetting other catalogues'.
    pub fn put(&self, catalogue: &Arc<Catalogue>, key: ListingKey, tools: Bytes) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if !Weak::ptr_eq(&kept.of, &Arc::downgrade(catalogue)) || kept.tools.len() >= MAX_KEPT {
            *kept = Kept {
                of: Arc::downgrade(catalogue),
                tools: HashMap::new(),
            };
        }
        kept.tools.insert(key, tools);
    }
}

/// The `tools` array of a listing as bytes (of values, or of declarations
/// kept as bytes, [`warden_core::ToolEntry::published`]).
pub fn serialise<T: serde::Serialize>(tools: impl IntoIterator<Item = T>) -> Bytes {
    let tools: Vec<T> = tools.into_iter().collect();
    Bytes::from(serde_json::to_vec(&tools).unwrap_or_else(|_| b"[]".to_vec()))
}

/// The whole response to a `tools/list` request `id`: `{"tools": …}` and then
/// the fields of `rest` in their order, byte for byte what serialising
/// [`jsonrpc::response`] of that result would give.
pub fn answer(id: &Value, tools: &[u8], rest: &Map<String, Value>) -> Bytes {
    let id = serde_json::to_vec(id).unwrap_or_else(|_| b"null".to_vec());
    let mut rest_bytes = Vec::new();
    for (key, value) in rest.iter().filter(|(k, _)| *k != "tools") {
        rest_bytes.push(b',');
        rest_bytes.extend(serde_json::to_vec(key).unwrap_or_default());
        rest_bytes.push(b':');
        rest_bytes.extend(serde_json::to_vec(value).unwrap_or_default());
    }
    let mut out = Vec::with_capacity(64 + id.len() + tools.len() + rest_bytes.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(&id);
    out.extend_from_slice(br#","result":{"tools":"#);
    out.extend_from_slice(tools);
    out.extend_from_slice(&rest_bytes);
    out.extend_from_slice(b"}}");
    Bytes::from(out)
}

/// The response's envelope without its result, for routing the bytes
/// [`answer`] made (a front reads only `id` and the message's kind).
pub fn envelope(id: Value) -> Value {
    jsonrpc::response(id, Value::Object(Map::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::rev2026;
    use serde_json::json;

    fn tools() -> Vec<Value> {
        vec![
            json!({"name": "a", "description": "quote \" and é", "inputSchema": {"type": "object"}}),
            json!({"name": "b", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}),
        ]
    }

    /// What the Value path writes for the same result.
    fn by_value(id: Value, result: Value) -> Vec<u8> {
        serde_json::to_vec(&jsonrpc::response(id, result)).unwrap()
    }

    #[test]
    fn the_bytes_are_those_of_the_value_path() {
        let tools = tools();
        let bytes = serialise(&tools);
        for id in [json!(7), json!("a\"b\\c"), json!(null), json!(1.5)] {
            let result = json!({"tools": tools});
            assert_eq!(
                answer(&id, &bytes, &Map::new())[..],
                by_value(id.clone(), result)[..]
            );
        }
    }

    #[test]
    fn the_2026_stamp_follows_the_tools_in_the_same_order() {
        let tools = tools();
        let bytes = serialise(&tools);
        for ttl in [None, Some(5_000u64)] {
            let mut result = json!({"tools": tools});
            let mut rest = json!({});
            if let Some(t) = ttl {
                result["ttlMs"] = json!(t);
                rest["ttlMs"] = json!(t);
            }
            rev2026::stamp_result("tools/list", &mut result);
            rev2026::stamp_result("tools/list", &mut rest);
            let rest = rest.as_object().unwrap();
            assert_eq!(
                answer(&json!(3), &bytes, rest)[..],
                by_value(json!(3), result)[..]
            );
        }
    }

    #[test]
    fn a_new_catalogue_forgets_the_listings_of_the_old() {
        let listings = Listings::default();
        let (one, two) = (
            Arc::new(Catalogue::default()),
            Arc::new(Catalogue::default()),
        );
        let key = ListingKey::new(Some(&Caller::new("alice")), None, &BTreeSet::new());
        listings.put(&one, key.clone(), Bytes::from_static(b"[1]"));
        assert_eq!(listings.get(&one, &key).as_deref(), Some(&b"[1]"[..]));
        assert_eq!(listings.get(&two, &key), None);
        listings.put(&two, key.clone(), Bytes::from_static(b"[2]"));
        assert_eq!(listings.get(&one, &key), None);
        assert_eq!(listings.get(&two, &key).as_deref(), Some(&b"[2]"[..]));
    }

    #[test]
    fn callers_servers_and_groups_are_kept_apart() {
        let listings = Listings::default();
        let cat = Arc::new(Catalogue::default());
        let none = BTreeSet::new();
        let mut grouped = Caller::new("alice");
        grouped.groups.push("ops".into());
        let keys = [
            ListingKey::new(Some(&Caller::new("alice")), None, &none),
            ListingKey::new(Some(&grouped), None, &none),
            ListingKey::new(Some(&Caller::new("bob")), None, &none),
            ListingKey::new(Some(&Caller::new("alice")), Some("s"), &none),
            ListingKey::new(None, None, &none),
        ];
        for (n, k) in keys.iter().enumerate() {
            listings.put(&cat, k.clone(), Bytes::from(n.to_string()));
        }
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(listings.get(&cat, k), Some(Bytes::from(n.to_string())));
        }
        // Found tools matter on a server only.
        let found: BTreeSet<String> = ["x".to_owned()].into();
        assert_eq!(
            ListingKey::new(None, None, &found),
            ListingKey::new(None, None, &none)
        );
        assert_ne!(
            ListingKey::new(None, Some("s"), &found),
            ListingKey::new(None, Some("s"), &none)
        );
    }
}
