//! Which upstream serves a method the gateway does not govern: one named by the
//! request (a resource's URI, a prompt's name), or all that offer it, their
//! lists merged page by page with their cache hints.

use super::{merge_capabilities, Upstreams};
use crate::gateway::client_session::lock;
use crate::gateway::relay;
use crate::gateway::settle::Body;
use crate::otel::Parent;
use crate::upstream::Upstream;
use crate::{jsonrpc, texts};
use serde_json::{json, Map, Value};
use std::sync::Arc;

impl Upstreams {
    /// Passes a client's notification the gateway does not handle itself on
    /// to every connected upstream.
    pub async fn notify_all(&self, msg: &Value) {
        for up in self.list().iter() {
            if let Some(conn) = up.conn() {
                conn.send(msg.clone()).await;
            }
        }
    }

    /// Which upstream serves a method the gateway does not govern: the one upstream
    /// that declared the capability it belongs to (the first such, with several),
    /// or the one that listed the resource or prompt the request names.
    /// A method no upstream declared the capability of goes to the single
    /// upstream when there is one: a 2026-07-28 server need not announce
    /// `completions` or `logging` in `server/discover` to answer them (the
    /// conformance suite's reference server does not), and the upstream itself
    /// says when it has no such method.
    pub fn serving(&self, method: &str, params: Option<&Value>) -> Option<Arc<Upstream>> {
        let only = || match &*self.list() {
            [only] if only.conn().is_some() => Some(only.clone()),
            _ => None,
        };
        let Some(capability) = capability_of(method) else {
            // Not tied to a capability: only unambiguous with a single upstream.
            return only();
        };
        if let Some(key) = params.and_then(owner_key) {
            let owner = lock(&self.owners).get(&key).copied();
            if let Some(up) = owner
                .and_then(|i| self.get(i))
                .filter(|u| u.conn().is_some())
            {
                return Some(up);
            }
        }
        self.capable(capability).into_iter().next().or_else(only)
    }

    /// The running upstreams that declared the capability `method` belongs to,
    /// when `method` is a list merged across upstreams and several serve it.
    pub fn merging(&self, method: &str) -> Option<(&'static str, Vec<Arc<Upstream>>)> {
        let field = merged_field(method)?;
        let ups = self.capable(capability_of(method).unwrap_or_default());
        (ups.len() > 1).then_some((field, ups))
    }

    /// Running upstreams that declared `capability`, in config order.
    pub(super) fn capable(&self, capability: &str) -> Vec<Arc<Upstream>> {
        self.list()
            .iter()
            .filter(|u| {
                u.conn().is_some()
                    && u.info()
                        .is_some_and(|i| i.capabilities.contains_key(capability))
            })
            .cloned()
            .collect()
    }

    /// `resources/list`, `resources/templates/list` or `prompts/list` over several
    /// upstreams: every page of each, concatenated in config order, remembering which
    /// upstream offers which URI or prompt. One failing upstream fails the listing.
    /// With `trace` (the request's span), each page asked for is a round-trip span
    /// under it, which the upstream continues.
    pub async fn merged_list(
        &self,
        method: &str,
        field: &str,
        ups: Vec<Arc<Upstream>>,
        trace: Option<&Parent>,
    ) -> Body {
        let mut items = Vec::new();
        let mut hint = crate::gateway::rev2026::CacheHint::default();
        for up in ups {
            let failed = || json!({"code": jsonrpc::INTERNAL_ERROR, "message": texts::listing_failed(std::slice::from_ref(&up.name))});
            let conn = up.conn().ok_or_else(failed)?;
            let mut cursor: Option<Value> = None;
            loop {
                let mut params = match cursor.take() {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let mut round_trip =
                    trace.map(|s| crate::gateway::dispatch::round_trip_span(s, method, &up.name));
                if let Some(s) = &round_trip {
                    crate::otel::set_traceparent(&mut params, &s.context());
                }
                let response = conn
                    .request(
                        method,
                        conn.revision().envelop(Some(params), None, None),
                        up.timeout_ms(),
                    )
                    .await
                    .map_err(|e| {
                        tracing::error!(upstream = %up.name, %method, "listing failed: {e}");
                        if let Some(s) = &mut round_trip {
                            s.fail("the upstream did not answer");
                        }
                        failed()
                    })?;
                let result = relay::upstream_body(response, self.error_data, &up.name, method).0;
                if let (Some(s), Err(_)) = (&mut round_trip, &result) {
                    s.fail("answered with a JSON-RPC error");
                }
                drop(round_trip);
                let result = result?;
                hint.absorb(&result);
                let page = result
                    .get(field)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                {
                    let mut owners = lock(&self.owners);
                    for item in &page {
                        if let Some(key) = item_owner_key(field, item) {
                            owners.entry(key).or_insert(up.index);
                        }
                    }
                }
                items.extend(page);
                match result.get("nextCursor") {
                    Some(c) if !c.is_null() => cursor = Some(c.clone()),
                    _ => break,
                }
            }
        }
        let mut result = Map::new();
        result.insert(field.to_owned(), Value::Array(items));
        hint.apply(&mut result);
        Ok(Value::Object(result))
    }

    /// The capabilities the gateway offers (its upstreams' merged, tools always)
    /// and their instructions; `older`: to a client of a revision before
    /// 2026-07-28 (its `initialize`), else in `server/discover`.
    pub fn offered(&self, older: bool) -> (Map<String, Value>, Option<String>) {
        let mut capabilities = Map::new();
        let mut instructions = Vec::new();
        for up in self.list().iter() {
            if let Some(mut info) = up.info_for(older) {
                up.revision_for(older).offer(&mut info.capabilities, older);
                merge_capabilities(&mut capabilities, &info.capabilities);
                if let Some(i) = info.instructions {
                    instructions.push(i);
                }
            }
        }
        capabilities.insert("tools".into(), json!({"listChanged": true}));
        let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
        (capabilities, instructions)
    }
}

/// The capability a method belongs to, for the methods the gateway relays.
fn capability_of(method: &str) -> Option<&'static str> {
    match method.split('/').next()? {
        "resources" => Some("resources"),
        "prompts" => Some("prompts"),
        "completion" => Some("completions"),
        "logging" => Some("logging"),
        _ => None,
    }
}

/// The result field of the list methods merged across upstreams.
fn merged_field(method: &str) -> Option<&'static str> {
    match method {
        "resources/list" => Some("resources"),
        "resources/templates/list" => Some("resourceTemplates"),
        "prompts/list" => Some("prompts"),
        _ => None,
    }
}

/// The resource URI or prompt name a request names, as an owners key.
fn owner_key(params: &Value) -> Option<String> {
    if let Some(uri) = params.get("uri").and_then(Value::as_str) {
        return Some(format!("uri:{uri}"));
    }
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        return Some(format!("prompt:{name}"));
    }
    let r = params.get("ref")?;
    match r.get("type").and_then(Value::as_str)? {
        "ref/prompt" => Some(format!("prompt:{}", r.get("name")?.as_str()?)),
        "ref/resource" => Some(format!("uri:{}", r.get("uri")?.as_str()?)),
        _ => None,
    }
}

fn item_owner_key(field: &str, item: &Value) -> Option<String> {
    match field {
        "resources" => Some(format!("uri:{}", item.get("uri")?.as_str()?)),
        "resourceTemplates" => Some(format!("uri:{}", item.get("uriTemplate")?.as_str()?)),
        "prompts" => Some(format!("prompt:{}", item.get("name")?.as_str()?)),
        _ => None,
    }
}
