//! Live reload through the real binary: SIGHUP and `run --watch` read the config
//! again; an invalid file changes nothing, a valid one takes effect for the
//! next call while calls in flight finish under the old one, and upstreams
//! restart only where their own settings changed.

mod common;

use common::http::{hold, HttpWarden};
use common::{
    alive, cli, free_port, metrics_text, reloads, said, wait_for_reloads, write_config, Warden,
    FIXTURE, PATIENCE,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn admin(port: u16) -> String {
    format!("[admin]\nlisten = \"127.0.0.1:{port}\"\n")
}

/// Lines in a fixture's start file: how often that upstream was started.
fn starts(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Sends `n` echo calls without waiting; returns their ids.
fn pipeline_echoes(w: &mut Warden, tool: &str, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| w.send_request("tools/call", json!({"name": tool, "arguments": {"n": i}})))
        .collect()
}

/// Every echo answered with its own arguments.
fn all_echoed(w: &mut Warden, ids: &[i64]) {
    for id in ids {
        let r = w.response(&json!(id));
        assert!(
            r.pointer("/result/structuredContent/n").is_some(),
            "call {id} failed: {r}"
        );
    }
}

#[test]
fn an_invalid_file_under_load_changes_nothing_and_fails_no_call() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let mut w = Warden::start_capturing_stderr("reload-invalid", &toml, "info");
    let before = w.tool_names();
    let mut ids = pipeline_echoes(&mut w, "fx.echo", 100);
    let path = write_config(
        &w.dir,
        &format!("{toml}\n[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.*\"]\neffect = \"maybe\"\n"),
    );
    w.hangup();
    ids.extend(pipeline_echoes(&mut w, "fx.echo", 100));
    let metrics = wait_for_reloads(port, "invalid", 1);
    assert_eq!(reloads(&metrics, "ok"), 0, "{metrics}");
    ids.extend(pipeline_echoes(&mut w, "fx.echo", 100));
    all_echoed(&mut w, &ids);
    assert_eq!(w.tool_names(), before);
    assert!(
        !w.backlog
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "{:?}",
        w.backlog
    );
    let log = w.stderr_after_exit();
    let said = format!(
        "config reload refused; the configuration in force stays: {}: rule[0].effect: 'maybe' is not an effect; use one of: allow, deny, ask",
        path.display()
    );
    assert!(log.contains(&said), "{log}");
    // The words are those `check` prints for the same file.
    let (code, _, err) = common::cli(&["check", "--config", &path.display().to_string()]);
    assert_eq!(code, 1);
    assert_eq!(
        err.lines().next(),
        Some(
            format!(
                "error: {}: rule[0].effect: 'maybe' is not an effect; use one of: allow, deny, ask",
                path.display()
            )
            .as_str()
        )
    );
    assert_eq!(
        err.lines().nth(1),
        Some(format!("  --> {}:10:1", path.display()).as_str())
    );
}

