//! `action = "ask"` guards through the real gateway (S3, S6): a human decides
//! whether a result a guard flagged goes on, or whether a call whose arguments
//! it flagged runs, asked as an `ask` rule asks (H5). The question names the
//! guard, the kinds and the paths; the matched text reaches neither the
//! question about a result, nor the audit trail.

mod common;

use common::*;
use serde_json::{json, Value};

const CARD: &str = "4111 1111 1111 1111";
const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

fn audit_out(w: &Warden) -> String {
    let config = w.dir.join("warden.toml");
    let (code, out, err) = cli(&["audit", "--config", config.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    out
}

/// Sends a call, answers the question it raises with `answer`, and returns
/// the question and the call's response.
fn asked(w: &mut Warden, tool: &str, args: Value, answer: Value) -> (Value, Value) {
    let id = w.send_request("tools/call", json!({"name": tool, "arguments": args}));
    let ask = w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    w.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
    (ask, w.response(&json!(id)))
}

/// S3 (ask): the result waits for the human; approved, it passes whole;
/// declined, it is withheld; a client that cannot elicit never gets it.
#[test]
fn a_flagged_result_goes_on_only_when_the_human_says_so() {
    let config = fixture_config(
        "",
        "[store]\nurl = \"sqlite://warden.db\"\n[audit]\nredact = [\"text\"]\n\
         [[guard]]\nname = \"cards\"\non = [\"results\"]\ndetect = [\"pii.card\"]\naction = \"ask\"\n",
    );
    let mut w = Warden::start_in_process("guard-ask-result", &config);
    let card = json!({"text": format!("card {CARD}")});
    let yes = json!({"action": "accept", "content": {"approve": true}});
    let (ask, r) = asked(&mut w, "fx.echo", card.clone(), yes);
    assert_eq!(
        ask["params"]["message"],
        "Guard 'cards' found pii.card in the result of tool 'fx.echo' (at /content/0/text, /structuredContent/text). Pass the result on to the model?"
    );
    assert_eq!(text(&r), format!(r#"{{"text":"card {CARD}"}}"#));
    let (_, r) = asked(
        &mut w,
        "fx.echo",
        card.clone(),
        json!({"action": "decline"}),
    );
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": "Error: The result of tool 'fx.echo' was withheld: guard 'cards' found pii.card in it, and the user did not let it through. Do not retry the same call; ask the user how to proceed."}], "isError": true})
    );
    // Nothing flagged: nobody is asked.
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "no card"})),
        r#"{"text":"no card"}"#
    );
    let out = audit_out(&w);
    assert!(!out.contains(CARD), "{out}");
    assert!(out.contains(r#""action":"ask""#), "{out}");

    let mut w = Warden::spawn_in_process("guard-ask-result-nocap", &config);
    let init = w.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert!(init.get("result").is_some());
    assert_eq!(
        text(&w.call("fx.echo", card)),
        "Error: The result of tool 'fx.echo' was withheld: guard 'cards' found pii.card in it, and the client cannot ask the user to let it through. Do not retry the same call; ask the user how to proceed."
    );
}

/// S6 (ask): a call whose arguments a guard flags runs only once the human
/// approved it; the question shows the arguments with the matches hidden, and
/// the audit record holds them redacted.
#[test]
fn a_flagged_argument_is_put_to_the_human_with_the_match_hidden() {
    let config = fixture_config(
        "",
        "[store]\nurl = \"sqlite://warden.db\"\n\
         [[guard]]\nname = \"keys-out\"\non = [\"arguments\"]\ndetect = [\"secrets\"]\ntools = [\"fx.*\"]\naction = \"ask\"\n",
    );
    let mut w = Warden::start_in_process("guard-ask-arguments", &config);
    let args = json!({"text": format!("key {KEY}")});
    let yes = json!({"action": "accept", "content": {"approve": true}});
    let (ask, r) = asked(&mut w, "fx.echo", args.clone(), yes);
    assert_eq!(
        ask["params"]["message"],
        "Guard 'keys-out' found secrets.aws_access_key in the arguments (at /text); the matches are hidden below.\nAllow the call to 'fx.echo' with these arguments?\n{\"text\":\"key [redacted:secrets.aws_access_key]\"}"
    );
    // Approved: the upstream got the arguments as sent.
    assert_eq!(text(&r), format!(r#"{{"text":"key {KEY}"}}"#));
    let (_, r) = asked(&mut w, "fx.echo", args, json!({"action": "decline"}));
    assert_eq!(
        text(&r),
        "Error: This call needs approval, and approval was refused."
    );
    let out = audit_out(&w);
    assert!(!out.contains(KEY), "{out}");
    assert!(
        out.contains(r#""text":"key [redacted:secrets.aws_access_key]""#),
        "{out}"
    );
}
