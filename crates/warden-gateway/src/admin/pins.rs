//! The pins page (P2 in the console): the lock, each upstream's mode and drift,
//! a side-by-side view of what changed in each drifted tool (the lock's
//! definition against the listing's, field by field), and the approve form,
//! which writes the lock exactly as `mcp-warden pins approve` does
//! ([`crate::pins::approve_into`]) and rebuilds the catalogue at once, and the
//! reject form, which records the listed definition as rejected in the lock
//! (P4, [`crate::pins::reject_into`]) so it stays withheld and is not offered
//! again until the upstream lists another.

use super::html::{esc, page};
use crate::gateway::Gateway;
use crate::pins::{self, Drift};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The pins lock: whether there is one beside the config, and per upstream its
/// mode, how many tools the lock holds and how its last listing drifted from
/// them (what `mcp-warden pins diff` prints), each drift with the definitions
/// on both sides.
pub fn data(gw: &Gateway) -> Value {
    let path = pins::lock_path(&gw.config.path);
    // The file's name only: where the config lives is not the console's to show.
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let lock = match pins::Lock::read(&path) {
        Ok(lock) => lock,
        Err(e) => {
            tracing::warn!(
                "the console cannot read the pins lock: {}",
                crate::logged::logged(&e)
            );
            return json!({"lock": file, "present": true, "error": "the pins lock cannot be read (the log says why); the gateway keeps the last good one"});
        }
    };
    let listings = gw.upstream_listings();
    let upstreams: Vec<Value> = gw
        .config
        .upstream
        .iter()
        .map(|u| {
            // The mode as the config writes it (`hidden` when unset).
            let mode = format!("{:?}", u.pins.unwrap_or_default()).to_lowercase();
            let locked = lock.as_ref().and_then(|l| l.upstreams.get(&u.name));
            let listing = listings.iter().find(|(name, _)| *name == u.name);
            let drift: Vec<Value> = match (&lock, listing) {
                (Some(lock), Some((_, tools))) => {
                    let none = Default::default();
                    let locked = locked.unwrap_or(&none);
                    pins::diff(locked, tools)
                        .iter()
                        .map(|d| drift(&u.name, d, (locked, lock), tools))
                        .collect()
                }
                _ => Vec::new(),
            };
            json!({
                "upstream": u.name,
                "mode": mode,
                "locked_tools": locked.map_or(0, |t| t.len()),
                "listed": listing.is_some(),
                "drift": drift,
            })
        })
        .collect();
    json!({"lock": file, "present": lock.is_some(), "upstreams": upstreams})
}

/// One drift: the tool, what changed in a few words, and per reviewed field that
/// differs the lock's value and the listing's (`null` where absent); the name to
/// approve, the name to reject (`null` for a removal: nothing is listed to
/// withhold), and whether the listed definition is one already rejected (P4).
fn drift(
    up: &str,
    d: &Drift,
    (locked, lock): (&std::collections::BTreeMap<String, Value>, &pins::Lock),
    tools: &[Value],
) -> Value {
    let find = |n: &str| {
        tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(n))
    };
    let listed = |n: &str| find(n).map(pins::reviewed);
    let whole = |was: Option<&Value>, is: Option<Value>| -> Vec<Value> {
        pins::REVIEWED
            .iter()
            .filter_map(|k| {
                let a = was.and_then(|w| w.get(*k)).cloned().unwrap_or(Value::Null);
                let b = is
                    .as_ref()
                    .and_then(|i| i.get(*k))
                    .cloned()
                    .unwrap_or(Value::Null);
                (a != b).then(|| json!({"field": k, "locked": a, "listed": b}))
            })
            .collect()
    };
    let (tool, change, fields) = match d {
        Drift::Added(n) => (n, "added".to_owned(), whole(None, listed(n))),
        Drift::Removed(n) => (n, "removed".to_owned(), whole(locked.get(n), None)),
        Drift::Renamed { from, to } => (
            from,
            format!("renamed to {up}.{to}"),
            whole(locked.get(from), listed(to)),
        ),
        Drift::Changed(n, fields) => {
            let names: Vec<&str> = fields.iter().map(|(k, _, _)| k.as_str()).collect();
            let fields = fields
                .iter()
                .map(|(k, a, b)| json!({"field": k, "locked": a, "listed": b}))
                .collect();
            (n, format!("changed: {}", names.join(", ")), fields)
        }
    };
    // What to approve to take the listing into the lock: the name it is listed under.
    let (approve, listed_as) = match d {
        Drift::Renamed { to, .. } => (format!("{up}.{to}"), Some(to)),
        Drift::Removed(_) => (format!("{up}.{tool}"), None),
        _ => (format!("{up}.{tool}"), Some(tool)),
    };
    let rejected = listed_as
        .and_then(|n| find(n))
        .is_some_and(|t| lock.rejects(up, t));
    let reject = listed_as.map(|n| format!("{up}.{n}"));
    json!({"tool": format!("{up}.{tool}"), "change": change, "approve": approve,
           "reject": reject, "rejected": rejected, "fields": fields})
}

