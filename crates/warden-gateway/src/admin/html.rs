//! The operator console's pages, rendered on the server from the admin API's JSON
//! (no script, no build step): plain tables and GET forms that read well without
//! JavaScript and work from the keyboard (a skip link, labelled fields, visible
//! focus). Every value is HTML-escaped.

use super::data::{url_encode, DEFAULT_LIMIT};
use serde_json::Value;
use std::fmt::Write as _;

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as a table cell's text.
fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => esc(s),
        Value::Array(items) => esc(&items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(", ")),
        other => esc(&other.to_string()),
    }
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}\
header{background:#1d3557;color:#fff;padding:.6em 1em}header a{color:#fff;margin-right:1.2em}\
main{padding:1em}table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #bbb;padding:.3em .6em;text-align:left;vertical-align:top}\
th{background:#eef2f7}a:focus,input:focus,select:focus,button:focus{outline:3px solid #e76f51;outline-offset:2px}\
.skip{position:absolute;left:-999px}.skip:focus{left:1em;top:.5em;background:#fff;color:#000;padding:.3em}\
.refused,.failed{color:#9b1d20;font-weight:600}.ok{color:#1e6b34}pre{background:#f5f5f5;padding:.6em;overflow:auto}\
form{margin:.5em 0 1em}label{margin-right:.3em}input,select,button{margin-right:1em;font:inherit}\
td ul{margin:0;padding-left:1.2em}del{background:#fbe3e4;color:#7b1d1d}ins{background:#e3f4e6;color:#1e6b34;text-decoration:none}\
.diff pre{margin:0;background:none;padding:0;white-space:pre-wrap}.diff td{min-width:20em}.figure{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}.chart{max-width:100%;height:auto}";

/// A whole page: `title`, the JSON twin at `api`, and the body.
pub fn page(title: &str, api: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} · mcp-warden</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head><body>\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header><nav aria-label=\"Console\"><strong>mcp-warden</strong> · \
         <a href=\"/\">Overview</a><a href=\"/charts\">Charts</a><a href=\"/approvals\">Approvals</a><a href=\"/catalogue\">Catalogue</a><a href=\"/calls\">Calls</a>\
         <a href=\"/pins\">Pins</a><a href=\"/quotas\">Quotas</a></nav></header>\
         <main id=\"main\" tabindex=\"-1\"><h1>{t}</h1>{body}\
         <p><a href=\"{api}\">This page as JSON</a></p></main></body></html>\n",
        t = esc(title),
        api = esc(api),
    )
}

fn error_note(data: &Value) -> String {
    match data.get("error").and_then(Value::as_str) {
        Some(e) => format!("<p role=\"alert\" class=\"failed\">{}</p>", esc(e)),
        None => String::new(),
    }
}

pub fn overview(data: &Value) -> String {
    let mut b = String::new();
    b.push_str("<h2>Upstreams</h2><table id=\"upstreams\"><thead><tr><th scope=\"col\">Upstream</th><th scope=\"col\">Transport</th><th scope=\"col\">State</th><th scope=\"col\">Restarts</th><th scope=\"col\">Tools</th><th scope=\"col\">Callers' own processes</th><th scope=\"col\">Last listing error</th></tr></thead><tbody>");
    for u in data["upstreams"].as_array().into_iter().flatten() {
        let own = &u["caller_processes"];
        let own = match (own["running"].as_u64(), own["max"].as_u64()) {
            (Some(n), Some(max)) => format!("{n} of at most {max}"),
            _ => "—".to_owned(),
        };
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            text(&u["name"]),
            text(&u["transport"]),
            if u["state"] == "running" { "ok" } else { "failed" },
            text(&u["state"]),
            text(&u["restarts"]),
            text(&u["tools"]),
            own,
            text(&u["last_listing_error"]),
        );
    }
    b.push_str("</tbody></table>");
    let _ = write!(
        b,
        "<p>{} tools in the catalogue. Traces: {}.</p>",
        text(&data["catalogue_tools"]),
        if data["traces"] == true { "on" } else { "off" }
    );
    b.push_str("<h2>Calls since start</h2>");
    counts_table(&mut b, "totals", &data["calls_since_start"]);
    b.push_str("<h2>Calls per minute (last 10 minutes, from the audit trail)</h2>");
    match &data["calls_per_minute"] {
        Value::Array(minutes) => {
            b.push_str("<table id=\"per-minute\"><thead><tr><th scope=\"col\">Minute (UTC)</th><th scope=\"col\">Calls by decision / outcome</th></tr></thead><tbody>");
            for m in minutes {
                let counts: Vec<String> = m["counts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        format!(
                            "{} / {}: {}",
                            text(&c["decision"]),
                            text(&c["outcome"]),
                            text(&c["calls"])
                        )
                    })
                    .collect();
                let _ = write!(
                    b,
                    "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
                    text(&m["minute"]),
                    if counts.is_empty() {
                        "none".to_owned()
                    } else {
                        counts.join("; ")
                    }
                );
            }
            b.push_str("</tbody></table>");
        }
        Value::Null => b.push_str("<p>No audit store is configured ([store] url).</p>"),
        other => b.push_str(&error_note(other)),
    }
    page("Overview", "/api/overview", &b)
}

