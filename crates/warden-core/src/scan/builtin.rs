//! The built-in detectors: one stable kind name each, its regex, and the check a
//! candidate match must also pass. Kinds group by their first part (`secrets`,
//! `pii`, `injection`), and a guard may name a group or a kind.

use super::checks;
use super::find::{self, Find, Words};
use super::numbers::Number;

/// One built-in detector.
pub struct Builtin {
    /// The stable kind name (`secrets.jwt`), in audit records and redactions.
    pub kind: &'static str,
    /// Where it looks. With a capture group, only the group is redacted.
    pub regex: &'static str,
    /// What a candidate must also pass.
    pub check: Option<fn(&str) -> bool>,
    /// How its matches are searched for (the same matches, faster).
    pub find: Find,
}

const fn d(kind: &'static str, regex: &'static str, check: Option<fn(&str) -> bool>) -> Builtin {
    Builtin {
        kind,
        regex,
        check,
        find: Find::Whole,
    }
}

/// A detector of numbers, found from the runs of digits its kind shares.
const fn number(
    kind: &'static str,
    regex: &'static str,
    check: fn(&str) -> bool,
    number: Number,
) -> Builtin {
    Builtin {
        kind,
        regex,
        check: Some(check),
        find: Find::Numbers(number),
    }
}

/// A detector whose every match starts with one of `words`, in any case.
const fn words(
    kind: &'static str,
    regex: &'static str,
    check: Option<fn(&str) -> bool>,
    words: &'static Words,
) -> Builtin {
    Builtin {
        kind,
        regex,
        check,
        find: Find::Words(words),
    }
}

static ASSIGNED: Words = Words::new(&[
    "password", "passwd", "pwd", "secret", "api", "access", "auth", "client",
]);
static OVERRIDES: Words = Words::new(&["ignore", "disregard", "forget", "override", "new", "you"]);
static ORDERS: Words = Words::new(&[
    "from",
    "quietly",
    "secretly",
    "silently",
    "covertly",
    "system",
    "important",
    "attention",
    "note",
    "act",
]);

/// The characters no reader sees: Unicode tag characters, bidi overrides and
/// isolates, zero-width space, word joiner and invisible operators, BOM.
pub const INVISIBLE: &str =
    r"[\x{E0000}-\x{E007F}\x{202A}-\x{202E}\x{2066}-\x{2069}\x{200B}\x{2060}-\x{2064}\x{FEFF}]+";