#[test]
fn a_rule_the_pins_lock_says_can_never_hold_is_refused_as_check_refuses_it() {
    let port = free_port();
    // Undeclared keys are refused before rules are judged: a condition on one
    // can never hold.
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nunknown_arguments = \"reject\"\n{}",
        admin(port)
    );
    let mut w = Warden::start_capturing_stderr("reload-lock-rule", &toml, "info");
    let config = w.dir.join("warden.toml");
    let (code, _, err) = cli(&["pins", "lock", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // The file alone is valid; against the locked schema of fx.echo the
    // condition names an argument the tool does not have.
    let path = write_config(
        &w.dir,
        &format!(
            "{toml}\n[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\nwhen = [{{ arg = \"txet\", equals = \"x\" }}]\n"
        ),
    );
    w.hangup();
    wait_for_reloads(port, "invalid", 1);
    let r = w.call("fx.echo", json!({"text": "x"}));
    assert_eq!(
        r.pointer("/result/structuredContent/text"),
        Some(&json!("x")),
        "the rule in the refused file is not in force: {r}"
    );
    let lock = w.dir.join("warden.pins.json");
    let problem = format!(
        "{}: rule[0]: the condition on 'txet' can never hold for tool 'fx.echo': the tool has no argument 'txet'; did you mean 'text'? (schema from {})",
        path.display(),
        lock.display()
    );
    let log = w.stderr_after_exit();
    let said = format!("config reload refused; the configuration in force stays: {problem}");
    assert!(log.contains(&said), "{log}");
    let (code, _, err) = cli(&["check", "--config", &path.display().to_string()]);
    assert_eq!((code, err), (1, format!("error: {problem}\n")));
    // Nor does a gateway start with it.
    let (code, _, err) = cli(&["run", "--config", &path.display().to_string()]);
    assert_eq!((code, err), (1, format!("error: {problem}\n")));
    // In warn mode the key reaches the rules, so the condition can hold: check
    // passes with a warning about the likely typo, and so would a reload.
    let warn = std::fs::read_to_string(&path).unwrap().replace(
        "unknown_arguments = \"reject\"",
        "unknown_arguments = \"warn\"",
    );
    let path = write_config(&w.dir, &warn);
    let (code, out, err) = cli(&["check", "--config", &path.display().to_string()]);
    assert_eq!(
        (code, out, err),
        (
            0,
            format!(
                "warning: rule[0]: the condition on 'txet' holds for tool 'fx.echo' only on calls that break its schema: the tool has no argument 'txet'; did you mean 'text'? (schema from {})\n{}: ok (1 upstream(s), 1 warning(s))\n",
                lock.display(),
                path.display()
            ),
            String::new()
        )
    );
}

#[test]
fn a_valid_file_that_removes_a_tool_hides_it_from_the_next_listing() {
    let port = free_port();
    let two = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n\
         [[upstream]]\nname = \"gx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let mut w = Warden::start("reload-remove", &two);
    let names = w.tool_names();
    assert!(names.contains(&"gx.echo".to_owned()), "{names:?}");
    let mut ids = pipeline_echoes(&mut w, "fx.echo", 100);
    // gx goes; fx stays; and a rule hides fx.slow from everyone.
    write_config(
        &w.dir,
        &format!(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}\
             [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.slow\"]\neffect = \"deny\"\n",
            admin(port)
        ),
    );
    w.hangup();
    ids.extend(pipeline_echoes(&mut w, "fx.echo", 100));
    w.wait_for("list_changed", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    all_echoed(&mut w, &ids);
    let now = w.tool_names();
    assert!(!now.iter().any(|n| n.starts_with("gx.")), "{now:?}");
    assert!(!now.contains(&"fx.slow".to_owned()), "{now:?}");
    assert!(now.contains(&"fx.echo".to_owned()), "{now:?}");
    let id = w.send_request("tools/call", json!({"name": "gx.echo", "arguments": {}}));
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602,"message":"Unknown tool 'gx.echo'."}}}}"#
        )
    );
    let metrics = metrics_text(port);
    assert_eq!(reloads(&metrics, "ok"), 1, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l == "warden_config_restart_needed 0"),
        "{metrics}"
    );
}

#[test]
fn a_rule_change_applies_to_the_next_call_while_a_slow_call_finishes_under_the_old_rule() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_GATE = \"1\" }}\n{}",
        admin(port)
    );
    let mut w = Warden::start("reload-rule", &toml);
    // The call waits upstream until the test opens its gate: in flight across the reload.
    let gate = w.dir.join("open");
    let gated = json!({"name": "fx.gate", "arguments": {"file": gate.display().to_string()}});
    let held = w.send_request("tools/call", gated.clone());
    write_config(
        &w.dir,
        &format!("{toml}[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.gate\"]\neffect = \"deny\"\n"),
    );
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    let id = w.send_request("tools/call", gated);
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602,"message":"Unknown tool 'fx.gate'."}}}}"#
        )
    );
    std::fs::write(&gate, "").unwrap();
    let (line, _) = w.response_line(&json!(held));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{held},"result":{{"content":[{{"type":"text","text":"the gate opened"}}]}}}}"#
        ),
        "the call begun under the old rule finishes under it"
    );
}

