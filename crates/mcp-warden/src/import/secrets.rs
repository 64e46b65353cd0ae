//! Which values of a client's config are secrets, and the environment
//! variable each one is to come from instead. A secret is never written to the
//! gateway's file nor printed: what the user learns is the variable to set.
//!
//! A value is a secret when the client asked the user for it (VS Code's
//! `${input:…}`), when its name says so (`…_TOKEN`, `API_KEY`, `PASSWORD`, …),
//! or when it looks like a credential (`ghp_…`, `sk-…`, a URL with a
//! password). A value that already names a variable (`${env:X}`, `${X}`) is a
//! reference to the environment, kept as one.

/// What an `env` value of the client's file becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Written as is.
    Plain(String),
    /// Read from the gateway's environment, under `var`; `secret` when the
    /// file held the value itself (so the user must now set `var`).
    FromEnv { var: String, secret: bool },
}

/// Words that, as a part of a variable's name, make its value a secret.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "PAT",
    "COOKIE",
    "DSN",
];

/// How known credentials begin.
const SECRET_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "AKIA",
    "Bearer ",
];

/// Classifies the value of the variable `name`; `suggest` is the variable a
/// secret held in the file is to come from.
pub fn classify(name: &str, value: &str, suggest: &str) -> Value {
    if let Some(var) = reference(value) {
        return match var {
            Ref::Env(var) => Value::FromEnv { var, secret: false },
            Ref::Input(id) => Value::FromEnv {
                var: variable(&id),
                secret: true,
            },
        };
    }
    if secret_name(name) || looks_secret(value) {
        return Value::FromEnv {
            var: suggest.to_owned(),
            secret: true,
        };
    }
    Value::Plain(value.to_owned())
}

/// A value that is a whole reference to something outside the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Ref {
    /// `${env:NAME}` (VS Code, Cursor), `${NAME}` (Claude Code, Cursor).
    Env(String),
    /// `${input:ID}` (VS Code).
    Input(String),
}

/// The reference `value` is, if it is one and nothing else.
pub fn reference(value: &str) -> Option<Ref> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    if let Some(id) = inner.strip_prefix("input:") {
        return Some(Ref::Input(id.to_owned()));
    }
    let name = inner.strip_prefix("env:").unwrap_or(inner);
    let usable = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    usable.then(|| Ref::Env(name.to_owned()))
}

fn secret_name(name: &str) -> bool {
    name.to_ascii_uppercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|part| SECRET_WORDS.contains(&part))
}

/// Whether a value looks like a credential: a known token prefix, or a URL
/// with a password.
pub fn looks_secret(value: &str) -> bool {
    let url_password = value
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|auth| auth.rsplit_once('@'))
        .is_some_and(|(user, _)| user.contains(':'));
    url_password || SECRET_PREFIXES.iter().any(|p| value.starts_with(p))
}

/// An environment variable's name made of `text`: upper case, `_` for
/// anything else (`api-key` → `API_KEY`).
pub fn variable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_told_by_name_by_look_and_by_input() {
        let env = |var: &str, secret| Value::FromEnv {
            var: var.into(),
            secret,
        };
        assert_eq!(
            classify("GITHUB_PERSONAL_ACCESS_TOKEN", "abc", "G"),
            env("G", true)
        );
        assert_eq!(classify("api-key", "abc", "A"), env("A", true));
        assert_eq!(classify("UPSTREAM", "ghp_0123456789", "U"), env("U", true));
        assert_eq!(
            classify("DATABASE_URL", "postgres://u:pw@db/x", "D"),
            env("D", true)
        );
        assert_eq!(classify("X", "${input:api-key}", "X"), env("API_KEY", true));
        assert_eq!(
            classify("TOKEN", "${env:GH_TOKEN}", "T"),
            env("GH_TOKEN", false)
        );
        assert_eq!(
            classify("TOKEN", "${GH_TOKEN}", "T"),
            env("GH_TOKEN", false)
        );
        assert_eq!(
            classify("PATH", "/usr/bin", "P"),
            Value::Plain("/usr/bin".into())
        );
        assert_eq!(
            classify("DATABASE_URL", "postgres://db/x", "D"),
            Value::Plain("postgres://db/x".into())
        );
        assert_eq!(variable("api-key"), "API_KEY");
        assert_eq!(variable("1x"), "_1X");
    }
}
