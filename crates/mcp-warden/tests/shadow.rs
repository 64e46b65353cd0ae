//! Shadow rules (X6) through the real binary: a `mode = "shadow"` rule never
//! stops a call, and each call it would have decided otherwise is audited
//! (`would_deny by rule[0]`) and counted in the metrics.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn a_shadow_rule_audits_would_deny_while_the_calls_run() {
    let dir = scratch("shadow");
    let port = free_port();
    let toml = format!(
        r#"
[gateway]
stdio_caller = "local"
[store]
url = "sqlite://{db}"
[admin]
listen = "127.0.0.1:{port}"

[[rule]]
callers = ["*"]
tools = ["notes.publish_note"]
effect = "deny"
mode = "shadow"
when_cel = "args.id > 1"

[[rule]]
callers = ["*"]
tools = ["notes.list_notes"]
effect = "ask"
mode = "shadow"
{DEMO}"#,
        db = dir.join("warden.db").display()
    );
    let path = write_config(&dir, &toml);
    let mut w = Warden::start("shadow", &toml);
    w.call_text("notes.create_note", json!({"title": "a", "text": "x"}));
    w.call_text("notes.create_note", json!({"title": "b", "text": "y"}));
    // Both run: the shadow rule is not enforced.
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 1})),
        "Note 1 is now public."
    );
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 2})),
        "Note 2 is now public."
    );
    w.call_text("notes.list_notes", json!({}));
    let metrics = metrics_text(port);
    assert!(
        metrics.contains("warden_shadow_total{would=\"would_ask\"} 1\nwarden_shadow_total{would=\"would_deny\"} 1\n"),
        "{metrics}"
    );
    assert!(w.close().success());
    let (code, out, err) = cli(&["audit", "--config", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let shadows: Vec<(String, Value, Value)> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["decision"].clone(),
                r["shadow"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shadows,
        [
            ("notes.create_note".into(), json!("allowed"), Value::Null),
            ("notes.create_note".into(), json!("allowed"), Value::Null),
            ("notes.publish_note".into(), json!("allowed"), Value::Null),
            (
                "notes.publish_note".into(),
                json!("allowed"),
                json!("would_deny by rule[0]")
            ),
            (
                "notes.list_notes".into(),
                json!("allowed"),
                json!("would_ask by rule[1]")
            ),
        ]
    );
}

#[test]
fn check_refuses_a_mode_it_does_not_know() {
    let dir = scratch("shadow-check");
    let path = write_config(
        &dir,
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"t\"]\neffect = \"deny\"\nmode = \"dry\"\n",
    );
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err.lines().next().unwrap(),
        format!(
            "error: {}: rule[0].mode: 'dry' is not a mode; use one of: enforce, shadow",
            path.display()
        )
    );
}
