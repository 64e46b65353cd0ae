//! `[[server]]`: a virtual server, a named tool set across upstreams served at
//! `/mcp/<name>` and by `run --server NAME` (V1-V7).

use super::*;
use std::collections::BTreeMap;

/// One virtual server as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Its name: the path `/mcp/<name>` and `run --server NAME`.
    pub name: String,
    /// Globs over catalogue names: the tools it exposes.
    pub tools: Vec<String>,
    /// `list` (default): its tools are listed; `search`: it lists `search_tools`
    /// and `call_tool` only (V4); `grow`: as `search`, and the tools a search
    /// found join the session's own listing (V6).
    #[serde(default, deserialize_with = "parsed")]
    pub discovery: Discovery,
    /// Catalogue name → the name this server gives the tool.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Catalogue name → the description this server gives the tool.
    #[serde(default)]
    pub describe: BTreeMap<String, String>,
    /// Catalogue name → the title this server gives the tool.
    #[serde(default)]
    pub title: BTreeMap<String, String>,
    /// What `initialize` tells the client about this server.
    pub instructions: Option<String>,
    /// Catalogue name → its arguments on this server: defaults, pins, hidden (V7).
    #[serde(default)]
    pub args: BTreeMap<String, ServerArgs>,
}

/// One tool's arguments on a virtual server (V7).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerArgs {
    /// Values for arguments the caller leaves out.
    #[serde(default)]
    pub defaults: serde_json::Map<String, serde_json::Value>,
    /// Values the caller cannot choose: gone from the schema, set on every call.
    #[serde(default)]
    pub pin: serde_json::Map<String, serde_json::Value>,
    /// Arguments the caller cannot see or send: the upstream's own default holds.
    #[serde(default)]
    pub hide: Vec<String>,
}

/// How a virtual server's tools are found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Discovery {
    #[default]
    List,
    Search,
    Grow,
}

impl Discovery {
    /// Whether the server lists `search_tools` and `call_tool` (V4, V6).
    pub fn searches(self) -> bool {
        self != Discovery::List
    }
}

impl FromStr for Discovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "list" => Ok(Discovery::List),
            "search" => Ok(Discovery::Search),
            "grow" => Ok(Discovery::Grow),
            other => Err(format!(
                "'{other}' is not a discovery; use list, search or grow"
            )),
        }
    }
}
