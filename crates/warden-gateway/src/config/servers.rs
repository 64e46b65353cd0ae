//! Virtual servers (V1-V7), checked at load: their names, globs and renames,
//! and how one maps catalogue names to the names it shows and back.

use super::check::Invalid;
use super::file::{Discovery, ServerArgs, ServerConfig};
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The two tools a server in search mode lists (V4).
pub const SEARCH_TOOLS: &str = "search_tools";
pub const CALL_TOOL: &str = "call_tool";

/// One `[[server]]`, checked.
#[derive(Debug, Clone)]
pub struct VirtualServer {
    pub name: String,
    globs: GlobSet,
    /// The globs as written (for `check`'s warnings).
    pub patterns: Vec<String>,
    pub discovery: Discovery,
    /// Catalogue name → shown name.
    rename: BTreeMap<String, String>,
    /// Shown name → catalogue name, for the renamed tools.
    renamed: BTreeMap<String, String>,
    describe: BTreeMap<String, String>,
    title: BTreeMap<String, String>,
    pub instructions: Option<String>,
    /// Catalogue name → its argument defaults, pins and hidden ones (V7).
    args: BTreeMap<String, ServerArgs>,
}

/// Whether `name` may be a tool's name (MCP: 1-128 of `A-Z a-z 0-9 _ - .`).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn invalid(key: String, message: String) -> Invalid {
    Invalid { key, message }
}

/// Checks every `[[server]]` (V1): unique names usable in a path, valid globs,
/// renames to valid tool names that collide with nothing.
pub(super) fn check(list: &[ServerConfig]) -> Result<Vec<Arc<VirtualServer>>, Invalid> {
    let mut out: Vec<Arc<VirtualServer>> = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let key = |k: &str| format!("server[{i}]{k}");
        let path_safe = s
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        if s.name.is_empty() || s.name.len() > 64 || !path_safe {
            return Err(invalid(key(".name"), format!("'{}' is not a server name: use 1-64 letters, digits, '_' or '-' (it becomes the path /mcp/<name>)", s.name)));
        }
        if out.iter().any(|o| o.name == s.name) {
            return Err(invalid(
                key(".name"),
                format!("'{}' names two servers: each needs its own name", s.name),
            ));
        }
        if s.tools.is_empty() {
            return Err(invalid(
                key(".tools"),
                "a server needs at least one tool glob (e.g. \"notes.*\")".into(),
            ));
        }
        let mut globs = GlobSetBuilder::new();
        for t in &s.tools {
            let g = Glob::new(t).map_err(|e| {
                invalid(
                    key(".tools"),
                    format!("'{t}' is not a valid tool glob: {}", e.kind()),
                )
            })?;
            globs.add(g);
        }
        let globs = globs
            .build()
            .map_err(|e| invalid(key(".tools"), e.to_string()))?;
        let renamed = renames(s, &globs, &key)?;
        check_args(s, &globs, &key)?;
        out.push(Arc::new(VirtualServer {
            name: s.name.clone(),
            globs,
            patterns: s.tools.clone(),
            discovery: s.discovery,
            rename: s.rename.clone(),
            renamed,
            describe: s.describe.clone(),
            title: s.title.clone(),
            instructions: s.instructions.clone(),
            args: s.args.clone(),
        }));
    }
    Ok(out)
}

