//! The catalogue's unit tests: entries, publishing, A4's decisions, listings.

use super::*;
use crate::policy::UnknownMode;

fn tool(name: &str, schema: Value) -> Value {
    json!({"name": name, "description": "d", "inputSchema": schema})
}

#[test]
fn params_in_declaration_order() {
    let (c, problems) = Catalogue::from_tools(
        &[tool(
            "t",
            json!({"type":"object","properties":{"z":{},"a":{},"m":{}}}),
        )],
        &ToolPolicy::default(),
    );
    assert!(problems.is_empty());
    let t = c.get("t").unwrap();
    assert_eq!(t.params, ["z", "a", "m"]);
    assert_eq!(t.check, ArgCheck::Declared);
    assert!(t.has_validator());
}

#[test]
fn a_validator_is_held_only_once_a_call_needed_it() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let (c, _) = Catalogue::from_tools(&[tool("t", schema)], &ToolPolicy::default());
    let t = c.get("t").unwrap();
    assert!(t.has_validator());
    assert!(t.validator.get().is_none(), "kept from the build");
    assert!(t.validator().unwrap().is_valid(&json!({"a": "x"})));
    assert!(!t.validator().unwrap().is_valid(&json!({"a": 1})));
    assert!(t.validator.get().is_some());
}

#[test]
fn tools_that_share_a_schema_are_decided_alike() {
    let good = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let bad = json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}});
    let tools = [("g1", &good), ("b1", &bad), ("g2", &good), ("b2", &bad)];
    let tools: Vec<Value> = tools.iter().map(|(n, s)| tool(n, (*s).clone())).collect();
    let (c, problems) = Catalogue::from_tools(&tools, &ToolPolicy::default());
    for name in ["g1", "g2"] {
        let v = c.get(name).unwrap().validator().unwrap();
        assert!(!v.is_valid(&json!({"a": 1})));
    }
    let (b1, b2) = (c.get("b1").unwrap(), c.get("b2").unwrap());
    assert!(matches!(b1.check, ArgCheck::Unusable(_)));
    assert_eq!(b1.check, b2.check, "the same reason for both");
    assert_eq!(problems.len(), 2);
}

#[test]
fn the_published_bytes_are_those_of_the_value() {
    let decl = json!({"name": "t", "description": "quote \" é \u{1}", "n": 1.50,
        "inputSchema": {"type": "object", "properties": {"z": {}, "a": {"default": 12345678901234567890u64}}}});
    let (c, _) = Catalogue::from_tools(std::slice::from_ref(&decl), &ToolPolicy::default());
    let t = c.get("t").unwrap();
    assert_eq!(t.published().get(), serde_json::to_string(&decl).unwrap());
    assert_eq!(t.published_value(), decl);
}

#[test]
fn many_parameters_are_found_by_name() {
    let props: Map<String, Value> = ["k", "b", "z", "a", "m", "c", "y", "d", "x", "e"]
        .iter()
        .map(|p| (p.to_string(), json!({"type": "string", "default": "v"})))
        .collect();
    let (c, _) = Catalogue::from_tools(
        &[tool("t", json!({"type": "object", "properties": props}))],
        &ToolPolicy::default(),
    );
    let t = c.get("t").unwrap();
    for p in ["k", "b", "z", "a", "m", "c", "y", "d", "x", "e"] {
        assert!(t.declares(p), "{p}");
        assert!(t.defaulted(p));
        assert_eq!(t.expected(p).as_deref(), Some("string"));
    }
    for p in ["", "f", "zz", "A", "reason"] {
        assert!(!t.declares(p), "{p}");
        assert!(!t.defaulted(p));
        assert_eq!(t.expected(p), None);
    }
}

#[test]
fn edge_case_schemas() {
    let tools = [
        json!({"name": "none"}),
        tool("null", Value::Null),
        tool(
            "open",
            json!({"type":"object","properties":{"a":{}},"additionalProperties":true}),
        ),
        tool("bare", json!({"type":"object"})),
        tool(
            "bad",
            json!({"type":"object","properties":{"a":{"type":"no-such-type"}}}),
        ),
        tool("weird", json!({"type":"object","properties":[1]})),
        tool("num", json!(5)),
    ];
    let (c, problems) = Catalogue::from_tools(&tools, &ToolPolicy::default());
    assert!(matches!(
        c.get("none").unwrap().check,
        ArgCheck::Unusable(_)
    ));
    assert!(matches!(
        c.get("null").unwrap().check,
        ArgCheck::Unusable(_)
    ));
    assert_eq!(c.get("open").unwrap().check, ArgCheck::Open);
    assert_eq!(c.get("bare").unwrap().check, ArgCheck::Declared);
    assert!(c.get("bare").unwrap().params.is_empty());
    assert!(matches!(c.get("bad").unwrap().check, ArgCheck::Unusable(_)));
    assert!(!c.get("bad").unwrap().has_validator());
    assert!(matches!(
        c.get("weird").unwrap().check,
        ArgCheck::Unusable(_)
    ));
    assert!(matches!(c.get("num").unwrap().check, ArgCheck::Unusable(_)));
    let skipped: Vec<_> = problems.iter().map(|p| p.tool.as_str()).collect();
    assert_eq!(skipped, ["none", "null", "bad", "weird", "num"]);
    assert!(problems.iter().all(|p| !p.dropped));
}