#[test]
fn only_the_upstream_whose_command_changed_restarts() {
    let port = free_port();
    let dir = common::scratch("reload-starts");
    let (a, b, d) = (dir.join("a"), dir.join("b"), dir.join("d"));
    let up = |name: &str, start: &Path, args: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\ncommand = [\"{FIXTURE}\"{args}]\nenv = {{ FIXTURE_START_FILE = \"{}\" }}\n",
            start.display()
        )
    };
    let toml = format!("{}{}{}", up("a", &a, ""), up("b", &b, ""), admin(port));
    let mut w = Warden::start("reload-restart", &toml);
    assert_eq!((starts(&a), starts(&b)), (1, 1));
    // b's command changes, a stays as it was (its tool settings aside), d is new.
    let changed = format!(
        "{}[upstream.tools.echo]\naliases = {{ words = \"text\" }}\n{}{}{}",
        up("a", &a, ""),
        up("b", &b, ", \"--again\""),
        up("d", &d, ""),
        admin(port)
    );
    write_config(&w.dir, &changed);
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    assert_eq!((starts(&a), starts(&b), starts(&d)), (1, 2, 1));
    for tool in ["a.echo", "b.echo", "d.echo"] {
        let r = w.call(tool, json!({"n": 1}));
        assert_eq!(
            r["result"]["structuredContent"],
            json!({"n": 1}),
            "{tool}: {r}"
        );
    }
    // a's new alias applies without a restart.
    let r = w.call("a.echo", json!({"words": "hi"}));
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"text": "hi"}),
        "{r}"
    );
    // The same file again: nothing restarts.
    w.hangup();
    wait_for_reloads(port, "ok", 2);
    assert_eq!((starts(&a), starts(&b), starts(&d)), (1, 2, 1));
}

#[test]
fn watch_picks_up_a_file_edit_and_names_settings_that_need_a_restart() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let mut w = Warden::start_with_args("reload-watch", &toml, "info", &["--watch"]);
    assert!(w.tool_names().contains(&"fx.echo".to_owned()));
    write_config(
        &w.dir,
        &format!(
            "[gateway]\nstdio_caller = \"someone\"\n{toml}[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n"
        ),
    );
    w.wait_for("list_changed", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    let metrics = wait_for_reloads(port, "ok", 1);
    assert!(
        metrics
            .lines()
            .any(|l| l == "warden_config_restart_needed 1"),
        "{metrics}"
    );
    assert!(!w.tool_names().contains(&"fx.echo".to_owned()));
    let log = w.stderr_after_exit();
    assert!(
        log.contains("config reload: [gateway] changed and needs a restart; the values the gateway started with stay in force"),
        "{log}"
    );
}

#[test]
fn the_metrics_name_the_configuration_in_force() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let w = Warden::start("reload-metrics", &toml);
    let info = |text: &str| -> String {
        text.lines()
            .find(|l| l.starts_with("warden_config_info{sha256=\""))
            .unwrap_or_else(|| panic!("no warden_config_info in {text}"))
            .to_owned()
    };
    let loaded = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("warden_config_last_reload_success_timestamp_seconds "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no timestamp in {text}"))
    };
    let text = metrics_text(port);
    let first = info(&text);
    assert_eq!(
        first.len(),
        "warden_config_info{sha256=\"\"} 1".len() + 16,
        "{first}"
    );
    assert!(loaded(&text) > 1_700_000_000, "{text}");
    write_config(&w.dir, &format!("{toml}\n# edited\n"));
    w.hangup();
    let text = wait_for_reloads(port, "ok", 1);
    assert_ne!(info(&text), first, "the hash follows the file");
}

