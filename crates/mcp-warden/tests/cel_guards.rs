//! `when_cel` and `mode = "shadow"` on `[[quota]]`, `[[guard]]` and `[[flow]]`
//! (X8, X9) through the real binary and the demo server: a quota counts and a
//! guard applies only where its expression holds, one that fails refuses the
//! call closed, and shadow entries audit `would_*` while every call runs.

mod common;

use common::*;
use serde_json::{json, Value};

const NOTES_UPSTREAM: &str = r#"
[[upstream]]
name = "notes"
command = ["{notes}"]
labels = { "create_note" = ["private_data"], "publish_note" = ["external_sink"] }
"#;

#[test]
fn a_quota_counts_and_a_guard_applies_only_where_when_cel_holds() {
    let toml = format!(
        r#"
[gateway]
stdio_caller = "local"

[[quota]]
callers = ["*"]
tools = ["notes.publish_note"]
rate = "1/hour"
when_cel = "args.id > 1"

[[guard]]
name = "mail"
on = ["arguments"]
detect = ["pii.email"]
action = "block"
tools = ["notes.create_note", "notes.list_notes"]
when_cel = "args.title != 'ok'"
{NOTES_UPSTREAM}"#
    );
    let mut w = Warden::start_capturing_stderr("cel-limits", &toml, "warn");
    // The guard's expression does not hold: the address goes through.
    assert_eq!(
        w.call_text(
            "notes.create_note",
            json!({"title": "ok", "text": "a@b.co"})
        ),
        "Created note 1 'ok' (private)."
    );
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "x", "text": "a@b.co"})),
        "Error: Tool 'notes.create_note' was not called: guard 'mail' found pii.email in its arguments. Do not send it in another form; ask the user how to proceed."
    );
    // No title to read: the guard's expression fails, and so does the call.
    assert_eq!(
        w.call_text("notes.list_notes", json!({})),
        "Error: Policy could not decide on this call, so it is refused."
    );
    // Note 1 is not counted (id > 1 does not hold); note 2 is, once.
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "ok", "text": "plain"})),
        "Created note 2 'ok' (private)."
    );
    for _ in 0..3 {
        assert_eq!(
            w.call_text("notes.publish_note", json!({"id": 1})),
            "Note 1 is now public."
        );
    }
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 2})),
        "Note 2 is now public."
    );
    let refused = w.call_text("notes.publish_note", json!({"id": 2}));
    assert!(
        refused.starts_with("Error: Rate limit for tool 'notes.publish_note' reached (1 call per hour for caller 'local'). Retry in "),
        "{refused}"
    );
    w.close_stdin();
    let log = w.stderr_after_exit();
    assert!(
        log.contains(
            "guard[0].when_cel: it stopped: a key it reads is absent (guard it with has())"
        ),
        "{log}"
    );
}

#[test]
fn shadow_quotas_flows_and_guards_audit_what_they_would_do_while_the_calls_run() {
    let dir = scratch("shadow-limits");
    let port = free_port();
    let toml = format!(
        r#"
[gateway]
stdio_caller = "local"
[store]
url = "sqlite://{db}"
[admin]
listen = "127.0.0.1:{port}"

[[quota]]
callers = ["*"]
tools = ["notes.publish_note"]
rate = "1/hour"
mode = "shadow"

[[flow]]
touched = ["private_data"]
calling = "external_sink"
effect = "deny"
mode = "shadow"

[[guard]]
name = "mail"
on = ["arguments"]
detect = ["pii.email"]
action = "redact"
mode = "shadow"
{NOTES_UPSTREAM}"#,
        db = dir.join("warden.db").display()
    );
    let path = write_config(&dir, &toml);
    let mut w = Warden::start("shadow-limits", &toml);
    // Not redacted: the guard is in shadow mode.
    assert_eq!(
        w.call_text(
            "notes.create_note",
            json!({"title": "a", "text": "mail a@b.co"})
        ),
        "Created note 1 'a' (private)."
    );
    // Neither the flow rule nor the quota stops these.
    for _ in 0..2 {
        assert_eq!(
            w.call_text("notes.publish_note", json!({"id": 1})),
            "Note 1 is now public."
        );
    }
    let metrics = metrics_text(port);
    assert!(
        metrics.contains("warden_shadow_total{would=\"would_deny\"} 3\nwarden_shadow_total{would=\"would_redact\"} 1\n"),
        "{metrics}"
    );
    assert!(w.close().success());
    let (code, out, err) = cli(&["audit", "--config", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let records: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    // The arguments went upstream and into the trail as they were sent.
    assert_eq!(records[0]["arguments"]["text"], "mail a@b.co");
    let shadows: Vec<(String, Value, Value)> = records
        .iter()
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
            (
                "notes.create_note".into(),
                json!("allowed"),
                json!("would_redact by guard[0]")
            ),
            (
                "notes.publish_note".into(),
                json!("allowed"),
                json!("would_deny by flow[0]")
            ),
            (
                "notes.publish_note".into(),
                json!("allowed"),
                json!("would_deny by flow[0]; would_deny by quota[0]")
            ),
        ]
    );
}

