//! The values a `when_cel` expression reads, built from one call: only the
//! variables the expression names are built, and JSON becomes CEL values the
//! way the arguments were written (integers stay integers, other numbers are
//! doubles).

use super::{Need, Uses};
use crate::call::{CallScope, Caller};
use cel::objects::{Key, Map as CelMap};
use cel::Value as Cel;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

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
        list.iter()
            .map(|s| Cel::String(Arc::new(s.clone())))
            .collect(),
    ))
}

/// The field names of the fixed variables, allocated once.
fn field_key(name: &'static str) -> Key {
    static KEYS: OnceLock<Vec<(&'static str, Arc<String>)>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        [
            "name",
            "groups",
            "claims",
            "upstream",
            "labels",
            "calls",
            "time",
            "transport",
            "revision",
        ]
        .into_iter()
        .map(|k| (k, Arc::new(k.to_owned())))
        .collect()
    });
    match keys.iter().find(|(k, _)| *k == name) {
        Some((_, arc)) => Key::String(Arc::clone(arc)),
        None => Key::String(Arc::new(name.to_owned())),
    }
}

/// A variable with fixed fields, built with only the fields its [`Need`] wants.
struct Record<'n> {
    need: &'n Need,
    map: HashMap<Key, Cel>,
}

impl<'n> Record<'n> {
    fn new(need: &'n Need) -> Self {
        Record {
            need,
            map: HashMap::new(),
        }
    }

    fn add(mut self, name: &'static str, value: impl FnOnce() -> Cel) -> Self {
        if self.need.wants(name) {
            self.map.insert(field_key(name), value());
        }
        self
    }

    fn done(self) -> Cel {
        Cel::Map(CelMap {
            map: Arc::new(self.map),
        })
    }
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

/// The arguments, with only the keys `need` wants.
fn arguments(need: &Need, o: &Map<String, Value>) -> Cel {
    match need {
        Need::Fields(keys) => {
            let map: HashMap<Key, Cel> = keys
                .iter()
                .filter_map(|k| {
                    o.get(k)
                        .map(|v| (Key::String(Arc::new(k.clone())), json(v)))
                })
                .collect();
            Cel::Map(CelMap { map: Arc::new(map) })
        }
        _ => object(o),
    }
}

/// Whether `v` holds a list or map longer than `max_items`, or more than
/// `budget` values in all (`budget` counts down as values are met).
fn exceeds(v: &Value, max_items: usize, budget: &mut usize) -> bool {
    let Some(left) = budget.checked_sub(1) else {
        return true;
    };
    *budget = left;
    match v {
        Value::Array(a) => a.len() > max_items || a.iter().any(|x| exceeds(x, max_items, budget)),
        Value::Object(o) => {
            o.len() > max_items || o.values().any(|x| exceeds(x, max_items, budget))
        }
        _ => false,
    }
}

impl CelInput<'_> {
    /// X3: whether the arguments an expression reads (`need`) hold a list or
    /// map longer than `max_items`, or more than `max_values` values in all.
    pub(super) fn args_too_large(&self, need: &Need, max_items: usize, max_values: usize) -> bool {
        let mut budget = max_values;
        match need {
            Need::Nothing => false,
            Need::Fields(keys) => keys
                .iter()
                .filter_map(|k| self.args.get(k))
                .any(|v| exceeds(v, max_items, &mut budget)),
            _ => {
                self.args.len() > max_items
                    || self
                        .args
                        .values()
                        .any(|v| exceeds(v, max_items, &mut budget))
            }
        }
    }

    /// The variables `uses` names, each with what it reads of them.
    pub(super) fn variables(&self, uses: &Uses) -> Vec<(&'static str, Cel)> {
        let [caller, tool, args, session, request] = uses;
        let mut out = Vec::with_capacity(5);
        let scope = self.scope;
        if *caller != Need::Nothing {
            let r = Record::new(caller)
                .add("name", || string(&self.caller.name))
                .add("groups", || strings(&self.caller.groups))
                .add("claims", || object(&scope.claims));
            out.push(("caller", r.done()));
        }
        if *tool != Need::Nothing {
            let r = Record::new(tool)
                .add("name", || string(self.tool))
                .add("upstream", || string(self.upstream))
                .add("labels", || strings(&scope.tool_labels));
            out.push(("tool", r.done()));
        }
        if *args != Need::Nothing {
            out.push(("args", arguments(args, self.args)));
        }
        if *session != Need::Nothing {
            let calls = i64::try_from(scope.session_calls).unwrap_or(i64::MAX);
            let r = Record::new(session)
                .add("labels", || strings(&scope.session_labels))
                .add("calls", || Cel::Int(calls));
            out.push(("session", r.done()));
        }
        if *request != Need::Nothing {
            let r = Record::new(request)
                .add("time", || Cel::Int(scope.time))
                .add("transport", || string(&scope.transport))
                .add("revision", || string(&scope.revision));
            out.push(("request", r.done()));
        }
        out
    }
}
