//! What may follow a word (S5): for a [`Words`](super::find::Words) detector,
//! the bytes that can come right after each of its words in a match that
//! starts with it, read off the detector's own automaton once. Where a word
//! is found and the byte after it is none of these, no match starts there,
//! and the regex is not tried: most words found in ordinary text (`new`,
//! `from`, `client`, `note`) are followed by what no match holds.
//!
//! Exact by construction: the automaton is walked, anchored, from every
//! start (any byte or none before the word), over every ASCII case of the
//! word (the text was lowered to find it), and a byte is let through when
//! it leads anywhere but to the dead state. A word inside which a match may
//! already end lets every byte through.

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::util::start;
use regex_automata::Anchored;

/// The bytes that may follow each word of a list in a match of one regex.
pub struct Follows {
    /// The regex they were read from.
    pattern: String,
    /// One set of 256 bits per word, in the list's order.
    after: Vec<[u64; 4]>,
}

/// Every byte: the set of a word the automaton could not be read for.
const ANY: [u64; 4] = [u64::MAX; 4];

impl Follows {
    /// What may follow each of `words` (in lower case) in a match of
    /// `pattern`, each of whose matches starts with one of them.
    pub fn new(pattern: &str, words: &[&str]) -> Follows {
        let after = match DFA::new(pattern) {
            Ok(dfa) => {
                let mut cache = dfa.create_cache();
                let starts = starts(&dfa, &mut cache);
                words
                    .iter()
                    .map(|w| after_word(&dfa, &mut cache, &starts, w.as_bytes()).unwrap_or(ANY))
                    .collect()
            }
            Err(_) => vec![ANY; words.len()],
        };
        Follows {
            pattern: pattern.to_owned(),
            after,
        }
    }

    /// Whether these were read from `pattern`.
    pub fn of(&self, pattern: &str) -> bool {
        self.pattern == pattern
    }

    /// Whether the `i`th word, followed by `byte`, may start a match.
    #[inline]
    pub fn allows(&self, i: usize, byte: u8) -> bool {
        self.after[i][usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }
}

/// The automaton's distinct anchored start states, over every byte before
/// the word and none.
fn starts(dfa: &DFA, cache: &mut Cache) -> Vec<LazyStateID> {
    let befores = std::iter::once(None).chain((0..=255u8).map(Some));
    let mut states = Vec::new();
    for before in befores {
        let config = start::Config::new()
            .anchored(Anchored::Yes)
            .look_behind(before);
        match dfa.start_state(cache, &config) {
            Ok(s) if !states.contains(&s) => states.push(s),
            Ok(_) => {}
            // A start the automaton cannot give: no start is left out.
            Err(_) => return Vec::new(),
        }
    }
    states
}

/// The bytes after `word` (in any ASCII case) that keep a match alive from
/// one of `starts`; `None` when that cannot be told (no starts, a state the
/// lazy automaton gives up on, a match that may end inside the word).
fn after_word(
    dfa: &DFA,
    cache: &mut Cache,
    starts: &[LazyStateID],
    word: &[u8],
) -> Option<[u64; 4]> {
    if starts.is_empty() {
        return None;
    }
    let mut states = starts.to_vec();
    for &c in word {
        let mut next = Vec::new();
        for &s in &states {
            for b in [c, c.to_ascii_uppercase()] {
                let n = dfa.next_state(cache, s, b).ok()?;
                // A match state here is a match that ended before `b`.
                if n.is_quit() || n.is_match() {
                    return None;
                }
                if !n.is_dead() && !next.contains(&n) {
                    next.push(n);
                }
            }
        }
        states = next;
    }
    let mut after = [0u64; 4];
    for &s in &states {
        for b in 0..=255u8 {
            let n = dfa.next_state(cache, s, b).ok()?;
            if n.is_quit() {
                return None;
            }
            if !n.is_dead() {
                after[usize::from(b >> 6)] |= 1 << (b & 63);
            }
        }
    }
    Some(after)
}

#[cfg(test)]
mod tests {
    use super::Follows;

    fn allowed(f: &Follows, i: usize) -> Vec<u8> {
        (0..=255u8).filter(|&b| f.allows(i, b)).collect()
    }

    #[test]
    fn a_word_lets_through_what_may_follow_it() {
        let f = Follows::new(
            r"(?i)(?-u:\b)(?:client[_-]?secret|new\s+rules)",
            &["client", "new"],
        );
        // `(?i)s` is `ſ` too (U+017F, bytes C5 BF).
        assert_eq!(allowed(&f, 0), b"-S_s\xC5");
        let white: Vec<u8> = vec![b'\t', b'\n', 0x0B, 0x0C, b'\r', b' '];
        // `\s` is Unicode white space: the first bytes of U+0085, U+00A0,
        // U+1680, U+2000–U+200A and the rest lead on too.
        let ascii: Vec<u8> = allowed(&f, 1).into_iter().filter(u8::is_ascii).collect();
        assert_eq!(ascii, white);
        assert!(f.allows(1, 0xC2) && f.allows(1, 0xE2) && !f.allows(1, b'x'));
    }

    #[test]
    fn every_case_of_the_word_and_every_start_counts() {
        // `From` then a space, after a non-word byte or none; any case of
        // `from` then `y`, after anything.
        let f = Follows::new(r"(?-u:\b)From x|(?i:FROM)y", &["from"]);
        assert_eq!(allowed(&f, 0), b" y");
    }

    #[test]
    fn a_match_that_may_end_inside_the_word_lets_everything_through() {
        let f = Follows::new(r"(?i)ai|aisle", &["ais"]);
        assert_eq!(allowed(&f, 0).len(), 256);
        // And a word that no match holds lets nothing through.
        let f = Follows::new(r"(?i)ai", &["xy"]);
        assert!(allowed(&f, 0).is_empty());
    }

    #[test]
    fn they_know_their_regex() {
        let f = Follows::new("a", &["a"]);
        assert!(f.of("a") && !f.of("b"));
    }
}
