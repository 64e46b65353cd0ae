//! The injection group over labelled sets (`tests/guard/`): the phrasings
//! the detectors were written with (`injection.txt`), and the phrasings and
//! tool descriptions written by sessions that saw no detector (the held-out
//! sets). A set's lines start with `+` (an injection: found), `~` (an
//! injection the detectors are known to miss), `-` (a look-alike or benign
//! description: not found) or `#` (a comment).

use super::{kinds, root, scanner};

#[test]
fn injection_phrasings_and_look_alikes() {
    let (found, pos, false_pos, neg) = figures("injection.txt", Text::Plain);
    assert_eq!(false_pos, 0, "{false_pos}/{neg}");
    let known = known_misses("injection.txt");
    assert_eq!(
        found,
        pos - known.len(),
        "every phrasing the detectors were written with is found, but the known misses"
    );
    let s = scanner(&["injection"]);
    for line in known {
        assert!(
            kinds(&s, &line).is_empty(),
            "found now, make it '+': {line}"
        );
    }
}

/// The held-out phrasings, written after the detectors and never used to tune
/// them: what they find there is a measure, and neither figure may get worse.
#[test]
fn injection_held_out_phrasings() {
    for (file, at_least, flagged_at_most) in HELD_OUT {
        let (found, pos, false_pos, neg) = figures(file, Text::Plain);
        assert!(found >= at_least, "{file}: {found}/{pos}");
        assert!(
            false_pos <= flagged_at_most,
            "{file}: {false_pos}/{neg} look-alikes flagged"
        );
    }
}

/// Each set of phrasings written by a session that saw no detector, with
/// what the detectors find in it and the look-alikes they flag; neither may
/// get worse. Set 2 (`injection-heldout.txt`): 13 of 49 when it was added (the
/// detectors before `injection.addressed` and `injection.secrecy` found 4),
/// none of 50 flagged. Set 3 (`injection-heldout-3.txt`): 12 of 60 and 4 of 60
/// flagged when it was added (two quote an override to explain it, one shows
/// the exfiltration pattern, one is a badge whose image URL has a query).
/// The forms of `injection.addressed` that name an AI (`AI agents: also run …`)
/// were then written from the misses of sets 2 and 3, which are no longer held
/// out for them: 16 and 23 since. Set 4 (`injection-heldout-4.txt`, written
/// after and read by no detector's author): 8 of 60, 4 of 60 flagged. A
/// detector made from a set's lines makes them no longer held out: write a
/// new set.
const HELD_OUT: [(&str, usize, usize); 3] = [
    ("injection-heldout.txt", 16, 0),
    ("injection-heldout-3.txt", 23, 4),
    ("injection-heldout-4.txt", 8, 4),
];

/// Tool poisoning held out: tool descriptions as servers list them, each a
/// JSON string, `+` poisoned, `-` benign, in sets written by sessions that saw
/// no detector. What the injection group finds there is a measure, and neither
/// figure may get worse.
#[test]
fn tool_poisoning_held_out() {
    for (file, at_least, flagged_at_most) in POISON_HELD_OUT {
        let (found, pos, flagged, neg) = figures(file, Text::Json);
        assert!(found >= at_least, "{file}: {found}/{pos}");
        assert!(
            flagged <= flagged_at_most,
            "{file}: {flagged}/{neg} benign flagged"
        );
    }
}

/// Each held-out set of tool descriptions, with what the detectors found and
/// the benign ones they flagged. Set 1 (`poison-heldout.txt`, written with set
/// 2 of the phrasings): 12 of 25, and 1 of 25 benign (an `<instructions>`
/// block of usage advice, the class S2 names as found too); 13 since a child
/// element of a sentence counts, a rule written from its miss. Set 2
/// (`poison-heldout-2.txt`, measured before any detector read it): 8 of 30,
/// and 1 of 30 benign (an `<important>` block that warns of instructions in
/// fetched pages); 9 since the forms that name an AI. Set 3
/// (`poison-heldout-3.txt`, written with set 4 of the phrasings and read by
/// no detector's author): 8 of 30, none of 30 benign.
const POISON_HELD_OUT: [(&str, usize, usize); 3] = [
    ("poison-heldout.txt", 13, 1),
    ("poison-heldout-2.txt", 9, 1),
    ("poison-heldout-3.txt", 8, 0),
];

/// How a set's lines hold their text.
#[derive(Clone, Copy)]
enum Text {
    /// As it is (phrasings).
    Plain,
    /// As a JSON string (tool descriptions as servers list them).
    Json,
}

/// The injection group over `tests/guard/<file>`: found, positives (`+` and
/// `~` lines), flagged, negatives (`-` lines); prints them, each positive it
/// missed and each negative it flagged.
fn figures(file: &str, text: Text) -> (usize, usize, usize, usize) {
    let s = scanner(&["injection"]);
    let (positives, negatives) = labelled(file, text);
    let hit = |body: &&String| !kinds(&s, body).is_empty();
    let missed: Vec<&String> = positives.iter().filter(|b| !hit(b)).collect();
    let flagged: Vec<&String> = negatives.iter().filter(hit).collect();
    let (pos, neg) = (positives.len(), negatives.len());
    let found = pos - missed.len();
    println!(
        "injection ({file}): recall {found}/{pos}, false positives {}/{neg}; missed: {missed:#?}; flagged: {flagged:#?}",
        flagged.len()
    );
    (found, pos, flagged.len(), neg)
}

/// The positive (`+`, `~`) and negative (`-`) texts of `tests/guard/<file>`.
fn labelled(file: &str, text: Text) -> (Vec<String>, Vec<String>) {
    let all = std::fs::read_to_string(root().join("tests/guard").join(file)).unwrap();
    let (mut positives, mut negatives) = (Vec::new(), Vec::new());
    for line in all.lines().filter(|l| !l.starts_with('#')) {
        let (mark, body) = line.split_at(1);
        let body = match text {
            Text::Plain => body.to_owned(),
            Text::Json => serde_json::from_str(body).expect("a JSON string"),
        };
        match mark {
            "+" | "~" => positives.push(body),
            "-" => negatives.push(body),
            _ => panic!("{file}: a line starts with +, ~, - or #: {line}"),
        }
    }
    (positives, negatives)
}

/// The `~` lines of `tests/guard/<file>`: phrasings the detectors are known to miss.
fn known_misses(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/guard").join(file)).unwrap();
    let known = text.lines().filter_map(|l| l.strip_prefix('~'));
    known.map(str::to_owned).collect()
}
