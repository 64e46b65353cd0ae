//! Access rules on arguments (G6) through the real binary and the demo server:
//! conditions decide calls on the values the tool will get (after aliases and
//! pins), a listing is unaffected, refusals and approval questions name the
//! argument and the constraint, and impossible conditions are reported.

mod common;

use common::*;
use serde_json::{json, Value};

/// `local` may create short notes with no "drop" in the text, and publish notes 1 to 100.
const RULES: &str = r#"
[gateway]
stdio_caller = "local"
[access]
default = "allow"
approval_timeout_ms = 3000

[[rule]]
callers = ["local"]
tools = ["notes.create_note"]
effect = "deny"
when = [{ arg = "text", regex = "(?i)drop" }]

[[rule]]
callers = ["local"]
tools = ["notes.create_note"]
effect = "allow"
when = [{ arg = "title", max_len = 10 }, { arg = "is_public", equals = false }]

[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "deny"

[[rule]]
callers = ["local"]
tools = ["notes.publish_note"]
effect = "allow"
when_any = [{ arg = "id", min = 1, max = 100 }, { arg = "id", one_of = [500, 600] }]

[[rule]]
callers = ["local"]
tools = ["notes.publish_note"]
effect = "ask"
"#;

fn refusal(w: &mut Warden, tool: &str, args: Value) -> String {
    let r = w.call(tool, args);
    assert_eq!(r["result"]["isError"], true, "{r}");
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn conditions_decide_calls_on_the_values_the_tool_gets() {
    let mut w = Warden::start("arg-rules", &format!("{RULES}{DEMO}"));
    // Listing: every tool a call could be allowed to stays listed.
    assert_eq!(
        w.tool_names(),
        [
            "notes.create_note",
            "notes.list_notes",
            "notes.publish_note"
        ]
    );
    // `body` is an alias of `text`: the deny rule sees it under its canonical name.
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.create_note", "arguments": {"title": "t", "body": "please DROP it"}}),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"Error: Argument 'text' of tool 'notes.create_note' must not match the pattern '(?i)drop' for caller 'local'."}}],"isError":true}}}}"#
        )
    );
    // `is_public` is pinned to false: the allow rule's `equals = false` sees the pin.
    assert_eq!(
        w.call_text(
            "notes.create_note",
            json!({"title": "short", "body": "hello"})
        ),
        "Created note 1 'short' (private)."
    );
    assert_eq!(
        refusal(
            &mut w,
            "notes.create_note",
            json!({"title": "a much longer title", "text": "x"})
        ),
        "Error: Argument 'title' of tool 'notes.create_note' must have a length of at most 10 for caller 'local'."
    );
    // when_any: either condition lets the call through.
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 1})),
        "Note 1 is now public."
    );
    let text = w.call_text("notes.publish_note", json!({"id": 500}));
    assert_eq!(text, "No such note.");
    w.close();
}

#[test]
fn an_ask_rule_puts_the_missed_constraint_to_the_human() {
    let mut w = Warden::start("arg-rules-ask", &format!("{RULES}{DEMO}"));
    w.call_text("notes.create_note", json!({"title": "a", "text": "b"}));
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.publish_note", "arguments": {"id": 101}}),
    );
    let ask = w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    assert_eq!(
        ask["params"]["message"],
        "Argument 'id' of tool 'notes.publish_note' must be between 1 and 100 for caller 'local'.\n\
         Allow the call to 'notes.publish_note' with these arguments?\n{\"id\":101}"
    );
    w.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}));
    let r = w.response(&json!(id));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call needs approval, and approval was refused."
    );
    w.close();
}

#[test]
fn conditions_that_can_never_hold_are_warned_about_with_a_hint() {
    let rules = r#"
[gateway]
stdio_caller = "local"
[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "allow"
when = [{ arg = "titel", max_len = 10 }, { arg = "title", min = 1 }]
"#;
    let mut w = Warden::start_capturing_stderr("arg-rules-warn", &format!("{rules}{DEMO}"), "warn");
    assert_eq!(w.tool_names().len(), 3);
    w.close_stdin();
    let log = w.stderr_after_exit();
    assert!(
        log.contains("config: rule[0]: the condition on 'titel' can never hold for tool 'notes.create_note': the tool has no argument 'titel'; did you mean 'title'?"),
        "{log}"
    );
    assert!(
        log.contains("config: rule[0]: the condition on 'title' can never hold for tool 'notes.create_note': it is declared string, and the test needs number or integer"),
        "{log}"
    );
}

#[test]
fn check_names_a_bad_condition_and_how_to_fix_it() {
    let dir = scratch("arg-rules-check");
    for (when, why) in [
        (
            r#"[{ arg = "amount", min = 5, max = 1 }]"#,
            "rule[0].when[0]: min = 5 is above max = 1: no number is between them",
        ),
        (
            r#"[{ arg = "amount" }]"#,
            "rule[0].when[0]: the condition on 'amount' has no test; add one of: equals, one_of, glob, regex, min/max, min_len/max_len, present",
        ),
        (
            r#"[{ arg = "a", present = true }, { arg = "q", regex = "x" , glob = "x" }]"#,
            "rule[0].when[1]: the condition on 'q' has more than one test; write one condition per test",
        ),
        (
            r#"[{ arg = "q", regex = "(" }]"#,
            "rule[0].when[0]: '(' is not a valid regex: unclosed group",
        ),
        (
            r#"[{ arg = "items[x]", present = true }]"#,
            "rule[0].when[0]: 'items[x]' is not an argument path: write [*] or a number between brackets",
        ),
    ] {
        let path = write_config(
            &dir,
            &format!("[[rule]]\ncallers = [\"*\"]\ntools = [\"t\"]\neffect = \"allow\"\nwhen = {when}\n"),
        );
        let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (1, ""));
        // The message, then where the file has the condition.
        assert_eq!(
            err,
            format!(
                "error: {p}: {why}\n  --> {p}:5:{}\n",
                if why.contains("when[1]") { 40 } else { 9 },
                p = path.display()
            )
        );
    }
}

