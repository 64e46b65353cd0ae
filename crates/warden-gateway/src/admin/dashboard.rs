//! The charts page: each chart of [`super::stats`] drawn as SVG
//! ([`super::chart`]) with a table of the same numbers beside it, for screen
//! readers and for whoever wants the figures exactly.

use super::chart::{self, Series};
use super::html::{esc, page};
use super::stats::{OTHER_COLOR, OUTCOME_COLORS};
use serde_json::Value;
use std::fmt::Write as _;

/// `HH:MM` of an RFC 3339 time (`2026-12-03T13:05:00Z` → `13:05`).
fn clock(rfc3339: &str) -> String {
    rfc3339.get(11..16).unwrap_or(rfc3339).to_owned()
}

/// A chart and its table side by side, under a heading.
fn figure(b: &mut String, id: &str, heading: &str, svg: &str, table: &str) {
    let _ = write!(
        b,
        "<section aria-labelledby=\"{id}-heading\"><h2 id=\"{id}-heading\">{}</h2>\
         <div class=\"figure\"><div>{svg}</div><div>{table}</div></div></section>",
        esc(heading)
    );
}

/// The whole page from `/api/charts`.
pub fn charts(data: &Value) -> String {
    let mut b = String::new();
    if let Some(e) = data["error"].as_str() {
        let _ = write!(b, "<p role=\"alert\" class=\"failed\">{}</p>", esc(e));
        return page("Charts", "/api/charts", &b);
    }
    let _ = write!(
        b,
        "<p>The last {} minutes of the audit trail, this minute included.</p>",
        data["minutes"].as_i64().unwrap_or_default()
    );
    per_minute(&mut b, &data["per_minute"]);
    refusals(&mut b, &data["refusals"]);
    latency(&mut b, &data["latency"]);
    match data["findings"].as_array() {
        Some(list) => findings(&mut b, list),
        None => b.push_str("<p id=\"findings\">No guards are configured ([[guard]]), so there are no findings to chart.</p>"),
    }
    page("Charts", "/api/charts", &b)
}

fn per_minute(b: &mut String, minutes: &Value) {
    let minutes = minutes.as_array().cloned().unwrap_or_default();
    // The outcomes that occur, in the order the chart stacks them.
    let mut present: Vec<(String, &str)> = Vec::new();
    for m in &minutes {
        for o in m["outcomes"].as_object().into_iter().flat_map(|o| o.keys()) {
            if !present.iter().any(|(p, _)| p == o) {
                let color = OUTCOME_COLORS
                    .iter()
                    .find(|(n, _)| n == o)
                    .map_or(OTHER_COLOR, |(_, c)| c);
                present.push((o.clone(), color));
            }
        }
    }
    let rank = |o: &str| {
        OUTCOME_COLORS
            .iter()
            .position(|(n, _)| *n == o)
            .unwrap_or(usize::MAX)
    };
    present.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then(a.0.cmp(&b.0)));
    let series: Vec<Series> = present
        .iter()
        .map(|(name, color)| Series { name, color })
        .collect();
    let columns: Vec<(String, Vec<u64>)> = minutes
        .iter()
        .map(|m| {
            let counts = present
                .iter()
                .map(|(o, _)| m["outcomes"][o].as_u64().unwrap_or(0))
                .collect();
            (clock(m["minute"].as_str().unwrap_or_default()), counts)
        })
        .collect();
    let svg = chart::stacked_columns(
        "per-minute-chart",
        "Calls per minute by outcome",
        &series,
        &columns,
    );
    let mut t = String::from(
        "<table id=\"per-minute-table\"><thead><tr><th scope=\"col\">Minute (UTC)</th>",
    );
    for (o, _) in &present {
        let _ = write!(t, "<th scope=\"col\">{}</th>", esc(o));
    }
    t.push_str("</tr></thead><tbody>");
    for (label, counts) in &columns {
        let _ = write!(t, "<tr><th scope=\"row\">{}</th>", esc(label));
        for n in counts {
            let _ = write!(t, "<td>{n}</td>");
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    if present.is_empty() {
        t.push_str("<p>No calls in this window.</p>");
    }
    figure(b, "per-minute", "Calls per minute by outcome", &svg, &t);
}

fn refusals(b: &mut String, list: &Value) {
    let rows: Vec<(String, Vec<f64>)> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let reason = r["reason"].as_str().unwrap_or_default().to_owned();
            (reason, vec![r["calls"].as_f64().unwrap_or_default()])
        })
        .collect();
    let series = [Series {
        name: "refused calls",
        color: "#c0392b",
    }];
    let svg = chart::bars("refusals-chart", "Refusals by reason", &series, &rows, "");
    let table = two_columns(
        "refusals-table",
        ("Reason (decision)", "Refused calls"),
        &rows,
    );
    figure(b, "refusals", "Refusals by reason", &svg, &table);
}

