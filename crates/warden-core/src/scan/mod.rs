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
pub mod follows;
pub mod gate;
pub mod numbers;
pub mod starts;
#[cfg(test)]
mod tests;

use find::Find;
use regex::Regex;
use regex_automata::{Input, PatternID, PatternSet};
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
    /// Its place in the scanner's shared search for fixed starts, if in it.
    start: Option<usize>,
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
        if let Find::Words(words) = find {
            words.prepare(regex.as_str())?;
        }
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
            start: None,
        })
    }
}

/// Strings shorter than this are first asked whether any detector's regex
/// matches at all, then read once by a set of every detector's regex, and
/// only the detectors it names search them: for short strings a search per
/// detector costs more than the search itself. Longer ones go straight to
/// each detector's own way ([`find`]), which skips text faster than one
/// automaton of every regex reads it. The two cross between 384 and 512
/// bytes (`cargo bench -p warden-core --bench scan`, 256 results of one
/// string each, every detector on, µs per KB, one way then the other:
/// 256 B 1.52 against 2.12, 384 B 1.65 against 1.57, 512 B 1.63 against
/// 1.34, 1 KB 1.67 against 1.00, 4 KB 1.62 against 1.46).
const SHORT: usize = 512;

/// A compiled set of detectors.
pub struct Scanner {
    detectors: Vec<Detector>,
    /// Every detector's regex, in order, for short strings.
    set: regex_automata::meta::Regex,
    /// The same regexes, for whether any matches at all.
    any: regex_automata::meta::Regex,
    /// Strip invisible characters (an injection detector is on).
    strip: bool,
    /// Every detector is built in, so a short string without a gate byte
    /// holds nothing ([`gate`]).
    gated: bool,
    /// The built-in detectors whose matches start with fixed texts, searched
    /// for together ([`starts`]).
    starts: Option<starts::Starts>,
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
        let gated = patterns.is_empty();
        let starts = share_starts(&mut detectors);
        // As `regex::RegexSet` builds one: every pattern that matches anywhere.
        let patterns: Vec<&str> = detectors.iter().map(|d| d.regex.as_str()).collect();
        let any = regex_automata::meta::Regex::new_many(&patterns).map_err(|e| e.to_string())?;
        let set = regex_automata::meta::Regex::builder()
            .configure(
                regex_automata::meta::Regex::config()
                    .match_kind(regex_automata::MatchKind::All)
                    .utf8_empty(true)
                    .which_captures(regex_automata::nfa::thompson::WhichCaptures::None),
            )
            .build_many(
                &detectors
                    .iter()
                    .map(|d| d.regex.as_str())
                    .collect::<Vec<_>>(),
            )
            .map_err(|e| e.to_string())?;
        Ok(Scanner {
            detectors,
            any,
            set,
            strip,
            gated,
            starts,
        })
    }

    /// Whether the scanner strips invisible characters (an injection detector is on).
    pub fn strips_invisible(&self) -> bool {
        self.strip
    }

    /// The findings in `value`; invisible characters are stripped when an
    /// injection detector is on, nothing else changes.
    pub fn scan(&self, value: &mut Value) -> Vec<Finding> {
        self.look(value, false)
    }

    /// The findings in `value`, each match replaced with `[redacted:<kind>]`.
    pub fn redact(&self, value: &mut Value) -> Vec<Finding> {
        self.look(value, true)
    }

    fn look(&self, value: &mut Value, redact: bool) -> Vec<Finding> {
        let mut walk = Walk {
            at: Vec::new(),
            redact,
            out: Vec::new(),
            hits: PatternSet::new(self.set.pattern_len()),
            memo: find::Memo::default(),
            starts: starts::Found::default(),
            starts_read: false,
        };
        self.walk(value, &mut walk);
        walk.out
    }

    fn walk<'v>(&self, value: &'v mut Value, walk: &mut Walk<'v>) {
        match value {
            Value::String(s) if self.may_hold(s) => self.read(s, walk),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.member(Step::Index(i), item, walk);
                }
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    self.member(Step::Key(k), item, walk);
                }
            }
            _ => {}
        }
    }

    /// A member of an array or object, at `step` from its parent: it goes on
    /// the path only when read, so a number or a string the gate turns away
    /// costs no step and no call.
    #[inline]
    fn member<'v>(&self, step: Step<'v>, item: &'v mut Value, walk: &mut Walk<'v>) {
        match item {
            Value::String(s) if self.may_hold(s) => {
                walk.at.push(step);
                self.read(s, walk);
                walk.at.pop();
            }
            Value::Array(_) | Value::Object(_) => {
                walk.at.push(step);
                self.walk(item, walk);
                walk.at.pop();
            }
            _ => {}
        }
    }

    /// A string value the gate let through, rewritten when its text changes.
    #[inline]
    fn read(&self, s: &mut String, walk: &mut Walk) {
        if let Some(new) = self.string(s, walk) {
            *s = new;
        }
    }

    /// Whether `s` is worth reading: `false` when the gate says no built-in
    /// detector finds anything in it (a short string, every detector built in).
    #[inline]
    fn may_hold(&self, s: &str) -> bool {
        !(self.gated && s.len() < SHORT) || gate::may_match(s.as_bytes())
    }

    /// One string that passed [`Scanner::may_hold`]: its findings, and its
    /// new text when it changes. Invisible characters are stripped before
    /// any other detector reads the text, so a zero-width space inside a
    /// word (`<IMPOR\u{200B}TANT>`) hides nothing from them; their spans and
    /// the redacted text are those of the stripped string.
    fn string(&self, s: &str, walk: &mut Walk) -> Option<String> {
        // Every invisible character is a few bytes outside ASCII.
        if !self.strip || s.is_ascii() {
            return self.clean(s, 0, walk);
        }
        let (stripped, runs) = find::strip_invisible(s);
        if runs == 0 {
            return self.clean(s, 0, walk);
        }
        Some(self.clean(&stripped, runs, walk).unwrap_or(stripped))
    }

    /// A string without invisible characters (`runs` of them were stripped
    /// from it, reported as `injection.invisible` when that kind is on): its
    /// findings, and its new text when redacting changes it. Out of line, so
    /// that the walk through arrays and objects stays small.
    #[inline(never)]
    fn clean(&self, s: &str, runs: usize, walk: &mut Walk) -> Option<String> {
        let short = s.len() < SHORT;
        if short && runs == 0 && !self.any_match(s) {
            return None;
        }
        walk.memo.forget();
        walk.starts_read = false;
        if short {
            walk.hits.clear();
            self.set
                .which_overlapping_matches(&Input::new(s), &mut walk.hits);
            if walk.hits.is_empty() && runs == 0 {
                return None;
            }
        }
        // (start, end, detector index) of every match that passed its check.
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for (i, d) in self.detectors.iter().enumerate() {
            let count = match d.find {
                Find::Invisible => runs,
                _ if s.len() < d.min_len => continue,
                _ if short && !walk.hits.contains(PatternID::must(i)) => continue,
                _ => self.detect(i, s, walk, &mut spans),
            };
            if count > 0 {
                walk.out.push(Finding {
                    detector: d.detector.clone(),
                    kind: d.kind.clone(),
                    path: walk.path(),
                    count,
                });
            }
        }
        match walk.redact && !spans.is_empty() {
            true => Some(self.rewrite(s, spans)),
            false => None,
        }
    }

    /// Whether any detector's regex matches in `s`. No built-in detector's
    /// match starts with ASCII white space ([`gate::lead`]), so a scanner of
    /// built-in detectors only searches from the first other byte on.
    fn any_match(&self, s: &str) -> bool {
        let from = match self.gated {
            true => gate::lead(s.as_bytes()),
            false => 0,
        };
        self.any.is_match(Input::new(s).range(from..))
    }

    /// Detector `i`'s matches in `s` that pass its check, added to `spans`:
    /// how many.
    fn detect(
        &self,
        i: usize,
        s: &str,
        walk: &mut Walk,
        spans: &mut Vec<(usize, usize, usize)>,
    ) -> usize {
        let d = &self.detectors[i];
        let mut count = 0;
        let mut take = |start: usize, end: usize| {
            // Only a detector with a group looks again, within its match,
            // for the part to redact.
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
        };
        match (d.start, &self.starts) {
            // A short string's set has named the few detectors to run: each
            // searches alone.
            (Some(slot), Some(starts)) if s.len() >= SHORT => {
                if !walk.starts_read {
                    starts.find(s.as_bytes(), &mut walk.starts);
                    walk.starts_read = true;
                }
                walk.starts.matches[slot]
                    .iter()
                    .for_each(|&(a, z)| take(a, z));
            }
            _ => d.find.each(&d.search, s, &mut walk.memo, &mut take),
        }
        count
    }

    /// `s` with every span replaced by its kind's marker (overlaps: the
    /// first span's marker covers both, so no tail of a later span stays in
    /// clear).
    fn rewrite(&self, s: &str, mut spans: Vec<(usize, usize, usize)>) -> String {
        spans.sort_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        let mut text = String::with_capacity(s.len());
        let mut at = 0;
        for (start, end, i) in spans {
            if start < at {
                at = at.max(end);
                continue;
            }
            text.push_str(&s[at..start]);
            text.push_str("[redacted:");
            text.push_str(&self.detectors[i].kind);
            text.push(']');
            at = end;
        }
        text.push_str(&s[at..]);
        text
    }
}

