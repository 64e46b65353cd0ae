//! Scanners: what a guard looks for in a JSON value (a tool result, a call's
//! arguments, a tool definition), in one pass over every string in it.
//!
//! A [`Scanner`] is built once from a guard's `detect` list (built-in kinds or
//! groups, see [`builtin`]) and its own named patterns. [`Scanner::scan`]
//! reports [`Finding`]s: detector, kind, JSON path and count, never the matched
//! text. [`Scanner::redact`] replaces each match in place with
//! `[redacted:<kind>]` and keeps the rest. Either way, a scanner with an
//! injection detector strips invisible characters (tag characters, bidi
//! overrides, zero-width text) from the value: no reader sees them, a model does.
//!
//! No I/O: the gateway decides what to do with the findings.

pub mod builtin;
pub mod checks;
#[cfg(test)]
mod tests;

use regex::{Regex, RegexSet};
use serde_json::Value;

/// One kind found in one string of the value: no matched text, ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `secrets`, `pii`, `injection`, or `pattern` for a guard's own.
    pub detector: String,
    /// The built-in kind (`pii.card`) or the pattern's name.
    pub kind: String,
    /// Where, as a JSON pointer (`/content/0/text`).
    pub path: String,
    /// How many matches there.
    pub count: usize,
}

/// One detector as a scanner runs it.
struct Detector {
    detector: String,
    kind: String,
    regex: Regex,
    check: Option<fn(&str) -> bool>,
}

/// A compiled set of detectors.
pub struct Scanner {
    set: RegexSet,
    detectors: Vec<Detector>,
    /// Strip invisible characters (an injection detector is on).
    strip: Option<Regex>,
}

impl Scanner {
    /// A scanner for `detect` (kinds or groups) and `patterns` (name, regex).
    /// `Err`: the entry that is no detector, or the pattern that does not compile.
    pub fn new(detect: &[String], patterns: &[(String, String)]) -> Result<Scanner, String> {
        let mut detectors = Vec::new();
        for name in detect {
            let found = builtin::expand(name).ok_or_else(|| {
                let kinds: Vec<_> = builtin::BUILTINS.iter().map(|b| b.kind).collect();
                format!(
                    "'{name}' is no detector; use a group ({}) or a kind: {}",
                    builtin::GROUPS.join(", "),
                    kinds.join(", ")
                )
            })?;
            for b in found {
                if detectors.iter().any(|d: &Detector| d.kind == b.kind) {
                    continue;
                }
                detectors.push(Detector {
                    detector: b.kind.split('.').next().unwrap_or_default().to_owned(),
                    kind: b.kind.to_owned(),
                    regex: Regex::new(b.regex).map_err(|e| format!("{}: {e}", b.kind))?,
                    check: b.check,
                });
            }
        }
        for (name, pattern) in patterns {
            let regex = Regex::new(pattern)
                .map_err(|e| format!("pattern '{name}' does not compile: {e}"))?;
            if regex.is_match("") {
                return Err(format!("pattern '{name}' matches the empty string"));
            }
            detectors.push(Detector {
                detector: "pattern".into(),
                kind: name.clone(),
                regex,
                check: None,
            });
        }
        let set =
            RegexSet::new(detectors.iter().map(|d| d.regex.as_str())).map_err(|e| e.to_string())?;
        let strip = detectors
            .iter()
            .any(|d| d.detector == "injection")
            .then(|| Regex::new(builtin::INVISIBLE).expect("the invisible class compiles"));
        Ok(Scanner {
            set,
            detectors,
            strip,
        })
    }

    /// Whether the scanner strips invisible characters (an injection detector is on).
    pub fn strips_invisible(&self) -> bool {
        self.strip.is_some()
    }

    /// The findings in `value`; invisible characters are stripped when an
    /// injection detector is on, nothing else changes.
    pub fn scan(&self, value: &mut Value) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut path = String::new();
        self.walk(value, &mut path, false, &mut findings);
        findings
    }

    /// The findings in `value`, each match replaced with `[redacted:<kind>]`.
    pub fn redact(&self, value: &mut Value) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut path = String::new();
        self.walk(value, &mut path, true, &mut findings);
        findings
    }

    fn walk(&self, value: &mut Value, path: &mut String, redact: bool, out: &mut Vec<Finding>) {
        let len = path.len();
        match value {
            Value::String(s) => {
                if let Some(new) = self.string(s, path, redact, out) {
                    *s = new;
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    path.push('/');
                    path.push_str(&i.to_string());
                    self.walk(item, path, redact, out);
                    path.truncate(len);
                }
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    path.push('/');
                    path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    self.walk(item, path, redact, out);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// One string: its findings, and its new text when it changes.
    fn string(&self, s: &str, path: &str, redact: bool, out: &mut Vec<Finding>) -> Option<String> {
        let hits = self.set.matches(s);
        let invisible = self.strip.as_ref().is_some_and(|r| r.is_match(s));
        if !hits.matched_any() && !invisible {
            return None;
        }
        // (start, end, detector index) of every match that passed its check.
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for i in hits.iter() {
            let d = &self.detectors[i];
            let mut count = 0;
            // find_iter stays on the fast engines; only a detector with a
            // group looks again, within its match, for the part to redact.
            for m in d.regex.find_iter(s) {
                let (start, end) = match d.regex.captures_len() {
                    1 => (m.start(), m.end()),
                    _ => match d.regex.captures(m.as_str()).and_then(|c| c.get(1)) {
                        Some(g) => (m.start() + g.start(), m.start() + g.end()),
                        None => (m.start(), m.end()),
                    },
                };
                if d.check.is_some_and(|check| !check(&s[start..end])) {
                    continue;
                }
                count += 1;
                spans.push((start, end, i));
            }
            if count > 0 {
                out.push(Finding {
                    detector: d.detector.clone(),
                    kind: d.kind.clone(),
                    path: path.to_owned(),
                    count,
                });
            }
        }
        let rewrites = redact && !spans.is_empty();
        if !rewrites && !invisible {
            return None;
        }
        Some(self.rewrite(s, spans, redact))
    }

    /// `s` with its invisible characters gone and, when redacting, every span
    /// replaced by its kind's marker (overlaps: the first span wins).
    fn rewrite(&self, s: &str, mut spans: Vec<(usize, usize, usize)>, redact: bool) -> String {
        spans.sort_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        let mut text = String::with_capacity(s.len());
        let mut at = 0;
        for (start, end, i) in spans {
            let kind = &self.detectors[i].kind;
            let hidden = kind == "injection.invisible";
            if start < at || !(redact || hidden) {
                continue;
            }
            text.push_str(&s[at..start]);
            if !hidden {
                text.push_str("[redacted:");
                text.push_str(kind);
                text.push(']');
            }
            at = end;
        }
        text.push_str(&s[at..]);
        match &self.strip {
            Some(strip) => strip.replace_all(&text, "").into_owned(),
            None => text,
        }
    }
}