#[test]
fn close_schema_overrides_open() {
    let policy = ToolPolicy {
        close_schema: true,
        ..Default::default()
    };
    let (c, _) = Catalogue::from_tools(
        &[tool(
            "open",
            json!({"type":"object","properties":{"a":{}},"additionalProperties":true}),
        )],
        &policy,
    );
    let t = c.get("open").unwrap();
    assert_eq!(t.check, ArgCheck::Declared);
    assert_eq!(
        t.published_value()["inputSchema"]["additionalProperties"],
        json!(false)
    );
}

#[test]
fn honours_draft_07() {
    // In draft-07, `items` as an array is tuple validation; 2020-12 would reject the schema form.
    let (c, problems) = Catalogue::from_tools(
        &[tool(
            "t",
            json!({"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
                   "properties":{"pair":{"type":"array","items":[{"type":"string"},{"type":"integer"}]}}}),
        )],
        &ToolPolicy::default(),
    );
    assert!(problems.is_empty(), "{problems:?}");
    let v = c.get("t").unwrap().validator().unwrap();
    assert!(v.is_valid(&json!({"pair": ["a", 1]})));
    assert!(!v.is_valid(&json!({"pair": [1, "a"]})));
}

#[test]
fn unnamed_and_duplicate_tools_are_dropped() {
    let (c, problems) = Catalogue::from_tools(
        &[
            json!({"inputSchema": {}}),
            tool("a", json!({})),
            tool("a", json!({})),
        ],
        &ToolPolicy::default(),
    );
    assert_eq!(c.len(), 1);
    assert_eq!(problems.len(), 2);
    assert!(problems.iter().all(|p| p.dropped));
}

#[test]
fn a_shared_listing_is_held_once_and_built_alike() {
    let decls = [
        tool(
            "a",
            json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        ),
        json!({"inputSchema": {}}),
    ];
    let shared: Vec<Arc<RawValue>> = decls.iter().map(|d| Arc::from(raw(d))).collect();
    let policy = ToolPolicy::default();
    let mut b = Catalogue::builder(&policy);
    b.add_upstream_shared("up", true, &shared);
    let (c, problems) = b.build();
    let entry = c.get("up.a").expect("listed");
    assert!(Arc::ptr_eq(&entry.declaration, &shared[0]), "not copied");
    assert_eq!(problems.len(), 1, "the unnamed one is dropped as before");
    let mut b = Catalogue::builder(&policy);
    b.add_upstream("up", true, &decls);
    let (copied, _) = b.build();
    let other = copied.get("up.a").expect("listed");
    assert_eq!(entry.published().get(), other.published().get());
    assert_eq!(entry.declaration.get(), other.declaration.get());
    assert_eq!(entry.params, other.params);
}

#[test]
fn published_declaration() {
    let mut pins = Map::new();
    pins.insert("is_public".into(), json!(false));
    let policy = ToolPolicy {
        reasons: true,
        pins,
        unknown: UnknownMode::Reject,
        ..Default::default()
    };
    let mut b = Catalogue::builder(&policy);
    b.add_upstream(
        "notes",
        true,
        &[json!({"name":"create_note","x-extra":1,"inputSchema":{"type":"object",
            "properties":{"title":{"type":"string"},"is_public":{"type":"boolean"},"text":{"type":"string"}},
            "required":["title","is_public"]}})],
    );
    let (c, _) = b.build();
    let t = c.get("notes.create_note").unwrap();
    assert_eq!(t.upstream_name, "create_note");
    assert_eq!(*t.visible_params(), ["title", "text"]);
    assert_eq!(
        t.published().get(),
        r#"{"name":"notes.create_note","x-extra":1,"inputSchema":{"type":"object","properties":{"title":{"type":"string"},"text":{"type":"string"},"reason":{"type":"string","description":"Why you are calling this tool, in one sentence. Recorded for audit; not passed to the tool."}},"required":["title"]}}"#
    );
}

#[test]
fn seen_names_are_valid_and_bounded() {
    assert_eq!(seen_name("fs", "read_file", true), "fs.read_file");
    assert_eq!(seen_name("fs", "read file!", false), "read_file_");
    let long = "x".repeat(100);
    let a = seen_name("up", &long, true);
    let b = seen_name("up", &format!("{long}y"), true);
    assert_eq!(a.len(), 64);
    assert_ne!(a, b);
    assert_eq!(seen_name("up", "", false), "_");
}

#[test]
fn deeply_nested_schemas_are_refused_not_a_crash() {
    // Built by moving values (json! would serialize its arguments, recursively).
    let object = |pairs: Vec<(&str, Value)>| {
        Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    };
    let nested = |levels: usize| {
        let mut s = json!({"type": "string"});
        for _ in 0..levels {
            let props = object(vec![("a", s)]);
            s = object(vec![("type", json!("object")), ("properties", props)]);
        }
        s
    };
    let tool =
        |name: &str, schema: Value| object(vec![("name", json!(name)), ("inputSchema", schema)]);
    // 40 schema levels nest 80 JSON levels: kept, but too deep to compile.
    let (c, problems) = Catalogue::from_tools(&[tool("deep", nested(40))], &ToolPolicy::default());
    assert!(matches!(
        c.get("deep").unwrap().check,
        ArgCheck::Unusable(_)
    ));
    assert_eq!(problems.len(), 1);
    // 10,000 levels: dropped before anything copies or recurses over it.
    let decl = tool("deeper", nested(10_000));
    let (c, problems) = Catalogue::from_tools(std::slice::from_ref(&decl), &ToolPolicy::default());
    assert!(c.get("deeper").is_none());
    assert!(problems[0].dropped);
    // Dropping a 10,000-level value recurses in serde_json itself; keep it off this thread's stack.
    std::mem::forget(decl);
}
