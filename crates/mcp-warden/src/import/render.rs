//! A client's servers as a commented `warden.toml`: one `[[upstream]]` each,
//! with its command, args, env and url. A secret becomes the name of the
//! variable it is to be read from (`secret_env` for a child, `bearer_token_env`
//! for an HTTP server's bearer token), and the variables are listed for the
//! user to set. What the gateway has no counterpart for is said in a comment
//! and a note, never dropped in silence.

use super::client::{ClientFile, Server};
use super::secrets::{self, Ref};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The file to write, and what the user must know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub toml: String,
    /// Variables the gateway reads: (variable, what it is for).
    pub variables: Vec<(String, String)>,
    /// What was left out or needs a look, one sentence each.
    pub notes: Vec<String>,
    pub upstreams: usize,
}

/// Renders every enabled server of `client`; `source` names the file in the header.
pub fn render(client: &ClientFile, source: &str) -> Result<Imported, String> {
    let mut out = Imported {
        toml: header(client, source),
        variables: Vec::new(),
        notes: Vec::new(),
        upstreams: 0,
    };
    let names = names(client)?;
    let shared = shared_secret_names(client);
    for s in &client.servers {
        let name = &names[&s.name];
        if s.disabled {
            let _ = writeln!(
                out.toml,
                "# '{}' is disabled in the client, so it is left out.\n",
                s.name
            );
            out.notes.push(format!(
                "'{}' is disabled in the client and was left out",
                s.name
            ));
            continue;
        }
        upstream(&mut out, s, name, &shared);
        out.upstreams += 1;
    }
    if out.upstreams == 0 {
        return Err("every server in the file is disabled: there is nothing to import".into());
    }
    Ok(out)
}

fn header(client: &ClientFile, source: &str) -> String {
    format!(
        "# mcp-warden configuration, imported from {source} ({}) by `mcp-warden import`.\n\
         # Check it with `mcp-warden check --config FILE`, serve it with `mcp-warden run`.\n\
         # Each server is an [[upstream]]; callers see its tools as NAME.TOOL.\n\
         # No secret of env or headers is in this file: secret_env and bearer_token_env\n\
         # name the environment variables the gateway reads them from.\n\n",
        client.format.key()
    )
}

/// Upstream names: the client's, with anything but letters, digits, `_` and `-`
/// made `-`. Two servers that would get one name are an error.
fn names(client: &ClientFile) -> Result<HashMap<String, String>, String> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = HashMap::new();
    for s in &client.servers {
        let name = upstream_name(&s.name);
        if let Some(other) = seen.insert(name.clone(), &s.name) {
            return Err(format!(
                "the servers '{other}' and '{}' would both be the upstream '{name}'; rename one in the client's file",
                s.name
            ));
        }
        out.insert(s.name.clone(), name);
    }
    Ok(out)
}

/// The upstream a client's server becomes: its name, with anything but
/// letters, digits, `_` and `-` made `-`.
pub fn upstream_name(server: &str) -> String {
    let name: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "server".to_owned()
    } else {
        name
    }
}

