//! Ranking for `search_tools` (V4): BM25 over the words of each tool's name,
//! title, description, and parameter names and descriptions.
//!
//! The index is built per query from the tools the caller may see, and only
//! from them: document frequencies and lengths never count a hidden tool, so a
//! hidden tool cannot shift the score of a visible one (G2). Ties are broken by
//! name: the same query over the same tools gives the same order.

use serde_json::Value;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The words of a text: split on anything not a letter or digit and at
/// camelCase humps, lower-cased.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_word(text, &mut |w| out.push(w.to_owned()));
    out
}

/// Calls `f` with each word of `text` ([`words`]), without allocating per word.
fn each_word(text: &str, f: &mut dyn FnMut(&str)) {
    let mut word = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, f);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            flush(&mut word, f);
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    flush(&mut word, f);
}

fn flush(word: &mut String, f: &mut dyn FnMut(&str)) {
    if !word.is_empty() {
        f(word);
        word.clear();
    }
}

/// One tool definition as the caller sees it, counted: its length in words,
/// and how often each query term occurs in it.
fn count(tool: &Value, terms: &[String]) -> (usize, Vec<u32>) {
    let mut len = 0;
    let mut tf = vec![0u32; terms.len()];
    let mut add = |w: &str| {
        len += 1;
        if let Some(k) = terms.iter().position(|t| t == w) {
            tf[k] += 1;
        }
    };
    let text = |k: &str| tool.get(k).and_then(Value::as_str).unwrap_or_default();
    for k in ["name", "title", "description"] {
        each_word(text(k), &mut add);
    }
    let props = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object);
    for (param, schema) in props.into_iter().flatten() {
        each_word(param, &mut add);
        let d = schema.get("description").and_then(Value::as_str);
        each_word(d.unwrap_or_default(), &mut add);
    }
    (len, tf)
}

/// The indexes into `tools` of the best `limit` matches for `query`, best
/// first; tools that share no word with the query are left out.
pub fn rank(tools: &[Value], query: &str, limit: usize) -> Vec<usize> {
    let mut terms = words(query);
    terms.sort();
    terms.dedup();
    let docs: Vec<(usize, Vec<u32>)> = tools.iter().map(|t| count(t, &terms)).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(|d| d.0).sum::<usize>() as f64 / n.max(1.0);
    let df: Vec<f64> = (0..terms.len())
        .map(|k| docs.iter().filter(|d| d.1[k] > 0).count() as f64)
        .collect();
    let mut scored: Vec<(f64, &str, usize)> = Vec::new();
    for (i, (len, tf)) in docs.iter().enumerate() {
        let norm = K1 * (1.0 - B + B * *len as f64 / avg.max(1.0));
        let mut score = 0.0;
        for (k, &f) in tf.iter().enumerate().filter(|(_, f)| **f > 0) {
            let f = f64::from(f);
            let idf = ((n - df[k] + 0.5) / (df[k] + 0.5) + 1.0).ln();
            score += idf * f * (K1 + 1.0) / (f + norm);
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