fn counts_table(b: &mut String, id: &str, rows: &Value) {
    let _ = write!(b, "<table id=\"{id}\"><thead><tr><th scope=\"col\">Decision</th><th scope=\"col\">Outcome</th><th scope=\"col\">Calls</th></tr></thead><tbody>");
    for c in rows.as_array().into_iter().flatten() {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            text(&c["decision"]),
            text(&c["outcome"]),
            text(&c["calls"])
        );
    }
    b.push_str("</tbody></table>");
}

/// The catalogue page: a caller chooser, and (`data`, when one is chosen) what
/// that caller sees and the rules that decided it.
pub fn catalogue(callers: &[String], chosen: Option<&str>, data: Option<&Value>) -> String {
    let mut b = String::new();
    b.push_str("<form method=\"get\" action=\"/catalogue\"><label for=\"caller\">Caller</label><input id=\"caller\" name=\"caller\" list=\"callers\" required value=\"");
    b.push_str(&esc(chosen.unwrap_or_default()));
    b.push_str("\"><datalist id=\"callers\">");
    for c in callers {
        let _ = write!(b, "<option value=\"{}\">", esc(c));
    }
    b.push_str("</datalist><button type=\"submit\">Show</button></form>");
    let api = match chosen {
        Some(c) => format!("/api/catalogue?caller={}", url_encode(c)),
        None => "/api/catalogue".to_owned(),
    };
    let Some(data) = data else {
        b.push_str("<p>Choose a caller to see the tools it is shown.</p>");
        return page("Catalogue", &api, &b);
    };
    b.push_str(&error_note(data));
    let _ = write!(
        b,
        "<h2>What {} sees</h2><p>Groups: {}.</p>",
        text(&data["caller"]),
        match text(&data["groups"]) {
            g if g.is_empty() => "none".to_owned(),
            g => g,
        }
    );
    b.push_str("<table id=\"catalogue\"><thead><tr><th scope=\"col\">Tool</th><th scope=\"col\">Parameters</th><th scope=\"col\">Description</th></tr></thead><tbody>");
    for t in data["tools"].as_array().into_iter().flatten() {
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td></tr>",
            text(&t["name"]),
            text(&t["parameters"]),
            text(&t["description"])
        );
    }
    b.push_str("</tbody></table><h2>The rules that decided it</h2>");
    if data["grant_webhook"] == true {
        b.push_str("<p>A grant webhook is configured: its decisions come before these rules, and the list above includes them.</p>");
    }
    b.push_str("<table id=\"rules\"><thead><tr><th scope=\"col\">Rule</th><th scope=\"col\">Callers</th><th scope=\"col\">Tools</th><th scope=\"col\">Effect</th><th scope=\"col\">Decides, for this caller</th></tr></thead><tbody>");
    for r in data["rules"].as_array().into_iter().flatten() {
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            text(&r["rule"]),
            text(&r["callers"]),
            text(&r["tools"]),
            text(&r["effect"]),
            text(&r["decides"])
        );
    }
    b.push_str("</tbody></table>");
    page("Catalogue", &api, &b)
}

const OUTCOMES: &[&str] = &[
    "ok",
    "tool_error",
    "upstream_error",
    "refused",
    "failed",
    "cancelled",
    "input_required",
    "abandoned",
    // Tool drift records (P2): the upstream's pins mode.
    "hidden",
    "ask",
    "report",
];

