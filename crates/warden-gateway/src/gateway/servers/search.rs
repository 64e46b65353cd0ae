//! Ranking for `search_tools` (V4): BM25 over the words of each tool's name,
//! title, description, and parameter names and descriptions.
//!
//! The index is built per query from the tools the caller may see, and only
//! from them: document frequencies and lengths never count a hidden tool, so a
//! hidden tool cannot shift the score of a visible one (G2). Ties are broken by
//! name: the same query over the same tools gives the same order.

use serde_json::Value;
use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The words of a text: split on anything not a letter or digit and at
/// camelCase humps, lower-cased.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut out);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            flush(&mut word, &mut out);
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut out);
    out
}

fn flush(word: &mut String, out: &mut Vec<String>) {
    if !word.is_empty() {
        out.push(std::mem::take(word));
    }
}

/// The words of one tool definition as the caller sees it.
fn document(tool: &Value) -> Vec<String> {
    let text = |k: &str| tool.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut out = words(text("name"));
    out.extend(words(text("title")));
    out.extend(words(text("description")));
    let props = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object);
    for (param, schema) in props.into_iter().flatten() {
        out.extend(words(param));
        let d = schema.get("description").and_then(Value::as_str);
        out.extend(words(d.unwrap_or_default()));
    }
    out
}

/// The indexes into `tools` of the best `limit` matches for `query`, best
/// first; tools that share no word with the query are left out.
pub fn rank(tools: &[Value], query: &str, limit: usize) -> Vec<usize> {
    let mut terms = words(query);
    terms.sort();
    terms.dedup();
    let docs: Vec<Vec<String>> = tools.iter().map(document).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let mut df: HashMap<&str, f64> = HashMap::new();
    for doc in &docs {
        let mut seen: Vec<&str> = doc.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup();
        for w in seen {
            *df.entry(w).or_default() += 1.0;
        }
    }
    let mut scored: Vec<(f64, &str, usize)> = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let len = doc.len() as f64;
        let mut score = 0.0;
        for t in &terms {
            let tf = doc.iter().filter(|w| *w == t).count() as f64;
            if tf == 0.0 {
                continue;
            }
            let d = df.get(t.as_str()).copied().unwrap_or(0.0);
            let idf = ((n - d + 0.5) / (d + 0.5) + 1.0).ln();
            score += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg.max(1.0)));
        }
        if score > 0.0 {
            let name = tools[i]
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            scored.push((score, name, i));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(limit).map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_split_names_the_way_tools_are_named() {
        assert_eq!(words("notes.search_notes"), ["notes", "search", "notes"]);
        assert_eq!(words("getUserID-v2"), ["get", "user", "id", "v2"]);
    }

    #[test]
    fn ranking_is_by_relevance_then_name() {
        let tools = [
            json!({"name": "b.fetch", "description": "Fetch a web page."}),
            json!({"name": "a.fetch", "description": "Fetch a web page."}),
            json!({"name": "notes.search", "description": "Search the notes."}),
        ];
        assert_eq!(rank(&tools, "fetch web page", 5), [1, 0]);
        assert_eq!(rank(&tools, "find my notes", 5), [2]);
        assert_eq!(rank(&tools, "fetch", 1), [1]);
    }

    #[test]
    fn parameters_count() {
        let tools = [
            json!({"name": "x", "inputSchema": {"properties": {"city": {"description": "The town"}}}}),
        ];
        assert_eq!(rank(&tools, "town", 5), [0]);
    }
}
