//! The provider stack's contract (seed 000 for the audit layer), point by point.

use serde_json::{json, Value};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use warden_core::hooks::HookFuture;
use warden_core::provider::{
    LocalTools, PolicyLayer, ProviderError, StageLayer, ToolCall, ToolProvider, ToolResult,
};
use warden_core::{Caller, Effect, Rule, Rules, UnknownKeyWarning, UnknownMode};

/// Drives a future whose every await is ready (the fake providers never wait).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A registry: fixed declarations, records every batch it executes.
#[derive(Default)]
struct Registry {
    batches: Mutex<Vec<Vec<ToolCall>>>,
    fail_listing: AtomicBool,
    fail_calls: AtomicBool,
    /// Set while a call is inside this provider; a layer holding a lock across it would be caught by `locked`.
    listings: AtomicUsize,
}

fn declarations() -> Vec<Value> {
    vec![
        json!({"name": "fs_read", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}}, "required": ["path"]}}),
        json!({"name": "task", "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}}}),
        json!({"name": "noargs", "inputSchema": {"type": "object"}}),
        json!({"name": "publish", "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}, "is_public": {"type": "boolean"}}}}),
    ]
}

impl ToolProvider for Registry {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        let fail = self.fail_listing.load(Ordering::SeqCst);
        Box::pin(async move {
            if fail {
                Err(ProviderError("registry offline".into()))
            } else {
                Ok(declarations())
            }
        })
    }

    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        self.batches.lock().unwrap().push(calls.clone());
        let fail = self.fail_calls.load(Ordering::SeqCst);
        Box::pin(async move {
            if fail {
                return Err(ProviderError("inner exploded".into()));
            }
            Ok(calls
                .into_iter()
                .map(|c| ToolResult { id: c.id.clone(), result: json!({"content": [{"type": "text", "text": format!("ran {} with {}", c.name, c.arguments)}]}) })
                .collect())
        })
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

type Warnings = Arc<Mutex<Vec<UnknownKeyWarning>>>;

fn audit(mode: UnknownMode) -> (Arc<Registry>, StageLayer<Arc<Registry>>, Warnings) {
    let registry = Arc::new(Registry::default());
    let warnings: Warnings = Arc::default();
    let sink = warnings.clone();
    let layer = StageLayer::unknown_keys(
        registry.clone(),
        mode,
        Arc::new(move |w: &UnknownKeyWarning| sink.lock().unwrap().push(w.clone())),
    );
    (registry, layer, warnings)
}

#[test]
fn only_tools_from_the_latest_listing_with_properties_are_audited() {
    let (_, layer, warnings) = audit(UnknownMode::Warn);
    // Before any listing nothing is audited.
    block_on(layer.execute_tool_calls(vec![call("1", "fs_read", json!({"path": "a", "x": 1}))]))
        .unwrap();
    assert!(warnings.lock().unwrap().is_empty());
    block_on(layer.tools_for_llm()).unwrap();
    assert_eq!(layer.audited_tools(), ["fs_read", "task", "publish"]);
    // A tool without properties and a tool never listed are not audited.
    block_on(layer.execute_tool_calls(vec![
        call("2", "noargs", json!({"x": 1})),
        call("3", "ghost", json!({"x": 1})),
    ]))
    .unwrap();
    assert!(warnings.lock().unwrap().is_empty());
}

#[test]
fn the_truncated_generation_is_reported_and_forwarded_untouched() {
    let (registry, layer, warnings) = audit(UnknownMode::Warn);
    block_on(layer.tools_for_llm()).unwrap();
    let mangled = call(
        "call_1",
        "fs_read",
        json!("{\"path\":\"src/app.rs\",\"ffset\":12,\"the rest\":\"…\"}"),
    );
    let results = block_on(layer.execute_tool_calls(vec![mangled.clone()])).unwrap();
    assert_eq!(
        registry.batches.lock().unwrap()[0],
        vec![mangled],
        "the very call object is forwarded"
    );
    assert_eq!(results.len(), 1);
    let w = warnings.lock().unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].tool, "fs_read");
    assert_eq!(w[0].unknown_keys, ["ffset", "the rest"]);
    assert_eq!(w[0].declared_keys, ["path", "offset"]);
}

