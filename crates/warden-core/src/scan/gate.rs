//! The gate a short string passes before any built-in detector reads it (S5):
//! every match of every built-in detector holds one of a few bytes (its
//! fixed text starts with `A`, holds `_`, `-` or `eyJ`; an assignment `=` or
//! `:`; a number digits, `+` or `(`; a phrase white space; a marker `<`, `[`
//! or `]`; an email `@`; invisible characters are not ASCII). A string with
//! none of them cannot hold a finding, and a table read per byte, up to the
//! first of them, says so for less than the search that would.
//! `every_builtin_match_holds_a_gate_byte` proves it for each detector's regex.

/// Whether a byte is one of the gate's: ASCII white space, `= : < [ ] @ _ - + (`,
/// digits, `A`, `J` and every byte of a non-ASCII character.
const fn table() -> [bool; 256] {
    let mut t = [false; 256];
    let also = b"\t\n\x0B\x0C\r =:<[]@_-+(AJ0123456789";
    let mut i = 0;
    while i < also.len() {
        t[also[i] as usize] = true;
        i += 1;
    }
    let mut c = 0x80;
    while c < 256 {
        t[c] = true;
        c += 1;
    }
    t
}

static GATE: [bool; 256] = table();

/// Whether `b` holds a gate byte: `false` says no built-in detector (not even
/// `injection.invisible`) finds anything in it.
pub fn may_match(b: &[u8]) -> bool {
    // Eight bytes at a time without a branch per byte: most strings that
    // have no gate byte are short, and most that have one have it early.
    let mut chunks = b.chunks_exact(8);
    for chunk in &mut chunks {
        if chunk
            .iter()
            .fold(false, |any, &c| any | GATE[usize::from(c)])
        {
            return true;
        }
    }
    chunks.remainder().iter().any(|&c| GATE[usize::from(c)])
}

