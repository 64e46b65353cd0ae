//! Object keys under guards (S2): the scanner reads strings, not the keys of
//! objects, yet a key can carry a secret (`{"AKIA…": {…}}`), and every JSON
//! pointer under that key would name it in the audit record and the log. A
//! guard's detectors read each key too: a finding in a key is a finding at the
//! key's own path; with `redact` (and in the audit's copy of the arguments)
//! the key becomes its redacted form, and whatever the action, every path
//! names a flagged key by its redacted form, never as it stands.

use crate::config::guards::Guard;
use serde_json::{Map, Value};
use warden_core::scan::Finding;

/// What a guard found in the keys of a value, and how paths must show them.
#[derive(Debug, Default)]
pub(super) struct Keys {
    pub found: Vec<Finding>,
    pub renamed: Renamed,
}

/// Flagged keys as path segments (escaped): as they stood or stand, and as
/// paths show them. Gathered over every guard of a result, so that a guard
/// that does not look for secrets never names, in a path, a key another
/// guard found one in.
#[derive(Debug, Default)]
pub(super) struct Renamed(Vec<(String, String)>);

impl Renamed {
    pub fn extend(&mut self, other: Renamed) {
        self.0.extend(other.0);
    }

    /// `path` with each flagged key in its redacted form.
    pub fn fix(&self, path: &mut String) {
        if self.0.is_empty() {
            return;
        }
        let segments: Vec<&str> = path
            .split('/')
            .map(|seg| match self.0.iter().find(|(from, _)| from == seg) {
                Some((_, to)) => to.as_str(),
                None => seg,
            })
            .collect();
        *path = segments.join("/");
    }
}

/// Reads the keys of every object in `value` with `g`'s detectors; `redact`:
/// flagged keys become their redacted form (else only invisible characters
/// leave them, as from strings).
pub(super) fn scan_keys(g: &Guard, value: &mut Value, redact: bool) -> Keys {
    let mut keys = Keys::default();
    let mut path = String::new();
    walk(g, value, &mut path, redact, &mut keys);
    keys
}

fn walk(g: &Guard, value: &mut Value, path: &mut String, redact: bool, keys: &mut Keys) {
    let len = path.len();
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push('/');
                path.push_str(&i.to_string());
                walk(g, item, path, redact, keys);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            let named: Vec<(String, String)> =
                map.keys().map(|k| key(g, k, path, redact, keys)).collect();
            for ((_, shown), item) in named.iter().zip(map.values_mut()) {
                path.push('/');
                path.push_str(&escape(shown));
                walk(g, item, path, redact, keys);
                path.truncate(len);
            }
            if named.iter().zip(map.keys()).any(|((kept, _), k)| kept != k) {
                rename(map, named);
            }
        }
        _ => {}
    }
}

/// One key: its findings, at its object's path plus its redacted form; what
/// it becomes in the value, and how paths show it.
fn key(g: &Guard, k: &str, path: &str, redact: bool, keys: &mut Keys) -> (String, String) {
    let mut redacted = Value::String(k.to_owned());
    let found = g.scanner.redact(&mut redacted);
    let Value::String(redacted) = redacted else {
        return (k.to_owned(), k.to_owned());
    };
    if found.is_empty() {
        // Nothing but invisible characters can have changed it, and they go.
        return (redacted.clone(), redacted);
    }
    let kept = if redact {
        redacted.clone()
    } else {
        let mut stripped = Value::String(k.to_owned());
        g.scanner.scan(&mut stripped);
        stripped.as_str().unwrap_or(k).to_owned()
    };
    for mut f in found {
        f.path = format!("{path}/{}", escape(&redacted));
        keys.found.push(f);
    }
    for stood in [k, kept.as_str()] {
        if stood != redacted {
            keys.renamed.0.push((escape(stood), escape(&redacted)));
        }
    }
    (kept, redacted)
}

/// The object with its keys renamed, in order; two keys that redact alike
/// stay two (`[redacted:pii.email]`, `[redacted:pii.email]#2`).
fn rename(map: &mut Map<String, Value>, named: Vec<(String, String)>) {
    let old = std::mem::take(map);
    for ((kept, _), (_, item)) in named.into_iter().zip(old) {
        let mut name = kept.clone();
        let mut n = 1;
        while map.contains_key(&name) {
            n += 1;
            name = format!("{kept}#{n}");
        }
        map.insert(name, item);
    }
}

/// A key as a JSON pointer segment (RFC 6901).
fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;
    use std::sync::Arc;

    fn guard(action: &str) -> Arc<Guard> {
        let c = Config::parse(
            &format!("[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n[[guard]]\nname = \"g\"\non = [\"results\"]\ndetect = [\"secrets\", \"pii.email\"]\naction = \"{action}\"\n"),
            "w.toml",
        )
        .unwrap();
        c.guards.list[0].clone()
    }

    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

    #[test]
    fn a_flagged_key_is_a_finding_and_no_path_names_it() {
        let mut v = json!({"s": {KEY: {"note": "mail a@example.org"}, "ok": 1}});
        let g = guard("report");
        let keys = scan_keys(&g, &mut v, false);
        let paths: Vec<_> = keys
            .found
            .iter()
            .map(|f| (f.kind.as_str(), f.path.as_str()))
            .collect();
        assert_eq!(
            paths,
            [(
                "secrets.aws_access_key",
                "/s/[redacted:secrets.aws_access_key]"
            )]
        );
        // Report: the key stays; the value's finding is shown under the redacted key.
        assert!(v["s"].get(KEY).is_some());
        let mut found = g.scanner.scan(&mut v);
        keys.renamed.fix(&mut found[0].path);
        assert_eq!(found[0].path, "/s/[redacted:secrets.aws_access_key]/note");
    }

    #[test]
    fn redact_renames_keys_and_keeps_two_that_redact_alike() {
        let mut v = json!({"a@example.org": 1, "b@example.org": 2, KEY: 3, "plain": 4});
        let keys = scan_keys(&guard("redact"), &mut v, true);
        assert_eq!(keys.found.len(), 3);
        assert_eq!(
            v,
            json!({"[redacted:pii.email]": 1, "[redacted:pii.email]#2": 2, "[redacted:secrets.aws_access_key]": 3, "plain": 4})
        );
        assert!(!format!("{keys:?}").contains("example.org"));
    }
}
