//! The scanner's quality on a labelled corpus (issue 26): generated positives
//! with valid checksums per format, hard negatives, every line of the
//! repository's own docs and sources and of the reference MCP servers' answers
//! (`tests/guard/reference-outputs.txt`) as ordinary text, and the injection
//! phrasings of `tests/guard/injection.txt`. Prints precision and recall per
//! detector and asserts the bars: recall >= 0.98 for checksum formats, at most 1
//! false positive per 10,000 ordinary lines for `secrets` and `pii`, per kind and
//! per group. The docs and sources hold a few values on purpose (test keys, test
//! cards, example addresses: `tests/guard/planted.tsv`); a find of one of them is
//! right, so it is counted and printed apart from the false positives.
//!
//! `cargo test -p warden-core --test guard_corpus -- --nocapture` shows the figures;
//! the scan's cost is measured by `cargo bench -p warden-core --bench scan`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use warden_core::scan::Scanner;

mod injection;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scanner(detect: &[&str]) -> Scanner {
    let d: Vec<String> = detect.iter().map(|s| s.to_string()).collect();
    Scanner::new(&d, &[]).unwrap()
}

fn kinds(s: &Scanner, text: &str) -> Vec<String> {
    let mut v = Value::String(text.into());
    s.scan(&mut v).into_iter().map(|f| f.kind).collect()
}

/// Each match's kind in `text`, once per match.
fn matches(s: &Scanner, text: &str) -> Vec<String> {
    let mut v = Value::String(text.into());
    let found = s.scan(&mut v).into_iter();
    found
        .flat_map(|f| std::iter::repeat_n(f.kind, f.count))
        .collect()
}

/// A small deterministic generator (no dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    fn digits(&mut self, k: usize) -> String {
        (0..k)
            .map(|_| char::from(b'0' + self.next(10) as u8))
            .collect()
    }
}

fn luhn_complete(body: &str) -> String {
    for d in 0..10 {
        let s = format!("{body}{d}");
        let ds: Vec<u8> = s.bytes().map(|b| b - b'0').collect();
        if warden_core::scan::checks::luhn(&ds) {
            return s;
        }
    }
    unreachable!()
}

fn iban_with_check(country: &str, bban: &str) -> String {
    for c in 2..99 {
        let s = format!("{country}{c:02}{bban}");
        if warden_core::scan::checks::iban(&s) {
            return s;
        }
    }
    unreachable!()
}

