//! `docs/configuration.md` against the loader, so the manual cannot drift.
//!
//! The keys are not listed here a second time: each table's keys come from the
//! loader's own unknown-key message ("Known keys: …", built from the serde
//! types in `file.rs`), found by writing a probe key into that table. Nested
//! tables are found the same way: a key whose value, given as a table, an array
//! of tables or a table of named tables, draws an unknown-key error from a new
//! table is one. The manual gives each table a heading naming it in backticks
//! (`[gateway]`, `[[upstream.credential]]`, `[upstream.tools.*]`) and each key
//! a table row opening with the key in backticks.

use super::Config;
use std::collections::{BTreeMap, BTreeSet};

const PROBE: &str = "zz_undocumented";

/// How a step of a probe's path holds the next table.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Table,
    Array,
    Named,
}

/// A probe value as inline TOML: the path's innermost table holds only `PROBE`.
fn probe_value(path: &[(String, Shape)]) -> String {
    let mut value = format!("{{ {PROBE} = 1 }}");
    for (key, shape) in path.iter().rev() {
        let wrapped = match shape {
            Shape::Table => value,
            Shape::Array => format!("[{value}]"),
            Shape::Named => format!("{{ \"*\" = {value} }}"),
        };
        value = format!("{{ \"{key}\" = {wrapped} }}");
    }
    value
}

/// The section and known keys of the table `path` leads to, if the loader
/// reports the probe key as unknown there.
fn known_keys(path: &[(String, Shape)]) -> Option<(String, Vec<String>)> {
    let value = probe_value(path);
    // The outermost inline table's contents are the file's top level.
    let text = value[1..value.len() - 1].trim().to_owned();
    let problems = match Config::parse_all(&text, "probe.toml") {
        Ok(_) => return None,
        Err(problems) => problems,
    };
    problems.iter().find_map(|p| {
        if !p.error.key.ends_with(PROBE) {
            return None;
        }
        let rest = p.error.message.strip_prefix("unknown key ")?;
        let (where_, list) = rest.split_once(" Known keys: ")?;
        let section = where_
            .strip_prefix("in [")
            .and_then(|s| s.split_once(']'))
            .map_or("", |(s, _)| s);
        let keys = list
            .trim_end_matches('.')
            .split(", ")
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect();
        Some((section.to_owned(), keys))
    })
}

/// Every table the loader accepts (by its section name, "" for the top level)
/// with its keys, discovered from the loader alone.
fn loader_tables() -> BTreeMap<String, Vec<String>> {
    let mut tables = BTreeMap::new();
    let mut todo: Vec<Vec<(String, Shape)>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let (section, keys) = known_keys(&path).expect("the probe key is reported as unknown");
        if tables.contains_key(&section) {
            continue;
        }
        for key in &keys {
            for shape in [Shape::Table, Shape::Array, Shape::Named] {
                let mut deeper = path.clone();
                deeper.push((key.clone(), shape));
                if let Some((inner, _)) = known_keys(&deeper) {
                    if inner != section && !tables.contains_key(&inner) {
                        todo.push(deeper);
                        break;
                    }
                }
            }
        }
        tables.insert(section, keys);
    }
    tables
}

/// The manual's tables: each heading's backticked `[section]` names, and the
/// keys of the rows under it.
fn documented_tables(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    let mut in_code = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if line.starts_with('#') {
            current = line
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|s| s.starts_with('[') && s.ends_with(']'))
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_owned())
                .collect();
            for section in &current {
                tables.entry(section.clone()).or_default();
            }
        } else if let Some(row) = line.strip_prefix("| `") {
            let key = row.split('`').next().unwrap_or_default();
            for section in &current {
                tables
                    .entry(section.clone())
                    .or_default()
                    .insert(key.to_owned());
            }
        }
    }
    tables
}

fn manual() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    std::fs::read_to_string(path).expect("docs/configuration.md is readable")
}

#[test]
fn the_probe_finds_nested_tables() {
    let tables = loader_tables();
    for section in [
        "gateway",
        "upstream",
        "upstream.tools.*",
        "upstream.credential.exchange",
        "rule.when",
        "server.args.*",
    ] {
        assert!(tables.contains_key(section), "{section}: {tables:?}");
    }
    assert!(tables["upstream"].contains(&"command".to_owned()));
}

#[test]
fn every_key_the_loader_accepts_is_documented_under_its_table() {
    let documented = documented_tables(&manual());
    let mut missing = Vec::new();
    for (section, keys) in loader_tables() {
        if section.is_empty() {
            continue; // the top level's keys are the tables themselves
        }
        let Some(doc) = documented.get(&section) else {
            missing.push(format!("no heading names `[{section}]`"));
            continue;
        };
        for key in keys.iter().filter(|k| !doc.contains(*k)) {
            missing.push(format!("[{section}] {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks: {missing:#?}"
    );
}

#[test]
fn every_key_the_manual_names_is_accepted() {
    let tables = loader_tables();
    let mut unknown = Vec::new();
    for (section, keys) in documented_tables(&manual()) {
        let Some(known) = tables.get(&section) else {
            unknown.push(format!("`[{section}]` is no table the loader reads"));
            continue;
        };
        for key in keys.iter().filter(|k| !known.contains(*k)) {
            unknown.push(format!("[{section}] {key}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "docs/configuration.md names: {unknown:#?}"
    );
}

#[test]
fn the_manuals_examples_use_only_known_keys() {
    let doc = manual();
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in doc.lines() {
        match (&mut block, line) {
            (None, "```toml") => block = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            _ => {}
        }
    }
    assert!(blocks.len() > 10, "the manual has its examples");
    for text in blocks {
        if let Err(problems) = Config::parse_all(&text, "example.toml") {
            let bad: Vec<_> = problems
                .iter()
                .map(|p| p.error.to_string())
                .filter(|m| m.contains("unknown key") || m.contains("not valid TOML"))
                .collect();
            assert!(bad.is_empty(), "{text}\n{bad:#?}");
        }
    }
}
