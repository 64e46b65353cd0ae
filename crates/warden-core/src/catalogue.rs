//! The tool catalogue: every tool a gateway (or host) offers, built once from
//! `tools/list` answers.
//!
//! Everything the argument stages need per call is prepared here, when the
//! catalogue is built, so a call does no schema work (A1): the canonical parameter
//! list in declaration order, the compiled JSON Schema validator, the texts naming
//! each parameter's expected value, and the declaration callers are shown.
//! A schema that cannot be used is reported as a [`BuildProblem`] and the tool is
//! skipped by the argument stages (A4), never a panic.

use crate::compiles::{compile, nesting_exceeds, Compiled};
use crate::expected;
use crate::policy::{LayeredPolicy, ToolPolicy};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Longest tool name a caller sees (the conformance suite's limit).
pub const MAX_NAME_LEN: usize = 64;
/// Deepest declaration kept at all (serde_json's own parser stops at 128).
const MAX_DECLARATION_DEPTH: usize = 128;
const REASON: &str = "reason";

/// How the argument stages treat one tool (A4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgCheck {
    /// The schema declares its parameters (possibly none: a parameterless tool).
    Declared,
    /// `additionalProperties: true`: any key is welcome; the unknown-key stage skips it.
    Open,
    /// No usable schema; both argument stages skip it. The text says why.
    Unusable(String),
}

/// One tool, ready for calls.
pub struct ToolEntry {
    /// The name callers see and call (`notes.create_note`).
    pub name: String,
    /// The upstream that runs it.
    pub upstream: String,
    /// The upstream's own name for it.
    pub upstream_name: String,
    /// The declaration as the upstream sent it, shared with the host's copy of the
    /// upstream's listing when it gave one ([`CatalogueBuilder::add_upstream_shared`]).
    /// Kept as its text: a tree of values costs several times its text, and only
    /// the first validated call, a failed one and a catalogue build read into it
    /// (issue 25); [`ToolEntry::declaration_value`] parses it.
    pub declaration: Arc<RawValue>,
    /// The declaration callers are shown (renamed, pins hidden, reason added,
    /// closed), kept as the bytes a listing writes: a tree of values costs
    /// several times its text, and only a guard or a view reads it (issue 25).
    published: Box<RawValue>,
    pub policy: ToolPolicy,
    pub check: ArgCheck,
    /// Canonical parameters in declaration order, pinned ones included.
    pub params: Vec<String>,
    /// Places in `params` in the order of their names, for lookups on tools
    /// with many (a few bytes a parameter, where a set of copies costs ~80).
    by_name: Box<[u32]>,
    /// Whether the input schema compiles (decided when the entry is built).
    compiles: bool,
    /// The compiled schema, built by the first call that is validated: a
    /// compiled schema costs about 12 KB, and a catalogue of thousands of tools
    /// holds only those of the tools called (issue 25).
    validator: OnceLock<Option<jsonschema::Validator>>,
    /// Whether the declaration itself names `reason` as a parameter.
    pub(crate) declares_reason: bool,
}

