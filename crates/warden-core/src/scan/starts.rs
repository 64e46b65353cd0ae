//! Fixed starts (S5): the built-in detectors whose every match starts with one
//! of a few fixed texts (`AKIA`, `ghp_`, `glpat-`, `-----BEGIN `, `eyJ`, `<|`,
//! `[INST]`, …) share one search for all those texts, instead of a search of
//! the whole text each. Where one starts, each detector it belongs to tries
//! its regex, anchored there. A detector so searched reports exactly the
//! matches its regex's `find_iter` gives over the whole text, in order:
//! every match starts where one of its texts does, so the leftmost match is
//! the first of those places where the anchored regex matches, and the next
//! is looked for from its end on.

use regex_automata::{meta::Regex, Anchored, Input};
use regex_syntax::hir::literal::Extractor;

/// One detector that shares the search.
struct Member {
    /// The detector's search engine (the same matches as its regex).
    regex: Regex,
    /// The texts one of which starts each of its matches.
    starts: Vec<Vec<u8>>,
}

/// What [`Starts::find`] found, its buffers kept from one text to the next.
#[derive(Default)]
pub struct Found {
    /// Each member's matches, in the members' order.
    pub matches: Vec<Vec<(usize, usize)>>,
    next: Vec<usize>,
}

/// The shared search and the detectors in it, in the scanner's order.
pub struct Starts {
    /// Any of every member's texts.
    search: Regex,
    members: Vec<Member>,
}

/// The texts one of which starts every match of `regex`, when there are a
/// few (the regex crate's own prefix extraction) of two bytes at least.
pub fn fixed_starts(regex: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::parse(regex).ok()?;
    let literals = Extractor::new().extract(&hir).literals()?.to_vec();
    if literals.is_empty() || literals.iter().any(|l| l.as_bytes().len() < 2) {
        return None;
    }
    Some(literals.iter().map(|l| l.as_bytes().to_vec()).collect())
}

impl Starts {
    /// The shared search for `members` (each a detector's search engine and
    /// its starts, from [`fixed_starts`]); `None` for fewer than two.
    pub fn new(members: Vec<(Regex, Vec<Vec<u8>>)>) -> Option<Starts> {
        if members.len() < 2 {
            return None;
        }
        let mut texts: Vec<String> = Vec::new();
        for (_, starts) in &members {
            for s in starts {
                // As `(?-u:…)`: the texts are bytes, matched as bytes.
                let escaped: String = s.iter().map(|b| format!(r"\x{b:02X}")).collect();
                texts.push(escaped);
            }
        }
        let search = regex_automata::meta::Regex::builder()
            .syntax(
                regex_automata::util::syntax::Config::new()
                    .unicode(false)
                    .utf8(false),
            )
            .configure(Regex::config().utf8_empty(false))
            .build(&texts.join("|"))
            .ok()?;
        let members = members
            .into_iter()
            .map(|(regex, starts)| Member { regex, starts })
            .collect();
        Some(Starts { search, members })
    }

    /// Each member's matches in `b`, in order: `found[i]` for the `i`th member.
    pub fn find(&self, b: &[u8], found: &mut Found) {
        let Found { matches, next } = found;
        matches.resize_with(self.members.len(), Vec::new);
        matches.iter_mut().for_each(Vec::clear);
        // Where each member's next match may start (its last match's end).
        next.clear();
        next.resize(self.members.len(), 0);
        let mut from = 0;
        while let Some(hit) = self.search.search(&Input::new(b).range(from..)) {
            let at = hit.start();
            from = at + 1;
            let rest = &b[at..];
            for (i, m) in self.members.iter().enumerate() {
                if at < next[i] || !m.starts.iter().any(|s| rest.starts_with(s)) {
                    continue;
                }
                let here = Input::new(b).range(at..).anchored(Anchored::Yes);
                if let Some(found_here) = m.regex.search(&here) {
                    matches[i].push((found_here.start(), found_here.end()));
                    next[i] = found_here.end();
                }
            }
        }
    }
}