#[test]
fn unreadable_arguments_are_not_this_layers_to_report() {
    let (registry, layer, warnings) = audit(UnknownMode::Warn);
    block_on(layer.tools_for_llm()).unwrap();
    let odd = vec![
        call("1", "fs_read", json!("{not json")),
        call("2", "fs_read", json!("[1, 2]")),
        call("3", "fs_read", json!("")),
        call("4", "fs_read", Value::Null),
        call("5", "fs_read", json!(42)),
    ];
    block_on(layer.execute_tool_calls(odd.clone())).unwrap();
    assert!(warnings.lock().unwrap().is_empty());
    assert_eq!(registry.batches.lock().unwrap()[0], odd);
}

#[test]
fn reason_is_tolerated_and_pairs_are_said_once_even_across_refreshes() {
    let (_, layer, warnings) = audit(UnknownMode::Warn);
    block_on(layer.tools_for_llm()).unwrap();
    block_on(layer.execute_tool_calls(vec![call(
        "1",
        "fs_read",
        json!({"path": "a", "reason": "why", "recursive": true}),
    )]))
    .unwrap();
    block_on(layer.tools_for_llm()).unwrap();
    block_on(layer.execute_tool_calls(vec![
        call(
            "2",
            "fs_read",
            json!({"path": "a", "recursive": true, "depth": 2}),
        ),
        call("3", "task", json!({"prompt": "p", "recursive": true})),
    ]))
    .unwrap();
    let w = warnings.lock().unwrap();
    let said: Vec<(String, Vec<String>)> = w
        .iter()
        .map(|w| (w.tool.clone(), w.unknown_keys.clone()))
        .collect();
    assert_eq!(
        said,
        [
            ("fs_read".to_string(), vec!["recursive".to_string()]),
            ("fs_read".to_string(), vec!["depth".to_string()]),
            ("task".to_string(), vec!["recursive".to_string()]),
        ]
    );
}

#[test]
fn batches_are_forwarded_whole_and_in_order_empty_ones_too() {
    let (registry, layer, _) = audit(UnknownMode::Warn);
    block_on(layer.tools_for_llm()).unwrap();
    let batch = vec![
        call("b", "task", json!({"prompt": "1"})),
        call("a", "fs_read", json!({"path": "x"})),
    ];
    let results = block_on(layer.execute_tool_calls(batch.clone())).unwrap();
    assert_eq!(
        results.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["b", "a"]
    );
    assert!(block_on(layer.execute_tool_calls(vec![]))
        .unwrap()
        .is_empty());
    let batches = registry.batches.lock().unwrap();
    assert_eq!(
        batches.len(),
        2,
        "the empty batch reached the inner provider"
    );
    assert_eq!(batches[0], batch);
    assert!(batches[1].is_empty());
}

#[test]
fn inner_errors_and_listing_failures_pass_through_and_keep_the_cache() {
    let (registry, layer, warnings) = audit(UnknownMode::Warn);
    block_on(layer.tools_for_llm()).unwrap();
    registry.fail_calls.store(true, Ordering::SeqCst);
    let e = block_on(layer.execute_tool_calls(vec![call("1", "task", json!({}))])).unwrap_err();
    assert_eq!(e, ProviderError("inner exploded".into()));
    registry.fail_calls.store(false, Ordering::SeqCst);
    registry.fail_listing.store(true, Ordering::SeqCst);
    assert_eq!(
        block_on(layer.tools_for_llm()).unwrap_err(),
        ProviderError("registry offline".into())
    );
    // The declaration cache from the successful listing is still in use.
    assert_eq!(layer.audited_tools(), ["fs_read", "task", "publish"]);
    block_on(layer.execute_tool_calls(vec![call("2", "task", json!({"prompt": "p", "x": 1}))]))
        .unwrap();
    assert_eq!(warnings.lock().unwrap().len(), 1);
}

#[test]
fn a_failing_warning_callback_is_swallowed() {
    let registry = Arc::new(Registry::default());
    let layer = StageLayer::unknown_keys(
        registry.clone(),
        UnknownMode::Warn,
        Arc::new(|_: &UnknownKeyWarning| panic!("host bookkeeping broke")),
    );
    block_on(layer.tools_for_llm()).unwrap();
    let results =
        block_on(layer.execute_tool_calls(vec![call("1", "task", json!({"prompt": "p", "x": 1}))]))
            .unwrap();
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error());
}