impl std::fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEntry")
            .field("name", &self.name)
            .field("upstream", &self.upstream)
            .field("check", &self.check)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl ToolEntry {
    /// The declaration callers are shown, as the bytes a listing writes.
    pub fn published(&self) -> &RawValue {
        &self.published
    }

    /// The declaration callers are shown, parsed (for what reads into it).
    pub fn published_value(&self) -> Value {
        // The bytes were serialised from a value, so they parse back to it.
        serde_json::from_str(self.published.get()).unwrap_or(Value::Null)
    }

    /// The declaration as the upstream sent it, parsed (for what reads into it).
    pub fn declaration_value(&self) -> Value {
        // The bytes are JSON (a RawValue), so they parse.
        serde_json::from_str(self.declaration.get()).unwrap_or(Value::Null)
    }

    /// The parameters a caller may send, in declaration order (no pinned ones).
    /// Read from `params` when asked (an unknown key's answer), not kept per tool:
    /// most tools pin nothing, and a copy of the names costs ~40 bytes a parameter.
    pub fn visible_params(&self) -> Cow<'_, [String]> {
        if self.policy.pins.is_empty() {
            return Cow::Borrowed(&self.params);
        }
        let visible = self
            .params
            .iter()
            .filter(|p| !self.policy.pins.contains_key(*p));
        Cow::Owned(visible.cloned().collect())
    }

    pub fn has_validator(&self) -> bool {
        self.compiles
    }

    /// The tool's compiled input schema, compiled on first use; `None` when it
    /// has no usable one.
    pub(crate) fn validator(&self) -> Option<&jsonschema::Validator> {
        if !self.compiles {
            return None;
        }
        self.validator
            .get_or_init(|| compile(self.declaration_value().get("inputSchema")?).ok())
            .as_ref()
    }

    /// Whether `key` is one of the tool's canonical parameters.
    pub fn declares(&self, key: &str) -> bool {
        if self.params.len() <= 8 {
            self.params.iter().any(|p| p == key)
        } else {
            self.by_name
                .binary_search_by(|&i| self.params[i as usize].as_str().cmp(key))
                .is_ok()
        }
    }

    /// The declaration of parameter `param` in the input schema, parsed from
    /// the declaration's text (read when a call fails validation).
    fn property(&self, param: &str) -> Option<Value> {
        let Value::Object(mut decl) = self.declaration_value() else {
            return None;
        };
        let Some(Value::Object(mut schema)) = decl.remove("inputSchema") else {
            return None;
        };
        match schema.remove("properties") {
            Some(Value::Object(mut props)) => props.remove(param),
            _ => None,
        }
    }

    /// What a valid value of `param` looks like, in words. Read from the
    /// declaration when a call fails validation, not kept per tool.
    pub(crate) fn expected(&self, param: &str) -> Option<String> {
        self.property(param).as_ref().map(expected::describe)
    }

    /// Whether `param` declares a `default` (never named as missing).
    pub(crate) fn defaulted(&self, param: &str) -> bool {
        self.property(param)
            .is_some_and(|p| p.get("default").is_some())
    }
}

/// Whether two listings show callers the same declarations, byte for byte.
pub fn same_listing(a: &[&Arc<ToolEntry>], b: &[&Arc<ToolEntry>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.published.get() == b.published.get())
}

/// Something wrong with an upstream's tool list, found while building.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildProblem {
    pub upstream: String,
    /// The tool's upstream name, or a placeholder when it had none.
    pub tool: String,
    pub problem: String,
    /// Whether the tool was left out of the catalogue entirely (else only its checks are off).
    pub dropped: bool,
}

/// Where the per-tool policy comes from while building.
pub trait PolicySource {
    fn policy_for(&self, upstream: &str, tool: &str) -> ToolPolicy;
}

impl PolicySource for LayeredPolicy {
    fn policy_for(&self, upstream: &str, tool: &str) -> ToolPolicy {
        self.resolve(upstream, tool)
    }
}

impl PolicySource for ToolPolicy {
    fn policy_for(&self, _: &str, _: &str) -> ToolPolicy {
        self.clone()
    }
}

/// All tools, in listing order, by the names callers see.
#[derive(Debug, Default)]
pub struct Catalogue {
    tools: Vec<Arc<ToolEntry>>,
    index: HashMap<String, usize>,
}