/// Rejects `tool` (`upstream.tool`) as listed now (P4): the lock records its
/// definition as rejected, written whole as an approval writes it, and the
/// catalogue is built again under it. How many rejected definitions the lock
/// holds, or why not.
pub async fn reject(gw: &Gateway, tool: &str, by: &str) -> Result<usize, String> {
    let path = pins::lock_path(&gw.config.path);
    let listings = gw.upstream_listings();
    let held = pins::reject_into(&path, &listings, &[tool.to_owned()])?;
    tracing::info!(tool = %crate::logged::logged(tool), by = %crate::logged::logged(by), "the console rejected a tool definition; the pins lock records it");
    gw.pins_changed().await;
    Ok(held)
}

/// Approves `tool` (`upstream.tool` as the lock names it) from the listing into
/// the lock, as `mcp-warden pins approve <tool>` would, then serves the
/// catalogue under the new lock. How many tools the lock holds, or why not.
pub async fn approve(gw: &Gateway, tool: &str, by: &str) -> Result<usize, String> {
    let path = pins::lock_path(&gw.config.path);
    let listings = gw.upstream_listings();
    let names = [tool.to_owned()];
    let held = pins::approve_into(&path, &listings, &names)?;
    tracing::info!(tool = %crate::logged::logged(tool), by = %crate::logged::logged(by), "the console approved a tool definition into the pins lock");
    gw.pins_changed().await;
    Ok(held)
}

/// The pins page: the table of upstreams, then a review of each drifted tool
/// with its approve form (carrying `csrf`).
pub fn html(data: &Value, csrf: &str) -> String {
    let mut b = String::new();
    if let Some(e) = data["error"].as_str() {
        let _ = write!(b, "<p role=\"alert\" class=\"failed\">{}</p>", esc(e));
    } else if data["present"] == true {
        let _ = write!(
            b,
            "<p id=\"lock\">The pins lock {} holds the reviewed tool definitions; a tool that differs from it is handled as each upstream's mode says.</p>",
            esc(data["lock"].as_str().unwrap_or_default())
        );
    } else {
        let _ = write!(
            b,
            "<p id=\"lock\">No pins lock ({} beside the config): every listed tool is served as listed. <code>mcp-warden pins lock</code> writes one.</p>",
            esc(data["lock"].as_str().unwrap_or_default())
        );
    }
    b.push_str("<table id=\"pins\"><thead><tr><th scope=\"col\">Upstream</th><th scope=\"col\">Mode</th><th scope=\"col\">Locked tools</th><th scope=\"col\">Drift from the lock</th></tr></thead><tbody>");
    let ups = data["upstreams"].as_array().cloned().unwrap_or_default();
    for u in &ups {
        let drift: Vec<String> = u["drift"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let tool = d["tool"].as_str().unwrap_or_default();
                let rejected = match d["rejected"] == true {
                    true => " (rejected: withheld)",
                    false => "",
                };
                format!(
                    "<li><a href=\"#review-{}\">{}</a>: {}{rejected}</li>",
                    esc(tool),
                    esc(tool),
                    esc(d["change"].as_str().unwrap_or_default())
                )
            })
            .collect();
        let drift = match (
            drift.is_empty(),
            data["present"] == true,
            u["listed"] == true,
        ) {
            (false, _, _) => format!("<ul class=\"failed\">{}</ul>", drift.concat()),
            (true, false, _) => "no lock".to_owned(),
            (true, true, false) => "not listed yet".to_owned(),
            (true, true, true) => {
                "<span class=\"ok\">none: every tool is as locked</span>".to_owned()
            }
        };
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{drift}</td></tr>",
            esc(u["upstream"].as_str().unwrap_or_default()),
            esc(u["mode"].as_str().unwrap_or_default()),
            u["locked_tools"],
        );
    }
    b.push_str("</tbody></table>");
    for d in ups
        .iter()
        .flat_map(|u| u["drift"].as_array().cloned().unwrap_or_default())
    {
        review(&mut b, &d, csrf);
    }
    page("Pins", "/api/pins", &b)
}

