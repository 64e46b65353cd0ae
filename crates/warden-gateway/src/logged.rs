//! How a string the gateway did not write itself goes into its log.
//!
//! Tool names, argument keys, method names and ids come from callers; error texts,
//! versions and stderr lines from upstreams and webhooks. Written raw, a newline
//! in one of them forges a log line of its own and an ESC drives the terminal
//! that shows the log. [`logged`] escapes them the way [`warden_core::answer::shown`]
//! escapes names for callers (the same [`Escaping`]), with a longer bound: enough
//! for an error text, never a caller's megabytes.

use std::fmt;
use warden_core::answer::Escaping;

/// The most characters of one value a log line carries.
pub const LOGGED_MAX_CHARS: usize = 1024;

/// A value as it is written to the log: see [`logged`].
pub struct Logged<T> {
    value: T,
    max: usize,
}

/// `value`, displayed with control characters (and the characters that break or
/// reorder lines) escaped and at most [`LOGGED_MAX_CHARS`] characters. Formatting
/// happens only when the log line is written.
pub fn logged<T: fmt::Display>(value: T) -> Logged<T> {
    Logged {
        value,
        max: LOGGED_MAX_CHARS,
    }
}

/// [`logged`] without the bound, for the one value the log must keep whole: an
/// audit record the store refused, which is nowhere else. (Its JSON escapes what
/// is below U+0020, but not DEL, the C1 controls or the line separators.)
pub fn logged_whole<T: fmt::Display>(value: T) -> Logged<T> {
    Logged {
        value,
        max: usize::MAX,
    }
}

impl<T: fmt::Display> fmt::Display for Logged<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        let mut out = Escaping::new(f, self.max);
        write!(out, "{}", self.value)?;
        out.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_line_stays_on_its_own_line() {
        let key = "x\n2026-01-01T00:00:00Z ERROR fake\u{1b}[31m";
        assert_eq!(
            logged(key).to_string(),
            "x\\u{a}2026-01-01T00:00:00Z ERROR fake\\u{1b}[31m"
        );
        assert_eq!(logged("a\r\u{2028}b").to_string(), "a\\u{d}\\u{2028}b");
        assert_eq!(logged("plain name.tool").to_string(), "plain name.tool");
    }

    #[test]
    fn anything_displayable_is_escaped_and_bounded() {
        let error = std::io::Error::other("upstream said:\nERROR fake");
        assert_eq!(
            format!("failed: {}", logged(&error)),
            "failed: upstream said:\\u{a}ERROR fake"
        );
        let huge = "k".repeat(10 * LOGGED_MAX_CHARS);
        let shown = logged(&huge).to_string();
        assert_eq!(shown.chars().count(), LOGGED_MAX_CHARS);
        assert!(shown.ends_with('…'));
        let whole = logged_whole(format!("{huge}\u{9b}")).to_string();
        assert_eq!(whole, format!("{huge}\\u{{9b}}"));
    }
}
