//! Whether a tool's input schema compiles (A4), decided once per distinct
//! schema text while a catalogue is built, and the compilation itself.

use serde_json::Value;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Deepest schema nesting we compile; deeper documents are unusable, not a stack overflow.
const MAX_SCHEMA_DEPTH: usize = 64;

/// Whether each input schema met while building compiles, by its text: tools
/// that share a schema (generated servers declare thousands alike) compile it
/// once (issue 25). Identical text compiles identically, `$schema` included.
#[derive(Default)]
pub(crate) struct Compiled(HashMap<String, Result<(), String>>);

impl Compiled {
    pub(crate) fn check(&mut self, schema: &Value) -> Result<(), String> {
        // Depth first: the text of a schema too deep is never made.
        if nesting_exceeds(schema, MAX_SCHEMA_DEPTH) {
            return compile(schema).map(drop);
        }
        let Ok(text) = serde_json::to_string(schema) else {
            return compile(schema).map(drop);
        };
        if let Some(known) = self.0.get(&text) {
            return known.clone();
        }
        let decided = compile(schema).map(drop);
        self.0.insert(text, decided.clone());
        decided
    }

    /// How many distinct schemas were compiled.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Compiles a tool's input schema: 2020-12 unless its `$schema` says otherwise.
/// External references are never fetched (no resolver is built in).
pub(crate) fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    if nesting_exceeds(schema, MAX_SCHEMA_DEPTH) {
        return Err(format!(
            "inputSchema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    let mut options = jsonschema::options();
    if schema.get("$schema").is_none() {
        options = options.with_draft(jsonschema::Draft::Draft202012);
    }
    match catch_unwind(AssertUnwindSafe(|| options.build(schema))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("inputSchema does not compile: {e}")),
        Err(_) => Err("inputSchema could not be compiled".into()),
    }
}

/// Whether `v` nests deeper than `max` levels; iterative, so any depth is safe.
pub(crate) fn nesting_exceeds(v: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        if d >= max {
            return true;
        }
        stack.extend(children.map(|c| (c, d + 1)));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_text_is_compiled_once() {
        let good = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let bad = json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}});
        let draft7 =
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"});
        let mut compiled = Compiled::default();
        for _ in 0..3 {
            assert_eq!(compiled.check(&good), Ok(()));
            assert_eq!(compiled.check(&bad), compile(&bad).map(drop));
            assert_eq!(compiled.check(&draft7), Ok(()));
        }
        assert!(compiled.check(&bad).is_err());
        assert_eq!(
            compiled.len(),
            3,
            "three distinct texts, three compilations"
        );
    }
}
