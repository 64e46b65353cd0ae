//! `mcp-warden replay` (X5) through the real binary: traffic is recorded by the
//! gateway in SQLite, then judged again by other access rules offline. Exactly
//! the calls a tighter policy newly refuses are listed, a redacted argument a
//! rule reads leaves its calls unjudged and named, and the exit code tells CI.

mod common;

use common::*;
use serde_json::{json, Value};

fn stored(dir: &std::path::Path) -> String {
    format!(
        "[gateway]\nstdio_caller = \"local\"\n[[caller]]\nname = \"local\"\ngroups = [\"staff\"]\n\
         [store]\nurl = \"sqlite://{}\"\n[audit]\nredact = [\"text\"]\n{DEMO}",
        dir.join("warden.db").display()
    )
}

/// Records five calls: two notes (one a draft), two publications, a listing.
fn record_traffic(dir: &std::path::Path) {
    let mut w = Warden::start("replay-live", &stored(dir));
    w.call_text("notes.create_note", json!({"title": "plan", "text": "x"}));
    w.call_text(
        "notes.create_note",
        json!({"title": "tmp draft", "text": "y"}),
    );
    w.call_text("notes.publish_note", json!({"id": 1}));
    w.call_text("notes.publish_note", json!({"id": 50}));
    w.call_text("notes.list_notes", json!({}));
    assert!(w.close().success());
}

fn replay(dir: &std::path::Path, rules: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let path = dir.join("new.toml");
    let text = format!("{}\n{rules}", stored(dir)).replace("{notes}", NOTES);
    std::fs::write(&path, text).unwrap();
    let mut args = vec!["replay", "--config", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = cli(&args);
    let lines = out
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().shift_remove("time");
            v
        })
        .collect();
    (code, lines, err)
}