/// Generated positives per kind, each in a sentence.
fn positives() -> Vec<(&'static str, String)> {
    let mut r = Lcg(26);
    let mut out = Vec::new();
    for i in 0..200 {
        let (prefix, len) = [
            ("4", 16),
            ("51", 16),
            ("2221", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("35", 16),
            ("4", 19),
        ][i % 8];
        let body = format!("{prefix}{}", r.digits(len - prefix.len() - 1));
        let card = luhn_complete(&body);
        let shown = if i % 3 == 0 && len == 16 {
            card.as_bytes()
                .chunks(4)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            card
        };
        out.push(("pii.card", format!("Charge card {shown} for the order.")));
        let (cc, n) = [("DE", 18), ("FR", 23), ("NL", 14), ("ES", 20)][i % 4];
        let bban = if cc == "NL" {
            format!("ABNA{}", r.digits(10))
        } else {
            r.digits(n)
        };
        out.push((
            "pii.iban",
            format!("Pay to IBAN {}.", iban_with_check(cc, &bban)),
        ));
        let area = loop {
            let a = 1 + r.next(899);
            if a != 666 {
                break a;
            }
        };
        out.push((
            "pii.ssn",
            format!(
                "SSN {area:03}-{:02}-{:04} on file.",
                1 + r.next(98),
                1 + r.next(9998)
            ),
        ));
        out.push((
            "pii.email",
            format!(
                "Reach user{}@mail{}.example.com today.",
                r.next(1000),
                r.next(50)
            ),
        ));
        out.push((
            "pii.phone",
            format!("Call +1 415 {} {} now.", r.digits(3), r.digits(4)),
        ));
        let alnum = |r: &mut Lcg, k: usize| -> String {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            (0..k).map(|_| A[r.next(62) as usize] as char).collect()
        };
        let upper = |r: &mut Lcg, k: usize| -> String {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
            (0..k).map(|_| A[r.next(32) as usize] as char).collect()
        };
        out.push((
            "secrets.aws_access_key",
            format!("aws_access_key_id AKIA{}", upper(&mut r, 16)),
        ));
        let body = alnum(&mut r, 30);
        out.push((
            "secrets.github_token",
            format!(
                "token: gh{}_{body}{}",
                ["p", "o", "u", "s", "r"][i % 5],
                warden_core::scan::checks::github_checksum(&body)
            ),
        ));
        out.push((
            "secrets.gitlab_token",
            format!("export GL=glpat-{}", alnum(&mut r, 20)),
        ));
        out.push((
            "secrets.slack_token",
            format!("xoxb-{}-{}", r.digits(12), alnum(&mut r, 24)),
        ));
        out.push((
            "secrets.stripe_key",
            format!("stripe sk_live_{}", alnum(&mut r, 24)),
        ));
        out.push((
            "secrets.google_api_key",
            format!("key=AIza{}", alnum(&mut r, 35)),
        ));
        out.push(("secrets.jwt", format!("Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLXtpfSJ9.{}", alnum(&mut r, 43))));
        out.push((
            "secrets.private_key",
            format!(
                "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
                alnum(&mut r, 64)
            ),
        ));
        out.push((
            "secrets.assignment",
            format!("DB_PASSWORD={}9!", alnum(&mut r, 12)),
        ));
    }
    out
}

/// Hard negatives: look-alikes that must not be found by any kind.
fn hard_negatives() -> Vec<String> {
    let mut r = Lcg(7);
    let mut out = Vec::new();
    for _ in 0..200 {
        out.push(format!(
            "id {:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            r.next(1 << 32),
            r.next(1 << 16),
            r.next(1 << 12),
            r.next(1 << 12),
            r.next(1 << 40)
        ));
        out.push(format!(
            "sha256 {:016x}{:016x}{:016x}{:016x}",
            r.next(u64::MAX),
            r.next(u64::MAX),
            r.next(u64::MAX),
            r.next(u64::MAX)
        ));
        out.push(format!(
            "blob {}",
            (0..40)
                .map(
                    |_| b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                        [r.next(64) as usize] as char
                )
                .collect::<String>()
        ));
        out.push(format!(
            "ghp_{}",
            (0..36)
                .map(
                    |_| b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                        [r.next(62) as usize] as char
                )
                .collect::<String>()
        ));
        let card = luhn_complete(&format!("4{}", r.digits(14)));
        let last = card.as_bytes()[15] - b'0';
        out.push(format!("card {}{}", &card[..15], (last + 1) % 10));
        out.push(format!(
            "timestamp {} ms, order {}",
            1_600_000_000_000 + r.next(100_000_000_000),
            r.digits(12)
        ));
    }
    out
}

/// What the reference MCP servers answered (`tests/guard/capture-reference.py`
/// made it: server-everything, server-filesystem over license texts,
/// server-memory), a line per line of each string of each result.
fn reference_lines() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/guard/reference-outputs.txt")).unwrap();
    // The file's own header comes first; the servers' lines may start with '#' too.
    text.lines()
        .skip_while(|l| l.starts_with("# "))
        .map(str::to_owned)
        .collect()
}

/// Every line of the repository's docs and Rust sources, except the files
/// that hold positives on purpose.
fn repository_lines() -> Vec<String> {
    let mut files = Vec::new();
    let skip = [
        "scan",
        "guards.rs",
        "content.rs",
        "guard_corpus",
        "http_auth.rs",
        "jwt",
    ];
    fn walk(dir: &Path, out: &mut Vec<PathBuf>, skip: &[&str]) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if skip.iter().any(|s| name.contains(s)) || name == "target" || name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(&p, out, skip);
            } else if name.ends_with(".rs") || name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    walk(&root().join("crates"), &mut files, &skip);
    walk(&root().join("docs"), &mut files, &skip);
    files.push(root().join("README.md"));
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The values planted on purpose in the repository's own text: (kind, value).
fn planted() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("tests/guard/planted.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut cols = l.split('\t');
            let (kind, value) = (cols.next().unwrap(), cols.next().unwrap());
            assert!(
                cols.next().is_some(),
                "planted.tsv: say why '{value}' is planted"
            );
            (kind.to_owned(), value.to_owned())
        })
        .collect()
}

