//! Session flow policy through the real binary (F1-F4): the "lethal trifecta"
//! (private data, untrusted content, then a call that sends data out) in each
//! order, denied and asked, over stdio, HTTP sessions and stateless 2026-07-28
//! requests, including a client that drops or alters its flow context and two
//! replicas sharing the sealing secret; and what a session touched, in the
//! audit trail.

mod common;

use common::http::HttpWarden;
use common::*;
use serde_json::{json, Value};

const DENIED: &str = "Error: Tool 'mail.echo' cannot be called at this point of the session. This session has already used tools labelled 'private_data' and 'untrusted_content', and this tool is labelled 'external_sink': together they could send what was read out of the session.";

/// Three fixture upstreams: `drive` reads private data, `web` reads untrusted
/// content (its `fail` tool also sends data out), `mail` sends data out.
fn labelled(effect: &str, rest: &str) -> String {
    format!(
        "[[upstream]]\nname = \"drive\"\ncommand = [\"{{fixture}}\"]\nlabels = {{ \"*\" = [\"private_data\"] }}\n\
         [[upstream]]\nname = \"web\"\ncommand = [\"{{fixture}}\"]\nlabels = {{ echo = [\"untrusted_content\"], fail = [\"untrusted_content\", \"external_sink\"] }}\n\
         [[upstream]]\nname = \"mail\"\ncommand = [\"{{fixture}}\"]\nlabels = {{ echo = [\"external_sink\"] }}\n\
         [[flow]]\ntouched = [\"private_data\", \"untrusted_content\"]\ncalling = \"external_sink\"\neffect = \"{effect}\"\n{rest}"
    )
}

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn the_trifecta_is_denied_in_either_order_over_stdio() {
    for (name, first, second) in [
        ("flow-pu", "drive.echo", "web.echo"),
        ("flow-up", "web.echo", "drive.echo"),
    ] {
        let mut w = Warden::start(name, &labelled("deny", ""));
        // Sending first is harmless: nothing was read yet.
        assert_eq!(
            w.call_text("mail.echo", json!({"text": "x"})),
            r#"{"text":"x"}"#
        );
        assert_eq!(w.call_text(first, json!({"n": 1})), r#"{"n":1}"#);
        assert_eq!(
            w.call_text("mail.echo", json!({"text": "x"})),
            r#"{"text":"x"}"#,
            "one of the two is not enough"
        );
        assert_eq!(w.call_text(second, json!({"n": 2})), r#"{"n":2}"#);
        let r = w.call("mail.echo", json!({"text": "x"}));
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(text(&r), DENIED);
        // Unlabelled tools and readers still run.
        assert_eq!(w.call_text("drive.echo", json!({})), "{}");
    }
}

#[test]
fn a_tool_that_reads_untrusted_content_and_sends_is_stopped_after_private_data() {
    let dir = scratch("flow-audit");
    let config = labelled(
        "deny",
        &format!(
            "[audit]\njsonl = \"{}\"\n",
            dir.join("audit.jsonl").display()
        ),
    );
    let mut w = Warden::start("flow-two-in-one", &config);
    assert!(w
        .call("web.fail", json!({}))
        .pointer("/result/content/0/text")
        .is_some());
    assert_eq!(w.call_text("drive.echo", json!({"n": 1})), r#"{"n":1}"#);
    let r = w.call("web.fail", json!({}));
    assert_eq!(
        text(&r),
        "Error: Tool 'web.fail' cannot be called at this point of the session. This session has already used tools labelled 'private_data' and 'untrusted_content', and this tool is labelled 'external_sink': together they could send what was read out of the session."
    );
    w.close();
    // The trail says what the session had touched at each call.
    let records: Vec<Value> = std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(String, String, Value, Value)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["decision"].as_str().unwrap().to_owned(),
                r.get("labels").cloned().unwrap_or(json!([])),
                r.get("touched").cloned().unwrap_or(json!([])),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "web.fail".into(),
                "allowed".into(),
                json!(["external_sink", "untrusted_content"]),
                json!(["external_sink", "untrusted_content"])
            ),
            (
                "drive.echo".into(),
                "allowed".into(),
                json!(["private_data"]),
                json!(["external_sink", "private_data", "untrusted_content"])
            ),
            (
                "web.fail".into(),
                "flow_denied".into(),
                json!(["external_sink", "untrusted_content"]),
                json!(["external_sink", "private_data", "untrusted_content"])
            ),
        ]
    );
}

