//! `mcp-warden wrap`: a client's file rewritten so that every server it
//! starts goes through one gateway entry. The old file is kept beside it as a
//! backup, and the change is printed as a diff. Only servers the gateway's
//! configuration already has as upstreams are taken out of the client's list,
//! so no server is lost on the way.

use super::client::{ClientFile, Format};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The name of the one entry the client is left with.
pub const ENTRY: &str = "mcp-warden";

/// The client's document with its enabled servers replaced by the gateway
/// entry; disabled servers stay as they were. `upstreams` are the names the
/// gateway's configuration has; `program` and `config` are what the entry starts.
pub fn rewrite(
    client: &ClientFile,
    upstream_of: impl Fn(&str) -> String,
    upstreams: &[String],
    program: &Path,
    config: &Path,
) -> Result<Map<String, Value>, String> {
    let key = client.format.key();
    let enabled: Vec<_> = client.servers.iter().filter(|s| !s.disabled).collect();
    if enabled.len() == 1 && enabled[0].name == ENTRY {
        return Err(format!(
            "{key} already lists only the {ENTRY} entry: the file is wrapped"
        ));
    }
    let missing: Vec<&str> = enabled
        .iter()
        .filter(|s| !upstreams.contains(&upstream_of(&s.name)))
        .map(|s| s.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} has no upstream for: {}; import them first (mcp-warden import FILE -o {0})",
            config.display(),
            missing.join(", ")
        ));
    }
    let args = json!(["run", "--stdio", "--config", config.display().to_string()]);
    let entry = match client.format {
        Format::McpServers => json!({"command": program.display().to_string(), "args": args}),
        Format::VsCode => {
            json!({"type": "stdio", "command": program.display().to_string(), "args": args})
        }
    };
    let mut servers = Map::new();
    servers.insert(ENTRY.to_owned(), entry);
    if let Some(Value::Object(old)) = client.document.get(key) {
        for s in client.servers.iter().filter(|s| s.disabled) {
            if let Some(v) = old.get(&s.name) {
                servers.insert(s.name.clone(), v.clone());
            }
        }
    }
    let mut document = client.document.clone();
    document.insert(key.to_owned(), Value::Object(servers));
    Ok(document)
}

/// A backup path beside `file` that does not exist yet: `FILE.bak`, then
/// `FILE.bak.2`, `FILE.bak.3`, …
pub fn backup_path(file: &Path) -> Result<PathBuf, String> {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    (1..1000)
        .map(|n| match n {
            1 => file.with_file_name(format!("{name}.bak")),
            n => file.with_file_name(format!("{name}.bak.{n}")),
        })
        .find(|p| !p.exists())
        .ok_or_else(|| {
            format!(
                "{}: too many backups beside it; remove some",
                file.display()
            )
        })
}
