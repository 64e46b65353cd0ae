//! How a detector's matches are found, fast (S5). Whatever the way, a detector
//! reports exactly the matches its regex's `find_iter` gives over the whole
//! string, in order; only the work to get there differs:
//!
//! - [`Find::Whole`]: the regex over the whole string, when its own literal
//!   prefilter already skips most text (a fixed prefix such as `AKIA`).
//! - [`Find::Numbers`]: phone, card, IBAN and SSN numbers are made of digits
//!   and a few other bytes; one pass over the text, shared by the four, finds
//!   the runs of those bytes that hold enough digits, and each searches only
//!   there (see [`numbers`](super::numbers)).
//! - [`Find::Windows`]: a function reports windows, in order and apart, that
//!   every match lies in, so that any match starting in a window also ends
//!   in it; each window is searched once.
//! - [`Find::Words`]: every match starts with one of a few ASCII words in any
//!   case. The text is lowered once and searched for the words in lower case
//!   (a case-insensitive search has no literal to skip to), and the regex is
//!   tried, anchored, where a word starts. A text with a non-ASCII letter that
//!   case-folds to a word's letter (`ſ`, the Kelvin sign) takes the plain way.
//! - [`Find::Invisible`]: the invisible characters, found without a regex.

use super::follows::Follows;
use super::numbers::{Number, Numbers};
use regex_automata::{meta::Regex, Anchored, Input};
use std::sync::OnceLock;

/// The way a detector searches; see the module's documentation.
#[derive(Clone, Copy)]
pub enum Find {
    Whole,
    Numbers(Number),
    Windows(fn(&[u8], &mut dyn FnMut(usize, usize))),
    Words(&'static Words),
    Invisible,
}

/// A text in ASCII lower case, made once for every [`Find::Words`] detector
/// that reads the same text.
#[derive(Default)]
pub struct Lower {
    /// Where and how long the text lowered last was.
    of: Option<(usize, usize)>,
    text: Vec<u8>,
    /// The text read last for `ſ` and the Kelvin sign, and whether it holds
    /// each, once looked for.
    folding: Option<(Key, [Option<bool>; 2])>,
}

/// A text known by its address and length.
type Key = (usize, usize);

/// The two non-ASCII letters a case-insensitive regex reads as ASCII ones:
/// `ſ` as `s`, the Kelvin sign as `k`.
const FOLDS: [(char, &str); 2] = [('s', "\u{17F}"), ('k', "\u{212A}")];

impl Lower {
    /// Whether `b` holds the `i`th of [`FOLDS`], looked for once per text, and
    /// only when a detector asks: no built-in word has a `k`.
    fn folding(&mut self, b: &[u8], i: usize) -> bool {
        let key = (b.as_ptr() as usize, b.len());
        if self.folding.is_none_or(|(k, _)| k != key) {
            self.folding = Some((key, [None; 2]));
        }
        let found = &mut self.folding.get_or_insert((key, [None; 2])).1;
        *found[i].get_or_insert_with(|| memchr::memmem::find(b, FOLDS[i].1.as_bytes()).is_some())
    }

    /// `b` lowered. The text is known by its address and length, so the
    /// caller makes a new `Lower` (or calls [`Lower::forget`]) before a
    /// text that may sit where another one was.
    fn of(&mut self, b: &[u8]) -> &[u8] {
        let key = (b.as_ptr() as usize, b.len());
        if self.of != Some(key) {
            self.text.clear();
            self.text.extend(b.iter().map(u8::to_ascii_lowercase));
            self.of = Some(key);
        }
        &self.text
    }

