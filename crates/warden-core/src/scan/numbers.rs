//! `pii.phone`, `pii.card`, `pii.iban` and `pii.ssn`: numbers made of digits
//! and a few other bytes, the first three found from one pass over the text
//! that they share (S5), each reporting exactly its regex's matches.
//!
//! Every match of each consists of bytes of a class (digits and spaces for a
//! card, …) and a match cannot cross the ends of a run of its class, so
//! searching each run once from its start gives the whole string's matches;
//! look-around (`\b`) sees past a run's ends. The card and SSN classes are
//! within the phone class (digits, spaces, `. - ( ) +`), so the pass finds
//! the maximal runs of phone bytes, counts their digits and keeps those with
//! 10 at least: a phone number (10 digits) and a card run with 13 lie in one
//! of them. A run too poor to hold a match that passes the detector's check
//! is not searched: what is skipped would never have been counted. An IBAN
//! starts with two capitals and two digits, so its digits start a phone run:
//! the pass notes each such start, and IBAN runs (capitals, digits, spaces)
//! are searched from there. An SSN's runs (digits and `-`) are found from
//! their anchor, `000-00-`, which `memchr` reaches faster than the shared
//! pass reads the text.

use regex_automata::{meta::Regex, Input};

/// Which of the four a detector is.
#[derive(Clone, Copy)]
pub enum Number {
    Phone,
    Card,
    Iban,
    Ssn,
}

/// What the pass found in the text read last.
#[derive(Default)]
pub struct Numbers {
    /// Where and how long the text read last was.
    of: Option<(usize, usize)>,
    /// Start, end and digits of each maximal run of phone bytes with 10
    /// digits or more, in order.
    runs: Vec<(usize, usize, usize)>,
    /// Where an IBAN could start (two capitals, two digits), in order.
    ibans: Vec<usize>,
}

impl Numbers {
    /// The runs of `b`, found once per text. The text is known by its address
    /// and length, so the caller calls [`Numbers::forget`] before a text that
    /// may sit where another one was.
    fn of(&mut self, b: &[u8]) -> &Numbers {
        let key = (b.as_ptr() as usize, b.len());
        if self.of == Some(key) {
            return self;
        }
        self.runs.clear();
        self.ibans.clear();
        let upper = |i: usize| b[i].is_ascii_uppercase();
        let mut at = 0;
        while let Some(a) = next_digit(b, at) {
            let (lo, hi) = run(b, at, a, &PHONE_CLASS);
            let pair = b.get(a + 1).is_some_and(u8::is_ascii_digit);
            if lo == a && a >= 2 && pair && upper(a - 1) && upper(a - 2) {
                self.ibans.push(a - 2);
            }
            let n = digits(&b[lo..hi]);
            if n >= 10 {
                self.runs.push((lo, hi, n));
            }
            at = hi;
        }
        self.of = Some(key);
        self
    }

    /// Drops what is known of the last text (its buffers stay for the next).
    pub fn forget(&mut self) {
        self.of = None;
    }
}

impl Number {
    /// Calls `f(start, end)` for each match of `re` (this detector's regex) in
    /// `b` that could pass its check, in order.
    pub fn each(
        self,
        re: &Regex,
        b: &[u8],
        numbers: &mut Numbers,
        f: &mut dyn FnMut(usize, usize),
    ) {
        if let Number::Ssn = self {
            // Its anchor, `000-00-`, is rarer than a digit and found by
            // `memchr`: cheaper alone than the shared pass.
            return within(re, b, 0, b.len(), ssn_anchor, &SSN_CLASS, |_| true, f);
        }
        let found = numbers.of(b);
        match self {
            Number::Phone => found
                .runs
                .iter()
                .for_each(|&(lo, hi, _)| search(re, b, lo, hi, f)),
            Number::Card => found
                .runs
                .iter()
                .filter(|r| r.2 >= 13)
                .for_each(|&(lo, hi, _)| {
                    within(re, b, lo, hi, next_digit, &CARD_CLASS, card_enough, f)
                }),
            Number::Ssn => {}
            Number::Iban => {
                let mut at = 0;
                for &start in &found.ibans {
                    if start < at {
                        continue;
                    }
                    let (lo, hi) = run(b, at, start, &IBAN_CLASS);
                    search(re, b, lo, hi, f);
                    at = hi;
                }
            }
        }
    }
}

/// Each match of `re` in `b[lo..hi]`, look-around seeing the whole of `b`.
fn search(re: &Regex, b: &[u8], lo: usize, hi: usize, f: &mut dyn FnMut(usize, usize)) {
    for m in re.find_iter(Input::new(b).range(lo..hi)) {
        f(m.start(), m.end());
    }
}

