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
pub mod find;
#[cfg(test)]
mod tests;

use find::Find;
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
    /// The search engine behind `regex` (the same matches), for searches
    /// limited to a span ([`Find::Runs`]).
    search: regex_automata::meta::Regex,
    /// Only a detector with a group needs it: to find the group in a match.
    regex: Regex,
    find: Find,
    /// No string shorter than this (in bytes) can hold a match.
    min_len: usize,
    check: Option<fn(&str) -> bool>,
}

impl Detector {
    fn new(
        detector: &str,
        kind: &str,
        regex: Regex,
        find: Find,
        check: Option<fn(&str) -> bool>,
    ) -> Result<Detector, String> {
        let search = regex_automata::meta::Regex::new(regex.as_str()).map_err(|e| e.to_string())?;
        let min_len = regex_syntax::parse(regex.as_str())
            .map_err(|e| e.to_string())?
            .properties()
            .minimum_len()
            .unwrap_or(usize::MAX);
        Ok(Detector {
            detector: detector.to_owned(),
            kind: kind.to_owned(),
            search,
            regex,
            find,
            min_len,
            check,
        })
    }
}

/// Strings shorter than this are first read once by a set of every detector's
/// regex, and only the detectors it names search them: for short strings a
/// search per detector costs more than the search itself.
const SHORT: usize = 512;

/// A compiled set of detectors.
pub struct Scanner {
    detectors: Vec<Detector>,
    /// Every detector's regex, in order, for short strings.
    set: RegexSet,
    /// Strip invisible characters (an injection detector is on).
    strip: bool,
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
                let regex = Regex::new(b.regex).map_err(|e| format!("{}: {e}", b.kind))?;
                let group = b.kind.split('.').next().unwrap_or_default();
                detectors.push(Detector::new(group, b.kind, regex, b.find, b.check)?);
            }
        }
        for (name, pattern) in patterns {
            let regex = Regex::new(pattern)
                .map_err(|e| format!("pattern '{name}' does not compile: {e}"))?;
            if regex.is_match("") {
                return Err(format!("pattern '{name}' matches the empty string"));
            }
            let d = Detector::new("pattern", name, regex, Find::Whole, None)
                .map_err(|e| format!("pattern '{name}' does not compile: {e}"))?;
            detectors.push(d);
        }
        let strip = detectors.iter().any(|d| d.detector == "injection");
        let set =
            RegexSet::new(detectors.iter().map(|d| d.regex.as_str())).map_err(|e| e.to_string())?;
        Ok(Scanner {
            detectors,
            set,
            strip,
        })
    }

    /// Whether the scanner strips invisible characters (an injection detector is on).
    pub fn strips_invisible(&self) -> bool {
        self.strip
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
                    push_index(path, i);
                    self.walk(item, path, redact, out);
                    path.truncate(len);
                }
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    path.push('/');
                    push_key(path, k);
                    self.walk(item, path, redact, out);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// One string: its findings, and its new text when it changes.
    fn string(&self, s: &str, path: &str, redact: bool, out: &mut Vec<Finding>) -> Option<String> {
        let invisible = self.strip && find::has_invisible(s);
        // (start, end, detector index) of every match that passed its check.
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        let hits = (s.len() < SHORT).then(|| self.set.matches(s));
        for (i, d) in self.detectors.iter().enumerate() {
            if s.len() < d.min_len
                || (matches!(d.find, Find::Invisible) && !invisible)
                || hits.as_ref().is_some_and(|h| !h.matched(i))
            {
                continue;
            }
            let mut count = 0;
            d.find.each(&d.search, s, &mut |start, end| {
                // Only a detector with a group looks again, within its
                // match, for the part to redact.
                let (start, end) = match d.regex.captures_len() {
                    1 => (start, end),
                    _ => match d.regex.captures(&s[start..end]).and_then(|c| c.get(1)) {
                        Some(g) => (start + g.start(), start + g.end()),
                        None => (start, end),
                    },
                };
                if d.check.is_some_and(|check| !check(&s[start..end])) {
                    return;
                }
                count += 1;
                spans.push((start, end, i));
            });
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
        Some(self.rewrite(s, spans, redact, invisible))
    }

    /// `s` with its invisible characters gone and, when redacting, every span
    /// replaced by its kind's marker (overlaps: the first span wins).
    fn rewrite(
        &self,
        s: &str,
        mut spans: Vec<(usize, usize, usize)>,
        redact: bool,
        invisible: bool,
    ) -> String {
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
        match invisible {
            true => find::strip_invisible(&text),
            false => text,
        }
    }
}

/// Appends `i` in decimal, without an allocation per element.
fn push_index(path: &mut String, i: usize) {
    let mut digits = [0u8; 20];
    let mut n = i;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    path.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// Appends `key` escaped for a JSON pointer (`~` as `~0`, `/` as `~1`).
fn push_key(path: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}