#[test]
fn no_lock_is_held_across_the_callback_or_the_inner_provider() {
    // A callback that re-enters the layer would deadlock if a lock were held around it.
    let registry = Arc::new(Registry::default());
    type Audited = StageLayer<Arc<Registry>>;
    let slot: Arc<Mutex<Option<Arc<Audited>>>> = Arc::default();
    let reentry = slot.clone();
    let reentered = Arc::new(AtomicBool::new(false));
    let flag = reentered.clone();
    let layer = Arc::new(StageLayer::unknown_keys(
        registry,
        UnknownMode::Warn,
        Arc::new(move |_: &UnknownKeyWarning| {
            if let Some(layer) = reentry.lock().unwrap().clone() {
                let _ = block_on(layer.tools_for_llm());
                let _ = layer.audited_tools();
                flag.store(true, Ordering::SeqCst);
            }
        }),
    ));
    *slot.lock().unwrap() = Some(layer.clone());
    block_on(layer.tools_for_llm()).unwrap();
    block_on(layer.execute_tool_calls(vec![call("1", "task", json!({"prompt": "p", "x": 1}))]))
        .unwrap();
    assert!(reentered.load(Ordering::SeqCst));
    slot.lock().unwrap().take();
}

#[test]
fn parallel_batches_report_each_pair_once() {
    let (_, layer, warnings) = audit(UnknownMode::Warn);
    let layer = Arc::new(layer);
    block_on(layer.tools_for_llm()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let layer = layer.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let key = format!("k{}", (i + t) % 6);
                    block_on(layer.execute_tool_calls(vec![call(
                        "c",
                        "task",
                        json!({"prompt": "p", key: 1}),
                    )]))
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut keys: Vec<String> = warnings
        .lock()
        .unwrap()
        .iter()
        .flat_map(|w| w.unknown_keys.clone())
        .collect();
    keys.sort();
    assert_eq!(keys, ["k0", "k1", "k2", "k3", "k4", "k5"]);
}

#[test]
fn reject_and_strip_modes_and_mixed_batches_keep_order() {
    let (registry, layer, _) = audit(UnknownMode::Reject);
    block_on(layer.tools_for_llm()).unwrap();
    let results = block_on(layer.execute_tool_calls(vec![
        call("1", "task", json!({"prompt": "ok"})),
        call("2", "fs_read", json!({"path": "a", "ofset": 1})),
        call("3", "task", json!({"prompt": "also ok"})),
    ]))
    .unwrap();
    assert_eq!(
        results.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    assert_eq!(
        results[1].text(),
        "Error: Unknown parameter 'ofset' for tool 'fs_read'.\nDid you mean: offset?\nAllowed parameters: path, offset."
    );
    assert!(results[1].is_error() && !results[0].is_error() && !results[2].is_error());
    assert_eq!(
        registry.batches.lock().unwrap()[0].len(),
        2,
        "the rejected call never reached the inner provider"
    );

    let (registry, layer, _) = audit(UnknownMode::Strip);
    block_on(layer.tools_for_llm()).unwrap();
    block_on(layer.execute_tool_calls(vec![call(
        "1",
        "fs_read",
        json!("{\"path\":\"a\",\"junk\":1}"),
    )]))
    .unwrap();
    assert_eq!(
        registry.batches.lock().unwrap()[0][0].arguments,
        json!({"path": "a"})
    );
}

#[test]
fn reasons_schema_and_pins_stack() {
    let registry = Arc::new(Registry::default());
    let reasons_seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let record = reasons_seen.clone();
    let mut pins = serde_json::Map::new();
    pins.insert("is_public".into(), json!(false));
    let stack = StageLayer::reasons(
        StageLayer::schema(StageLayer::pins(registry.clone(), pins)),
        Some(Arc::new(move |tool: &str, reason: &str| {
            record.lock().unwrap().push((tool.into(), reason.into()))
        })),
    );
    let tools = block_on(stack.tools_for_llm()).unwrap();
    let publish = tools.iter().find(|t| t["name"] == "publish").unwrap();
    assert!(
        publish["inputSchema"]["properties"]
            .get("is_public")
            .is_none(),
        "pinned arguments are hidden"
    );
    assert!(
        publish["inputSchema"]["properties"].get("reason").is_some(),
        "reason is offered"
    );
    let results = block_on(stack.execute_tool_calls(vec![
        call("1", "publish", json!({"id": 3, "reason": "user asked"})),
        call("2", "publish", json!({"id": "three"})),
        call("3", "publish", json!({"id": 3, "is_public": true})),
        call("4", "fs_read", json!({"path": "a"})),
    ]))
    .unwrap();
    assert_eq!(
        results[1].text(),
        "Error: Invalid value for argument 'id': expected integer."
    );
    assert_eq!(
        results[2].text(),
        "Error: Argument 'is_public' of tool 'publish' is fixed by configuration and cannot be set by the caller."
    );
    let forwarded = registry.batches.lock().unwrap()[0].clone();
    assert_eq!(forwarded.len(), 2);
    assert_eq!(forwarded[0].arguments, json!({"id": 3, "is_public": false}));
    assert_eq!(
        forwarded[1].arguments,
        json!({"path": "a"}),
        "tools that do not declare a pin are not given it"
    );
    assert_eq!(
        *reasons_seen.lock().unwrap(),
        [("publish".to_string(), "user asked".to_string())]
    );
}

#[test]
fn policy_hides_denies_and_asks() {
    let registry = Arc::new(Registry::default());
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let rules = Rules {
        rules: vec![
            Rule::new(&s(&["*"]), &s(&["publish"]), Effect::Ask).unwrap(),
            Rule::new(&s(&["*"]), &s(&["fs_*", "task"]), Effect::Allow).unwrap(),
        ],
        default: Effect::Deny,
    };
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = asked.clone();
    let layer = PolicyLayer::new(
        registry.clone(),
        rules,
        Caller::new("host"),
        Arc::new(move |_: &Caller, tool: &str, args: &Value| {
            record.lock().unwrap().push(format!("{tool} {args}"));
            let yes = args["id"] == json!(1);
            Box::pin(async move { yes })
        }),
    );
    let names: Vec<String> = block_on(layer.tools_for_llm())
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["fs_read", "task", "publish"]);
    let results = block_on(layer.execute_tool_calls(vec![
        call("1", "noargs", json!({})),
        call("2", "publish", json!({"id": 1})),
        call("3", "publish", json!("{\"id\": 2}")),
        call("4", "nowhere", json!({})),
    ]))
    .unwrap();
    assert_eq!(results[0].text(), "Error: Unknown tool 'noargs'.");
    assert_eq!(results[3].text(), "Error: Unknown tool 'nowhere'.");
    assert!(!results[1].is_error());
    assert_eq!(
        results[2].text(),
        "Error: This call needs approval, and approval was refused."
    );
    assert_eq!(
        *asked.lock().unwrap(),
        ["publish {\"id\":1}", "publish {\"id\":2}"]
    );
    assert_eq!(registry.batches.lock().unwrap()[0].len(), 1);
}

#[test]
fn a_hosts_own_tools_stack_under_the_same_layers() {
    let local = LocalTools::default().with(
        json!({"name": "delegate", "inputSchema": {"type": "object", "properties": {"brief": {"type": "string"}}, "required": ["brief"]}}),
        Arc::new(|args| json!({"content": [{"type": "text", "text": format!("delegated: {}", args["brief"])}]})),
    );
    let stack = StageLayer::schema(StageLayer::unknown_keys(
        local,
        UnknownMode::Reject,
        warden_core::provider::no_warnings(),
    ));
    assert_eq!(block_on(stack.tools_for_llm()).unwrap().len(), 1);
    let results = block_on(stack.execute_tool_calls(vec![
        call("1", "delegate", json!({"brief": "fix the build"})),
        call(
            "2",
            "delegate",
            json!({"brief": "Investigate the", "nvestigate": "…"}),
        ),
        call("3", "delegate", json!({})),
        call("4", "nothing", json!({})),
    ]))
    .unwrap();
    assert_eq!(results[0].text(), "delegated: \"fix the build\"");
    assert_eq!(
        results[1].text(),
        "Error: Unknown parameter 'nvestigate' for tool 'delegate'.\nAllowed parameters: brief."
    );
    assert_eq!(
        results[2].text(),
        "Error: Missing required argument 'brief'."
    );
    assert_eq!(results[3].text(), "Error: Unknown tool 'nothing'.");
}
