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
