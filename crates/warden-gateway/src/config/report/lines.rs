//! Where a key is in the file: the line and column of a dotted key
//! (`upstream[0].tools.a.b.pin`), read from the parser's spans. A key the file
//! does not have (a default, a table named only by its children) is placed at
//! the nearest table on its way that the file does have.

use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The file's text and its parsed tables, with the spans of every key.
pub(in crate::config) struct Lines<'t> {
    text: &'t str,
    root: Option<DeTable<'t>>,
}

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Lines<'t> {
        let root = DeTable::parse(text).ok().map(Spanned::into_inner);
        Lines { text, root }
    }

    /// The 1-based line and column of `key`, or of the nearest table on its way.
    pub fn locate(&self, key: &str) -> Option<(usize, usize)> {
        let span = find(self.root.as_ref()?, key)?;
        Some(self.position(span.start))
    }

    /// The 1-based line and column of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        (line, column)
    }
}

/// The span of the key `key` names in `table`, or of the deepest key on its way.
/// A name with dots is tried whole before its parts.
fn find(table: &DeTable<'_>, key: &str) -> Option<Range<usize>> {
    let mut best: Option<(usize, Range<usize>)> = None;
    for (k, v) in table {
        let Some(rest) = key.strip_prefix(k.get_ref().as_ref()) else {
            continue;
        };
        let found = if rest.is_empty() {
            Some(k.span())
        } else if let Some(rest) = rest.strip_prefix('.') {
            Some(within(v, rest).unwrap_or(k.span()))
        } else if rest.starts_with('[') {
            Some(within(v, rest).unwrap_or(k.span()))
        } else {
            None
        };
        let len = k.get_ref().len();
        if let Some(span) = found {
            if best.as_ref().is_none_or(|(l, _)| len > *l) {
                best = Some((len, span));
            }
        }
    }
    best.map(|(_, span)| span)
}

/// The span of `rest` (`.key…` already stripped to `key…`, or `[i]…`) inside `value`.
fn within(value: &Spanned<DeValue<'_>>, rest: &str) -> Option<Range<usize>> {
    match value.get_ref() {
        DeValue::Table(t) => find(t, rest),
        DeValue::Array(a) => {
            let (index, rest) = rest.strip_prefix('[')?.split_once(']')?;
            let item = a.get(index.parse::<usize>().ok()?)?;
            match rest.strip_prefix('.') {
                Some(rest) => within(item, rest).or(Some(item.span())),
                None => Some(item.span()),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[gateway]\nlisten = \"x\"\n\n[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[upstream]]\nname = \"b\"\n[upstream.tools.\"a.b\"]\npin = { x = 1 }\n";

    #[test]
    fn keys_are_found_where_the_file_writes_them() {
        let lines = Lines::new(TEXT);
        assert_eq!(lines.locate("gateway.listen"), Some((2, 1)));
        assert_eq!(lines.locate("upstream[0].command"), Some((6, 1)));
        assert_eq!(lines.locate("upstream[1].name"), Some((9, 1)));
        assert_eq!(lines.locate("upstream[1].tools.a.b.pin"), Some((11, 1)));
        assert_eq!(lines.locate("upstream[1].tools.a.b.pin.x"), Some((11, 9)));
    }

    #[test]
    fn a_key_the_file_lacks_is_placed_at_its_table() {
        let lines = Lines::new(TEXT);
        assert_eq!(lines.locate("gateway.session_idle"), Some((1, 2)));
        assert_eq!(lines.locate("nothing"), None);
        assert_eq!(Lines::new("[x\n").locate("x"), None);
    }
}