/// Variable names that more than one server holds a secret under: those get
/// the upstream's name in front, so each secret has its own variable.
fn shared_secret_names(client: &ClientFile) -> Vec<String> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for s in &client.servers {
        for (k, _) in &s.env {
            *count.entry(secrets::variable(k)).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

fn upstream(out: &mut Imported, s: &Server, name: &str, shared: &[String]) {
    let t = &mut out.toml;
    let _ = writeln!(t, "[[upstream]]");
    if name != s.name {
        let _ = writeln!(t, "# '{}' in the client's file.", s.name);
    }
    let _ = writeln!(t, "name = {}", quoted(name));
    if let Some(command) = &s.command {
        let all: Vec<String> = std::iter::once(command)
            .chain(&s.args)
            .map(|a| quoted(a))
            .collect();
        let _ = writeln!(t, "command = [{}]", all.join(", "));
    }
    if let Some(url) = &s.url {
        let _ = writeln!(t, "url = {}", quoted(url));
    }
    env(out, s, name, shared);
    if s.url.is_some() {
        headers(out, s, name);
    } else if !s.headers.is_empty() {
        out.notes.push(format!(
            "upstream '{name}': headers are for HTTP servers and were left out"
        ));
    }
    notes(out, s, name);
    out.toml.push('\n');
}

fn env(out: &mut Imported, s: &Server, name: &str, shared: &[String]) {
    let (mut plain, mut from_env) = (Vec::new(), Vec::new());
    for (k, v) in &s.env {
        let mut suggest = secrets::variable(k);
        if shared.contains(&suggest) {
            suggest = format!("{}_{suggest}", secrets::variable(name));
        }
        match secrets::classify(k, v, &suggest) {
            secrets::Value::Plain(v) => plain.push(format!("{} = {}", key(k), quoted(&v))),
            secrets::Value::FromEnv { var, secret } => {
                let why = if secret {
                    "held a secret"
                } else {
                    "named a variable"
                };
                let _ = writeln!(
                    out.toml,
                    "# {k} {why}: the child gets it from the gateway's {var}."
                );
                from_env.push(format!("{} = {}", key(k), quoted(&var)));
                out.variables
                    .push((var, format!("upstream '{name}', env {k}")));
            }
        }
    }
    if !from_env.is_empty() {
        let _ = writeln!(out.toml, "secret_env = {{ {} }}", from_env.join(", "));
    }
    if !plain.is_empty() {
        let _ = writeln!(out.toml, "env = {{ {} }}", plain.join(", "));
    }
}

fn headers(out: &mut Imported, s: &Server, name: &str) {
    for (h, v) in &s.headers {
        let bearer = v
            .strip_prefix("Bearer ")
            .filter(|_| h.eq_ignore_ascii_case("authorization"));
        let Some(token) = bearer else {
            let _ = writeln!(out.toml, "# The header {h} is not sent: the gateway presents an HTTP upstream only a bearer token.");
            out.notes.push(format!("upstream '{name}': the header {h} was left out (mcp-warden presents only a bearer token, bearer_token_env)"));
            continue;
        };
        let var = match secrets::reference(token) {
            Some(Ref::Env(var)) => var,
            Some(Ref::Input(id)) => secrets::variable(&id),
            None => format!("{}_TOKEN", secrets::variable(name)),
        };
        let _ = writeln!(out.toml, "# The Authorization header held a bearer token: the gateway presents the one in {var}.");
        let _ = writeln!(out.toml, "bearer_token_env = {}", quoted(&var));
        out.variables.push((
            var,
            format!("upstream '{name}', the Authorization header's bearer token"),
        ));
    }
}

/// Comments and notes on what the gateway has no counterpart for.
fn notes(out: &mut Imported, s: &Server, name: &str) {
    let mut say = |text: String| {
        let _ = writeln!(out.toml, "# {text}");
        out.notes.push(format!("upstream '{name}': {text}"));
    };
    for f in &s.unsupported {
        say(match f.as_str() {
            "cwd" => "cwd is not carried: the child starts in the gateway's working directory; give the command absolute paths.".into(),
            "envFile" => "envFile is not read: set its variables in the gateway's environment.".into(),
            "autoApprove" | "alwaysAllow" => format!("{f} is not carried: in mcp-warden, [[rule]] tables decide who may call which tool."),
            other => format!("{other} is not carried: mcp-warden has no counterpart for it."),
        });
    }
    if s.transport.as_deref() == Some("sse") {
        say("type sse: the gateway speaks Streamable HTTP to an upstream; a server offering only the older SSE transport will not answer.".into());
    }
    if s.args
        .iter()
        .chain(&s.url)
        .any(|a| secrets::looks_secret(a))
    {
        say("an argument or the url looks like a credential and is written as it was: move it into a variable the server reads.".into());
    }
    let texts = s.command.iter().chain(&s.args).chain(&s.url);
    if texts.clone().any(|a| a.contains("${")) {
        say("a ${…} client variable is written as is: mcp-warden does not expand it; replace it with its value.".into());
    }
}

/// A TOML string, quoted and escaped.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A TOML key: bare where it may be, else quoted.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_owned()
    } else {
        quoted(k)
    }
}