/// One drifted tool side by side: per field, the lock's definition and the
/// listing's, the lines only one side has marked; then the approve form.
fn review(b: &mut String, d: &Value, csrf: &str) {
    let tool = d["tool"].as_str().unwrap_or_default();
    let _ = write!(
        b,
        "<section class=\"review\" id=\"review-{t}\" aria-labelledby=\"review-{t}-heading\"><h2 id=\"review-{t}-heading\">{t}: {}</h2>\
         <table class=\"diff\"><thead><tr><th scope=\"col\">Field</th><th scope=\"col\">In the lock (reviewed)</th><th scope=\"col\">As listed now</th></tr></thead><tbody>",
        esc(d["change"].as_str().unwrap_or_default()),
        t = esc(tool),
    );
    for f in d["fields"].as_array().into_iter().flatten() {
        let (was, is) = (pretty(&f["locked"]), pretty(&f["listed"]));
        let (left, right) = side_by_side(&was, &is);
        let _ = write!(
            b,
            "<tr><th scope=\"row\">{}</th><td><pre>{left}</pre></td><td><pre>{right}</pre></td></tr>",
            esc(f["field"].as_str().unwrap_or_default())
        );
    }
    b.push_str("</tbody></table>");
    if d["rejected"] == true {
        // P4: not offered again until the upstream lists another definition.
        b.push_str(REJECTED_NOTE);
        b.push_str("</section>");
        return;
    }
    // Approving a removed tool takes it out of the lock, as `pins approve` does.
    let approve = d["approve"].as_str().unwrap_or(tool);
    let label = match d["change"].as_str() {
        Some("removed") => format!("Approve the removal of {}", esc(approve)),
        _ => format!("Approve {} as listed now", esc(approve)),
    };
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/pins/approve\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"tool\" value=\"{}\"><button type=\"submit\">{label}</button></form>",
        esc(csrf),
        esc(approve),
    );
    if let Some(reject) = d["reject"].as_str() {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/pins/reject\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"tool\" value=\"{r}\"><button type=\"submit\">Reject {r} as listed now</button></form>",
            esc(csrf),
            r = esc(reject),
        );
    }
    b.push_str("</section>");
}

/// What a drift whose listed definition was rejected shows instead of its forms.
const REJECTED_NOTE: &str = "<p class=\"failed\">Rejected: this definition is withheld and not offered for approval again until the upstream lists another one. <code>mcp-warden pins approve</code> still takes it.</p>";