impl Catalogue {
    pub fn builder(policy: &dyn PolicySource) -> CatalogueBuilder<'_> {
        CatalogueBuilder {
            policy,
            catalogue: Catalogue::default(),
            problems: Vec::new(),
            compiled: Compiled::default(),
        }
    }

    /// Builds a catalogue from one upstream's tool declarations, unprefixed.
    pub fn from_tools(
        tools: &[Value],
        policy: &dyn PolicySource,
    ) -> (Catalogue, Vec<BuildProblem>) {
        let mut b = Catalogue::builder(policy);
        b.add_upstream("", false, tools);
        b.build()
    }

    /// Looks a tool up by the name callers see. Reads the index only (G3).
    pub fn get(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub fn tools(&self) -> &[Arc<ToolEntry>] {
        &self.tools
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

pub struct CatalogueBuilder<'p> {
    policy: &'p dyn PolicySource,
    catalogue: Catalogue,
    problems: Vec<BuildProblem>,
    compiled: Compiled,
}

impl CatalogueBuilder<'_> {
    /// Adds one upstream's `tools` array. With `prefix`, names become `upstream.tool`.
    pub fn add_upstream(&mut self, upstream: &str, prefix: bool, tools: &[Value]) -> &mut Self {
        for decl in tools {
            self.add_tool(upstream, prefix, decl, || Arc::from(raw(decl)));
        }
        self
    }

    /// [`CatalogueBuilder::add_upstream`] for a host that keeps the listing itself,
    /// as text: each entry shares its declaration instead of holding a copy (a
    /// catalogue of hundreds of tools holds each schema once). Each declaration is
    /// parsed while its entry is built, and the tree dropped after.
    pub fn add_upstream_shared(
        &mut self,
        upstream: &str,
        prefix: bool,
        tools: &[Arc<RawValue>],
    ) -> &mut Self {
        for text in tools {
            match serde_json::from_str::<Value>(text.get()) {
                Ok(decl) => self.add_tool(upstream, prefix, &decl, || Arc::clone(text)),
                Err(e) => self.problems.push(BuildProblem {
                    upstream: upstream.to_owned(),
                    tool: "<unreadable>".to_owned(),
                    problem: format!("a tool declaration cannot be read: {e}"),
                    dropped: true,
                }),
            }
        }
        self
    }

    fn add_tool(
        &mut self,
        upstream: &str,
        prefix: bool,
        decl: &Value,
        shared: impl FnOnce() -> Arc<RawValue>,
    ) {
        let Some(own_name) = decl.get("name").and_then(Value::as_str) else {
            self.problems.push(BuildProblem {
                upstream: upstream.to_owned(),
                tool: "<unnamed>".to_owned(),
                problem: "a tool declaration has no string 'name'".to_owned(),
                dropped: true,
            });
            return;
        };
        // Checked before anything copies the declaration: copying recurses.
        if nesting_exceeds(decl, MAX_DECLARATION_DEPTH) {
            self.problems.push(BuildProblem {
                upstream: upstream.to_owned(),
                tool: own_name.to_owned(),
                problem: format!(
                    "the declaration nests deeper than {MAX_DECLARATION_DEPTH} levels"
                ),
                dropped: true,
            });
            return;
        }
        let seen = seen_name(upstream, own_name, prefix);
        if self.catalogue.index.contains_key(&seen) {
            self.problems.push(BuildProblem {
                upstream: upstream.to_owned(),
                tool: own_name.to_owned(),
                problem: format!("the name '{seen}' is already taken by another tool"),
                dropped: true,
            });
            return;
        }
        let policy = self.policy.policy_for(upstream, own_name);
        let entry = build_entry(
            upstream,
            own_name,
            seen.clone(),
            decl,
            shared,
            policy,
            &mut self.compiled,
        );
        if let ArgCheck::Unusable(why) = &entry.check {
            self.problems.push(BuildProblem {
                upstream: upstream.to_owned(),
                tool: own_name.to_owned(),
                problem: format!("argument checks are off for this tool: {why}"),
                dropped: false,
            });
        }
        self.catalogue
            .index
            .insert(seen, self.catalogue.tools.len());
        self.catalogue.tools.push(Arc::new(entry));
    }

    pub fn build(self) -> (Catalogue, Vec<BuildProblem>) {
        (self.catalogue, self.problems)
    }
}