/// What the scanner finds in the ordinary lines, per kind: (planted, other).
/// Every planted entry must still be found, or it says nothing true.
fn ordinary_findings(all: &Scanner, lines: &[String]) -> BTreeMap<String, (u32, u32)> {
    let (ordinary, used) = findings_and_planted(all, lines);
    let planted = planted();
    for ((kind, value), used) in planted.iter().zip(used) {
        assert!(
            used,
            "planted.tsv: no ordinary line holds {kind} '{value}' any more"
        );
    }
    ordinary
}

/// Each kind's matches in `lines` (planted, other) and which planted entries
/// were found.
fn findings_and_planted(
    all: &Scanner,
    lines: &[String],
) -> (BTreeMap<String, (u32, u32)>, Vec<bool>) {
    let planted = planted();
    let mut used = vec![false; planted.len()];
    let mut ordinary: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for l in lines {
        let found = matches(all, l);
        if found.is_empty() {
            continue;
        }
        // A find is planted when scanning the line again without the planted
        // values it holds no longer finds it; what is still found is not.
        let held: Vec<usize> = (0..planted.len())
            .filter(|&i| l.contains(planted[i].1.as_str()))
            .collect();
        let masked = held
            .iter()
            .fold(l.clone(), |m, &i| m.replace(planted[i].1.as_str(), " "));
        let mut left = matches(all, &masked);
        for k in found {
            let e = ordinary.entry(k.clone()).or_default();
            match left.iter().position(|m| *m == k) {
                Some(at) => {
                    left.swap_remove(at);
                    // Injection finds of the docs that quote markers are
                    // counted, not printed (CORPUS_PRINT_ALL=1 prints them
                    // too); instruction_tag has none to quote.
                    let quiet = k.starts_with("injection.") && k != "injection.instruction_tag";
                    if !quiet || std::env::var_os("CORPUS_PRINT_ALL").is_some() {
                        println!("ordinary line found as {k}: {}", l.trim());
                    }
                    e.1 += 1;
                }
                None => {
                    held.iter()
                        .filter(|&&i| planted[i].0 == k)
                        .for_each(|&i| used[i] = true);
                    e.0 += 1;
                }
            }
        }
    }
    (ordinary, used)
}

/// Text nobody here wrote, as an agent reads it (the `.md` and `.txt` files
/// under `GUARD_CORPUS_DIR`: crates' and npm packages' READMEs and docs):
/// each kind's finds per 10,000 lines and each injection find's line, for a
/// reader to judge. A measure, not a bar (values in docs are often real
/// formats on purpose): `GUARD_CORPUS_DIR=~/.cargo/registry/src cargo test
/// --release -p warden-core --test guard_corpus -- --ignored --nocapture`.
#[test]
#[ignore = "reads a directory named by GUARD_CORPUS_DIR"]
fn others_text_in_a_directory() {
    let dir = std::env::var_os("GUARD_CORPUS_DIR").expect("GUARD_CORPUS_DIR names a directory");
    let mut files = Vec::new();
    text_files(Path::new(&dir), &mut files);
    files.sort();
    let all = scanner(&["secrets", "pii", "injection"]);
    let (mut lines, mut per_kind) = (0usize, BTreeMap::<String, usize>::new());
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for l in text.lines() {
            lines += 1;
            for k in matches(&all, l) {
                if k.starts_with("injection.") {
                    println!("{k}\t{}\t{}", f.display(), l.trim());
                }
                *per_kind.entry(k).or_default() += 1;
            }
        }
    }
    println!("{} files, {lines} lines", files.len());
    for (k, n) in per_kind {
        println!(
            "{k:28} {n:6}  {:.2} per 10,000 lines",
            n as f64 * 1e4 / lines as f64
        );
    }
}

/// The `.md` and `.txt` files under `dir`, each real file once (no links followed).
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        let p = e.path();
        if kind.is_dir() {
            text_files(&p, out);
        } else if kind.is_file() && p.extension().is_some_and(|x| x == "md" || x == "txt") {
            out.push(p);
        }
    }
}

/// The repository's lines and the reference servers' answers, one list.
fn ordinary_lines() -> Vec<String> {
    let (own, reference) = (repository_lines(), reference_lines());
    println!(
        "ordinary text: {} lines of the repository's docs and sources, {} of the reference servers' answers",
        own.len(),
        reference.len()
    );
    // The license texts come back twice (text and structuredContent): count
    // what is distinct.
    let distinct: std::collections::BTreeSet<&String> = reference.iter().collect();
    println!(
        "of the reference servers' lines, {} distinct",
        distinct.len()
    );
    assert!(
        distinct.len() >= 3_000,
        "{} distinct reference lines",
        distinct.len()
    );
    own.into_iter().chain(reference).collect()
}