#[test]
fn quota_counts_survive_a_reload_that_leaves_the_quota_as_it_was() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}\
         [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\nrate = \"2/hour\"\n",
        admin(port)
    );
    let mut w = Warden::start("reload-quota", &toml);
    for n in 0..2 {
        let r = w.call("fx.echo", json!({"n": n}));
        assert_eq!(r["result"]["structuredContent"], json!({"n": n}), "{r}");
    }
    // Another rule, the same quota: the two calls made still count.
    write_config(
        &w.dir,
        &format!("{toml}[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.crash\"]\neffect = \"deny\"\n"),
    );
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    let r = w.call("fx.echo", json!({"n": 3}));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    // The wait is the bucket's (about half an hour), counted from the first calls.
    assert!(
        text.starts_with(
            "Error: Rate limit for tool 'fx.echo' reached (2 calls per hour for caller 'local'). Retry in "
        ),
        "{r}"
    );
}

#[test]
fn a_subscription_stream_hears_of_a_reload_that_changes_its_callers_tools() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let mut w = Warden::spawn("reload-listen", &toml);
    let envelope = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "reload-test", "version": "1"}});
    w.send(
        &json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
        "params": {"_meta": envelope, "notifications": {"toolsListChanged": true}}}),
    );
    assert_eq!(
        w.recv(),
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen"},
                "notifications": {"toolsListChanged": true}}})
    );
    write_config(
        &w.dir,
        &format!("{toml}[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n"),
    );
    w.hangup();
    assert_eq!(
        w.recv(),
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen"}}})
    );
}