/// A value as the review shows it: pretty JSON, or `(absent)`.
fn pretty(v: &Value) -> String {
    match v {
        Value::Null => "(absent)".to_owned(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// Both texts escaped, line by line, with the lines that are not in their
/// longest common run of lines marked (`<del>` on the left, `<ins>` on the right).
fn side_by_side(was: &str, is: &str) -> (String, String) {
    let (a, b): (Vec<&str>, Vec<&str>) = (was.lines().collect(), is.lines().collect());
    // LCS table over lines; definitions are short.
    let mut t = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            t[i][j] = if a[i] == b[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let (mut keep_a, mut keep_b) = (vec![false; a.len()], vec![false; b.len()]);
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            (keep_a[i], keep_b[j]) = (true, true);
            (i, j) = (i + 1, j + 1);
        } else if t[i + 1][j] >= t[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    let mark = |lines: &[&str], keep: &[bool], tag: &str| -> String {
        lines
            .iter()
            .zip(keep)
            .map(|(l, k)| match k {
                true => esc(l),
                false => format!("<{tag}>{}</{tag}>", esc(l)),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    (mark(&a, &keep_a, "del"), mark(&b, &keep_b, "ins"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_only_one_side_has_are_marked() {
        let (l, r) = side_by_side(
            "{\n  \"a\": 1,\n  \"b\": \"<x>\"\n}",
            "{\n  \"a\": 2,\n  \"b\": \"<x>\"\n}",
        );
        assert_eq!(
            l,
            "{\n<del>  &quot;a&quot;: 1,</del>\n  &quot;b&quot;: &quot;&lt;x&gt;&quot;\n}"
        );
        assert_eq!(
            r,
            "{\n<ins>  &quot;a&quot;: 2,</ins>\n  &quot;b&quot;: &quot;&lt;x&gt;&quot;\n}"
        );
        let (l, r) = side_by_side("(absent)", "Echo.");
        assert_eq!(
            (l.as_str(), r.as_str()),
            ("<del>(absent)</del>", "<ins>Echo.</ins>")
        );
    }

    #[test]
    fn a_drifted_tool_is_reviewed_side_by_side_with_its_approve_form() {
        let data = json!({"lock": "warden.pins.json", "present": true, "upstreams": [{
            "upstream": "up", "mode": "hidden", "locked_tools": 2, "listed": true,
            "drift": [{"tool": "up.echo", "change": "changed: description", "approve": "up.echo",
                       "fields": [{"field": "description", "locked": "Echo.", "listed": "Echo <b>louder</b>."}]}]}]});
        let page = html(&data, "tok&en");
        assert!(
            page.contains("<li><a href=\"#review-up.echo\">up.echo</a>: changed: description</li>")
        );
        assert!(page.contains("<tr><th scope=\"row\">description</th><td><pre><del>Echo.</del></pre></td><td><pre><ins>Echo &lt;b&gt;louder&lt;/b&gt;.</ins></pre></td></tr>"), "{page}");
        assert!(page.contains("<form method=\"post\" action=\"/pins/approve\"><input type=\"hidden\" name=\"csrf\" value=\"tok&amp;en\"><input type=\"hidden\" name=\"tool\" value=\"up.echo\"><button type=\"submit\">Approve up.echo as listed now</button></form>"));
        // No reject form for a drift without a `reject` name (a removal).
        assert!(!page.contains("/pins/reject"));
    }

    #[test]
    fn a_drift_is_offered_for_rejection_until_rejected_then_only_named() {
        let drift = |rejected: bool| {
            json!({"lock": "warden.pins.json", "present": true, "upstreams": [{
                "upstream": "up", "mode": "ask", "locked_tools": 2, "listed": true,
                "drift": [{"tool": "up.echo", "change": "changed: description", "approve": "up.echo",
                           "reject": "up.echo", "rejected": rejected,
                           "fields": [{"field": "description", "locked": "Echo.", "listed": "Echo!"}]}]}]})
        };
        let page = html(&drift(false), "t");
        assert!(page.contains("<form method=\"post\" action=\"/pins/reject\"><input type=\"hidden\" name=\"csrf\" value=\"t\"><input type=\"hidden\" name=\"tool\" value=\"up.echo\"><button type=\"submit\">Reject up.echo as listed now</button></form></section>"), "{page}");
        let page = html(&drift(true), "t");
        assert!(
            page.contains("<li><a href=\"#review-up.echo\">up.echo</a>: changed: description (rejected: withheld)</li>")
        );
        assert!(page.contains("</table><p class=\"failed\">Rejected: this definition is withheld and not offered for approval again until the upstream lists another one. <code>mcp-warden pins approve</code> still takes it.</p></section>"), "{page}");
        assert!(!page.contains("<form method=\"post\" action=\"/pins/"));
    }
}