#[test]
fn an_ask_rule_puts_the_call_to_the_human() {
    // No [access] table: an approval still waits for the human (it once timed out at once).
    let mut w = Warden::start(
        "flow-ask",
        &labelled(
            "ask",
            "reason = \"Private data and web content were read in this session.\"\n",
        ),
    );
    w.call_text("drive.echo", json!({}));
    w.call_text("web.echo", json!({}));
    for (answer, expected) in [
        (json!({"action": "decline"}), None),
        (
            json!({"action": "accept", "content": {"approve": true}}),
            Some(r#"{"text":"x"}"#),
        ),
    ] {
        let id = w.send_request(
            "tools/call",
            json!({"name": "mail.echo", "arguments": {"text": "x"}}),
        );
        let ask = w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
        assert_eq!(
            ask["params"]["message"],
            "Allow the call to 'mail.echo' with these arguments?\n{\"text\":\"x\"}"
        );
        w.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
        let r = w.response(&json!(id));
        match expected {
            Some(t) => assert_eq!(text(&r), t),
            None => assert_eq!(
                text(&r),
                "Error: Tool 'mail.echo' needs approval at this point of the session, and it was not given. Private data and web content were read in this session. (This call needs approval, and approval was refused.)"
            ),
        }
    }
}

#[test]
fn http_sessions_keep_their_own_trails() {
    let w = HttpWarden::start(
        "flow-http",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            labelled("deny", "")
        ),
        &[],
    );
    let (tainted, clean) = (w.session(&[]), w.session(&[]));
    let call = |sid: &str, id: i64, tool: &str| {
        let r = w.post(
            &[("Mcp-Session-Id", sid)],
            &common::http::call(id, tool, json!({"n": id})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        text(&r.json()).to_owned()
    };
    assert_eq!(call(&tainted, 2, "drive.echo"), r#"{"n":2}"#);
    assert_eq!(call(&tainted, 3, "web.echo"), r#"{"n":3}"#);
    assert_eq!(call(&tainted, 4, "mail.echo"), DENIED);
    // Another session of the same caller has touched nothing.
    assert_eq!(call(&clean, 5, "mail.echo"), r#"{"n":5}"#);
}

#[test]
fn the_trifecta_is_denied_over_an_http_session_when_untrusted_content_comes_first() {
    let w = HttpWarden::start(
        "flow-http-up",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            labelled("deny", "")
        ),
        &[],
    );
    let sid = w.session(&[]);
    let call = |id: i64, tool: &str| {
        let r = w.post(
            &[("Mcp-Session-Id", &sid)],
            &common::http::call(id, tool, json!({"n": id})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    assert_eq!(text(&call(2, "web.echo")), r#"{"n":2}"#);
    assert_eq!(
        text(&call(3, "mail.echo")),
        r#"{"n":3}"#,
        "untrusted content alone is not enough"
    );
    assert_eq!(text(&call(4, "drive.echo")), r#"{"n":4}"#);
    let r = call(5, "mail.echo");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(text(&r), DENIED);
}

/// An `ask` flow rule over an HTTP session whose 2025-11-25 client declared
/// elicitation: the question goes out on the call's own stream, and the answer
/// POSTed back decides.
#[test]
fn an_ask_rule_puts_the_call_to_the_human_over_an_http_session() {
    use common::http::{open, POST};
    let w = HttpWarden::start(
        "flow-http-ask",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            labelled(
                "ask",
                "reason = \"Private data and web content were read in this session.\"\n",
            )
        ),
        &[],
    );
    let sid = w.session_with(&[], json!({"elicitation": {}}));
    let with = [("Mcp-Session-Id", sid.as_str())];
    for (id, tool) in [(2, "drive.echo"), (3, "web.echo")] {
        let r = w.post(&with, &common::http::call(id, tool, json!({})));
        assert_eq!(text(&r.json()), "{}");
    }
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    for (id, answer, expected) in [
        (
            4,
            json!({"action": "decline"}),
            "Error: Tool 'mail.echo' needs approval at this point of the session, and it was not given. Private data and web content were read in this session. (This call needs approval, and approval was refused.)",
        ),
        (
            5,
            json!({"action": "accept", "content": {"approve": true}}),
            r#"{"text":"x"}"#,
        ),
    ] {
        let body = common::http::call(id, "mail.echo", json!({"text": "x"})).to_string();
        let mut stream = open(&w.addr, "POST", &headers, &body);
        assert_eq!(stream.status, 200);
        let ask = loop {
            let (_, data) = stream.next_event().expect("the approval question");
            if data.contains("elicitation/create") {
                break serde_json::from_str::<Value>(&data).unwrap();
            }
        };
        assert_eq!(
            ask["params"]["message"],
            "Allow the call to 'mail.echo' with these arguments?\n{\"text\":\"x\"}"
        );
        let r = w.post(
            &with,
            &json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}),
        );
        assert_eq!(r.status, 202, "{}", r.body);
        let last = stream.finish().messages().pop().expect("the call's answer");
        assert_eq!(last["id"], id, "{last}");
        assert_eq!(text(&last), expected);
    }
}

const V: &str = "2026-07-28";

/// A stateless 2026-07-28 `tools/call`, with a flow context when given one.
fn modern(tool: &str, n: i64, context: Option<&Value>) -> Value {
    let mut meta = json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {}});
    if let Some(c) = context {
        meta["warden/flowContext"] = c.clone();
    }
    json!({"name": tool, "arguments": {"n": n}, "_meta": meta})
}

fn context_of(r: &Value) -> Value {
    let c = r["result"]["_meta"]["warden/flowContext"].clone();
    assert!(c.is_string(), "no flow context in {r}");
    c
}

#[test]
fn a_stateless_client_cannot_reset_its_trail_by_dropping_or_altering_the_context() {
    let mut w = Warden::spawn("flow-modern", &labelled("deny", ""));
    let r = w.request("tools/call", modern("drive.echo", 1, None));
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"n": 1}),
        "the upstream never sees the context: {r}"
    );
    let c1 = context_of(&r);
    let r = w.request("tools/call", modern("web.echo", 2, Some(&c1)));
    let c2 = context_of(&r);
    let r = w.request("tools/call", modern("mail.echo", 3, Some(&c2)));
    assert_eq!(text(&r), DENIED);
    assert_eq!(r["result"]["resultType"], "complete");
    // Dropped, or replaced by the first (older) context: still denied.
    for context in [None, Some(&c1)] {
        let r = w.request("tools/call", modern("mail.echo", 4, context));
        assert_eq!(text(&r), DENIED, "{r}");
    }
    // Altered: the seal breaks, the context is ignored, the trail stands.
    let s = c2.as_str().unwrap();
    let mid = s.len() / 2;
    let flipped = if &s[mid..=mid] == "A" { "B" } else { "A" };
    let forged = json!(format!("{}{flipped}{}", &s[..mid], &s[mid + 1..]));
    let r = w.request("tools/call", modern("mail.echo", 5, Some(&forged)));
    assert_eq!(text(&r), DENIED);
}

#[test]
fn stateless_http_requests_carry_the_trail_too() {
    let w = HttpWarden::start(
        "flow-http-modern",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            labelled("deny", "")
        ),
        &[],
    );
    let post = |id: i64, params: Value| {
        let r = w.post(
            &[
                ("MCP-Protocol-Version", V),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", params["name"].as_str().unwrap()),
            ],
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    let c1 = context_of(&post(1, modern("drive.echo", 1, None)));
    let c2 = context_of(&post(2, modern("web.echo", 2, Some(&c1))));
    assert_eq!(text(&post(3, modern("mail.echo", 3, Some(&c2)))), DENIED);
    assert_eq!(text(&post(4, modern("mail.echo", 4, None))), DENIED);
}

#[test]
fn a_stateless_ask_is_an_input_request_and_the_approved_retry_runs() {
    let mut w = Warden::spawn("flow-modern-ask", &labelled("ask", ""));
    let c1 = context_of(&w.request("tools/call", modern("drive.echo", 1, None)));
    let c2 = context_of(&w.request("tools/call", modern("web.echo", 2, Some(&c1))));
    let ask = |context: &Value, extra: Value| {
        let mut p = modern("mail.echo", 3, Some(context));
        p["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    let r = w.request("tools/call", ask(&c2, json!({})));
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert_eq!(
        r["result"]["inputRequests"]["warden/approval"]["method"],
        "elicitation/create"
    );
    let state = r["result"]["requestState"].clone();
    let c3 = context_of(&r);
    let yes = json!({"warden/approval": {"action": "accept", "content": {"approve": true}}});
    let r = w.request(
        "tools/call",
        ask(&c3, json!({"inputResponses": yes, "requestState": state})),
    );
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["structuredContent"], json!({"n": 3}));
}

#[test]
fn replicas_sharing_the_sealing_secret_carry_a_stateless_trail_between_them() {
    std::env::set_var("WARDEN_FLOW_TEST_SECRET", "a shared flow secret of length");
    let config = format!(
        "[gateway]\nstate_secret_env = \"WARDEN_FLOW_TEST_SECRET\"\n{}",
        labelled("deny", "")
    );
    let mut a = Warden::spawn("flow-replica-a", &config);
    let mut b = Warden::spawn("flow-replica-b", &config);
    let mut stranger = Warden::spawn("flow-replica-c", &labelled("deny", ""));
    let r = a.request("tools/call", modern("drive.echo", 1, None));
    let c1 = context_of(&r);
    // B never saw the private read; the context A sealed tells it.
    let r = b.request("tools/call", modern("web.echo", 2, Some(&c1)));
    let c2 = context_of(&r);
    let r = b.request("tools/call", modern("mail.echo", 3, Some(&c2)));
    assert_eq!(text(&r), DENIED);
    // A learns of the web read from B's context.
    let r = a.request("tools/call", modern("mail.echo", 4, Some(&c2)));
    assert_eq!(text(&r), DENIED);
    // A gateway with another key does not trust the context.
    let r = stranger.request("tools/call", modern("mail.echo", 5, Some(&c2)));
    assert_eq!(text(&r), r#"{"n":5}"#);
}

#[test]
fn a_bad_flow_or_label_is_named_with_how_to_fix_it() {
    let dir = scratch("flow-check");
    for (toml, expected) in [
        (
            "[[flow]]\ntouched = []\ncalling = \"external_sink\"\neffect = \"deny\"\n",
            "flow[0]: touched needs at least one label (e.g. [\"private_data\"])",
        ),
        (
            "[[flow]]\ntouched = [\"a\"]\ncalling = \"b\"\neffect = \"block\"\n",
            "flow[0].effect: 'block' is not a flow effect; use deny or ask",
        ),
        (
            "[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\nlabels = { \"r[\" = [\"private_data\"] }\n",
            "upstream[0].labels.r[: 'r[' is not a valid tool glob",
        ),
        (
            "[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\nlabels = { \"*\" = [\"private data\"] }\n",
            "upstream[0].labels.*: 'private data' is not a usable label; use letters, digits, '_' and '-'",
        ),
    ] {
        let path = write_config(&dir, toml);
        let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1);
        assert!(err.contains(expected), "{err}");
    }
}

/// An unlabelled stateless call (`mail.slow`).
fn unlabelled(n: i64, context: Option<&Value>) -> Value {
    let mut p = modern("mail.slow", n, context);
    p["arguments"] = json!({"ms": n});
    p
}

/// Gap of the first build: a stateless client that dropped its context and
/// moved to another replica started with a clean trail. With a shared
/// PostgreSQL store the trail is kept there by caller: whatever the client
/// drops, forges or replays, and whichever replica it reaches, the replicas
/// agree, even one that cannot open the others' contexts (another key).
#[test]
fn replicas_sharing_postgres_agree_on_a_trail_the_client_drops_tampers_with_or_moves() {
    std::env::set_var("WARDEN_FLOW_PG_SECRET", "a shared flow secret for postgres");
    let db = PgDb::create("flowpg");
    let dir = scratch("flow-pg");
    let store = format!("[store]\nurl = \"{}\"\n", db.url());
    let config = format!(
        "[gateway]\nstate_secret_env = \"WARDEN_FLOW_PG_SECRET\"\n{store}{}",
        labelled("deny", "")
    );
    let audited = format!(
        "{config}[audit]\njsonl = \"{}\"\n",
        dir.join("audit.jsonl").display()
    );
    let mut a = Warden::spawn("flow-pg-a", &audited);
    let mut b = Warden::spawn("flow-pg-b", &config);
    let mut c = Warden::spawn("flow-pg-c", &format!("{store}{}", labelled("deny", "")));
    // A context sealed before anything was read.
    let r = a.request("tools/call", unlabelled(1, None));
    assert_eq!(text(&r), "slept 1 ms", "{r}");
    let clean = context_of(&r);
    // The private read on A, its context dropped; the web read on B.
    let r = a.request("tools/call", modern("drive.echo", 1, None));
    assert_eq!(r["result"]["structuredContent"], json!({"n": 1}), "{r}");
    let r = b.request("tools/call", modern("web.echo", 2, None));
    assert_eq!(r["result"]["structuredContent"], json!({"n": 2}), "{r}");
    let c2 = context_of(&r);
    // Without a context, on either replica, and on one with another key.
    for w in [&mut a, &mut b, &mut c] {
        assert_eq!(
            text(&w.request("tools/call", modern("mail.echo", 3, None))),
            DENIED
        );
    }
    // With a forged context, or one sealed before anything was read.
    let s = c2.as_str().unwrap();
    let mid = s.len() / 2;
    let flipped = if &s[mid..=mid] == "A" { "B" } else { "A" };
    let forged = json!(format!("{}{flipped}{}", &s[..mid], &s[mid + 1..]));
    for context in [&forged, &clean] {
        assert_eq!(
            text(&b.request("tools/call", modern("mail.echo", 4, Some(context)))),
            DENIED
        );
    }
    // Unlabelled calls still run.
    assert_eq!(
        text(&c.request("tools/call", unlabelled(2, None))),
        "slept 2 ms"
    );
    drop((b, c));
    a.close();
    // What the caller had touched, in A's audit trail.
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    let denied: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["decision"] == "flow_denied")
        .collect();
    assert_eq!(denied.len(), 1, "{audit}");
    assert_eq!(denied[0]["labels"], json!(["external_sink"]));
    assert_eq!(
        denied[0]["touched"],
        json!(["private_data", "untrusted_content"])
    );
}

/// With the shared store gone, a labelled stateless call is refused (flows
/// fail closed) with when to retry; an unlabelled one still runs.
#[test]
fn a_lost_store_refuses_labelled_stateless_calls() {
    let db = PgDb::create("flowlost");
    let config = format!("[store]\nurl = \"{}\"\n{}", db.url(), labelled("deny", ""));
    let mut w = Warden::spawn("flow-pg-lost", &config);
    let r = w.request("tools/call", modern("drive.echo", 1, None));
    assert_eq!(r["result"]["structuredContent"], json!({"n": 1}), "{r}");
    db.lose();
    let r = w.request("tools/call", modern("mail.echo", 2, None));
    assert_eq!(
        text(&r),
        "Error: Tool 'mail.echo' cannot be called now: what this session has touched could not be checked. Retry in 1 s."
    );
    assert_eq!(r["result"]["_meta"]["warden/retryAfterMs"], 1000);
    assert_eq!(
        text(&w.request("tools/call", unlabelled(3, None))),
        "slept 3 ms"
    );
}

/// An HTTP session any replica takes up (its id sealed with the shared secret)
/// meets its trail at each: with PostgreSQL the trail is kept there under the
/// session, so a private read at A and a web read at B stop a send at either.
#[test]
fn an_http_session_taken_up_by_another_replica_keeps_its_trail() {
    const SECRET: (&str, &str) = ("WARDEN_FLOW_HTTP_SECRET", "sixteen or more characters");
    let db = PgDb::create("flowhttp");
    let config = format!(
        "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"{}\"\n[store]\nurl = \"{}\"\n{}",
        SECRET.0,
        db.url(),
        labelled("deny", "")
    );
    let a = HttpWarden::start("flow-http-a", &config, &[SECRET]);
    let b = HttpWarden::start("flow-http-b", &config, &[SECRET]);
    let call = |w: &HttpWarden, sid: &str, id: i64, tool: &str| {
        let r = w.post(
            &[("Mcp-Session-Id", sid)],
            &common::http::call(id, tool, json!({"n": id})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        text(&r.json()).to_owned()
    };
    let sid = a.session(&[]);
    assert_eq!(call(&a, &sid, 2, "drive.echo"), r#"{"n":2}"#);
    assert_eq!(call(&b, &sid, 3, "web.echo"), r#"{"n":3}"#);
    assert_eq!(call(&a, &sid, 4, "mail.echo"), DENIED);
    assert_eq!(call(&b, &sid, 5, "mail.echo"), DENIED);
    // Another session of the same caller has touched nothing, at either replica.
    let other = b.session(&[]);
    assert_eq!(call(&a, &other, 6, "mail.echo"), r#"{"n":6}"#);
}

/// Issue 24, item 6: after private data and untrusted content a send was
/// refused, and once the session had idled out (`session_idle`) the same
/// `Mcp-Session-Id` sent it. With PostgreSQL a session's trail is kept as long
/// as its id can be taken up, so the session comes back with it: at the
/// replica where it idled and at another.
#[test]
fn an_http_session_taken_up_after_it_idled_out_comes_back_with_its_trail() {
    const SECRET: (&str, &str) = ("WARDEN_FLOW_IDLE_SECRET", "sixteen or more characters");
    let db = PgDb::create("flowidle");
    let config = format!(
        "[gateway]\nanonymous_caller = \"dev\"\nsession_idle = \"1s\"\nstate_secret_env = \"{}\"\n[store]\nurl = \"{}\"\n{}",
        SECRET.0,
        db.url(),
        labelled("deny", "")
    );
    let a = HttpWarden::start("flow-idle-a", &config, &[SECRET]);
    let sid = a.session(&[]);
    let call = |w: &HttpWarden, id: i64, tool: &str| {
        let r = w.post(
            &[("Mcp-Session-Id", sid.as_str())],
            &common::http::call(id, tool, json!({"n": id})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        text(&r.json()).to_owned()
    };
    assert_eq!(call(&a, 2, "drive.echo"), r#"{"n":2}"#);
    assert_eq!(call(&a, 3, "web.echo"), r#"{"n":3}"#);
    assert_eq!(call(&a, 4, "mail.echo"), DENIED);
    // Idle for longer than session_idle (the sweep runs every half of it).
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(
        call(&a, 5, "mail.echo"),
        DENIED,
        "taken up again where it idled"
    );
    let b = HttpWarden::start("flow-idle-b", &config, &[SECRET]);
    assert_eq!(call(&b, 6, "mail.echo"), DENIED, "and at another replica");
}

/// Issue 24, item 6, without PostgreSQL: no store keeps the trail outside the
/// process, so a session id is not taken up without it: once the session idled
/// out, or at another replica sharing the secret, the id is not found (404) and
/// the client starts a new session, whose trail starts empty on purpose.
#[test]
fn without_a_shared_store_a_session_with_flow_rules_ends_when_it_idles_out() {
    const SECRET: (&str, &str) = (
        "WARDEN_FLOW_IDLE_LOCAL_SECRET",
        "sixteen or more characters",
    );
    let dir = scratch("flow-idle-local-db");
    let config = format!(
        "[gateway]\nanonymous_caller = \"dev\"\nsession_idle = \"1s\"\nstate_secret_env = \"{}\"\n[store]\nurl = \"sqlite://{}\"\n{}",
        SECRET.0,
        dir.join("warden.db").display(),
        labelled("deny", "")
    );
    let a = HttpWarden::start("flow-idle-local-a", &config, &[SECRET]);
    let b = HttpWarden::start("flow-idle-local-b", &config, &[SECRET]);
    let sid = a.session(&[]);
    let post = |w: &HttpWarden, id: i64, tool: &str| {
        w.post(
            &[("Mcp-Session-Id", sid.as_str())],
            &common::http::call(id, tool, json!({"n": id})),
        )
    };
    let not_found = common::http::error_body(
        "Session not found: it ended or expired. Start a new one with initialize.",
    );
    assert_eq!(text(&post(&a, 2, "drive.echo").json()), r#"{"n":2}"#);
    assert_eq!(text(&post(&a, 3, "web.echo").json()), r#"{"n":3}"#);
    assert_eq!(text(&post(&a, 4, "mail.echo").json()), DENIED);
    let r = post(&b, 5, "mail.echo");
    assert_eq!((r.status, r.body), (404, not_found.clone()), "not at b");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let r = post(&a, 6, "mail.echo");
    assert_eq!((r.status, r.body), (404, not_found), "idled out at a");
    let _ = std::fs::remove_dir_all(dir);
}

/// X1 on `[[flow]]`: the rule stops only calls its `when_cel` holds for; one
/// that fails at run time fails the call closed.
#[test]
fn a_flow_with_when_cel_stops_only_the_calls_it_holds_for() {
    let config = labelled("deny", "when_cel = \"args.text.contains('@')\"\n");
    let mut w = Warden::start("flow-cel", &config);
    w.call_text("drive.echo", json!({}));
    w.call_text("web.echo", json!({}));
    // The trifecta is complete, but no address: the rule does not hold.
    assert_eq!(
        w.call_text("mail.echo", json!({"text": "hello"})),
        r#"{"text":"hello"}"#
    );
    assert_eq!(text(&w.call("mail.echo", json!({"text": "a@b.c"}))), DENIED);
    // No `text` to read: the condition fails, and so does the call.
    assert_eq!(
        text(&w.call("mail.echo", json!({"n": 1}))),
        "Error: Policy could not decide on this call, so it is refused."
    );
}
