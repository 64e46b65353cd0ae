//! The did-you-mean of a misspelt argument name in configuration (a rule's
//! condition, a pin, an alias's target): the nearest name the tool declares, or
//! the nearest alias configured for it. An alias never reaches the rules, the
//! pins or the schema under its own name (A2 renames it first), so a hint that
//! lands on an alias points at the canonical name it is read as.

/// The name a misspelt argument most likely meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Near<'a> {
    /// A name the tool's schema declares.
    Declared(&'a str),
    /// A configured alias, and the canonical name it is read as.
    Alias { alias: &'a str, canonical: &'a str },
}

impl Near<'_> {
    /// `did you mean 'x'?`, or for an alias
    /// `did you mean 'text'? ('body' is an alias of it)`.
    pub fn did_you_mean(&self) -> String {
        match self {
            Near::Declared(name) => format!("did you mean '{name}'?"),
            Near::Alias { alias, canonical } => {
                format!("did you mean '{canonical}'? ('{alias}' is an alias of it)")
            }
        }
    }
}

/// The nearest of `declared` and of the aliases' names to `key`, declared names
/// first on a tie; `None` when none is near enough to be a likely typo.
pub fn near<'a>(
    key: &str,
    declared: &[&'a str],
    aliases: &'a [(String, String)],
) -> Option<Near<'a>> {
    let names = declared
        .iter()
        .map(|d| (*d, Near::Declared(d)))
        .chain(aliases.iter().map(|(a, c)| {
            (
                a.as_str(),
                Near::Alias {
                    alias: a,
                    canonical: c,
                },
            )
        }));
    names
        .filter(|(name, _)| *name != key)
        .map(|(name, near)| (strsim::levenshtein(key, name), name, near))
        .filter(|(d, name, _)| is_near(*d, key, name))
        .min_by_key(|(d, ..)| *d)
        .map(|(.., near)| near)
}

/// The nearest of `names` to `key`, if it is near enough to be a likely typo.
pub fn nearest<'n>(key: &str, names: &[&'n str]) -> Option<&'n str> {
    names
        .iter()
        .map(|n| (strsim::levenshtein(key, n), *n))
        .filter(|(d, n)| is_near(*d, key, n))
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// At most 6 edits, and at most half the longer name.
fn is_near(distance: usize, key: &str, name: &str) -> bool {
    distance <= 6 && distance <= key.chars().count().max(name.chars().count()) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_of_an_alias_points_at_the_canonical_name() {
        let aliases = vec![("body".to_owned(), "text".to_owned())];
        let n = near("bdy", &["title", "text"], &aliases).unwrap();
        assert_eq!(
            n,
            Near::Alias {
                alias: "body",
                canonical: "text"
            }
        );
        assert_eq!(
            n.did_you_mean(),
            "did you mean 'text'? ('body' is an alias of it)"
        );
        assert_eq!(
            near("titel", &["title", "text"], &aliases).map(|n| n.did_you_mean()),
            Some("did you mean 'title'?".to_owned())
        );
        assert_eq!(near("zzzzzz", &["title"], &aliases), None);
    }

    #[test]
    fn a_declared_name_wins_a_tie() {
        let aliases = vec![("texts".to_owned(), "content".to_owned())];
        assert_eq!(
            near("textz", &["text"], &aliases),
            Some(Near::Declared("text"))
        );
    }
}
