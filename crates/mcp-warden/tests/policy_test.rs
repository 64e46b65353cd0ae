//! `mcp-warden policy test CASES.toml` (X7) through the real binary: cases
//! judged by a configuration's access rules, a diff for each that fails, and
//! the exit code for CI.

mod common;

use common::*;

const POLICY: &str = r#"
[[upstream]]
name = "bank"
command = ["{fixture}"]

[[caller]]
name = "alice"
groups = ["finance"]

[[rule]]
callers = ["*"]
tools = ["bank.transfer"]
effect = "deny"
when_cel = "args.amount > 1000 && !('finance' in caller.groups)"

[[rule]]
callers = ["*"]
tools = ["bank.transfer"]
effect = "ask"
when = [{ arg = "amount", min = 10000 }]

[[rule]]
callers = ["*"]
tools = ["bank.*"]
effect = "allow"

[access]
default = "deny"
"#;

const CASES: &str = r#"
[[case]]
name = "small transfers run"
caller = "bob"
tool = "bank.transfer"
arguments = { amount = 50 }
expect = "allow"

[[case]]
name = "big transfers need finance"
caller = "bob"
tool = "bank.transfer"
arguments = { amount = 5000 }
expect = "deny"
message = "Error: Policy does not allow this call to tool 'bank.transfer' for caller 'bob'."

[[case]]
name = "finance asks for huge ones"
caller = "alice"
tool = "bank.transfer"
arguments = { amount = 20000 }
expect = "ask"

[[case]]
caller = "bob"
tool = "mail.send"
expect = "deny"
message = "Unknown tool 'mail.send'."
"#;

fn run(dir: &std::path::Path, cases: &str) -> (i32, String, String) {
    let config = write_config(dir, POLICY);
    let path = dir.join("cases.toml");
    std::fs::write(&path, cases).unwrap();
    cli(&[
        "policy",
        "test",
        path.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ])
}

#[test]
fn passing_cases_pass() {
    let (code, out, err) = run(&scratch("policy-test"), CASES);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out,
        "ok    small transfers run\nok    big transfers need finance\nok    finance asks for huge ones\nok    case[3]\n4 case(s), 0 failed\n"
    );
}

#[test]
fn a_failing_case_prints_a_diff_and_fails() {
    let cases = CASES
        .replace(
            "amount = 50 }\nexpect = \"allow\"",
            "amount = 50 }\nexpect = \"deny\"",
        )
        .replace("for caller 'bob'.\"", "for bob.\"");
    let (code, out, _) = run(&scratch("policy-test-fail"), &cases);
    assert_eq!(code, 1);
    assert_eq!(
        out,
        "FAIL  small transfers run\n  - expected deny\n  + got      allow\n\
         FAIL  big transfers need finance\n  - expected deny: Error: Policy does not allow this call to tool 'bank.transfer' for bob.\n  + got      deny: Error: Policy does not allow this call to tool 'bank.transfer' for caller 'bob'.\n\
         ok    finance asks for huge ones\nok    case[3]\n4 case(s), 2 failed\n"
    );
}

/// X11: with a pins lock beside the config, the cases meet the tool's schema,
/// unknown keys and pins, and expect the very words the gateway answers the
/// same calls with. Without the lock the schema is unknown: a case that only
/// the schema refuses fails, which shows the lock was read. (The lock keeps a
/// schema's keys sorted, not in the upstream's order: a tool of one parameter
/// is the one whose list of allowed parameters reads alike either way.)
#[test]
fn with_a_pins_lock_the_argument_stages_answer_in_the_gateways_words() {
    let config = format!("[gateway]\nstdio_caller = \"local\"\n{DEMO}");
    let mut w = Warden::start("policy-test-lock", &config);
    let path = write_config(&scratch("policy-test-lock"), &config);
    let (code, _, err) = cli(&["pins", "lock", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let calls = [
        (
            "notes.publish_note",
            r#"{ idd = 1 }"#,
            serde_json::json!({"idd": 1}),
        ),
        (
            "notes.create_note",
            r#"{ title = "t", text = "x", is_public = true }"#,
            serde_json::json!({"title": "t", "text": "x", "is_public": true}),
        ),
        (
            "notes.publish_note",
            r#"{ id = "one" }"#,
            serde_json::json!({"id": "one"}),
        ),
    ];
    let mut cases = String::new();
    for (i, (tool, toml_args, args)) in calls.iter().enumerate() {
        let text = w.call_text(tool, args.clone());
        assert!(text.starts_with("Error: "), "{text}");
        cases.push_str(&format!(
            "[[case]]\nname = \"c{i}\"\ncaller = \"local\"\ntool = \"{tool}\"\narguments = {toml_args}\nexpect = \"deny\"\nmessage = {}\n",
            serde_json::to_string(&text).unwrap()
        ));
    }
    assert!(w.close().success());
    let file = path.with_file_name("cases.toml");
    std::fs::write(&file, cases).unwrap();
    let judge = || {
        cli(&[
            "policy",
            "test",
            file.to_str().unwrap(),
            "--config",
            path.to_str().unwrap(),
        ])
    };
    let (code, out, err) = judge();
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "ok    c0\nok    c1\nok    c2\n3 case(s), 0 failed\n");
    std::fs::remove_file(path.with_file_name("warden.pins.json")).unwrap();
    let (code, out, _) = judge();
    assert_eq!(code, 1);
    assert!(out.starts_with("FAIL  c0\n"), "{out}");
    assert!(
        out.contains("ok    c1\nFAIL  c2\n  - expected deny: Error: "),
        "{out}"
    );
}
