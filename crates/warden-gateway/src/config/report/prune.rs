//! Every shape problem of a file, not only the first: serde stops at the first
//! key it refuses, so the refused key is taken out of the table and the file is
//! read again, until it reads. What was taken out is remembered, so the checks
//! that run on the rest say nothing about tables that lost a key (their
//! problems would only repeat the first one), and keys of later array elements
//! are told in the file's own numbering.

use super::super::check::Invalid;
use super::super::deserialise_error;
use super::super::file::ConfigFile;
use serde_path_to_error::Segment;
use std::collections::BTreeMap;

/// A file read as far as it goes: the part that read, and what did not.
pub(in crate::config) struct Shape {
    /// The file less every key (or table) a problem was found at.
    pub file: ConfigFile,
    /// Each problem as the first-error loader words it, in the file's numbering;
    /// `at` locates a problem whose message names no key.
    pub problems: Vec<(Invalid, String)>,
    /// Tables (in the file's numbering) a key or element was taken out of.
    tainted: Vec<String>,
    /// Top-level arrays of tables → the elements taken out, by their index in the file.
    removed: BTreeMap<String, Vec<usize>>,
}

/// Rounds at most: each takes one key out, and a file has only so many.
const MAX_ROUNDS: usize = 1000;

/// Reads `table` as the config file, taking out each key serde refuses.
pub(in crate::config) fn deserialise(mut table: toml::Table) -> Shape {
    let mut shape = Shape {
        file: ConfigFile::default(),
        problems: Vec::new(),
        tainted: Vec::new(),
        removed: BTreeMap::new(),
    };
    // The key this loop took out last: the table that then lacks a required
    // field is taken out whole, without a second complaint.
    let mut taken: Option<(Vec<Segment>, String)> = None;
    for _ in 0..MAX_ROUNDS {
        let e = match serde_path_to_error::deserialize(toml::Value::Table(table.clone())) {
            Ok(file) => {
                shape.file = file;
                return shape;
            }
            Err(e) => e,
        };
        let path: Vec<Segment> = e.path().iter().cloned().collect();
        let (key, message) = deserialise_error(e);
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'));
        let ours = matches!((&taken, missing), (Some((t, k)), Some(m)) if same(t, &path) && k == m);
        // What to take out: a table lacking a field goes whole; otherwise the
        // deepest key of a table on the path (a bad list goes as a whole).
        let cut = match missing {
            Some(_) => path.len(),
            None => match path.iter().rposition(|s| matches!(s, Segment::Map { .. })) {
                Some(i) => i + 1,
                None => 0,
            },
        };
        if !ours {
            let at = shape.told(&path);
            let key = if key.is_empty() {
                key
            } else {
                shape.told_key(&key)
            };
            shape.problems.push((Invalid { key, message }, at));
        }
        if cut == 0 || !shape.take_out(&mut table, &path[..cut]) {
            return shape; // the problem is the file as a whole: nothing to take out
        }
        taken = match path[..cut].split_last() {
            Some((Segment::Map { key }, parent)) => Some((parent.to_vec(), key.clone())),
            _ => None,
        };
    }
    shape
}

fn same(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_string() == y.to_string())
}

impl Shape {
    /// Whether a later check's complaint about `key` would repeat a problem
    /// already reported for its table.
    pub fn hides(&self, key: &str) -> bool {
        self.tainted.iter().any(|t| {
            key == t
                || key
                    .strip_prefix(t.as_str())
                    .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
        })
    }

    /// A key in the numbering of what is left, told in the file's numbering:
    /// `rule[1]` is `rule[2]` when the file's `rule[0]` was taken out.
    pub fn told_key(&self, key: &str) -> String {
        for (array, removed) in &self.removed {
            let Some(rest) = key
                .strip_prefix(array.as_str())
                .and_then(|r| r.strip_prefix('['))
            else {
                continue;
            };
            let Some((index, rest)) = rest.split_once(']') else {
                continue;
            };
            if let Ok(i) = index.parse::<usize>() {
                return format!("{array}[{}]{rest}", original(removed, i));
            }
        }
        key.to_owned()
    }

    /// A path in the numbering of what is left, as a key in the file's numbering.
    fn told(&self, path: &[Segment]) -> String {
        self.told_key(&render(path))
    }

    /// Takes the key or element at `path` out of `table`; false when it is not there.
    fn take_out(&mut self, table: &mut toml::Table, path: &[Segment]) -> bool {
        let Some((last, parent)) = path.split_last() else {
            return false;
        };
        let mut at = Some(TableOrArray::Table(table));
        for s in parent {
            at = match (at, s) {
                (Some(TableOrArray::Table(t)), Segment::Map { key }) => {
                    t.get_mut(key).and_then(step)
                }
                (Some(TableOrArray::Array(a)), Segment::Seq { index }) => {
                    a.get_mut(*index).and_then(step)
                }
                _ => None,
            };
        }
        let done = match (at, last) {
            (Some(TableOrArray::Table(t)), Segment::Map { key }) => t.remove(key).is_some(),
            (Some(TableOrArray::Array(a)), Segment::Seq { index }) if *index < a.len() => {
                a.remove(*index);
                true
            }
            _ => false,
        };
        if !done {
            return false;
        }
        let parent_key = self.told(parent);
        match (parent, last) {
            // A top-level array element: later elements are renumbered.
            ([Segment::Map { key }], Segment::Seq { index }) => {
                let removed = self.removed.entry(key.clone()).or_default();
                let i = original(removed, *index);
                removed.push(i);
                removed.sort_unstable();
                self.tainted.push(format!("{key}[{i}]"));
            }
            // Deeper, the element's top-level table answers for it.
            (_, Segment::Seq { .. }) => {
                self.tainted.push(self.told(&parent[..parent.len().min(2)]))
            }
            _ if !parent.is_empty() => self.tainted.push(parent_key),
            _ => {}
        }
        true
    }
}

enum TableOrArray<'a> {
    Table(&'a mut toml::Table),
    Array(&'a mut Vec<toml::Value>),
}

fn step(v: &mut toml::Value) -> Option<TableOrArray<'_>> {
    match v {
        toml::Value::Table(t) => Some(TableOrArray::Table(t)),
        toml::Value::Array(a) => Some(TableOrArray::Array(a)),
        _ => None,
    }
}

/// The index in the file of the element now at `index`, `removed` being the
/// file's indices already taken out (sorted).
fn original(removed: &[usize], index: usize) -> usize {
    let mut i = index;
    for r in removed {
        if *r <= i {
            i += 1;
        }
    }
    i
}

/// A path as serde_path_to_error writes it (`upstream[0].tools.t.pin`).
fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&other.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_in_what_is_left_is_told_in_the_files_numbering() {
        assert_eq!(original(&[], 0), 0);
        assert_eq!(original(&[0], 0), 1);
        assert_eq!(original(&[0, 1], 0), 2);
        assert_eq!(original(&[1], 0), 0);
        assert_eq!(original(&[1], 1), 2);
        assert_eq!(original(&[0, 2], 1), 3);
    }
}