#[test]
fn check_errs_on_conditions_the_locked_schemas_can_never_meet() {
    let dir = scratch("arg-rules-check-lock");
    let rules = r#"
[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "allow"
when = [{ arg = "titel", max_len = 10 }, { arg = "title", min = 1 }]
"#;
    let path = write_config(&dir, &format!("{rules}{DEMO}"));
    let p = path.to_str().unwrap();
    // Without a lock, check cannot know the tools' schemas.
    let (code, out, _) = cli(&["check", "--config", p]);
    assert_eq!(
        (code, out),
        (0, format!("{p}: ok (1 upstream(s), 0 warning(s))\n"))
    );
    assert_eq!(cli(&["pins", "lock", "--config", p]).0, 0);
    let lock = dir.join("warden.pins.json");
    let (code, out, err) = cli(&["check", "--config", p]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: {p}: rule[0]: the condition on 'titel' can never hold for tool 'notes.create_note': the tool has no argument 'titel'; did you mean 'title'? (schema from {l})\n\
             error: {p}: rule[0]: the condition on 'title' can never hold for tool 'notes.create_note': it is declared string, and the test needs number or integer (schema from {l})\n",
            l = lock.display()
        )
    );
    // A lock edited by hand is an error too.
    let text = std::fs::read_to_string(&lock).unwrap();
    std::fs::write(&lock, text.replacen("Create a", "Create one", 1)).unwrap();
    let (code, _, err) = cli(&["check", "--config", p]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("error: {}: tool 'create_note' of 'notes' in the pins lock does not match its digest (edited by hand?); write it again with `mcp-warden pins lock`\n", lock.display())
    );
}

/// `local` may call `fx.nested` for its own filters, with a note of three
/// characters or more and item ids up to 100; never on paths under /etc, an
/// item 13, or with `filters.all`.
const PATHS: &str = r#"
[gateway]
stdio_caller = "local"

[[rule]]
callers = ["local"]
tools = ["fx.nested"]
effect = "deny"
when = [{ arg = "path", glob = "/etc/*" }]

[[rule]]
callers = ["local"]
tools = ["fx.nested"]
effect = "deny"
when = [{ arg = "items[*].id", equals = 13 }]

[[rule]]
callers = ["local"]
tools = ["fx.nested"]
effect = "deny"
when = [{ arg = "filters.all", present = true }]

[[rule]]
callers = ["local"]
tools = ["fx.nested"]
effect = "allow"
when = [{ arg = "filters.owner", equals = "me" }, { arg = "note", min_len = 3 }, { arg = "items[*].id", max = 100 }]

[[rule]]
callers = ["*"]
tools = ["fx.nested"]
effect = "deny"
"#;