/// Every built-in detector, in a fixed order.
pub const BUILTINS: &[Builtin] = &[
    d(
        "secrets.aws_access_key",
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?-u:\b)",
        None,
    ),
    d(
        "secrets.github_token",
        r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})(?-u:\b)",
        Some(checks::github),
    ),
    d(
        "secrets.gitlab_token",
        r"(?-u:\b)glpat-[A-Za-z0-9_-]{20}",
        None,
    ),
    d(
        "secrets.slack_token",
        r"(?-u:\b)xox[abposr]-[0-9A-Za-z]{8,}(?:-[0-9A-Za-z]+)+",
        None,
    ),
    d(
        "secrets.stripe_key",
        r"(?-u:\b)[sr]k_live_[0-9A-Za-z]{24,99}(?-u:\b)",
        None,
    ),
    d(
        "secrets.google_api_key",
        r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        None,
    ),
    d(
        "secrets.private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        None,
    ),
    d(
        "secrets.jwt",
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        Some(checks::jwt),
    ),
    words(
        "secrets.assignment",
        r#"(?i)(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret)["']?\s*[=:]\s*["']?([^\s"'&,;<>(){}\[\]]{8,})"#,
        Some(checks::assigned),
        &ASSIGNED,
    ),
    d(
        "pii.email",
        r"(?-u:\b)[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}(?-u:\b)",
        None,
    ),
    number(
        "pii.phone",
        r"(?:\+[1-9][0-9]{0,2}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-][0-9]{2,4}){1,4}(?-u:\b)|\([0-9]{3}\) ?[0-9]{3}-[0-9]{4}(?-u:\b))",
        checks::phone,
        Number::Phone,
    ),
    number(
        "pii.card",
        r"(?-u:\b)[0-9](?:[ -]?[0-9]){12,18}(?-u:\b)",
        checks::card,
        Number::Card,
    ),
    number(
        "pii.iban",
        r"(?-u:\b)[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?-u:\b)",
        checks::iban,
        Number::Iban,
    ),
    number(
        "pii.ssn",
        r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)",
        checks::ssn,
        Number::Ssn,
    ),
    words(
        "injection.override",
        r"(?i)(?-u:\b)(?:ignore|disregard|forget|override)\s+(?:(?:all|any|the|your|my|of|previous|prior|earlier|above|preceding|system|original)\s+){1,4}(?:instructions?|prompts?|rules|directions|guidelines|directives)(?-u:\b)|(?i)(?-u:\b)new\s+(?:system\s+)?instructions?\s*:|(?i)(?-u:\b)you\s+are\s+now\s+(?:in\s+)?(?:developer|DAN|jailbreak|unrestricted)(?-u:\b)",
        None,
        &OVERRIDES,
    ),
    // The first word in three casings only (lower, Capitalised, UPPER): a
    // case-insensitive first word leaves the regex no literal to skip to,
    // which made the scan of every text several times slower.
    words(
        "injection.orders",
        concat!(
            r"(?-u:\b)(?:from|From|FROM)(?i:\s+now\s+on,?\s+(?:you|the\s+(?:assistant|model|AI))\s+(?:only|must|shall|should|are\s+to))(?-u:\b)",
            r"|(?-u:\b)(?:quietly|Quietly|QUIETLY|secretly|Secretly|SECRETLY|silently|Silently|SILENTLY|covertly|Covertly|COVERTLY)(?i:\s+(?:send|forward|upload|post|e-?mail|transmit|exfiltrate|leak)\s+(?:(?:the|all|your|this|our|of)\s+){0,3}(?:chat|conversation|history|messages?|files?|data|keys?|credentials|secrets?|tokens?|passwords?|context))(?-u:\b)",
            r"|(?-u:\b)SYSTEM\s*:\s+(?i:the\s+user\s+(?:has\s+)?(?:authori[sz]ed|approved|allowed|permitted)|you\s+(?:must|are|may|will|have)|ignore|from\s+now\s+on)(?-u:\b)",
            r"|(?-u:\b)(?:important|Important|IMPORTANT|attention|Attention|ATTENTION|note|Note|NOTE)(?i:\s*:\s*(?:the\s+)?(?:assistant|AI|model|agent|LLM)\s+(?:must|should|needs\s+to|has\s+to|is\s+required\s+to)\s+(?:call|invoke|execute|send))(?-u:\b)",
            r"|(?-u:\b)(?:act|Act|ACT)(?i:\s+as\s+)(?:DAN|(?i:an?\s+(?:unrestricted|unfiltered|jailbroken|uncensored)\s+(?:AI|assistant|model)))(?-u:\b)",
        ),
        None,
        &ORDERS,
    ),
    d(
        "injection.template",
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>|\[/?INST\]|<</?SYS>>|</?tool_call>|</?function_calls?>",
        None,
    ),
    // Tool poisoning's block for the model: a tag a reader skims past (with or
    // without attributes), closed by the same tag, around an order of three
    // words or more of its own text (`checks::instruction_block`: a bare
    // `<system>` in a schema, `<system>GitHub</system>` in a POM, or a
    // `<system>` element of child elements, is none). Markup may sit inside,
    // up to 16 tags: each try of the regex reads on to the closing tag or to
    // the 17th `<` at most, so a text of many opening tags costs a bounded
    // read per tag. Each tag in three casings only, as for `injection.orders`.
    d(
        "injection.instruction_tag",
        concat!(
            r"<(?:IMPORTANT|Important|important)(?:\s[^<>]*)?>[^<]*(?:<[^<]*){0,16}?</(?:IMPORTANT|Important|important)\s*>",
            r"|<(?:SYSTEM|System|system)(?:\s[^<>]*)?>[^<]*(?:<[^<]*){0,16}?</(?:SYSTEM|System|system)\s*>",
            r"|<(?:INSTRUCTIONS?|Instructions?|instructions?)(?:\s[^<>]*)?>[^<]*(?:<[^<]*){0,16}?</(?:INSTRUCTIONS?|Instructions?|instructions?)\s*>",
        ),
        Some(checks::instruction_block),
    ),
    Builtin {
        kind: "injection.invisible",
        regex: INVISIBLE,
        check: None,
        find: Find::Invisible,
    },
    Builtin {
        kind: "injection.exfil_link",
        regex: r"!\[[^\]\n]*\]\(\s*https?://[^\s)]*\?[^\s)]*=[^\s)&]+[^\s)]*\)|\[[^\]\n]*\]\(\s*https?://[^\s)]*\?[^\s)]*=[^\s)&]{24,}[^\s)]*\)",
        check: None,
        find: Find::Windows(find::link_windows),
    },
];

/// The groups a guard may name instead of each kind.
pub const GROUPS: &[&str] = &["secrets", "pii", "injection"];

/// The kinds a `detect` entry names: a group's kinds, or one kind; `None`: no such thing.
pub fn expand(name: &str) -> Option<Vec<&'static Builtin>> {
    let of_group: Vec<_> = BUILTINS
        .iter()
        .filter(|b| b.kind.split('.').next() == Some(name))
        .collect();
    if GROUPS.contains(&name) {
        return Some(of_group);
    }
    BUILTINS.iter().find(|b| b.kind == name).map(|b| vec![b])
}
