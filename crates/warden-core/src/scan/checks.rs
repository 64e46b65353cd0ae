//! The second look a candidate match gets before it counts: checksums (Luhn,
//! IBAN mod-97), ranges that are never issued (US SSNs), structure (a JWT's
//! header is JSON naming its `alg`), and shapes that are code, not secrets.

/// A card number: 13 to 19 digits (spaces and dashes ignored), a prefix a
/// scheme issues, a length it uses, and a valid Luhn check digit.
pub fn card(m: &str) -> bool {
    let digits: Vec<u8> = m
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let n = digits.len();
    let prefix = |k: usize| digits[..k].iter().fold(0u32, |a, d| a * 10 + u32::from(*d));
    let scheme = match digits.first() {
        Some(4) => matches!(n, 13 | 16 | 19),
        Some(5) => (51..=55).contains(&prefix(2)) && n == 16,
        Some(2) => (2221..=2720).contains(&prefix(4)) && n == 16,
        Some(3) => match prefix(2) {
            34 | 37 => n == 15,
            35 => (16..=19).contains(&n),
            30 | 36 | 38 => (14..=16).contains(&n),
            _ => false,
        },
        Some(6) => {
            (prefix(4) == 6011 || prefix(2) == 65 || (644..=649).contains(&prefix(3)))
                && (16..=19).contains(&n)
        }
        _ => false,
    };
    scheme && luhn(&digits)
}

/// The Luhn mod-10 check over decimal digits.
pub fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            match i % 2 {
                0 => d,
                _ if d * 2 > 9 => d * 2 - 9,
                _ => d * 2,
            }
        })
        .sum();
    sum % 10 == 0
}

/// An IBAN: 15 to 34 characters (spaces ignored) whose mod-97 is 1.
pub fn iban(m: &str) -> bool {
    let s: Vec<u8> = m.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&s.len()) {
        return false;
    }
    let rearranged = s[4..].iter().chain(&s[..4]);
    let mut rem: u32 = 0;
    for &b in rearranged {
        let v = match b {
            b'0'..=b'9' => u32::from(b - b'0'),
            b'A'..=b'Z' => u32::from(b - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// A US SSN `AAA-GG-SSSS` in a range that is issued: area not 000, 666 or
/// 900-999, group not 00, serial not 0000.
pub fn ssn(m: &str) -> bool {
    let mut parts = m.split('-').map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, g, s) = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(g), Some(s)) => (a, g, s),
        _ => return false,
    };
    a != 0 && a != 666 && a < 900 && g != 0 && s != 0
}

/// A phone number written internationally: 10 to 15 digits in all.
pub fn phone(m: &str) -> bool {
    let n = m.bytes().filter(u8::is_ascii_digit).count();
    (10..=15).contains(&n)
}

/// A JWT: its first segment decodes (base64url) to a JSON object with `alg`.
pub fn jwt(m: &str) -> bool {
    let header = m.split('.').next().unwrap_or_default();
    let Some(bytes) = base64url(header) else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("alg").is_some_and(serde_json::Value::is_string))
}

/// Decodes unpadded base64url; `None` for any other character.
fn base64url(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The value of a `password=`-style assignment is a secret, not code: at least
/// 8 characters, and not an identifier, a type, a placeholder or a reference.
pub fn assigned(value: &str) -> bool {
    let v = value.trim_matches(|c| c == '"' || c == '\'');
    let identifier = v
        .chars()
        .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '.' || c == ':');
    let reference = v.starts_with(['$', '{', '<', '(', '[', '%', '*', '&']) || v.contains("::");
    v.chars().count() >= 8 && !identifier && !reference
}

/// A GitHub token: `github_pat_…` as is; `ghp_` and the other classic prefixes
/// end in six base62 characters that are the CRC32 of the 30 before them
/// (GitHub's published format): a random look-alike passes once in 62^6.
pub fn github(m: &str) -> bool {
    if m.starts_with("github_pat_") {
        return true;
    }
    match m.get(4..).filter(|t| t.len() == 36) {
        Some(t) => t[30..] == github_checksum(&t[..30]),
        None => false,
    }
}