    /// Drops what is known of the last text (its buffer stays for the next).
    pub fn forget(&mut self) {
        self.of = None;
        self.folding = None;
    }
}

/// What the detectors of one scanner share about the text they read: its
/// lowered copy and its runs of digits, each made once, when first needed.
#[derive(Default)]
pub struct Memo {
    lower: Lower,
    numbers: Numbers,
}

impl Memo {
    /// Drops what is known of the last text (buffers stay for the next): the
    /// caller calls it before each text, which may sit where another one was.
    pub fn forget(&mut self) {
        self.lower.forget();
        self.numbers.forget();
    }
}

/// The words one of which starts every match of a [`Find::Words`] detector.
pub struct Words {
    /// In lower case.
    list: &'static [&'static str],
    /// A search for any of them, in lowered text.
    search: OnceLock<Regex>,
    /// Every match that starts with a word byte (ASCII letter, digit, `_`)
    /// starts at a word boundary, so a word found inside another word (`do`
    /// in `document`) is passed over without trying the regex there
    /// (`bounded_words_match_only_at_a_word_boundary` proves it per detector).
    bounded: bool,
    /// What may follow each word in a match of the detector's regex, read
    /// once ([`Words::prepare`]); a word followed by anything else is passed over.
    follows: OnceLock<Follows>,
}

impl Words {
    pub const fn new(list: &'static [&'static str]) -> Words {
        Words {
            list,
            search: OnceLock::new(),
            bounded: false,
            follows: OnceLock::new(),
        }
    }

    /// As [`Words::new`], for a regex whose every match that starts with a
    /// word byte starts at a word boundary.
    pub const fn bounded(list: &'static [&'static str]) -> Words {
        Words {
            list,
            search: OnceLock::new(),
            bounded: true,
            follows: OnceLock::new(),
        }
    }

    /// Whether this detector's regex is known to match, when it starts with
    /// a word byte, only at a word boundary.
    pub fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// Reads what may follow each word in a match of `pattern`, the regex
    /// of the one detector these words serve, once per process. `Err` when
    /// they were read for another regex: a list serves one detector only.
    pub fn prepare(&self, pattern: &str) -> Result<(), String> {
        match self
            .follows
            .get_or_init(|| Follows::new(pattern, self.list))
            .of(pattern)
        {
            true => Ok(()),
            false => Err(format!("the words {:?} serve another detector", self.list)),
        }
    }

    /// Whether the word found at `at..end` of the lowered text `low` may
    /// start a match, by the byte of `b` after it.
    #[inline]
    fn may_follow(&self, low: &[u8], b: &[u8], at: usize, end: usize) -> bool {
        let (Some(follows), Some(&next)) = (self.follows.get(), b.get(end)) else {
            return true;
        };
        let word = &low[at..end];
        match self.list.iter().position(|w| w.as_bytes() == word) {
            Some(i) => follows.allows(i, next),
            None => true,
        }
    }

    fn search(&self) -> &Regex {
        self.search.get_or_init(|| {
            let words: Vec<String> = self.list.iter().map(|w| regex_syntax::escape(w)).collect();
            Regex::new(&words.join("|")).expect("escaped words compile")
        })
    }

    /// Whether `b` holds a non-ASCII letter that a case-insensitive regex
    /// takes for one of the words' letters (see `only_s_and_k_fold_from_outside_ascii`).
    fn folds(&self, b: &[u8], lower: &mut Lower) -> bool {
        let has = |c: char| self.list.iter().any(|w| w.contains(c));
        (0..FOLDS.len()).any(|i| has(FOLDS[i].0) && lower.folding(b, i))
    }

    /// Each match of `re` in `b`, as `re.find_iter(b)` gives them.
    fn each(&self, re: &Regex, b: &[u8], lower: &mut Lower, f: &mut dyn FnMut(usize, usize)) {
        if self.folds(b, lower) {
            return re.find_iter(b).for_each(|m| f(m.start(), m.end()));
        }
        let low = lower.of(b);
        let (mut from, search) = (0, self.search());
        while let Some(word) = search.search(&Input::new(low).range(from..)) {
            let at = word.start();
            from = at + 1;
            if self.bounded && at > 0 && is_word(b[at]) && is_word(b[at - 1]) {
                continue;
            }
            if !self.may_follow(low, b, at, word.end()) {
                continue;
            }
            let here = Input::new(b).range(at..).anchored(Anchored::Yes);
            if let Some(m) = re.search(&here) {
                f(m.start(), m.end());
                from = m.end().max(from);
            }
        }
    }
}