/// The bars on ordinary text: no `injection.instruction_tag` but the planted
/// ones, and at most 1 false positive per 10,000 lines for each of `secrets`
/// and `pii` (planted values apart).
fn ordinary_bars(ordinary: &BTreeMap<String, (u32, u32)>, lines: usize) {
    let per_10k = |n: u32| f64::from(n) * 10_000.0 / lines as f64;
    let (_, tagged) = ordinary
        .get("injection.instruction_tag")
        .copied()
        .unwrap_or_default();
    assert_eq!(tagged, 0, "injection.instruction_tag in ordinary text");
    for group in ["secrets", "pii"] {
        let of_group = ordinary
            .iter()
            .filter(|(kind, _)| kind.starts_with(&format!("{group}.")));
        let (planted, other) = of_group.fold((0, 0), |(p, o), (_, (kp, ko))| (p + kp, o + ko));
        println!(
            "{group}: {other} false positives in {} ordinary lines ({:.2} per 10,000), {planted} finds of planted values",
            lines,
            per_10k(other)
        );
        assert!(
            per_10k(other) <= 1.0,
            "{group}: {other} in {} ordinary lines",
            lines
        );
    }
}

#[test]
fn precision_and_recall_per_detector() {
    let all = scanner(&["secrets", "pii", "injection"]);
    let mut tp: BTreeMap<String, (u32, u32)> = BTreeMap::new(); // kind -> (found, total)
    let mut fp: BTreeMap<String, u32> = BTreeMap::new();
    for (kind, text) in positives() {
        let found = kinds(&all, &text);
        let e = tp.entry(kind.to_owned()).or_default();
        e.1 += 1;
        if found.iter().any(|k| k == kind) {
            e.0 += 1;
        }
        for k in found.into_iter().filter(|k| k != kind) {
            *fp.entry(k).or_default() += 1;
        }
    }
    let negatives = hard_negatives();
    for text in &negatives {
        for k in kinds(&all, text) {
            *fp.entry(k).or_default() += 1;
        }
    }
    let lines = ordinary_lines();
    let ordinary = ordinary_findings(&all, &lines);
    println!(
        "{:<26} {:>8} {:>8} {:>10} {:>10} {:>8}",
        "kind", "recall", "found", "fp(neg)", "fp(ord)", "planted"
    );
    for (kind, (found, total)) in &tp {
        let fpn = fp.get(kind).copied().unwrap_or(0);
        let (planted, fpo) = ordinary.get(kind).copied().unwrap_or_default();
        let precision = f64::from(*found) / f64::from(found + fpn + fpo).max(1.0);
        println!("{kind:<26} {:>8.3} {found:>4}/{total:<3} {fpn:>10} {fpo:>10} {planted:>8}  precision {precision:.3}", f64::from(*found) / f64::from(*total));
    }
    println!(
        "{} generated positives, {} hard negatives, {} ordinary lines",
        positives().len(),
        negatives.len(),
        lines.len()
    );
    println!("ordinary-text findings: {ordinary:?}; other false positives: {fp:?}");
    assert!(lines.len() >= 10_000, "{} ordinary lines", lines.len());
    for kind in ["pii.card", "pii.iban", "pii.ssn"] {
        let (found, total) = tp[kind];
        assert!(
            f64::from(found) / f64::from(total) >= 0.98,
            "{kind}: {found}/{total}"
        );
    }
    ordinary_bars(&ordinary, lines.len());
    for kind in fp.keys() {
        assert!(
            !["pii.card", "pii.iban", "secrets.github_token"].contains(&kind.as_str()),
            "{fp:?}"
        );
    }
}

/// A planted value on a line hides no other find of its kind there: the line
/// is scanned again without it (a line holding Visa's test card and another
/// valid card counts one planted find and one false positive).
#[test]
fn a_planted_value_hides_no_other_find_on_its_line() {
    let all = scanner(&["secrets", "pii", "injection"]);
    let lines = ["test card 4111 1111 1111 1111, real card 5500 0000 0000 0004".to_owned()];
    let (found, _) = findings_and_planted(&all, &lines);
    assert_eq!(found.get("pii.card"), Some(&(1, 1)), "{found:?}");
}