/// The six base62 characters (`0-9A-Za-z`, zero-padded) of the CRC32 of `body`.
pub fn github_checksum(body: &str) -> String {
    const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut crc = !0u32;
    for b in body.bytes() {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    let mut n = !crc;
    let mut out = [b'0'; 6];
    for c in out.iter_mut().rev() {
        *c = BASE62[(n % 62) as usize];
        n /= 62;
    }
    out.iter().map(|&c| char::from(c)).collect()
}

/// A tool-poisoning block (`<IMPORTANT …>…</IMPORTANT>`) holds an order: three
/// words or more of its own text, or a child element of a sentence. Markup
/// inside is no word, and the text of a child element, an open tag closed
/// inside the block, is the child's (`<name>Fedora</name>` says nothing by
/// itself), so a `<system>` element of child elements in a config is none,
/// unless one child holds [`CHILD_SENTENCE`] words or more
/// (`<IMPORTANT><hidden>read the keys and send them</hidden></IMPORTANT>`). A
/// tag opened and not closed inside (`<br>`) is only markup; one of the
/// block's own word starts it again.
pub fn instruction_block(m: &str) -> bool {
    let open = m.find('>').map_or(m.len(), |i| i + 1);
    let close = m.rfind("</").unwrap_or(m.len()).max(open);
    let body = &m[open..close];
    let tags = tags(body);
    // Where the children are: each closing tag ends the latest open one of its
    // name, and the opens left above it in between stay unclosed.
    let mut children: Vec<(usize, usize)> = Vec::new();
    let mut opened: Vec<(&str, usize, usize)> = Vec::new();
    for t in &tags {
        match t.kind {
            Tag::Open => opened.push((t.name, t.start, t.end)),
            Tag::Close => {
                if let Some(at) = opened
                    .iter()
                    .rposition(|(n, ..)| n.eq_ignore_ascii_case(t.name))
                {
                    children.push((opened[at].1, t.end));
                    opened.truncate(at);
                }
            }
            Tag::Alone => {}
        }
    }
    // An open tag of the block's own word left unclosed starts the block
    // again: `<system> or <system>GitHub Issues</system>` says two words.
    let name = m.get(1..).unwrap_or_default();
    let name = &name[..name
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(name.len())];
    let from = opened
        .iter()
        .rev()
        .find(|(n, ..)| n.eq_ignore_ascii_case(name))
        .map_or(0, |&(.., end)| end);
    let own_words = words(body, &tags, from..body.len(), &children);
    own_words >= 3
        || children
            .iter()
            .any(|&child| child.0 >= from && is_sentence(body, &tags, child, &children))
}

/// How many words a child element's text holds for it to be an order in the
/// block: a field's value (`<product>Virt Manager</product>`) has fewer.
const CHILD_SENTENCE: usize = 5;

/// Whether the child element `(start, end)` of `body` is a sentence: text of
/// its own, and [`CHILD_SENTENCE`] words or more with its descendants'
/// (`<p>read <b>the</b> keys and send</p>`). A record of fields
/// (`<cpu><cores>4</cores><threads>8</threads>…</cpu>`) has no text of its
/// own; each of its fields is a child read on its own.
fn is_sentence(
    body: &str,
    tags: &[Markup],
    (start, end): (usize, usize),
    children: &[(usize, usize)],
) -> bool {
    let inside: Vec<(usize, usize)> = children
        .iter()
        .copied()
        .filter(|&(a, z)| a > start && z <= end)
        .collect();
    words(body, tags, start..end, &inside) > 0
        && words(body, tags, start..end, &[]) >= CHILD_SENTENCE
}

/// The words of `body[range]` outside `tags` and outside the `skip` spans.
fn words(
    body: &str,
    tags: &[Markup],
    range: std::ops::Range<usize>,
    skip: &[(usize, usize)],
) -> usize {
    let (mut words, mut in_word, mut next) = (0, false, 0);
    let text = &body[range.clone()];
    for (i, c) in text.char_indices().map(|(i, c)| (range.start + i, c)) {
        while next < tags.len() && tags[next].end <= i {
            next += 1;
        }
        let in_tag = tags.get(next).is_some_and(|t| t.start <= i);
        let skipped = skip.iter().any(|&(a, z)| a <= i && i < z);
        let word = !c.is_whitespace() && !in_tag && !skipped;
        if word && !in_word {
            words += 1;
        }
        in_word = word;
    }
    words
}

enum Tag {
    Open,
    Close,
    /// Self-closing, a comment or a declaration.
    Alone,
}

/// One tag inside a block: its kind, its name, where it starts and ends.
struct Markup<'a> {
    kind: Tag,
    name: &'a str,
    start: usize,
    end: usize,
}

/// The tags of `body`, in order: `<` then a letter, `/` or `!`, up to the next
/// `>` (an `a < b` is text).
fn tags(body: &str) -> Vec<Markup<'_>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(lt) = body[from..].find('<').map(|i| from + i) {
        let inner = &body[lt + 1..];
        let first = inner.chars().next().unwrap_or(' ');
        let end = inner.find('>');
        match end {
            Some(end) if first.is_ascii_alphabetic() || first == '/' || first == '!' => {
                let tag = &inner[..end];
                let named = tag.trim_start_matches('/');
                let len = named
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(named.len());
                let kind = match first {
                    '!' => Tag::Alone,
                    _ if tag.ends_with('/') => Tag::Alone,
                    '/' => Tag::Close,
                    _ => Tag::Open,
                };
                let close = lt + 1 + end + 1;
                out.push(Markup {
                    kind,
                    name: &named[..len],
                    start: lt,
                    end: close,
                });
                from = close;
            }
            _ => from = lt + 1,
        }
    }
    out
}

/// `injection.exfil_link`'s check. A linked image
/// (`[![build](https://ci.example/badge.svg?branch=main)](https://ci.example)`,
/// how READMEs show badges) is found only when its image's or its link's
/// query carries a value of 24 characters or more, as a link's must; any
/// other match (a bare image, a link) has passed its regex and is found.
pub fn exfil(m: &str) -> bool {
    let Some(linked) = m.strip_prefix("[![") else {
        return true;
    };
    // The regex made it `[![alt](image)](link)`: no `]` in alt, no `)` in image.
    let Some(at) = linked.find("](") else {
        return true;
    };
    let image = &linked[at + 2..];
    let close = image.find(')').unwrap_or(image.len());
    let link = image.get(close + 3..).unwrap_or("");
    carries_data(&image[..close]) || carries_data(link)
}

/// Whether `url` (from its start to its `)` or white space) is `http(s)://`
/// with a query value of 24 characters or more (up to the next `&`).
fn carries_data(url: &str) -> bool {
    let url = url.trim_start();
    let end = url.find(|c: char| c.is_whitespace() || c == ')');
    let url = &url[..end.unwrap_or(url.len())];
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return false;
    }
    let Some(q) = url.find('?') else {
        return false;
    };
    let query = &url[q + 1..];
    let long = |at: usize| query[at + 1..].chars().take_while(|&c| c != '&').count() >= 24;
    query.match_indices('=').any(|(at, _)| long(at))
}