#[test]
fn check_names_the_entry_and_the_position_of_a_bad_expression() {
    let dir = scratch("cel-limits-check");
    for (table, expected) in [
        (
            "[[quota]]\ncallers = [\"*\"]\ntools = [\"t\"]\nrate = \"1/hour\"\nwhen_cel = \"args.n >\"\n",
            "quota[0].when_cel: syntax error at line 1, column 9: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "[[guard]]\nname = \"g\"\non = [\"results\"]\ndetect = [\"pii\"]\naction = \"report\"\nwhen_cel = \"calller.name == 'x'\"\n",
            "guard[0].when_cel: unknown variable 'calller'; did you mean 'caller'? the variables are caller, tool, args, session, request (at line 1, column 1)",
        ),
        (
            "[[guard]]\nname = \"g\"\non = [\"descriptions\"]\ndetect = [\"pii\"]\naction = \"report\"\nmode = \"shadow\"\n",
            "guard[0].mode: a guard on descriptions cannot be in shadow mode: a listing has no audit record to note it in",
        ),
        (
            "[[guard]]\nname = \"g\"\non = [\"descriptions\"]\ndetect = [\"pii\"]\naction = \"report\"\nwhen_cel = \"true\"\n",
            "guard[0].when_cel: a guard on descriptions cannot have when_cel: a listing has no call to read",
        ),
        (
            "[[quota]]\ncallers = [\"*\"]\ntools = [\"t\"]\nconcurrency = 1\nmode = \"dry\"\n",
            "quota[0].mode: 'dry' is not a mode; use one of: enforce, shadow",
        ),
        (
            "[[flow]]\ntouched = [\"a\"]\ncalling = \"b\"\neffect = \"deny\"\nmode = \"loud\"\n",
            "flow[0].mode: 'loud' is not a mode; use one of: enforce, shadow",
        ),
    ] {
        let path = write_config(&dir, table);
        let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{err}");
        assert_eq!(
            err.lines().next().unwrap(),
            format!("error: {}: {expected}", path.display())
        );
    }
}

#[test]
fn a_reload_with_a_bad_quota_expression_leaves_the_quota_in_force() {
    let port = free_port();
    let toml = format!(
        r#"
[gateway]
stdio_caller = "local"
[admin]
listen = "127.0.0.1:{port}"

[[quota]]
callers = ["*"]
tools = ["notes.publish_note"]
rate = "1/hour"
when_cel = "args.id > 1"
{NOTES_UPSTREAM}"#
    );
    let mut w = Warden::start_capturing_stderr("cel-quota-reload", &toml, "info");
    let bad = toml.replace("args.id > 1", "args.id > 'one' &&");
    let path = write_config(&w.dir, &bad);
    w.hangup();
    wait_for_reloads(port, "invalid", 1);
    // The old quota still counts only notes past the first.
    w.call_text("notes.create_note", json!({"title": "a", "text": "x"}));
    w.call_text("notes.create_note", json!({"title": "b", "text": "y"}));
    for _ in 0..2 {
        assert_eq!(
            w.call_text("notes.publish_note", json!({"id": 1})),
            "Note 1 is now public."
        );
    }
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 2})),
        "Note 2 is now public."
    );
    assert!(w
        .call_text("notes.publish_note", json!({"id": 2}))
        .starts_with("Error: Rate limit for tool 'notes.publish_note' reached"));
    let log = w.stderr_after_exit();
    let said = format!(
        "config reload refused; the configuration in force stays: {}: quota[0].when_cel: syntax error at line 1, column 19: mismatched input '<EOF>' expecting {{'[', '{{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}}",
        path.display()
    );
    assert!(log.contains(&said), "{log}");
}

/// X9 with a shared PostgreSQL store: two gateways count a shadow quota in
/// the store together, and only the call past it notes `would_deny`.
#[test]
fn a_shadow_quota_is_counted_in_the_shared_store_across_gateways() {
    let db = PgDb::create("shadowquota");
    let (pa, pb) = (free_port(), free_port());
    let config = |port: u16| {
        format!(
            "[gateway]\nstdio_caller = \"local\"\n[store]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:{port}\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"notes.list_notes\"]\nrate = \"2/hour\"\nmode = \"shadow\"\n{NOTES_UPSTREAM}",
            db.url()
        )
    };
    let mut a = Warden::start("shadow-quota-pg-a", &config(pa));
    let mut b = Warden::start("shadow-quota-pg-b", &config(pb));
    for on_a in [true, false, true] {
        let w = if on_a { &mut a } else { &mut b };
        assert_eq!(w.call_text("notes.list_notes", json!({})), "No notes yet.");
    }
    let count = |port| {
        metrics_text(port)
            .lines()
            .find(|l| l.starts_with("warden_shadow_total{would=\"would_deny\"}"))
            .map(str::to_owned)
    };
    assert_eq!(
        (count(pa), count(pb)),
        (
            Some("warden_shadow_total{would=\"would_deny\"} 1".to_owned()),
            None
        )
    );
}

/// X1 on `[[flow]]`: `session.calls` and `request` are the call's, as for a rule.
#[test]
fn a_flow_expression_reads_the_sessions_calls_and_the_request() {
    let toml = format!(
        r#"
[gateway]
stdio_caller = "local"

[[flow]]
touched = ["private_data"]
calling = "external_sink"
effect = "deny"
reason = "Not after private data."
when_cel = "session.calls >= 3 && request.transport == 'stdio' && request.revision != ''"
{NOTES_UPSTREAM}"#
    );
    let mut w = Warden::start("cel-flow-scope", &toml);
    w.call_text("notes.create_note", json!({"title": "a", "text": "x"}));
    // The session's second call (one before it): the rule does not hold yet.
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 1})),
        "Note 1 is now public."
    );
    w.call_text("notes.list_notes", json!({}));
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 1})),
        "Error: Tool 'notes.publish_note' cannot be called at this point of the session. Not after private data."
    );
}