/// One look through a value: where it is, what it found so far, and room
/// for the set's answer on each short string.
struct Walk<'v> {
    /// The keys and indexes down to the string being read; spelled out as a
    /// JSON pointer only for a finding.
    at: Vec<Step<'v>>,
    redact: bool,
    out: Vec<Finding>,
    hits: PatternSet,
    memo: find::Memo,
    /// The matches of the detectors that share the search for fixed starts,
    /// in the string being read once `starts_read`.
    starts: starts::Found,
    starts_read: bool,
}

enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

impl Walk<'_> {
    /// Where the walk is, as a JSON pointer (`/content/0/text`).
    fn path(&self) -> String {
        let mut path = String::new();
        for step in &self.at {
            path.push('/');
            match step {
                Step::Key(k) => push_key(&mut path, k),
                Step::Index(i) => push_index(&mut path, *i),
            }
        }
        path
    }
}

/// The shared search for the built-in detectors, searched whole, whose
/// matches start with fixed texts ([`starts`]); each member learns its place.
fn share_starts(detectors: &mut [Detector]) -> Option<starts::Starts> {
    let mut members = Vec::new();
    let mut slots = Vec::new();
    for (i, d) in detectors.iter().enumerate() {
        if d.detector == "pattern" || !matches!(d.find, Find::Whole) {
            continue;
        }
        if let Some(texts) = starts::fixed_starts(d.regex.as_str()) {
            members.push((d.search.clone(), texts));
            slots.push(i);
        }
    }
    let shared = starts::Starts::new(members)?;
    for (slot, i) in slots.into_iter().enumerate() {
        detectors[i].start = Some(slot);
    }
    Some(shared)
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