#[test]
fn over_http_a_caller_added_by_a_reload_can_connect_and_a_session_sees_the_new_rules() {
    let port = free_port();
    let callers = "[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_RELOAD_ALICE\"\n";
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}{callers}",
        admin(port)
    );
    let w = HttpWarden::start(
        "reload-http",
        &toml,
        &[
            ("WARDEN_RELOAD_ALICE", "alice-key"),
            ("WARDEN_RELOAD_BOB", "bob-key"),
        ],
    );
    let alice = [("Authorization", "Bearer alice-key")];
    let bob = [("Authorization", "Bearer bob-key")];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    assert_eq!(w.post(&bob, &init).status, 401);
    let sid = w.session(&alice);
    let list = |who: &[(&str, &str)], sid: &str| -> Vec<String> {
        let mut headers = who.to_vec();
        headers.push(("Mcp-Session-Id", sid));
        let r = w.post(
            &headers,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let msgs = r.messages();
        msgs.iter()
            .find(|m| m["id"] == json!(2))
            .and_then(|m| m["result"]["tools"].as_array())
            .unwrap_or_else(|| panic!("no listing in {msgs:?}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(list(&alice, &sid).contains(&"fx.echo".to_owned()));
    write_config(
        &w.dir,
        &format!(
            "{toml}[[caller]]\nname = \"bob\"\napi_key_env = \"WARDEN_RELOAD_BOB\"\n\
             [[rule]]\ncallers = [\"alice\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n"
        ),
    );
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    assert!(!list(&alice, &sid).contains(&"fx.echo".to_owned()));
    let bob_sid = w.session(&bob);
    assert!(list(&bob, &bob_sid).contains(&"fx.echo".to_owned()));
}

#[test]
fn a_removed_upstream_answers_its_calls_in_flight_before_it_stops() {
    let port = free_port();
    let one = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let two = format!(
        "{one}[[upstream]]\nname = \"gx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_GATE = \"1\" }}\n"
    );
    let mut w = Warden::start("reload-retire", &two);
    // The call waits upstream until the test opens its gate: in flight across the reload.
    let gate = w.dir.join("open");
    let held = w.send_request(
        "tools/call",
        json!({"name": "gx.gate", "arguments": {"file": gate.display().to_string()}}),
    );
    write_config(&w.dir, &one);
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    assert!(!w.tool_names().iter().any(|n| n.starts_with("gx.")));
    std::fs::write(&gate, "").unwrap();
    let r = w.response(&json!(held));
    assert_eq!(
        r["result"]["content"][0]["text"],
        json!("the gate opened"),
        "{r}"
    );
}

#[test]
fn a_removed_upstream_ends_its_callers_own_processes_once_their_calls_are_over() {
    let port = free_port();
    let keep = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}\
         [[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_RELOAD_ALICE\"\n\
         [[caller]]\nname = \"bob\"\napi_key_env = \"WARDEN_RELOAD_BOB\"\n",
        admin(port)
    );
    // Alice has a credential for gx, so a child of her own; Bob uses gx's own.
    let with_gx = format!(
        "{keep}[[upstream]]\nname = \"gx\"\ncommand = [\"{{fixture}}\"]\n\
         env = {{ FIXTURE_SECRET_VAR = \"GX_TOKEN\" }}\ncredential_env = \"GX_TOKEN\"\n\
         [[upstream.credential]]\ncallers = [\"alice\"]\ntoken_env = \"WARDEN_RELOAD_ALICE_SECRET\"\n"
    );
    let w = HttpWarden::start(
        "reload-per-caller",
        &with_gx,
        &[
            ("WARDEN_RELOAD_ALICE", "alice-key"),
            ("WARDEN_RELOAD_BOB", "bob-key"),
            ("WARDEN_RELOAD_ALICE_SECRET", "alice-secret"),
        ],
    );
    let session = |who: &str| {
        let auth = format!("Bearer {who}-key");
        let sid = w.session_with(&[("Authorization", &auth)], json!({"sampling": {}}));
        (auth, sid)
    };
    let secret = |(auth, sid): &(String, String)| {
        let r = w.post(
            &[("Authorization", auth), ("Mcp-Session-Id", sid)],
            &common::http::call(2, "gx.secret", json!({})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        said(&r.messages().pop().expect("an answer")["result"])
    };
    let (alice, bob) = (session("alice"), session("bob"));
    let (env, child) = secret(&alice);
    assert_eq!(env, "GX_TOKEN=alice-secret");
    let (env, own) = secret(&bob);
    assert_eq!(env, "GX_TOKEN=<unset>");
    assert_ne!(child, own);
    // A call waits in Alice's child for her answer: in flight across the reload.
    let (mut stream, asked) = hold(&w, &alice, "gx.sample", 3);
    write_config(&w.dir, &keep);
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    let (auth, sid) = &alice;
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "done"}, "model": "m"}});
    let r = w.post(&[("Authorization", auth), ("Mcp-Session-Id", sid)], &answer);
    assert_eq!(r.status, 202, "{}", r.body);
    let last = loop {
        let (_, data) = stream.next_event().expect("the call's answer");
        if data.contains("\"result\"") {
            break serde_json::from_str::<serde_json::Value>(&data).unwrap();
        }
    };
    assert_eq!(last["result"]["content"][0]["text"], "model said: done");
    // Its call over, the removed upstream stops: its own process and Alice's.
    let deadline = Instant::now() + PATIENCE;
    while alive(child) || alive(own) {
        assert!(
            Instant::now() < deadline,
            "a removed upstream's processes still run (caller's: {}, own: {})",
            alive(child),
            alive(own)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_drift_that_stays_across_an_upstream_restart_is_counted_once() {
    let port = free_port();
    let with_env = |env: &str| {
        format!(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\npins = \"report\"\nenv = {{ {env} }}\n{}",
            admin(port)
        )
    };
    let mut w = Warden::start("reload-drift", &with_env(""));
    let config = w.dir.join("warden.toml");
    let (code, _, err) = cli(&["pins", "lock", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let drifts = || {
        let text = metrics_text(port);
        text.lines()
            .find_map(|l| l.strip_prefix("warden_tool_drift_total "))
            .unwrap_or_else(|| panic!("no drift count in {text}"))
            .to_owned()
    };
    // A changed env restarts fx, and the restarted one lists a tool the lock lacks.
    write_config(&w.dir, &with_env("FIXTURE_GATE = \"1\""));
    w.hangup();
    wait_for_reloads(port, "ok", 1);
    assert!(w.tool_names().contains(&"fx.gate".to_owned()));
    assert_eq!(drifts(), "1");
    // Restarted again, with the same drift: not counted (nor recorded) again.
    write_config(
        &w.dir,
        &with_env("FIXTURE_GATE = \"1\", FIXTURE_OTHER = \"1\""),
    );
    w.hangup();
    wait_for_reloads(port, "ok", 2);
    assert!(w.tool_names().contains(&"fx.gate".to_owned()));
    assert_eq!(drifts(), "1");
}

#[test]
fn watch_takes_up_a_lock_approved_alone_and_keeps_the_last_good_lock_when_one_breaks() {
    let port = free_port();
    // The upstream starts with the fixture's rug pulled: lookup and stamp changed,
    // old_name renamed to new_name, extra added. The lock is written from a copy
    // of the config whose upstream starts as it was reviewed.
    let toml = |rug: &str| {
        format!(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nenv = {{ FIXTURE_RUG_PULL = \"{rug}\" }}\n{}",
            admin(port)
        )
    };
    let mut w = Warden::start_with_args("reload-watch-lock", &toml("pulled"), "info", &["--watch"]);
    let config = w.dir.join("warden.toml").display().to_string();
    let reviewed = w.dir.join("reviewed.toml");
    std::fs::write(&reviewed, toml("1")).unwrap();
    let (code, _, err) = cli(&["pins", "lock", "--config", &reviewed.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    // Files are put in place whole, as `pins` writes them: the watcher never
    // meets half a file.
    let put = |path: &Path, text: &str| {
        let part = path.with_extension("part");
        std::fs::write(&part, text).unwrap();
        std::fs::rename(&part, path).unwrap();
    };
    let lock = w.dir.join("warden.pins.json");
    put(
        &lock,
        &std::fs::read_to_string(w.dir.join("reviewed.pins.json")).unwrap(),
    );
    wait_for_reloads(port, "ok", 1); // the lock appeared beside the config
    let hidden = ["fx.lookup", "fx.stamp", "fx.new_name", "fx.extra"];
    let names = w.tool_names();
    assert!(names.contains(&"fx.echo".to_owned()), "{names:?}");
    assert!(
        hidden.iter().all(|t| !names.contains(&t.to_string())),
        "{names:?}"
    );
    // Approving one tool rewrites only the lock: --watch takes it up, no SIGHUP.
    let (code, _, err) = cli(&["pins", "approve", "--config", &config, "fx.lookup"]);
    assert_eq!(code, 0, "{err}");
    let metrics = wait_for_reloads(port, "ok", 2);
    assert_eq!(
        reloads(&metrics, "invalid"),
        0,
        "no half-written lock was read"
    );
    let names = w.tool_names();
    assert!(names.contains(&"fx.lookup".to_owned()), "{names:?}");
    assert!(
        hidden[1..].iter().all(|t| !names.contains(&t.to_string())),
        "{names:?}"
    );
    assert_eq!(w.call_text("fx.lookup", json!({"word": "x"})), "lookup");
    // A lock broken on disk is refused like an invalid config: the last good one
    // stays, and nothing it hides comes out.
    put(&lock, "{\"upstreams\": 5}");
    wait_for_reloads(port, "invalid", 1);
    assert_eq!(w.tool_names(), names);
    let log = w.stderr_after_exit();
    let refused = format!(
        "config reload refused; the configuration in force stays: {}: the pins lock has no \"upstreams\" object; write it again with `mcp-warden pins lock`",
        lock.display()
    );
    assert!(log.contains(&refused), "{log}");
}