/// The length of `b`'s leading ASCII white space (`\t \n \x0B \x0C \r` and
/// space): no match of a built-in detector starts in it, so a search for any
/// of them may start after it (`no_builtin_match_starts_with_white_space`).
pub fn lead(b: &[u8]) -> usize {
    // Eight spaces at a time first: indentation is mostly spaces.
    let spaces = b.chunks_exact(8).take_while(|c| c == b"        ").count() * 8;
    b[spaces..]
        .iter()
        .position(|c| !matches!(c, b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r' | b' '))
        .map_or(b.len(), |i| spaces + i)
}

#[cfg(test)]
mod tests {
    use super::{lead, may_match, GATE};
    use crate::scan::builtin::BUILTINS;
    use regex_automata::hybrid::dfa::DFA;
    use regex_automata::hybrid::LazyStateID;
    use regex_automata::util::start;
    use regex_automata::Anchored;
    use std::collections::HashSet;

    /// Whether `regex` matches some text made only of bytes outside the gate:
    /// a walk of its automaton, anchored, over those bytes, from every start
    /// (what comes before a match is such a byte too, or the text's start).
    fn matches_without_gate(regex: &str) -> bool {
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .cache_capacity(1 << 28)
                    .minimum_cache_clear_count(Some(0)),
            )
            .build(regex)
            .expect("a built-in regex compiles as a lazy DFA");
        let mut cache = dfa.create_cache();
        let outside: Vec<u8> = (0..=255u8).filter(|&c| !GATE[usize::from(c)]).collect();
        let mut todo: Vec<LazyStateID> = Vec::new();
        let befores = std::iter::once(None).chain(outside.iter().map(|&c| Some(c)));
        for before in befores {
            let config = start::Config::new()
                .anchored(Anchored::Yes)
                .look_behind(before);
            todo.push(dfa.start_state(&mut cache, &config).expect("a start"));
        }
        let mut seen: HashSet<LazyStateID> = todo.iter().copied().collect();
        while let Some(s) = todo.pop() {
            let end = dfa.next_eoi_state(&mut cache, s).expect("no give-up");
            if s.is_match() || end.is_match() {
                return true;
            }
            for &c in &outside {
                let next = dfa.next_state(&mut cache, s, c).expect("no give-up");
                assert!(!next.is_quit(), "{regex}: the walk reached a quit state");
                if !next.is_dead() && seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        false
    }

    /// Whether a match of `regex` may start with one of `bytes`: from every
    /// start (any byte or none before), anchored, one of them leads anywhere
    /// but to the dead state (an empty match there counts too).
    fn may_start_with(regex: &str, bytes: &[u8]) -> bool {
        let dfa = DFA::new(regex).expect("a built-in regex compiles as a lazy DFA");
        let mut cache = dfa.create_cache();
        let befores = std::iter::once(None).chain((0..=255u8).map(Some));
        for before in befores {
            let config = start::Config::new()
                .anchored(Anchored::Yes)
                .look_behind(before);
            let s = dfa.start_state(&mut cache, &config).expect("a start");
            for &c in bytes {
                let next = dfa.next_state(&mut cache, s, c).expect("no give-up");
                assert!(!next.is_quit(), "{regex}: a quit state");
                if !next.is_dead() {
                    return true;
                }
            }
        }
        false
    }

    #[test]
    fn no_builtin_match_starts_with_white_space() {
        let white: Vec<u8> = (0..=255u8).filter(|&c| lead(&[c]) == 1).collect();
        assert_eq!(white, b"\t\n\x0B\x0C\r ");
        for b in BUILTINS {
            assert!(!may_start_with(b.regex, &white), "{}", b.kind);
        }
        // The check sees a match that does start so, or that is empty.
        assert!(may_start_with(r"(?i)x|\s+ignore", &white));
        assert!(may_start_with(r"\x0Bx", &white));
        assert!(may_start_with(r"(?-u:\b)|ab", &white));
        assert!(!may_start_with(r"(?-u:\b)ab", &white));
    }

    #[test]
    fn the_lead_is_the_white_space_before_anything_else() {
        assert_eq!(lead(b""), 0);
        assert_eq!(lead(b"   "), 3);
        assert_eq!(lead(b" \t\r\n\x0B\x0Cx y"), 6);
        assert_eq!(lead(b"x  "), 0);
        assert_eq!(lead("\u{A0}x".as_bytes()), 0);
        // Across the chunks of eight spaces, in any mix.
        for n in 0..40 {
            let mut b = " ".repeat(n).into_bytes();
            assert_eq!(lead(&b), n);
            b.extend_from_slice(b"\t x ");
            assert_eq!(lead(&b), n + 2, "{n}");
            b[n / 2] = b'y';
            assert_eq!(lead(&b), n / 2, "{n}");
        }
    }

    #[test]
    fn every_builtin_match_holds_a_gate_byte() {
        for b in BUILTINS {
            assert!(!matches_without_gate(b.regex), "{}", b.kind);
        }
        // The walk finds a match where there is one.
        assert!(matches_without_gate(r"(?-u:\b)docs/[a-z]+\.md"));
        assert!(!matches_without_gate(r"(?i)ab\s+c"));
    }

    #[test]
    fn the_gate_reads_bytes() {
        assert!(!may_match(b""));
        assert!(!may_match(b"docs/behaviour.md"));
        assert!(!may_match(b"ok.then;yes!"));
        assert!(!may_match(b"docs/behaviour.md/docs/behaviour.md"));
        // A gate byte at every place of a string longer than a chunk.
        let plain = b"abcdefghijklmnopqrs".to_vec();
        for at in 0..plain.len() {
            let mut b = plain.clone();
            b[at] = b'=';
            assert!(may_match(&b), "{at}");
            assert!(!may_match(&plain[..at]), "{at}");
        }
        for s in [
            "a b", "x=1", "7", "a@b", "Ab", "eyJ", "ſ", "\u{200B}", "x_y", "[", "(+",
        ] {
            assert!(may_match(s.as_bytes()), "{s:?}");
        }
    }
}
