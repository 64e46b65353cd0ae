//! Object keys under guards (S2): the scanner reads strings, not the keys of
//! objects, yet a key can carry a secret (`{"AKIA…": {…}}`), and every JSON
//! pointer under that key would name it in the audit record and the log. A
//! guard's detectors read each key too: a finding in a key is a finding at the
//! key's own path; with `redact` (and in the audit's copy of the arguments)
//! the key becomes its redacted form, and whatever the action, every path
//! names a flagged key by its redacted form, never as it stands.

use crate::config::guards::Guard;
use serde_json::{Map, Value};
use std::collections::HashSet;
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
#[derive(Default)]
pub(super) struct Renamed(Vec<(String, String)>);

/// Never the keys as they stood: they are what was found.
impl std::fmt::Debug for Renamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Renamed({} key(s))", self.0.len())
    }
}

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
    let mut w = Walk {
        g,
        redact,
        keys: Keys::default(),
        clean: HashSet::new(),
    };
    let mut path = String::new();
    w.walk(value, &mut path);
    w.keys
}

/// One pass over a value's keys.
struct Walk<'g> {
    g: &'g Guard,
    redact: bool,
    keys: Keys,
    /// Keys read already and found clean: rows of a table repeat their keys,
    /// so each distinct key is read once.
    clean: HashSet<String>,
}

impl Walk<'_> {
    fn walk(&mut self, value: &mut Value, path: &mut String) {
        let len = path.len();
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    path.push('/');
                    path.push_str(&i.to_string());
                    self.walk(item, path);
                    path.truncate(len);
                }
            }
            Value::Object(map) => {
                let named: Vec<Option<(String, String)>> =
                    map.keys().map(|k| self.key(k, path)).collect();
                for (n, (k, item)) in named.iter().zip(map.iter_mut()) {
                    let shown = n.as_ref().map_or(k.as_str(), |(_, s)| s.as_str());
                    path.push('/');
                    match shown.contains(['~', '/']) {
                        true => path.push_str(&escape(shown)),
                        false => path.push_str(shown),
                    }
                    self.walk(item, path);
                    path.truncate(len);
                }
                if named.iter().any(Option::is_some) {
                    rename(map, named);
                }
            }
            _ => {}
        }
    }

    /// One key: `None` when it is clean and stays as it is; else what it
    /// becomes in the value and how paths show it, its findings (at its
    /// object's path plus its redacted form) recorded.
    fn key(&mut self, k: &str, path: &str) -> Option<(String, String)> {
        if self.clean.contains(k) {
            return None;
        }
        let g = self.g;
        let mut redacted = Value::String(k.to_owned());
        let found = g.scanner.redact(&mut redacted);
        let Value::String(redacted) = redacted else {
            return None;
        };
        if found.is_empty() {
            if redacted == k {
                self.clean.insert(redacted);
                return None;
            }
            // Nothing but invisible characters changed it, and they go.
            return Some((redacted.clone(), redacted));
        }
        let kept = if self.redact {
            redacted.clone()
        } else {
            let mut stripped = Value::String(k.to_owned());
            g.scanner.scan(&mut stripped);
            stripped.as_str().unwrap_or(k).to_owned()
        };
        for mut f in found {
            f.path = format!("{path}/{}", escape(&redacted));
            self.keys.found.push(f);
        }
        for stood in [k, kept.as_str()] {
            if stood != redacted {
                self.keys.renamed.0.push((escape(stood), escape(&redacted)));
            }
        }
        Some((kept, redacted))
    }
}

/// The object with its keys renamed (`None`: kept), in order; two keys that
/// redact alike stay two (`[redacted:pii.email]`, `[redacted:pii.email]#2`).
fn rename(map: &mut Map<String, Value>, named: Vec<Option<(String, String)>>) {
    let old = std::mem::take(map);
    for (n, (k, item)) in named.into_iter().zip(old) {
        let kept = n.map_or(k, |(kept, _)| kept);
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

    /// What reading keys adds to a guard's pass over a result with many keys:
    /// printed as a ratio to the string pass in the same run, never asserted.
    /// `cargo test --release -p warden-gateway --lib -- --ignored --nocapture keys_cost`
    #[test]
    #[ignore]
    fn keys_cost() {
        let c = Config::parse(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n[[guard]]\nname = \"g\"\non = [\"results\"]\ndetect = [\"secrets\", \"pii\", \"injection\"]\naction = \"report\"\n",
            "w.toml",
        )
        .unwrap();
        let g = c.guards.list[0].clone();
        // 10,000 rows of 5 short fields: about 1 MB of JSON, 50,000 keys.
        let rows: Vec<Value> = (0..10_000)
            .map(|i| json!({"id": i, "name": format!("customer {i}"), "city": "Oslo", "status": "active", "note": "called back about the invoice"}))
            .collect();
        let v = json!({"structuredContent": {"rows": rows}});
        let size = v.to_string().len();
        let time = |f: &dyn Fn(&mut Value)| {
            let mut best = std::time::Duration::MAX;
            for _ in 0..5 {
                let mut x = v.clone();
                let t = std::time::Instant::now();
                f(&mut x);
                best = best.min(t.elapsed());
            }
            best
        };
        let strings = time(&|x| {
            g.scanner.scan(x);
        });
        let keys = time(&|x| {
            scan_keys(&g, x, false);
        });
        println!(
            "keys_cost: {size} bytes, 50000 keys: strings {strings:?}, keys {keys:?} ({:.2}x the string pass)",
            keys.as_secs_f64() / strings.as_secs_f64()
        );
    }
}