#[test]
fn conditions_read_globs_lengths_presence_nested_keys_and_every_array_element() {
    let config = fixture_config("env = { FIXTURE_NESTED = \"1\" }", PATHS);
    let mut w = Warden::start_capturing_stderr("arg-rules-paths", &config, "warn");
    let ok = json!({"path": "/srv/data", "note": "abc", "filters": {"owner": "me"},
                    "items": [{"id": 1}, {"id": 100}]});
    // Every condition of the allow rule holds, for every element: the tool runs.
    let r = w.call("fx.nested", ok.clone());
    assert_eq!(r["result"]["structuredContent"], ok, "{r}");
    let with = |k: &str, v: Value| {
        let mut args = ok.clone();
        args[k] = v;
        args
    };
    let says = |argument: &str, must: &str| {
        format!("Error: Argument '{argument}' of tool 'fx.nested' {must} for caller 'local'.")
    };
    for (args, expected) in [
        // glob: `*` crosses `/`.
        (
            with("path", json!("/etc/ssh/sshd_config")),
            says("path", "must not match '/etc/*'"),
        ),
        // A deny with a wildcard is set off by a single element, named by its index.
        (
            with("items", json!([{"id": 1}, {"id": 13}, {"id": 2}])),
            says("items[1].id", "must not be 13"),
        ),
        // present, on a nested key.
        (
            with("filters", json!({"owner": "me", "all": true})),
            says("filters.all", "must not be given"),
        ),
        // equals on a nested key: the allow rule missed, the catch-all denies.
        (
            with("filters", json!({"owner": "you"})),
            says("filters.owner", "must be 'me'"),
        ),
        (
            with("filters", json!({})),
            says("filters.owner", "must be 'me'"),
        ),
        // min_len on a string's characters.
        (
            with("note", json!("ab")),
            says("note", "must have a length of at least 3"),
        ),
        // An allow with a wildcard needs every element to pass.
        (
            with("items", json!([{"id": 1}, {"id": 101}, {"id": 2}])),
            says("items[1].id", "must be at most 100"),
        ),
        // An empty array reaches nothing: the allow rule's condition cannot hold.
        (
            with("items", json!([])),
            says("items[*].id", "must be at most 100"),
        ),
    ] {
        assert_eq!(
            refusal(&mut w, "fx.nested", args.clone()),
            expected,
            "{args}"
        );
    }
    // Every path is in the tool's schema, nested and through the array: no warning.
    let log = w.stderr_after_exit();
    assert!(!log.contains("can never hold"), "{log}");
}

/// `local` may not call a `nested` tool with `override`; the same tool under
/// an upstream that strips undeclared keys and one that forwards them.
const STRIPPED: &str = r#"
[gateway]
stdio_caller = "local"

[[rule]]
callers = ["local"]
tools = ["*.nested"]
effect = "deny"
when = [{ arg = "override", present = true }]

[[upstream]]
name = "strip"
command = ["{fixture}"]
env = { FIXTURE_NESTED = "1" }
unknown_arguments = "strip"

[[upstream]]
name = "warn"
command = ["{fixture}"]
env = { FIXTURE_NESTED = "1" }
unknown_arguments = "warn"
"#;

/// `unknown_arguments = "strip"` takes undeclared keys out before the rules
/// read the arguments (the pipeline's order: A3 stripping, then G6), so a rule
/// on such a key judges the call the tool would get. Under `warn` the key goes
/// on to the tool, and the same rule fires.
#[test]
fn conditions_judge_the_arguments_after_unknown_keys_were_stripped() {
    let mut w = Warden::start("arg-rules-strip", STRIPPED);
    let args = json!({"note": "abc", "override": true});
    let r = w.call("strip.nested", args.clone());
    assert_eq!(r["result"]["isError"], Value::Null, "{r}");
    assert_eq!(r["result"]["structuredContent"], json!({"note": "abc"}));
    assert_eq!(
        refusal(&mut w, "warn.nested", args),
        "Error: Argument 'override' of tool 'warn.nested' must not be given for caller 'local'."
    );
    w.close();
}

#[test]
fn check_hints_consider_the_aliases_for_rules_pins_and_alias_targets() {
    // A misspelt argument in a rule, a pin or an alias's target is told the
    // nearest declared name or alias; an alias points at the name it is read as.
    let dir = scratch("arg-rules-alias-hints");
    let config = |when: &str| {
        format!(
            "[[upstream]]\nname = \"notes\"\ncommand = [\"{{notes}}\"]\n\n\
             [upstream.tools.create_note]\naliases = {{ body = \"text\", heading = \"titel\" }}\npin = {{ is_publc = false }}\n\n\
             [[rule]]\ncallers = [\"*\"]\ntools = [\"notes.create_note\"]\neffect = \"deny\"\nwhen = [{{ arg = \"{when}\", present = true }}]\n"
        )
    };
    let path = write_config(&dir, &config("bdy"));
    let p = path.to_str().unwrap();
    assert_eq!(cli(&["pins", "lock", "--config", p]).0, 0);
    let l = dir.join("warden.pins.json");
    let l = l.display();
    let (code, out, err) = cli(&["check", "--config", p]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        format!(
            "warning: rule[0]: the condition on 'bdy' holds for tool 'notes.create_note' only on calls that break its schema: the tool has no argument 'bdy'; did you mean 'text'? ('body' is an alias of it) (schema from {l})\n\
             warning: upstream 'notes' tool 'create_note': alias 'heading' names 'titel', which its schema in the pins lock ({l}) does not declare; did you mean 'title'?\n\
             warning: upstream 'notes' tool 'create_note': pin 'is_publc' is not in its schema in the pins lock ({l}); did you mean 'is_public'?\n\
             {p}: ok (1 upstream(s), 3 warning(s))\n"
        )
    );
    // A condition on the alias itself never sees a value: rules read 'text'.
    write_config(&dir, &config("body"));
    let (code, out, err) = cli(&["check", "--config", p]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("error: {p}: rule[0]: the condition on 'body' can never hold for tool 'notes.create_note': 'body' is an alias, and rules read it as 'text' (schema from {l})\n")
    );
}
