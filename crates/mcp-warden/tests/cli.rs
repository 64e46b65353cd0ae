//! The command line: `check`, `tools`, `call`, `--help`.

mod common;

use common::*;

#[test]
fn check_accepts_a_good_config_and_prints_warnings() {
    let dir = scratch("check-ok");
    let path = write_config(&dir, &format!("[defaults]\nvalidate = false\n{DEMO}"));
    let (code, out, _) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!(
            "warning: defaults.validate = false: arguments reach upstreams without schema validation (A5)\n{}: ok (1 upstream(s), 1 warning(s))\n",
            path.display()
        )
    );
}

#[test]
fn check_names_file_key_and_fix() {
    let dir = scratch("check-bad");
    let path = write_config(
        &dir,
        "[[upstream]]\nname = \"n\"\ncommand = [\"x\"]\nunknown_argument = \"reject\"\n",
    );
    let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "error: {p}: upstream[0].unknown_argument: unknown key in [upstream]. Did you mean 'unknown_arguments'? Known keys: name, command, url, bearer_token_env, tls_ca_file, env, secret_env, prefix, unknown_arguments, validate, reasons, timeout_ms, rerun_abandoned, restart_after_timeouts, ping_interval_ms, protocol, pins, tools, labels, credential, credential_env, max_caller_processes, caller_process_idle_ms.\n  --> {p}:4:1\n",
            p = path.display()
        )
    );
    let (code, _, err) = cli(&["check", "--config", "/nonexistent/warden.toml"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: /nonexistent/warden.toml: cannot read the file"),
        "{err}"
    );
}

#[test]
fn check_reports_every_problem_with_its_line() {
    // The issue's case: a misspelt key and a misspelt effect in one file. Both
    // are reported, in file order, each followed by where it is.
    let dir = scratch("check-all");
    let path = write_config(
        &dir,
        "[[upstream]]\nname = \"n\"\ncomand = [\"x\"]\n\n[[rule]]\ncallers = [\"*\"]\ntools = [\"n.*\"]\neffect = \"alow\"\n\n[store]\nurl = \"mysql://db\"\n",
    );
    let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: {p}: upstream[0].comand: unknown key in [upstream]. Did you mean 'command'? Known keys: name, command, url, bearer_token_env, tls_ca_file, env, secret_env, prefix, unknown_arguments, validate, reasons, timeout_ms, rerun_abandoned, restart_after_timeouts, ping_interval_ms, protocol, pins, tools, labels, credential, credential_env, max_caller_processes, caller_process_idle_ms.\n  --> {p}:3:1\n\
             error: {p}: rule[0].effect: 'alow' is not an effect; use one of: allow, deny, ask (did you mean 'allow'?)\n  --> {p}:8:1\n\
             error: {p}: store.url: 'mysql://db' is not a store URL; use sqlite://FILE or postgres://USER@HOST/DB\n  --> {p}:11:1\n",
            p = path.display()
        )
    );
    // A syntax error is reported alone: nothing past it can be read.
    let path = write_config(&dir, "[[upstream]]\nname = \"n\"\ncommand = [\"x\"\n");
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.starts_with(&format!("error: {}: not valid TOML: ", path.display())),
        "{err}"
    );
    assert!(
        err.lines()
            .nth(1)
            .unwrap()
            .starts_with(&format!("  --> {}:", path.display())),
        "{err}"
    );
}

#[test]
fn tools_prints_what_the_caller_sees() {
    let dir = scratch("tools");
    let path = write_config(&dir, DEMO);
    let (code, out, err) = cli(&["tools", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "TOOL                PARAMETERS     DESCRIPTION\n\
         notes.create_note   title*, text*  Create a private note with a title and a text.\n\
         notes.list_notes                   List every note with its id and visibility.\n\
         notes.publish_note  id*            Make a note public.\n\
         (3 tool(s); * = required)\n"
    );
    let (code, json, _) = cli(&["tools", "--config", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let tools: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(tools.as_array().unwrap().len(), 3);
}

#[test]
fn call_runs_one_call_through_the_pipeline() {
    let dir = scratch("call");
    let path = write_config(&dir, DEMO);
    let p = path.to_str().unwrap();
    let (code, out, err) = cli(&[
        "call",
        "--config",
        p,
        "notes.create_note",
        r#"{"title":"a","body":"b"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        result["content"][0]["text"],
        "Created note 1 'a' (private)."
    );
    let (code, out, _) = cli(&[
        "call",
        "--config",
        p,
        "notes.create_note",
        r#"{"title":"a","txt":"b"}"#,
    ]);
    assert_eq!(code, 1);
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        result["content"][0]["text"],
        "Error: Unknown parameter 'txt' for tool 'notes.create_note'.\nDid you mean: text?\nAllowed parameters: title, text."
    );
    let (code, _, err) = cli(&["call", "--config", p, "notes.create_note", "{not json"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: JSON_ARGS is not valid JSON"),
        "{err}"
    );
    let (code, _, err) = cli(&["call", "--config", p, "notes.missing"]);
    assert_eq!(code, 1);
    assert!(err.contains("Unknown tool 'notes.missing'."), "{err}");
}

#[test]
fn help_explains_the_commands() {
    let (code, out, _) = cli(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["run", "check", "tools", "call"] {
        assert!(
            out.contains(&format!("  {cmd}")),
            "--help lacks {cmd}: {out}"
        );
    }
}