/// `decl` as JSON text. A value's serialisation does not fail (its keys are
/// strings); `null` stands in were it ever to.
pub fn raw(decl: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(decl).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// The name callers see: `upstream.tool` with a prefix, kept to 64 characters of
/// `[A-Za-z0-9_./-]`. Other characters become `_`; a name too long is cut and
/// given a short hash of the full name so two long names stay distinct.
pub fn seen_name(upstream: &str, tool: &str, prefix: bool) -> String {
    let full = if prefix && !upstream.is_empty() {
        format!("{upstream}.{tool}")
    } else {
        tool.to_owned()
    };
    let mut clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        clean.push('_');
    }
    if clean.len() > MAX_NAME_LEN {
        let hash = fnv1a(full.as_bytes());
        clean.truncate(MAX_NAME_LEN - 9);
        clean.push_str(&format!("-{:08x}", hash as u32));
    }
    clean
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn build_entry(
    upstream: &str,
    own_name: &str,
    seen: String,
    decl: &Value,
    shared: impl FnOnce() -> Arc<RawValue>,
    policy: ToolPolicy,
    compiled: &mut Compiled,
) -> ToolEntry {
    let schema = decl.get("inputSchema");
    let (check, params) = match schema {
        None | Some(Value::Null) => (ArgCheck::Unusable("no inputSchema".into()), Vec::new()),
        Some(Value::Object(s)) => match s.get("properties") {
            None => (ArgCheck::Declared, Vec::new()),
            Some(Value::Object(props)) => (ArgCheck::Declared, props.keys().cloned().collect()),
            Some(_) => (
                ArgCheck::Unusable("inputSchema.properties is not an object".into()),
                Vec::new(),
            ),
        },
        Some(_) => (
            ArgCheck::Unusable("inputSchema is not an object".into()),
            Vec::new(),
        ),
    };
    let mut check = check;
    let open = schema.and_then(|s| s.get("additionalProperties")) == Some(&Value::Bool(true));
    if check == ArgCheck::Declared && open && !policy.close_schema {
        check = ArgCheck::Open;
    }

    // Compiled here (once per distinct schema) to know that it compiles; a
    // validator is kept only by the first call.
    let compiles = match (&check, schema) {
        (ArgCheck::Unusable(_), _) | (_, None) => false,
        (_, Some(schema)) => match compiled.check(schema) {
            Ok(_) => true,
            Err(why) => {
                check = ArgCheck::Unusable(why);
                false
            }
        },
    };

    let declares_reason = params.iter().any(|p| p == REASON);
    let mut by_name: Vec<u32> = (0..params.len() as u32).collect();
    by_name.sort_unstable_by(|&a, &b| params[a as usize].cmp(&params[b as usize]));
    let published = raw(&publish(decl, &seen, &policy, &check));
    ToolEntry {
        name: seen,
        upstream: upstream.to_owned(),
        upstream_name: own_name.to_owned(),
        declaration: shared(),
        published,
        policy,
        check,
        params,
        by_name: by_name.into_boxed_slice(),
        compiles,
        validator: OnceLock::new(),
        declares_reason,
    }
}

/// The declaration callers are shown: the seen name; pinned parameters gone from
/// `properties` and `required` (A7); a `reason` parameter added (R1); closed (A6).
fn publish(decl: &Value, seen: &str, policy: &ToolPolicy, check: &ArgCheck) -> Value {
    let mut out = decl.clone();
    let Value::Object(top) = &mut out else {
        return out;
    };
    top.insert("name".into(), Value::String(seen.to_owned()));
    if matches!(check, ArgCheck::Unusable(_)) && !policy.reasons {
        return out;
    }
    let Some(Value::Object(schema)) = top.get_mut("inputSchema") else {
        return out;
    };
    if !policy.pins.is_empty() {
        if let Some(Value::Object(props)) = schema.get_mut("properties") {
            for pin in policy.pins.keys() {
                props.shift_remove(pin);
            }
        }
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|r| r.as_str().is_none_or(|r| !policy.pins.contains_key(r)));
        }
    }
    if policy.reasons {
        let props = schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(props) = props {
            props.entry(REASON).or_insert_with(|| {
                json!({
                    "type": "string",
                    "description": "Why you are calling this tool, in one sentence. Recorded for audit; not passed to the tool."
                })
            });
        }
    }
    if policy.close_schema {
        schema.insert("additionalProperties".into(), Value::Bool(false));
    }
    out
}

#[cfg(test)]
mod tests;