const TIGHTER: &str = r#"
[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "deny"
when_cel = "args.title.startsWith('tmp')"

[[rule]]
callers = ["group:staff"]
tools = ["notes.publish_note"]
effect = "deny"
when_cel = "args.id > 10"
"#;

#[test]
fn a_tighter_policy_lists_exactly_the_calls_it_newly_refuses() {
    let dir = scratch("replay");
    record_traffic(&dir);
    // The same policy: nothing changes, and CI passes.
    let (code, lines, err) = replay(&dir, "", &[]);
    assert_eq!((code, lines.len()), (0, 0), "{err}");
    assert!(err.starts_with("replayed 5 recorded call(s) in "), "{err}");
    let (code, lines, err) = replay(&dir, TIGHTER, &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        lines,
        [
            json!({"caller": "local", "tool": "notes.create_note", "before": "allow", "now": "refuse", "rule": "rule[0]", "would": "denied",
                "answer": "Error: Policy does not allow this call to tool 'notes.create_note' for caller 'local'."}),
            json!({"caller": "local", "tool": "notes.publish_note", "before": "allow", "now": "refuse", "rule": "rule[1]", "would": "denied",
                "answer": "Error: Policy does not allow this call to tool 'notes.publish_note' for caller 'local'."}),
        ]
    );
    assert!(
        err.contains(": 2 change(s), 2 newly refused, 0 not judged (redacted arguments)"),
        "{err}"
    );
    // --tool narrows to the publications.
    let (code, lines, _) = replay(&dir, TIGHTER, &["--tool", "notes.pub*"]);
    assert_eq!((code, lines.len()), (1, 1));
    assert_eq!(lines[0]["tool"], "notes.publish_note");
    // --caller names nobody who called: nothing to replay.
    let (code, lines, err) = replay(&dir, TIGHTER, &["--caller", "nobody"]);
    assert_eq!((code, lines.len()), (0, 0));
    assert!(err.starts_with("replayed 0 recorded call(s)"), "{err}");
}

#[test]
fn a_rule_reading_a_redacted_argument_leaves_its_calls_unjudged_and_named() {
    let dir = scratch("replay-redacted");
    record_traffic(&dir);
    let rules = r#"
[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "deny"
when_cel = "args.text.contains('y')"
"#;
    let (code, lines, err) = replay(&dir, rules, &[]);
    assert_eq!(code, 0, "unjudged calls do not fail CI: {err}");
    let unjudged = json!({"caller": "local", "tool": "notes.create_note", "before": "allow", "now": "unjudged", "rule": "default", "redacted": "text"});
    assert_eq!(lines, [unjudged.clone(), unjudged]);
    assert!(
        err.contains(": 2 change(s), 0 newly refused, 2 not judged (redacted arguments)"),
        "{err}"
    );
}

#[test]
fn the_table_counts_changes_per_rule() {
    let dir = scratch("replay-table");
    record_traffic(&dir);
    let path = dir.join("new.toml");
    std::fs::write(
        &path,
        format!("{}\n{TIGHTER}", stored(&dir)).replace("{notes}", NOTES),
    )
    .unwrap();
    let (code, out, _) = cli(&["replay", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "TIME                      CALLER            TOOL                          BEFORE    NOW       RULE"
    );
    assert!(
        lines[1].ends_with(
            "  local             notes.create_note             allow     refuse    rule[0]"
        ),
        "{out}"
    );
    assert!(
        lines[2].ends_with(
            "  local             notes.publish_note            allow     refuse    rule[1]"
        ),
        "{out}"
    );
    assert_eq!(
        &lines[3..],
        ["rule[0]: 1 change(s)", "rule[1]: 1 change(s)"]
    );
}

/// X11: a pin and a guard on the arguments added. A recorded call that sent
/// the newly pinned key with another value, and one carrying an e-mail
/// address, are newly refused, with the very words the gateway running the
/// new configuration answers those calls with; the call whose value equals
/// the pin (set by the gateway, as the trail cannot tell) and the plain one
/// stand.
#[test]
fn a_pin_and_a_guard_refuse_with_the_gateways_own_words() {
    const STRICTER: &str = "[upstream.tools.publish_note]\npin = { id = 1 }\n\n\
        [[guard]]\nname = \"no-mail\"\non = [\"arguments\"]\ndetect = [\"pii.email\"]\naction = \"block\"\n";
    let dir = scratch("replay-stages");
    let mail = json!({"title": "mail a@example.org", "text": "x"});
    let mut w = Warden::start("replay-stages-live", &stored(&dir));
    w.call_text("notes.publish_note", json!({"id": 1}));
    w.call_text("notes.publish_note", json!({"id": 50}));
    w.call_text("notes.create_note", mail.clone());
    w.call_text("notes.create_note", json!({"title": "plain", "text": "x"}));
    assert!(w.close().success());
    let (code, lines, err) = replay(&dir, STRICTER, &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let (pin, guard) = (&lines[0], &lines[1]);
    assert_eq!(
        (&pin["tool"], &pin["rule"], &pin["would"]),
        (
            &json!("notes.publish_note"),
            &json!("arguments"),
            &json!("invalid_arguments")
        )
    );
    assert_eq!(
        (&guard["tool"], &guard["rule"], &guard["would"]),
        (
            &json!("notes.create_note"),
            &json!("guard[0]"),
            &json!("denied")
        )
    );
    // The gateway under the new configuration answers the same calls so.
    let live = scratch("replay-stages-new");
    let mut w = Warden::start(
        "replay-stages-new",
        &format!("{}\n{STRICTER}", stored(&live)),
    );
    assert_eq!(
        pin["answer"],
        w.call_text("notes.publish_note", json!({"id": 50}))
    );
    assert_eq!(guard["answer"], w.call_text("notes.create_note", mail));
    assert!(w.close().success());
    assert!(
        err.contains("4 call(s) to tools no pins lock declares"),
        "{err}"
    );
}

/// A call refused before and now for another cause gets another answer: it is
/// listed with both decisions, and does not fail CI.
#[test]
fn a_call_refused_for_another_cause_is_listed_with_both_decisions() {
    let dir = scratch("replay-cause");
    let mut w = Warden::start("replay-cause-live", &stored(&dir));
    let unknown = w.call_text("notes.create_note", json!({"titel": "t", "text": "x"}));
    assert!(
        unknown.starts_with("Error: Unknown parameter 'titel'"),
        "{unknown}"
    );
    assert!(w.close().success());
    let hidden =
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"notes.create_note\"]\neffect = \"deny\"\n";
    let (code, lines, err) = replay(&dir, hidden, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines,
        [
            json!({"caller": "local", "tool": "notes.create_note", "before": "refuse", "now": "refuse", "rule": "rule[0]",
            "was": "invalid_arguments", "would": "unknown_tool", "answer": "Unknown tool 'notes.create_note'."})
        ]
    );
}

/// A week of generated traffic, written to the trail as the gateway writes it,
/// replayed with `--since 7d`: every call is judged, the figure is printed (the
/// issue's bar: 20,000 recorded calls a second from SQLite). Set
/// WARDEN_REPLAY_CALLS for a larger week.
#[test]
fn a_week_of_recorded_calls_replays_at_speed() {
    let n: usize = std::env::var("WARDEN_REPLAY_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = scratch("replay-week");
    let now = std::time::SystemTime::now();
    let week = std::time::Duration::from_secs(7 * 24 * 3600 - 60);
    let records: Vec<warden_store::AuditRecord> = (0..n)
        .map(|i| {
            let at = now - week + week.mul_f64(i as f64 / n as f64);
            let (tool, args) = match i % 3 {
                0 => ("notes.publish_note", json!({"id": i % 40})),
                1 => (
                    "notes.create_note",
                    json!({"title": format!("note {i}"), "text": "[redacted]", "is_public": false}),
                ),
                _ => ("notes.list_notes", json!({})),
            };
            serde_json::from_value(json!({
                "time": warden_store::format_rfc3339(at), "session": "stdio", "caller": "local",
                "tool": tool, "upstream": "notes", "arguments": args, "reason": null,
                "unknown_keys": [], "unknown_mode": null, "decision": "allowed", "outcome": "ok",
                "duration_ms": 1.0, "idempotency_key": null, "replayed": false
            }))
            .unwrap()
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = warden_store::Store::open(&dir.join("warden.db")).unwrap();
        for chunk in records.chunks(1000) {
            store.record_batch(chunk).await.unwrap();
        }
    });
    let (code, lines, err) = replay(&dir, TIGHTER, &["--since", "7d"]);
    // ids 11..39 of every 40 publications are newly refused.
    let refused = (0..n).filter(|i| i % 3 == 0 && i % 40 > 10).count();
    assert_eq!((code, lines.len()), (1, refused), "{err}");
    assert!(
        err.starts_with(&format!("replayed {n} recorded call(s) in ")),
        "{err}"
    );
    println!("{err}");
}