/// The reverse of a server's renames, checked: each new name valid, none given
/// twice, none that another exposed tool already has by its own name.
fn renames(
    s: &ServerConfig,
    globs: &GlobSet,
    key: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, String>, Invalid> {
    let mut back: BTreeMap<String, String> = BTreeMap::new();
    for (from, to) in &s.rename {
        let k = key(&format!(".rename.\"{from}\""));
        if !valid_tool_name(to) {
            return Err(invalid(
                k,
                format!(
                    "'{to}' is not a valid tool name: use 1-128 letters, digits, '_', '-' or '.'"
                ),
            ));
        }
        if let Some(other) = back.insert(to.clone(), from.clone()) {
            return Err(invalid(k, format!("'{other}' and '{from}' are both renamed to '{to}': each tool needs its own name")));
        }
        // A tool the globs name literally keeps its name unless it is renamed too.
        let literal = s.tools.iter().any(|t| t == to) && !s.rename.contains_key(to);
        if literal && globs.is_match(to) {
            return Err(invalid(k, format!("'{from}' is renamed to '{to}', which the server already exposes under that name: pick another name")));
        }
    }
    Ok(back)
}

/// Each `args` entry names a tool the server exposes, and gives each of its
/// arguments one treatment: a default, a pin or hidden (V7).
fn check_args(
    s: &ServerConfig,
    globs: &GlobSet,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Invalid> {
    for (tool, a) in &s.args {
        let k = key(&format!(".args.\"{tool}\""));
        if !globs.is_match(tool) {
            return Err(invalid(k, format!("'{tool}' is not among the tools this server exposes ({}): name a tool by its catalogue name", s.tools.join(", "))));
        }
        let mut seen = std::collections::BTreeSet::new();
        let names = a.defaults.keys().chain(a.pin.keys()).chain(&a.hide);
        for arg in names {
            if !seen.insert(arg) {
                return Err(invalid(k, format!("argument '{arg}' of '{tool}' is given more than one of defaults, pin and hide: choose one")));
            }
        }
    }
    Ok(())
}

impl VirtualServer {
    /// Whether the server sets any tool's arguments (V7).
    pub fn sets_args(&self) -> bool {
        !self.args.is_empty()
    }

    /// The catalogue tool names `args` sets arguments of, with the arguments
    /// (for `check` against the pins lock).
    pub fn set_arguments(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.args.iter().map(|(tool, a)| {
            let names = a.defaults.keys().chain(a.pin.keys()).chain(&a.hide);
            (tool.as_str(), names.map(String::as_str).collect())
        })
    }

    /// Applies the server's argument settings for the catalogue tool `real` to
    /// a call's arguments (V7): pins set, defaults filled in. `Err`: an
    /// argument the caller may not send here, which it sent.
    pub fn set_args(&self, real: &str, params: &mut serde_json::Value) -> Result<(), String> {
        let Some(a) = self.args.get(real) else {
            return Ok(());
        };
        if params
            .get("arguments")
            .is_none_or(serde_json::Value::is_null)
        {
            params["arguments"] = serde_json::Value::Object(Default::default());
        }
        let Some(args) = params.get_mut("arguments").and_then(|v| v.as_object_mut()) else {
            return Ok(()); // not an object: the pipeline answers that
        };
        let kept = a.pin.keys().chain(&a.hide);
        if let Some(sent) = kept.into_iter().find(|k| args.contains_key(*k)) {
            return Err(sent.clone());
        }
        for (k, v) in &a.pin {
            args.insert(k.clone(), v.clone());
        }
        for (k, v) in &a.defaults {
            if !args.contains_key(k) {
                args.insert(k.clone(), v.clone());
            }
        }
        Ok(())
    }

    /// A tool's input schema as this server shows it (V7): pinned and hidden
    /// arguments gone, defaults declared and no longer required.
    fn reshape(&self, real: &str, tool: &mut serde_json::Value) {
        let Some(a) = self.args.get(real) else {
            return;
        };
        let Some(schema) = tool.get_mut("inputSchema").and_then(|s| s.as_object_mut()) else {
            return;
        };
        let gone: Vec<&String> = a.pin.keys().chain(&a.hide).collect();
        if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
            for k in &gone {
                props.shift_remove(k.as_str());
            }
            for (k, v) in &a.defaults {
                if let Some(p) = props.get_mut(k).and_then(|p| p.as_object_mut()) {
                    p.insert("default".into(), v.clone());
                }
            }
        }
        if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
            required.retain(|r| {
                let r = r.as_str().unwrap_or_default();
                !gone.iter().any(|g| g.as_str() == r) && !a.defaults.contains_key(r)
            });
        }
    }

    /// Whether the server exposes the catalogue tool `real`.
    pub fn exposes(&self, real: &str) -> bool {
        self.globs.is_match(real)
    }

    /// The name the server shows for the catalogue tool `real`.
    pub fn shown<'a>(&'a self, real: &'a str) -> &'a str {
        self.rename.get(real).map_or(real, String::as_str)
    }

    /// The catalogue tool the server shows as `shown`, if it shows one by that
    /// name: renamed, or exposed under its own (V2). A renamed tool's own name
    /// is not shown, and a renamed tool wins over one that has its new name.
    pub fn real<'a>(&'a self, shown: &'a str) -> Option<&'a str> {
        if let Some(real) = self.renamed.get(shown) {
            return self.exposes(real).then_some(real.as_str());
        }
        (!self.rename.contains_key(shown) && self.exposes(shown)).then_some(shown)
    }

    /// The catalogue tool a `tools/call` with these params runs on this server
    /// (through `call_tool` in search mode), if any: what per-tool OAuth scopes
    /// are checked against, so that a new name does not shed them (V2, G7).
    pub fn called(&self, params: &serde_json::Value) -> Option<String> {
        let name = params.get("name")?.as_str()?;
        let shown = match self.discovery {
            Discovery::List => name,
            _ if name == CALL_TOOL => params.pointer("/arguments/name")?.as_str()?,
            Discovery::Search => return None,
            // A found tool is called by its name too (V6).
            Discovery::Grow => name,
        };
        self.real(shown).map(str::to_owned)
    }

    /// The listing the server shows from a caller's own (V2): its tools only,
    /// renamed, with their overridden titles and descriptions, in catalogue order.
    pub fn view<'v>(
        &self,
        listed: impl IntoIterator<Item = &'v serde_json::Value>,
    ) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for tool in listed {
            let Some(real) = tool.get("name").and_then(serde_json::Value::as_str) else {
                continue;
            };
            let shown = self.shown(real);
            if !self.exposes(real) || self.real(shown) != Some(real) {
                continue;
            }
            let mut t = tool.clone();
            t["name"] = shown.into();
            if let Some(d) = self.describe.get(real) {
                t["description"] = d.as_str().into();
            }
            if let Some(title) = self.title.get(real) {
                t["title"] = title.as_str().into();
            }
            self.reshape(real, &mut t);
            out.push(t);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(toml: &str) -> Result<Arc<VirtualServer>, Invalid> {
        let s: ServerConfig = toml::from_str(toml).unwrap();
        check(&[s]).map(|mut v| v.remove(0))
    }

    #[test]
    fn renames_map_both_ways_and_hide_the_old_name() {
        let s = server("name='r'\ntools=['notes.*']\nrename={'notes.search_notes'='find_notes'}")
            .unwrap();
        assert_eq!(s.real("find_notes"), Some("notes.search_notes"));
        assert_eq!(s.real("notes.search_notes"), None);
        assert_eq!(s.real("notes.create_note"), Some("notes.create_note"));
        assert_eq!(s.real("web.fetch"), None);
        let listed = [
            json!({"name": "notes.search_notes", "description": "d"}),
            json!({"name": "web.fetch"}),
        ];
        let view = s.view(listed.iter());
        assert_eq!(view, [json!({"name": "find_notes", "description": "d"})]);
    }

    #[test]
    fn a_call_names_the_real_tool_for_its_scopes() {
        let list = server("name='r'\ntools=['a.*']\nrename={'a.x'='y'}").unwrap();
        assert_eq!(list.called(&json!({"name": "y"})).as_deref(), Some("a.x"));
        assert_eq!(list.called(&json!({"name": "a.x"})), None);
        let search =
            server("name='s'\ntools=['a.*']\ndiscovery='search'\nrename={'a.x'='y'}").unwrap();
        let via = json!({"name": "call_tool", "arguments": {"name": "y"}});
        assert_eq!(search.called(&via).as_deref(), Some("a.x"));
        assert_eq!(search.called(&json!({"name": "search_tools"})), None);
    }

    #[test]
    fn a_renamed_tool_wins_over_one_with_its_new_name() {
        let s = server("name='r'\ntools=['a.*']\nrename={'a.x'='a.y'}").unwrap();
        let listed = [json!({"name": "a.x"}), json!({"name": "a.y"})];
        assert_eq!(s.view(listed.iter()), [json!({"name": "a.y"})]);
        assert_eq!(s.real("a.y"), Some("a.x"));
    }

    #[test]
    fn bad_servers_are_refused() {
        let two = server("name='r'\ntools=['a.*']\nrename={'a.x'='z', 'a.y'='z'}").unwrap_err();
        assert_eq!(
            two.message,
            "'a.x' and 'a.y' are both renamed to 'z': each tool needs its own name"
        );
        let taken = server("name='r'\ntools=['a.x', 'b.y']\nrename={'a.x'='b.y'}").unwrap_err();
        assert_eq!(taken.message, "'a.x' is renamed to 'b.y', which the server already exposes under that name: pick another name");
        let bad = server("name='r'\ntools=['a.*']\nrename={'a.x'='has space'}").unwrap_err();
        assert_eq!(
            bad.message,
            "'has space' is not a valid tool name: use 1-128 letters, digits, '_', '-' or '.'"
        );
        assert_eq!(
            server("name='a/b'\ntools=['a.*']").unwrap_err().key,
            "server[0].name"
        );
        assert_eq!(
            server("name='r'\ntools=[]").unwrap_err().key,
            "server[0].tools"
        );
    }
}
