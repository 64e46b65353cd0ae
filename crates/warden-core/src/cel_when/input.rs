//! The values a `when_cel` expression reads, built from one call: only the
//! variables the expression names are built, and JSON becomes CEL values the
//! way the arguments were written (integers stay integers, other numbers are
//! doubles).

use super::Uses;
use crate::call::{CallScope, Caller};
use cel::objects::{Key, Map as CelMap};
use cel::Value as Cel;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// One call, as a `when_cel` expression sees it.
#[derive(Debug, Clone, Copy)]
pub struct CelInput<'a> {
    pub caller: &'a Caller,
    /// The name callers see.
    pub tool: &'a str,
    pub upstream: &'a str,
    /// The arguments after the argument stages (A2-A7), as G6 reads them.
    pub args: &'a Map<String, Value>,
    pub scope: &'a CallScope,
}

fn strings(list: &[String]) -> Cel {
    Cel::List(Arc::new(
        list.iter().map(|s| Cel::String(Arc::new(s.clone()))).collect(),
    ))
}

fn record(entries: Vec<(&str, Cel)>) -> Cel {
    let map: HashMap<Key, Cel> = entries
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k.to_owned())), v))
        .collect();
    Cel::Map(CelMap { map: Arc::new(map) })
}

fn string(s: &str) -> Cel {
    Cel::String(Arc::new(s.to_owned()))
}

/// A JSON value as CEL reads it.
pub fn json(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => string(s),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(json).collect())),
        Value::Object(o) => object(o),
    }
}

fn object(o: &Map<String, Value>) -> Cel {
    let map: HashMap<Key, Cel> = o
        .iter()
        .map(|(k, v)| (Key::String(Arc::new(k.clone())), json(v)))
        .collect();
    Cel::Map(CelMap { map: Arc::new(map) })
}

impl CelInput<'_> {
    /// The variables `uses` names, each with its value.
    pub(super) fn variables(&self, uses: Uses) -> Vec<(&'static str, Cel)> {
        let mut out = Vec::with_capacity(5);
        if uses.caller {
            out.push((
                "caller",
                record(vec![
                    ("name", string(&self.caller.name)),
                    ("groups", strings(&self.caller.groups)),
                    ("claims", object(&self.scope.claims)),
                ]),
            ));
        }
        if uses.tool {
            out.push((
                "tool",
                record(vec![
                    ("name", string(self.tool)),
                    ("upstream", string(self.upstream)),
                    ("labels", strings(&self.scope.tool_labels)),
                ]),
            ));
        }
        if uses.args {
            out.push(("args", object(self.args)));
        }
        if uses.session {
            out.push((
                "session",
                record(vec![
                    ("labels", strings(&self.scope.session_labels)),
                    (
                        "calls",
                        Cel::Int(i64::try_from(self.scope.session_calls).unwrap_or(i64::MAX)),
                    ),
                ]),
            ));
        }
        if uses.request {
            out.push((
                "request",
                record(vec![
                    ("time", Cel::Int(self.scope.time)),
                    ("transport", string(&self.scope.transport)),
                    ("revision", string(&self.scope.revision)),
                ]),
            ));
        }
        out
    }
}