fn latency(b: &mut String, list: &Value) {
    let list = list.as_array().cloned().unwrap_or_default();
    let rows: Vec<(String, Vec<f64>)> = list
        .iter()
        .map(|u| {
            let up = u["upstream"].as_str().unwrap_or_default().to_owned();
            (
                up,
                vec![
                    u["p50_ms"].as_f64().unwrap_or_default(),
                    u["p99_ms"].as_f64().unwrap_or_default(),
                ],
            )
        })
        .collect();
    let series = [
        Series {
            name: "p50",
            color: "#2f6db5",
        },
        Series {
            name: "p99",
            color: "#e76f51",
        },
    ];
    let svg = chart::bars(
        "latency-chart",
        "Latency per upstream, p50 and p99 (ms)",
        &series,
        &rows,
        " ms",
    );
    let mut t = String::from("<table id=\"latency-table\"><thead><tr><th scope=\"col\">Upstream</th><th scope=\"col\">Calls</th><th scope=\"col\">p50 (ms)</th><th scope=\"col\">p99 (ms)</th></tr></thead><tbody>");
    for u in &list {
        let _ = write!(
            t,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(u["upstream"].as_str().unwrap_or_default()),
            u["calls"],
            u["p50_ms"],
            u["p99_ms"]
        );
    }
    t.push_str("</tbody></table>");
    if list.is_empty() {
        t.push_str("<p>No call reached an upstream in this window.</p>");
    }
    figure(b, "latency", "Latency per upstream (p50, p99)", &svg, &t);
}

fn findings(b: &mut String, list: &[Value]) {
    let rows: Vec<(String, Vec<f64>)> = list
        .iter()
        .map(|f| {
            let label = format!(
                "{}: {}",
                f["guard"].as_str().unwrap_or_default(),
                f["kind"].as_str().unwrap_or_default()
            );
            (label, vec![f["found"].as_f64().unwrap_or_default()])
        })
        .collect();
    let series = [Series {
        name: "findings",
        color: "#8e44ad",
    }];
    let svg = chart::bars(
        "findings-chart",
        "Guard findings by guard and kind",
        &series,
        &rows,
        "",
    );
    let table = two_columns("findings-table", ("Guard: kind", "Findings"), &rows);
    figure(b, "findings", "Guard findings", &svg, &table);
}

/// A table of a label and one number per row.
fn two_columns(id: &str, heads: (&str, &str), rows: &[(String, Vec<f64>)]) -> String {
    let mut t = format!(
        "<table id=\"{id}\"><thead><tr><th scope=\"col\">{}</th><th scope=\"col\">{}</th></tr></thead><tbody>",
        esc(heads.0),
        esc(heads.1)
    );
    for (label, v) in rows {
        let _ = write!(
            t,
            "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
            esc(label),
            v.first().copied().unwrap_or_default()
        );
    }
    t.push_str("</tbody></table>");
    if rows.is_empty() {
        t.push_str("<p>None in this window.</p>");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_chart_has_its_table_beside_it() {
        let page = charts(&json!({
            "minutes": 2,
            "per_minute": [
                {"minute": "2026-12-03T13:04:00Z", "outcomes": {"refused": 1}},
                {"minute": "2026-12-03T13:05:00Z", "outcomes": {"ok": 3, "refused": 1}},
            ],
            "refusals": [{"reason": "unknown_tool", "calls": 2}],
            "latency": [{"upstream": "up", "calls": 3, "p50_ms": 1.5, "p99_ms": 9.0}],
            "findings": [{"guard": "leaks", "kind": "aws_key", "found": 4}],
        }));
        for id in ["per-minute", "refusals", "latency", "findings"] {
            assert!(page.contains(&format!("<svg id=\"{id}-chart\"")), "{id}");
            assert!(page.contains(&format!("<table id=\"{id}-table\">")), "{id}");
        }
        // Columns in the stacking order: ok before refused, whatever the JSON's.
        assert!(page.contains("<th scope=\"col\">ok</th><th scope=\"col\">refused</th>"));
        assert!(page.contains("<tr><th scope=\"row\">13:04</th><td>0</td><td>1</td></tr>"));
        assert!(
            page.contains("<tr><th scope=\"row\">up</th><td>3</td><td>1.5</td><td>9.0</td></tr>")
        );
        assert!(page.contains("<tr><th scope=\"row\">leaks: aws_key</th><td>4</td></tr>"));
        let none = charts(
            &json!({"minutes": 1, "per_minute": [], "refusals": [], "latency": [], "findings": null}),
        );
        assert!(none
            .contains("No guards are configured ([[guard]]), so there are no findings to chart."));
        assert!(!none.contains("findings-chart"));
    }
}