/// Within `b[lo..hi]` (the whole text, or a phone run): each run of `class`
/// (within the phone class) that holds an `anchor` and is `enough`, searched once.
#[allow(clippy::too_many_arguments)]
fn within(
    re: &Regex,
    b: &[u8],
    lo: usize,
    hi: usize,
    anchor: fn(&[u8], usize) -> Option<usize>,
    class: &Class,
    enough: fn(&[u8]) -> bool,
    f: &mut dyn FnMut(usize, usize),
) {
    // No run of `class` crosses a phone run's ends, so neither the anchors
    // nor the runs need to look past them.
    let part = &b[..hi];
    let mut at = lo;
    while let Some(a) = anchor(part, at) {
        let (rlo, rhi) = run(part, at, a, class);
        if enough(&b[rlo..rhi]) {
            search(re, b, rlo, rhi, f);
        }
        at = rhi.max(a + 1);
    }
}

/// The run of `class` around `a` (a byte of it), not starting before `at`.
fn run(b: &[u8], at: usize, a: usize, class: &Class) -> (usize, usize) {
    let lo = b[at..a]
        .iter()
        .rposition(|&c| !class.has(c))
        .map_or(at, |i| at + i + 1);
    let hi = b[a..]
        .iter()
        .position(|&c| !class.has(c))
        .map_or(b.len(), |i| a + i);
    (lo, hi)
}

/// A set of bytes, as a table: a test per byte of a run costs a load, not a call.
struct Class([bool; 256]);

impl Class {
    /// ASCII digits, with capitals when `upper`, and the bytes of `also`.
    const fn new(upper: bool, also: &[u8]) -> Class {
        let mut table = [false; 256];
        let mut c = 0;
        while c < 256 {
            let b = c as u8;
            table[c] = b.is_ascii_digit() || (upper && b.is_ascii_uppercase());
            c += 1;
        }
        let mut i = 0;
        while i < also.len() {
            table[also[i] as usize] = true;
            i += 1;
        }
        Class(table)
    }

    fn has(&self, c: u8) -> bool {
        self.0[usize::from(c)]
    }
}

/// `pii.ssn`: the first `-` of `000-00-0000`, digits around it.
fn ssn_anchor(b: &[u8], from: usize) -> Option<usize> {
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let mut at = from;
    while let Some(i) = memchr::memchr(b'-', &b[at..]).map(|i| at + i) {
        if i >= 3 && digits(i - 3..i) && digits(i + 1..i + 3) && b.get(i + 3) == Some(&b'-') {
            return Some(i);
        }
        at = i + 1;
    }
    None
}

/// `pii.ssn`'s class: digits and dashes.
static SSN_CLASS: Class = Class::new(false, b"-");

/// `pii.iban`'s class: capitals, digits and spaces.
static IBAN_CLASS: Class = Class::new(true, b" ");

/// `pii.card`'s class: digits, spaces and dashes.
static CARD_CLASS: Class = Class::new(false, b" -");

/// A card number has 13 digits at least.
fn card_enough(run: &[u8]) -> bool {
    digits(run) >= 13
}

/// `pii.phone`'s class: digits and `+ ( ) . -` and spaces.
static PHONE_CLASS: Class = Class::new(false, b" .-()+");

fn digits(run: &[u8]) -> usize {
    run.iter().filter(|c| c.is_ascii_digit()).count()
}

/// Whether `chunk` (of a length that is a multiple of 8) holds an ASCII
/// digit, 8 bytes at a time: XOR with `0` makes digits the bytes below 10
/// and no other byte so, and `(y - 0x0A…) & !y & 0x80…` is not zero exactly
/// when a byte of `y` is below 10 (the "has less" test of Bit Twiddling Hacks,
/// exact as to whether there is one, not as to where).
fn has_digit(chunk: &[u8]) -> bool {
    const EACH: u64 = u64::MAX / 255;
    chunk.chunks_exact(8).fold(0, |found, word| {
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let y = x ^ (EACH * u64::from(b'0'));
        found | (y.wrapping_sub(EACH * 10) & !y & (EACH * 0x80))
    }) != 0
}

/// The first ASCII digit at or after `from`, 32 bytes at a time after the
/// first few: there is no `memchr` for a range of bytes, and a chunk's test
/// reads words, not bytes ([`has_digit`]).
pub fn next_digit(b: &[u8], from: usize) -> Option<usize> {
    let rest = b.get(from..)?;
    // Where digits are, the next one is often near: a few bytes one by one
    // first, before a chunk is read whole.
    let near = rest.len().min(8);
    if let Some(p) = rest[..near].iter().position(u8::is_ascii_digit) {
        return Some(from + p);
    }
    let mut chunks = rest[near..].chunks_exact(32);
    let mut at = from + near;
    for chunk in &mut chunks {
        if has_digit(chunk) {
            return chunk.iter().position(u8::is_ascii_digit).map(|p| at + p);
        }
        at += 32;
    }
    chunks
        .remainder()
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| at + p)
}
