//! Ranking for `search_tools` (V4): BM25 over the words of each tool's name,
//! title, description, and parameter names and descriptions.
//!
//! An [`Index`] counts the words of every tool a server could show once per
//! catalogue (see [`super::cache`]); a query then scores only the tools the
//! caller may see: document frequencies, the document count and the average
//! length are taken over that visible set alone, so a hidden tool cannot shift
//! the score of a visible one (G2). Ties are broken by name: the same query
//! over the same tools gives the same order.

use serde_json::Value;
use std::collections::HashMap;

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

/// Calls `f` with every word of one tool definition as the caller sees it.
fn each_word_of(tool: &Value, f: &mut dyn FnMut(&str)) {
    let text = |k: &str| tool.get(k).and_then(Value::as_str).unwrap_or_default();
    for k in ["name", "title", "description"] {
        each_word(text(k), f);
    }
    let props = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object);
    for (param, schema) in props.into_iter().flatten() {
        each_word(param, f);
        let d = schema.get("description").and_then(Value::as_str);
        each_word(d.unwrap_or_default(), f);
    }
}

/// The counted words of a set of tool definitions: one document per tool.
#[derive(Debug, Default)]
pub struct Index {
    /// Each document's length in words.
    lens: Vec<u32>,
    /// Each document's name as shown (for ties).
    names: Vec<String>,
    /// Word → (document, occurrences), documents ascending.
    postings: HashMap<String, Vec<(u32, u32)>>,
}

impl Index {
    /// Counts the words of `tools` (document `i` is `tools[i]`).
    pub fn build<'t>(tools: impl IntoIterator<Item = &'t Value>) -> Index {
        let mut index = Index::default();
        let mut counts: HashMap<String, u32> = HashMap::new();
        for (doc, tool) in tools.into_iter().enumerate() {
            let mut len = 0u32;
            each_word_of(tool, &mut |w| {
                len += 1;
                match counts.get_mut(w) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(w.to_owned(), 1);
                    }
                }
            });
            for (w, n) in counts.drain() {
                index.postings.entry(w).or_default().push((doc as u32, n));
            }
            index.lens.push(len);
            let name = tool.get("name").and_then(Value::as_str);
            index.names.push(name.unwrap_or_default().to_owned());
        }
        index
    }

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// The best `limit` documents for `query`, best first, among those
    /// `visible` marks (indexed by document); documents sharing no word with
    /// the query are left out. Nothing about an unmarked document is read.
    pub fn rank(&self, visible: &[bool], query: &str, limit: usize) -> Vec<usize> {
        let mut terms = words(query);
        terms.sort();
        terms.dedup();
        let seen = |d: &(u32, u32)| visible.get(d.0 as usize) == Some(&true);
        let (mut n, mut total) = (0usize, 0usize);
        for (doc, len) in self.lens.iter().enumerate() {
            if visible.get(doc) == Some(&true) {
                n += 1;
                total += *len as usize;
            }
        }
        let n = n as f64;
        let avg = total as f64 / n.max(1.0);
        // Dense, so a posting costs no hashing; `touched` lists who scored.
        let mut scores = vec![0.0f64; self.lens.len()];
        let mut touched: Vec<u32> = Vec::new();
        // Terms in order, so each document's sum adds up in the same order.
        for term in &terms {
            let Some(postings) = self.postings.get(term) else {
                continue;
            };
            let df = postings.iter().filter(|d| seen(d)).count() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, f) in postings.iter().filter(|d| seen(d)) {
                let len = f64::from(self.lens[doc as usize]);
                let norm = K1 * (1.0 - B + B * len / avg.max(1.0));
                let f = f64::from(f);
                let score = &mut scores[doc as usize];
                if *score == 0.0 {
                    touched.push(doc);
                }
                *score += idf * f * (K1 + 1.0) / (f + norm);
            }
        }
        let mut scored: Vec<(f64, &str, usize)> = touched
            .into_iter()
            .map(|d| {
                (
                    scores[d as usize],
                    self.names[d as usize].as_str(),
                    d as usize,
                )
            })
            .filter(|(s, _, _)| *s > 0.0)
            .collect();
        let order = |a: &(f64, &str, usize), b: &(f64, &str, usize)| {
            b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
        };
        // Only the best `limit` need an order among themselves.
        if limit > 0 && scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, order);
            scored.truncate(limit);
        }
        scored.sort_by(order);
        scored.into_iter().take(limit).map(|(_, _, i)| i).collect()
    }
}

/// The indexes into `tools` of the best `limit` matches for `query`, best
/// first, all of `tools` visible.
#[cfg(test)]
pub fn rank(tools: &[Value], query: &str, limit: usize) -> Vec<usize> {
    let index = Index::build(tools);
    index.rank(&vec![true; tools.len()], query, limit)
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

    /// One index over every tool, queried with one hidden, scores the rest
    /// exactly as an index built without it (G2).
    #[test]
    fn a_hidden_document_moves_no_score() {
        let tools = [
            json!({"name": "a", "description": "add two numbers and add more"}),
            json!({"name": "b", "description": "add an error"}),
            json!({"name": "c", "description": "report an error to the team"}),
            json!({"name": "d", "description": "add add add add"}),
        ];
        let index = Index::build(&tools);
        let without: Vec<Value> = tools.iter().filter(|t| t["name"] != "d").cloned().collect();
        for query in ["add error", "error", "report error team", "an"] {
            let hidden = index.rank(&[true, true, true, false], query, 5);
            assert_eq!(hidden, rank(&without, query, 5), "{query}");
        }
        // Counted, it would reorder the others, so the test can tell.
        let counted: Vec<usize> = index.rank(&[true; 4], "add error", 5);
        let counted: Vec<usize> = counted.into_iter().filter(|&i| i != 3).collect();
        assert_ne!(counted, rank(&without, "add error", 5));
    }
}
