//! The MCP server lists of the common clients, read into one shape:
//! Claude Desktop's `claude_desktop_config.json`, Cursor's `.cursor/mcp.json`
//! and the generic file all keep servers under `mcpServers`; VS Code's
//! `.vscode/mcp.json` keeps them under `servers`, with `inputs` the editor asks
//! the user for. A field no client documents is refused with a did-you-mean
//! rather than dropped: it may have been meant for something.

use super::jsonc;
use serde_json::{Map, Value};

/// Which list the file holds its servers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `mcpServers`: Claude Desktop, Cursor, and most other clients.
    McpServers,
    /// `servers` and `inputs`: VS Code.
    VsCode,
}

impl Format {
    /// The key the servers are listed under.
    pub fn key(self) -> &'static str {
        match self {
            Format::McpServers => "mcpServers",
            Format::VsCode => "servers",
        }
    }
}

/// One server as the client declares it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Server {
    /// The name the client gives it.
    pub name: String,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub url: Option<String>,
    pub headers: Vec<(String, String)>,
    /// `type`, where given: stdio, http, sse, streamable-http.
    pub transport: Option<String>,
    /// Fields the gateway has no counterpart for, by name (`cwd`, `envFile`, …).
    pub unsupported: Vec<String>,
    /// `disabled: true`: the client does not start it.
    pub disabled: bool,
}

/// One of VS Code's `inputs`: a value the editor asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub id: String,
    pub description: Option<String>,
    pub password: bool,
}

/// A client's file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientFile {
    pub format: Format,
    /// The whole document, for `wrap` to rewrite.
    pub document: Map<String, Value>,
    pub servers: Vec<Server>,
    pub inputs: Vec<Input>,
}

/// The fields a server entry may have, across the clients' documentation.
const FIELDS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "envFile",
    "cwd",
    "url",
    "headers",
    "disabled",
    "autoApprove",
    "alwaysAllow",
    "timeout",
    "description",
    "dev",
];

/// Fields a server may carry that say nothing the gateway runs on.
const IGNORED: &[&str] = &["description", "dev"];

/// Reads a client's file; an error says what is wrong and where.
pub fn read(text: &str) -> Result<ClientFile, String> {
    let value = jsonc::parse(&jsonc::strip(text))?;
    let Value::Object(document) = value else {
        return Err(
            "the file holds no JSON object; a client config is { \"mcpServers\": { … } }".into(),
        );
    };
    let format = match (document.get("mcpServers"), document.get("servers")) {
        (Some(_), Some(_)) => {
            return Err("the file has both mcpServers and servers; keep the servers in one of them".into())
        }
        (Some(_), None) => Format::McpServers,
        (None, Some(_)) => Format::VsCode,
        (None, None) => {
            return Err("no server list found: Claude Desktop, Cursor and most clients list servers under \"mcpServers\", VS Code under \"servers\"".into())
        }
    };
    let key = format.key();
    let Some(Value::Object(list)) = document.get(key) else {
        return Err(format!("{key} must be an object of servers by name"));
    };
    let servers = list
        .iter()
        .map(|(name, entry)| server(key, name, entry))
        .collect::<Result<Vec<_>, _>>()?;
    let inputs = match document.get("inputs") {
        Some(v) if format == Format::VsCode => inputs(v)?,
        _ => Vec::new(),
    };
    Ok(ClientFile {
        format,
        document,
        servers,
        inputs,
    })
}

fn server(list: &str, name: &str, entry: &Value) -> Result<Server, String> {
    let at = format!("{list}.{name}");
    let Value::Object(fields) = entry else {
        return Err(format!("{at} must be an object (command and args, or url)"));
    };
    let mut s = Server {
        name: name.to_owned(),
        ..Server::default()
    };
    for (field, value) in fields {
        let text = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{at}.{field} must be a string"))
        };
        match field.as_str() {
            "type" => s.transport = Some(text(value)?),
            "command" => s.command = Some(text(value)?),
            "url" => s.url = Some(text(value)?),
            "args" => s.args = strings(&format!("{at}.args"), value)?,
            "env" => s.env = pairs(&format!("{at}.env"), value)?,
            "headers" => s.headers = pairs(&format!("{at}.headers"), value)?,
            "disabled" => s.disabled = value.as_bool().unwrap_or(false),
            f if IGNORED.contains(&f) => {}
            f if FIELDS.contains(&f) => s.unsupported.push(f.to_owned()),
            f => return Err(unknown_field(&at, f)),
        }
    }
    match (&s.command, &s.url) {
        (None, None) => Err(format!(
            "{at} has neither command nor url; a server needs one of them"
        )),
        (Some(_), Some(_)) => Err(format!(
            "{at} has both command and url; keep the one the server runs with"
        )),
        _ => Ok(s),
    }
}

/// The error for a field no client documents.
fn unknown_field(at: &str, field: &str) -> String {
    let hint = FIELDS
        .iter()
        .map(|k| (strsim::levenshtein(field, k), k))
        .filter(|(d, k)| *d <= 3.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!(" Did you mean '{k}'?"))
        .unwrap_or_default();
    format!(
        "{at}: unknown field '{field}'.{hint} Known fields: {}.",
        FIELDS.join(", ")
    )
}

fn strings(at: &str, v: &Value) -> Result<Vec<String>, String> {
    let bad = || format!("{at} must be a list of strings");
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|a| a.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}

fn pairs(at: &str, v: &Value) -> Result<Vec<(String, String)>, String> {
    let bad = || format!("{at} must be an object of strings");
    v.as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(bad()),
            };
            Ok((k.clone(), v))
        })
        .collect()
}

fn inputs(v: &Value) -> Result<Vec<Input>, String> {
    let bad = || "inputs must be a list of { type, id, description, password }".to_owned();
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|i| {
            Ok(Input {
                id: i["id"].as_str().ok_or_else(bad)?.to_owned(),
                description: i["description"].as_str().map(str::to_owned),
                password: i["password"].as_bool().unwrap_or(false),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_read_into_one() {
        let c = read(r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"], "env": {"A": "1"}}}, "globalShortcut": ""}"#).unwrap();
        assert_eq!(c.format, Format::McpServers);
        assert_eq!(c.servers[0].command.as_deref(), Some("npx"));
        assert_eq!(c.servers[0].env, [("A".to_owned(), "1".to_owned())]);
        let c = read(r#"{"inputs": [{"type": "promptString", "id": "k", "password": true}], "servers": {"r": {"type": "http", "url": "https://x/mcp"}}}"#).unwrap();
        assert_eq!(c.format, Format::VsCode);
        assert!(c.inputs[0].password);
        assert_eq!(c.servers[0].transport.as_deref(), Some("http"));
    }

    #[test]
    fn what_cannot_be_read_is_said() {
        let e = read(r#"{"mcpServers": {"fs": {"comand": "npx"}}}"#).unwrap_err();
        assert!(
            e.starts_with("mcpServers.fs: unknown field 'comand'. Did you mean 'command'? Known fields: type, command,"),
            "{e}"
        );
        assert_eq!(
            read(r#"{"mcpServers": {"fs": {"args": []}}}"#).unwrap_err(),
            "mcpServers.fs has neither command nor url; a server needs one of them"
        );
        assert!(read("[]")
            .unwrap_err()
            .starts_with("the file holds no JSON object"));
        assert!(read("{}").unwrap_err().starts_with("no server list found"));
    }
}