/// A byte of an ASCII word, as `(?-u:\b)` reads it.
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl Find {
    /// Calls `f(start, end)` for each match of `re` (the detector's regex) in `s`.
    /// `memo` holds what the detectors reading the same text share.
    pub fn each(self, re: &Regex, s: &str, memo: &mut Memo, f: &mut dyn FnMut(usize, usize)) {
        let b = s.as_bytes();
        match self {
            Find::Whole => re.find_iter(b).for_each(|m| f(m.start(), m.end())),
            Find::Numbers(number) => number.each(re, b, &mut memo.numbers, f),
            Find::Windows(windows) => windows(b, &mut |lo, hi| {
                for m in re.find_iter(Input::new(b).range(lo..hi)) {
                    f(m.start(), m.end());
                }
            }),
            Find::Words(words) => words.each(re, b, &mut memo.lower, f),
            Find::Invisible => invisible_runs(b, f),
        }
    }
}

/// The length of the invisible character (S2 `injection.invisible`) at `i`, or 0:
/// U+200B, U+202A–202E, U+2060–2064, U+2066–2069, U+FEFF, U+E0000–E007F.
fn invisible_at(b: &[u8], i: usize) -> usize {
    match b[i..] {
        [0xE2, 0x80, 0x8B | 0xAA..=0xAE, ..] => 3,
        [0xE2, 0x81, 0xA0..=0xA4 | 0xA6..=0xA9, ..] => 3,
        [0xEF, 0xBB, 0xBF, ..] => 3,
        [0xF3, 0xA0, 0x80 | 0x81, _, ..] => 4,
        _ => 0,
    }
}

/// Each maximal run of invisible characters in `b`, as `[class]+` finds them.
pub fn invisible_runs(b: &[u8], f: &mut dyn FnMut(usize, usize)) {
    let mut at = 0;
    while let Some(i) = memchr::memchr3(0xE2, 0xEF, 0xF3, &b[at..]).map(|i| at + i) {
        let mut end = i;
        loop {
            match invisible_at(b, end) {
                0 => break,
                n => end += n,
            }
        }
        if end > i {
            f(i, end);
        }
        at = end.max(i + 1);
    }
}

/// `s` without its invisible characters, and how many runs of them it held.
pub fn strip_invisible(s: &str) -> (String, usize) {
    let mut out = String::new();
    let (mut at, mut runs) = (0, 0);
    invisible_runs(s.as_bytes(), &mut |start, end| {
        if runs == 0 {
            out.reserve(s.len());
        }
        out.push_str(&s[at..start]);
        (at, runs) = (end, runs + 1);
    });
    if runs > 0 {
        out.push_str(&s[at..]);
    }
    (out, runs)
}

/// `injection.exfil_link`: a match is `[text](` then a URL up to the first `)`,
/// its text holding no `]` and no line break. So each `](` gives a window
/// from just after the last `]` or line break before it to just after the
/// first `)` after it; windows that touch are merged, so no byte is searched
/// twice and a match that starts in a window ends in it.
pub fn link_windows(b: &[u8], f: &mut dyn FnMut(usize, usize)) {
    let (mut window, mut close) = (None::<(usize, usize)>, 0);
    let mut prev = 0;
    for a in memchr::memmem::find_iter(b, b"](") {
        let lo = memchr::memrchr2(b']', b'\n', &b[prev..a]).map_or(prev, |i| prev + i + 1);
        if close < a + 2 {
            close = memchr::memchr(b')', &b[a + 2..]).map_or(b.len(), |i| a + 2 + i + 1);
        }
        window = match window {
            Some((wlo, whi)) if lo < whi => Some((wlo, whi.max(close))),
            Some((wlo, whi)) => {
                f(wlo, whi);
                Some((lo, close))
            }
            None => Some((lo, close)),
        };
        prev = a;
    }
    if let Some((lo, hi)) = window {
        f(lo, hi);
    }
}