/// The calls page. `older`: the query string of the next (older) page, when
/// there is one; `newest`: the first page's, when this is a later one.
pub fn calls(data: &Value, query: &str, older: Option<&str>, newest: Option<&str>) -> String {
    let f = &data["filters"];
    let field = |name: &str, label: &str, hint: &str| {
        format!(
            "<label for=\"{name}\">{label}</label><input id=\"{name}\" name=\"{name}\" value=\"{}\" placeholder=\"{hint}\">",
            f[name].as_str().map(esc).unwrap_or_default()
        )
    };
    let mut b = String::new();
    b.push_str("<form method=\"get\" action=\"/calls\">");
    b.push_str(&field("caller", "Caller", "any"));
    b.push_str(&field("tool", "Tool", "any"));
    b.push_str("<label for=\"outcome\">Outcome</label><select id=\"outcome\" name=\"outcome\"><option value=\"\">any</option>");
    for o in OUTCOMES {
        let selected = if f["outcome"] == *o { " selected" } else { "" };
        let _ = write!(b, "<option{selected}>{o}</option>");
    }
    b.push_str("</select>");
    b.push_str(&field("since", "Since", "2h or 2026-11-30T04:00:00Z"));
    if f["limit"]
        .as_u64()
        .is_some_and(|l| l != DEFAULT_LIMIT as u64)
    {
        let _ = write!(
            b,
            "<input type=\"hidden\" name=\"limit\" value=\"{}\">",
            text(&f["limit"])
        );
    }
    b.push_str("<button type=\"submit\">Filter</button></form>");
    b.push_str(&error_note(data));
    if let Some(calls) = data["calls"].as_array() {
        let _ = write!(
            b,
            "<p>{} calls, newest first (at most {} a page){}.</p>",
            calls.len(),
            text(&f["limit"]),
            match f["before"].as_i64() {
                Some(id) => format!(", older than call {id}"),
                None => String::new(),
            }
        );
        b.push_str("<table id=\"calls\"><thead><tr><th scope=\"col\">Time (UTC)</th><th scope=\"col\">Caller</th><th scope=\"col\">Tool</th><th scope=\"col\">Decision</th><th scope=\"col\">Outcome</th><th scope=\"col\">Why</th><th scope=\"col\">ms</th><th scope=\"col\">Undeclared keys</th></tr></thead><tbody>");
        for c in calls {
            let class = match c["outcome"].as_str() {
                Some("refused") => "refused",
                Some("failed") => "failed",
                Some("ok") => "ok",
                _ => "",
            };
            let _ = write!(
                b,
                "<tr><td><a href=\"/calls/{id}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td>{:.1}</td><td>{}</td></tr>",
                text(&c["time"]),
                text(&c["caller"]),
                text(&c["tool"]),
                text(&c["decision"]),
                text(&c["outcome"]),
                text(&c["why"]),
                c["duration_ms"].as_f64().unwrap_or_default(),
                text(&c["undeclared_keys"]),
                id = text(&c["id"]),
            );
        }
        b.push_str("</tbody></table>");
        paging(&mut b, older, newest);
    }
    let api = if query.is_empty() {
        "/api/calls".to_owned()
    } else {
        format!("/api/calls?{query}")
    };
    page("Calls", &api, &b)
}

/// Links to the newest page and to the next, older one, as there are.
fn paging(b: &mut String, older: Option<&str>, newest: Option<&str>) {
    if older.is_none() && newest.is_none() {
        return;
    }
    b.push_str("<nav aria-label=\"Pages\" id=\"paging\"><p>");
    let link = |q: &str| {
        if q.is_empty() {
            "/calls".to_owned()
        } else {
            format!("/calls?{q}")
        }
    };
    if let Some(q) = newest {
        let _ = write!(b, "<a href=\"{}\">Newest calls</a> ", esc(&link(q)));
    }
    if let Some(q) = older {
        let _ = write!(
            b,
            "<a href=\"{}\" rel=\"next\">Older calls</a>",
            esc(&link(q))
        );
    }
    b.push_str("</p></nav>");
}

