//! Every problem of a config file in one run, each with where it is: what
//! `mcp-warden check` prints. The syntax comes first (nothing else can be read
//! past a syntax error), then each key serde refuses (unknown keys, bad values,
//! wrong types), then what the checks find in the rest: bad values serde could
//! not judge and keys that do not fit together. A gateway's start names the
//! first of these, a refused reload all of them, in the same words.

mod lines;
mod prune;

use super::check::{self, Invalid};
use super::servers;
use super::{Config, ConfigError};
use lines::Lines;
use std::path::Path;

/// One problem of a file: the error, and where the file has its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub error: ConfigError,
    /// The 1-based line and column of the key (or of the nearest table on its
    /// way); `None` for a problem of the file as a whole.
    pub line: Option<(usize, usize)>,
}

impl Located {
    /// `FILE:LINE:COLUMN`, the form editors and terminals jump to.
    pub fn location(&self) -> Option<String> {
        self.line
            .map(|(line, column)| format!("{}:{line}:{column}", self.error.file))
    }
}

/// The file's values, checked, or every problem found.
pub(super) type Parsed = Result<Config, Vec<Located>>;

impl Config {
    /// Reads a config file and reports every problem it has, in file order
    /// within each kind (see the module's comment); `load` names the first.
    pub fn load_all(path: &Path) -> Result<Config, Vec<Located>> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![Located {
                error: ConfigError {
                    file: file.clone(),
                    key: String::new(),
                    message: format!(
                        "cannot read the file ({e}); pass --config FILE with a readable file"
                    ),
                },
                line: None,
            }]
        })?;
        let mut config = Config::parse_all(&text, &file)?;
        if let Some(empty) = super::no_upstream(&config, &file) {
            return Err(vec![Located {
                error: empty,
                line: None,
            }]);
        }
        config.path = path.to_path_buf();
        Ok(config)
    }

    /// Parses and checks config text, reporting every problem; `file` names it.
    pub fn parse_all(text: &str, file: &str) -> Parsed {
        let lines = Lines::new(text);
        let located = |key: String, message: String, at: &str| Located {
            line: lines.locate(at),
            error: ConfigError {
                file: file.to_owned(),
                key,
                message,
            },
        };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            vec![Located {
                line: e.span().map(|s| lines.position(s.start)),
                error: ConfigError {
                    file: file.to_owned(),
                    key: String::new(),
                    message: format!("not valid TOML: {}", e.message().trim()),
                },
            }]
        })?;
        let source = table.clone();
        let shape = prune::deserialise(table);
        let mut problems: Vec<Located> = shape
            .problems
            .iter()
            .map(|(Invalid { key, message }, at)| located(key.clone(), message.clone(), at))
            .collect();
        // serde reads a table's keys in name order; they are told in file order.
        problems.sort_by_key(|p| p.line.unwrap_or((usize::MAX, 0)));
        let mut later = |found: Vec<Invalid>| {
            for Invalid { key, message } in found {
                let key = shape.told_key(&key);
                if !shape.hides(&key) {
                    problems.push(located(key.clone(), message, &key));
                }
            }
        };
        let checked = check::check(&shape.file).map_err(&mut later).ok();
        let servers = servers::check(&shape.file.server)
            .map_err(|e| later(vec![e]))
            .ok();
        match (checked, servers) {
            (Some(checked), Some(servers)) if problems.is_empty() => {
                Ok(Config::assemble(shape.file, checked, servers, source, text))
            }
            _ => Err(problems),
        }
    }
}

#[cfg(test)]
mod tests;
