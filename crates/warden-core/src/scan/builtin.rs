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
static OVERRIDES: Words = Words::bounded(&[
    "ignor",
    "disregard",
    "forget",
    "override",
    "new",
    "you",
    "pretend",
]);
static ORDERS: Words = Words::bounded(&[
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
// Two small lists rather than one long one: a search for any of more than
// about ten words costs several times the search for each half (Teddy's
// buckets fill up), and each of these costs about what `ORDERS` does.
static ADDRESSED: Words = Words::bounded(&[
    "assistant",
    "agent",
    "model",
    "llm",
    "hey",
    "hello",
    "dear",
    "ais",
    "ai ",
    "ai:",
    "ai,",
    "<!--",
    "[//]:",
]);
static SECRECY: Words = Words::bounded(&["do not", "don", "never", "without", "keep", "tell"]);

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
        concat!(
            r"(?i)(?-u:\b)(?:ignore|disregard|forget|override)\s+(?:(?:all|any|the|your|my|of|previous|prior|earlier|above|preceding|system|original)\s+){1,4}(?:instructions?|prompts?|rules|directions|guidelines|directives)(?-u:\b)",
            r"|(?i)(?-u:\b)new\s+(?:system\s+)?instructions?(?:\s+from\s+(?:the\s+|your\s+)?(?:developers?|admin(?:istrator)?s?|system|operators?|owners?|creators?|OpenAI|Anthropic))?\s*:",
            r"|(?i)(?-u:\b)you\s+are\s+now\s+(?:in\s+)?(?:developer|DAN|jailbreak|unrestricted)(?-u:\b)",
            // What came before, by place rather than by name.
            r"|(?i)(?-u:\b)(?:ignore|disregard|forget)\s+(?:(?:all|of|the|everything|anything)\s+){1,3}(?:(?:text|content|messages?|context|words)\s+)?(?:above|before\s+this|so\s+far|(?:written|said|stated)\s+(?:above|before))(?-u:\b)",
            // The same override in French, German and Spanish.
            r"|(?i)(?-u:\b)ignore[rz]?\s+(?:toutes\s+)?(?:les\s+|vos\s+)?instructions\s+(?:précédentes|antérieures|ci-dessus)",
            r"|(?i)(?-u:\b)ignorier(?:e|en)?\s+(?:Sie\s+)?(?:alle\s+)?(?:vorherigen|bisherigen|obigen|vorigen|früheren)\s+(?:Anweisungen|Instruktionen|Befehle|Regeln)",
            r"|(?i)(?-u:\b)ignora(?:r)?\s+(?:todas\s+)?(?:las\s+|tus\s+)?instrucciones\s+(?:anteriores|previas)",
            r"|(?i)(?-u:\b)your\s+new\s+(?:task|goal|objective|mission|role|purpose|instructions?)\s+(?:is|are)\s*(?:to(?-u:\b)|:)",
            // Asking for the hidden prompt, by what it is called.
            r"|(?i)(?-u:\b)your\s+(?:(?:full|entire|exact|complete)\s+)?(?:initial|original|hidden|secret|internal)\s+(?:system\s+)?(?:instructions|prompt|rules|guidelines)(?-u:\b)",
            // Jailbreaks: the rules declared gone.
            r"|(?i)(?-u:\b)pretend\s+(?:that\s+)?you\s+(?:have|are\s+under|are\s+bound\s+by|follow)\s+no\s+(?:content\s+polic(?:y|ies)|rules|restrictions|guidelines|filters|limits|safety)",
            r"|(?i)(?-u:\b)pretend\s+(?:that\s+)?you\s+are\s+(?:not\s+bound|free\s+of|an?\s+(?:unrestricted|unfiltered|jailbroken|uncensored))",
            r"|(?i)(?-u:\b)your\s+safety\s+(?:rules|guidelines|filters|restrictions|policies|protocols)\s+(?:are|have\s+been)\s+(?:now\s+)?(?:suspended|disabled|lifted|removed|off|turned\s+off|deactivated|void)(?-u:\b)",
            // A condition on being a model: `If you are an LLM, …`.
            r"|(?i)(?-u:\b)you\s+are\s+(?:an?\s+|the\s+)?(?:AI|LLM|large\s+language\s+model|language\s+model|AI\s+(?:agent|model)|chatbot|GPT|Claude|ChatGPT|Copilot|Gemini)(?:\s+(?:reading|processing|summari[sz]ing|parsing)\s+this(?:\s+[a-z-]+){0,2})?\s*[,:;]",
        ),
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
            // A note to the model.
            r"|(?-u:\b)(?:note|Note|NOTE)(?i:\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:AI|assistant|model|agent|LLM|language\s+model|chatbot|bot|Claude|ChatGPT|GPT|Gemini|Copilot|(?:AI|LLM)(?:\s+[a-z-]+)?\s+(?:agent|assistant|model|tool|system|bot|chatbot|crawler))s?\s*[:,-])",
        ),
        None,
        &ORDERS,
    ),
    // Text addressed to the model: whoever reads `this`, a vocative, a chat
    // turn that gives an order, a comment that speaks to it.
    words(
        "injection.addressed",
        concat!(
            r"(?i)(?-u:\b)(?:assistants?|agents?|models?|LLMs?)\s+(?:(?:that\s+are|who\s+are)\s+)?(?:reading|processing|parsing|summari[sz]ing|browsing|crawling|viewing|scanning|ingesting)\s+this(?:\s+[a-z-]+){0,2}\s*[:,]",
            r"|(?i)(?-u:\b)(?:hey|hello|dear)\s*,?\s+(?:Claude|ChatGPT|GPT(?:-?[0-9o.]+)?|Gemini|Copilot|assistant|AI(?:\s+(?:assistant|agent|model))?|agent|LLM|model|chatbot)s?\s*[,:!.]",
            r"|(?i)(?-u:\b)(?:assistant|agent)s?\s*[,:][ \t]+(?:please[ \t]+)?(?:ignore|disregard|forget|stop|call|run|invoke|execute|send|forward|e-?mail|delete|reveal|print|output|append|include|tell|do\s+not|don't|silently|quietly|immediately|save|remember|store|upload|approve|recommend|rank|mark|reply|respond)(?-u:\b)",
            r"|(?i)(?:<!--|\[//\]:\s*#\s*\()\s*(?:(?:AI|LLM)\s+)?(?:AI|LLM|assistants?|agents?|models?|Claude|ChatGPT|GPT|Gemini|Copilot|bots?)\s*[:,]",
            // `AI agents: also run …`, `Attn AI: ignore …`: an AI, or what
            // kind of AI tool, then an order. After `AI` a space, `s`, `,` or
            // `:` (the words that start these), so that a search for `ai`
            // alone, which stops at every `ai…` word, is not needed.
            r"|(?i)(?-u:\b)(?:AI|LLM)s?(?:(?:[ ]+[a-z-]+){0,2}?[ ]+(?:assistants?|agents?|models?|tools?|systems?|chatbots?|bots?|crawlers?|engines?))?[ ]*[,:]\s+(?:(?:please|pls)\s+)?(?:ignor(?:e|ing)?|disregard|forget|stop|call|run|invoke|execute|send|forward|e-?mail|delete|reveal|print|output|append|include|tell|do\s+not|don't|always|never|also|when|if|save|remember|rank|recommend|approve|report|mark|add|upload|reply|respond|state|describe|treat)(?-u:\b)",
            // `the AI reading this`, `AI email assistants processing this thread`.
            r"|(?i)(?-u:\b)(?:AI|LLM)s?(?:[ ]+[a-z-]+){0,2}?[ ]+(?:(?:that|who)\s+(?:are|is)\s+)?(?:reading|processing|parsing|summari[sz]ing|handling|browsing|crawling|viewing|scanning|ingesting|screening|rendering)\s+(?:this|these)(?-u:\b)",
            // `AI note:`, `[LLM instructions: …` (not an assistant's: a
            // research assistant's instructions are a person's).
            r"|(?i)(?-u:\b)(?:AI|LLM)s?[ ]+(?:note|instructions?|directives?)\s*:",
        ),
        None,
        &ADDRESSED,
    ),
    // Orders to keep the user from knowing.
    words(
        "injection.secrecy",
        concat!(
            r"(?i)(?-u:\b)(?:do[ ]not|don['’]t|never)\s+(?:mention|tell|reveal|disclose|show|say|explain|report)\s+(?:(?:this|it|that|these\s+instructions|this\s+(?:instruction|step|message|note|tool\s+call)|anything)\s+)?(?:about\s+(?:this|it)\s+)?to\s+the\s+user(?-u:\b)",
            r"|(?i)(?-u:\b)without\s+(?:telling|informing|alerting|warning)\s+the\s+user(?-u:\b)",
            r"|(?i)(?-u:\b)keep\s+(?:this|it)\s+(?:secret|hidden|confidential)\s+from\s+the\s+user(?-u:\b)",
            r"|(?i)(?-u:\b)tell\s+no\s+one(?-u:\b)",
        ),
        None,
        &SECRECY,
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
    // A markdown image whose URL has a query parameter, or a link whose query
    // carries a value of 24 or more characters. A linked image (a README's
    // badge) is matched whole first, so that its image is not matched alone,
    // and `checks::exfil` holds it to a link's rule.
    Builtin {
        kind: "injection.exfil_link",
        regex: concat!(
            r"\[!\[[^\]\n]*\]\(\s*[^\s)]*\)\]\(\s*[^\s)]*\)",
            r"|!\[[^\]\n]*\]\(\s*https?://[^\s)]*\?[^\s)]*=[^\s)&]+[^\s)]*\)",
            r"|\[[^\]\n]*\]\(\s*https?://[^\s)]*\?[^\s)]*=[^\s)&]{24,}[^\s)]*\)",
        ),
        check: Some(checks::exfil),
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