/// The quotas page: each quota as configured and each caller's use of it.
pub fn quotas(data: &Value) -> String {
    let mut b = String::new();
    let list = data["quotas"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        b.push_str("<p>No quotas are configured ([[quota]]).</p>");
        return page("Quotas", "/api/quotas", &b);
    }
    b.push_str("<p>Use as this gateway process counts it: calls in flight against a concurrency, and calls a rate would take at once now (of its burst). A caller not listed under a quota has its whole quota.");
    if data["rates_shared"] == true {
        b.push_str(" Rates are counted in the shared store with the other replicas, so only concurrency is shown here.");
    }
    b.push_str("</p><table id=\"quotas\"><thead><tr><th scope=\"col\">Quota</th><th scope=\"col\">Callers</th><th scope=\"col\">Tools</th><th scope=\"col\">Rate</th><th scope=\"col\">Concurrency</th><th scope=\"col\">Use now, per caller</th></tr></thead><tbody>");
    for q in &list {
        let rate = match q["rate"].as_str() {
            Some(r) => format!("{} (burst {})", esc(r), text(&q["burst"])),
            None => "none".to_owned(),
        };
        let used: Vec<String> = q["use"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| {
                let mut parts = Vec::new();
                if let Some(n) = u["in_flight"].as_u64() {
                    parts.push(format!("{n} in flight"));
                }
                if let (Some(a), Some(burst)) = (u["available"].as_u64(), u["burst"].as_u64()) {
                    parts.push(format!("{a} of {burst} calls available now"));
                }
                format!("<li>{}: {}</li>", text(&u["caller"]), parts.join(", "))
            })
            .collect();
        let used = if used.is_empty() {
            "no caller has used it".to_owned()
        } else {
            format!("<ul>{}</ul>", used.concat())
        };
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{rate}</td><td>{}</td><td>{used}</td></tr>",
            text(&q["quota"]),
            text(&q["callers"]),
            text(&q["tools"]),
            match q["concurrency"].as_u64() {
                Some(n) => n.to_string(),
                None => "none".to_owned(),
            },
        );
    }
    b.push_str("</tbody></table>");
    page("Quotas", "/api/quotas", &b)
}

pub fn call(data: &Value) -> String {
    let id = text(&data["id"]);
    let mut b = String::from("<dl id=\"call\">");
    for (key, label) in [
        ("time", "Time (UTC)"),
        ("caller", "Caller"),
        ("session", "Session"),
        ("tool", "Tool"),
        ("upstream", "Upstream"),
        ("decision", "Decision"),
        ("outcome", "Outcome"),
        ("why", "Why"),
        ("reason", "Caller's reason"),
        ("unknown_keys", "Undeclared keys"),
        ("unknown_mode", "Undeclared keys mode"),
        ("duration_ms", "Duration (ms)"),
        ("idempotency_key", "Idempotency key"),
        ("replayed", "Answered from the ledger"),
    ] {
        let _ = write!(b, "<dt>{label}</dt><dd>{}</dd>", text(&data[key]));
    }
    b.push_str(
        "</dl><h2>Arguments (redacted as the audit trail stores them)</h2><pre id=\"arguments\">",
    );
    b.push_str(&esc(
        &serde_json::to_string_pretty(&data["arguments"]).unwrap_or_default()
    ));
    b.push_str("</pre>");
    if let Some(diff) = data["drift"]["diff"].as_str().filter(|d| !d.is_empty()) {
        // The upstream's words: escaped like everything else.
        b.push_str("<h2>How the tool differs from the pins lock</h2><pre id=\"drift\">");
        b.push_str(&esc(diff));
        b.push_str("</pre>");
    }
    b.push_str("<p><a href=\"/calls\">All calls</a></p>");
    page(&format!("Call {id}"), &format!("/api/calls/{id}"), &b)
}

/// A page that says why there is nothing to show.
pub fn message(title: &str, what: &str) -> String {
    page(title, "/api/overview", &format!("<p>{}</p>", esc(what)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_value_is_escaped() {
        assert_eq!(
            esc("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        let page = calls(
            &json!({"filters": {"caller": "\"><x", "limit": 100}, "calls": [{"id": 1, "time": "t", "caller": "<b>", "tool": "t<", "decision": "d", "outcome": "refused", "why": "<i>", "duration_ms": 1.0, "undeclared_keys": ["<k>"]}]}),
            "caller=%22",
            Some("caller=%22&before=1"),
            None,
        );
        assert!(
            !page.contains("<b>")
                && !page.contains("<i>")
                && !page.contains("<k>")
                && !page.contains("\"><x")
        );
        assert!(page.contains("&lt;b&gt;"));
        assert_eq!(url_encode("a b/é"), "a%20b%2F%C3%A9");
        let drift = call(
            &json!({"id": 2, "tool": "fx.lookup", "decision": "tool_drift", "outcome": "hidden", "arguments": null,
                    "drift": {"change": "changed", "diff": "fx.lookup: changed\n  description\n    + \"<script>\"\n"}}),
        );
        assert!(
            drift.contains("<pre id=\"drift\">fx.lookup: changed\n  description\n    + &quot;&lt;script&gt;&quot;\n</pre>"),
            "{drift}"
        );
    }
}
