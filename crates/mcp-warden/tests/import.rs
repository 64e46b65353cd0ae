//! `mcp-warden import` and `mcp-warden wrap` on the clients' own file formats
//! (samples under tests/import/, written from each client's documentation),
//! through the real binary; `wrap`'s entry is then started as the client
//! would start it, and serves the imported upstream.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sample `name`, copied into a scratch folder (the test may change it).
fn sample(dir: &Path, name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/import")
        .join(name);
    let to = dir.join(name);
    std::fs::copy(&from, &to).expect("copy the sample");
    to
}

fn import(file: &Path, out: &Path) -> (i32, String, String) {
    cli(&[
        "import",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
}

#[test]
fn claude_desktop_servers_become_upstreams_and_the_secret_a_variable() {
    let dir = scratch("import-claude");
    let file = sample(&dir, "claude_desktop_config.json");
    let before = std::fs::read(&file).unwrap();
    let out = dir.join("warden.toml");
    let (code, stdout, stderr) = import(&file, &out);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let (f, o) = (file.display(), out.display());
    assert_eq!(
        stdout,
        format!(
            "{o}: 2 upstream(s) imported from {f}\n\
             Set these environment variables where the gateway runs (the file holds none of their values):\n  \
             GITHUB_PERSONAL_ACCESS_TOKEN  upstream 'github', env GITHUB_PERSONAL_ACCESS_TOKEN\n\
             Next: mcp-warden check --config {o}\n"
        )
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!(
            "# mcp-warden configuration, imported from {f} (mcpServers) by `mcp-warden import`.\n\
             # Check it with `mcp-warden check --config FILE`, serve it with `mcp-warden run`.\n\
             # Each server is an [[upstream]]; callers see its tools as NAME.TOOL.\n\
             # No secret of env or headers is in this file: secret_env and bearer_token_env\n\
             # name the environment variables the gateway reads them from.\n\n\
             [[upstream]]\n\
             name = \"filesystem\"\n\
             command = [\"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/Users/username/Desktop\", \"/Users/username/Downloads\"]\n\n\
             [[upstream]]\n\
             name = \"github\"\n\
             command = [\"npx\", \"-y\", \"@modelcontextprotocol/server-github\"]\n\
             # GITHUB_PERSONAL_ACCESS_TOKEN held a secret: the child gets it from the gateway's GITHUB_PERSONAL_ACCESS_TOKEN.\n\
             secret_env = {{ GITHUB_PERSONAL_ACCESS_TOKEN = \"GITHUB_PERSONAL_ACCESS_TOKEN\" }}\n\n"
        )
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the client's file is read only"
    );
    let (code, _, err) = cli(&["check", "--config", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // A second import does not overwrite the first without --force.
    let (code, _, err) = import(&file, &out);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("error: {o} exists; pass --force to replace it, or -o another file\n")
    );
}

#[test]
fn every_client_format_imports_into_a_file_check_accepts_with_no_secret_in_it() {
    let dir = scratch("import-formats");
    let cases: [(&str, &[&str], &[&str]); 3] = [
        (
            "vscode-mcp.json",
            &[
                "PERPLEXITY_KEY  upstream 'Perplexity', env PERPLEXITY_API_KEY",
                "GITHUB_TOKEN    upstream 'github', the Authorization header's bearer token",
            ],
            &[
                "secret_env = { PERPLEXITY_API_KEY = \"PERPLEXITY_KEY\" }",
                "url = \"https://api.githubcopilot.com/mcp/\"",
                "bearer_token_env = \"GITHUB_TOKEN\"",
                "command = [\"uvx\", \"mcp-server-fetch\"]",
            ],
        ),
        (
            "cursor-mcp.json",
            &[
                "SEARCH_API_KEY  upstream 'web-search', env API_KEY",
                "DOCS_MCP_TOKEN  upstream 'docs', the Authorization header's bearer token",
            ],
            &[
                "secret_env = { API_KEY = \"SEARCH_API_KEY\" }",
                "env = { LOG_LEVEL = \"info\" }",
                "bearer_token_env = \"DOCS_MCP_TOKEN\"",
            ],
        ),
        (
            "generic-mcp.json",
            &[
                "SLACK_BOT_TOKEN  upstream 'slack', env SLACK_BOT_TOKEN",
                "note: upstream 'local-notes': cwd is not carried",
                "note: 'old' is disabled in the client and was left out",
                "note: upstream 'postgres': an argument or the url looks like a credential and is written as it was",
            ],
            &[
                "secret_env = { SLACK_BOT_TOKEN = \"SLACK_BOT_TOKEN\" }",
                "env = { SLACK_TEAM_ID = \"T01234567\" }",
                "# 'local notes' in the client's file.\nname = \"local-notes\"",
                "# autoApprove is not carried",
            ],
        ),
    ];
    for (name, said, written) in cases {
        let file = sample(&dir, name);
        let before = std::fs::read(&file).unwrap();
        let out = dir.join(format!("{name}.toml"));
        let (code, stdout, stderr) = import(&file, &out);
        assert_eq!((code, stderr.as_str()), (0, ""), "{name}");
        let toml = std::fs::read_to_string(&out).unwrap();
        for s in said {
            assert!(stdout.contains(s), "{name}: {s}\n{stdout}");
        }
        for w in written {
            assert!(toml.contains(w), "{name}: {w}\n{toml}");
        }
        for secret in ["xoxb-1111", "Bearer"] {
            assert!(
                !toml.contains(secret) && !stdout.contains(secret),
                "{name}: {secret}"
            );
        }
        // A credential in an argument stays where it was written, and is never printed.
        assert!(!stdout.contains("hunter2"), "{name}");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{name}");
        let (code, _, err) = cli(&["check", "--config", out.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
    }
}

#[test]
fn a_file_that_is_no_client_config_gets_a_clear_error_and_stays_untouched() {
    let dir = scratch("import-bad");
    for (name, error) in [
        ("bad-json.json", "not valid JSON: expected `,` or `}` at line 5 column 7"),
        ("unknown-field.json", "mcpServers.github: unknown field 'comand'. Did you mean 'command'? Known fields: type, command, args, env, envFile, cwd, url, headers, disabled, autoApprove, alwaysAllow, timeout, description, dev."),
        ("duplicate-names.json", "'mcpServers.github' is given twice; each name may appear once at line 11 column 3"),
    ] {
        let file = sample(&dir, name);
        let before = std::fs::read(&file).unwrap();
        let out = dir.join("warden.toml");
        let (code, stdout, stderr) = import(&file, &out);
        assert_eq!((code, stdout.as_str()), (1, ""), "{name}");
        assert_eq!(
            stderr,
            format!("error: {}: {error} (the file is unchanged)\n", file.display())
        );
        assert!(!out.exists(), "{name}: nothing is written");
        // wrap refuses it the same way, and leaves no backup.
        let (code, _, wrapped) = cli(&["wrap", file.to_str().unwrap(), "--config", out.to_str().unwrap()]);
        assert_eq!((code, wrapped), (1, stderr), "{name}");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{name}");
        assert!(!dir.join(format!("{name}.bak")).exists(), "{name}");
    }
}

#[test]
fn wrap_sends_every_server_through_one_gateway_entry() {
    let dir = scratch("import-wrap");
    // A VS Code file whose one server is the fixture upstream, its secret
    // asked for by an input: the gateway's environment holds it instead.
    let file = dir.join("mcp.json");
    let original = format!(
        "{{\n  // the workspace's servers\n  \"inputs\": [{{\"type\": \"promptString\", \"id\": \"fixture-token\", \"password\": true}}],\n  \"servers\": {{\n    \"fx\": {{\n      \"type\": \"stdio\",\n      \"command\": \"{FIXTURE}\",\n      \"env\": {{\"FIXTURE_SECRET_VAR\": \"FIXTURE_TOKEN\", \"FIXTURE_TOKEN\": \"${{input:fixture-token}}\"}}\n    }}\n  }}\n}}\n"
    );
    std::fs::write(&file, &original).unwrap();
    let config = dir.join("warden.toml");
    let (code, out, err) = import(&file, &config);
    assert_eq!(code, 0, "{err}");
    // Both values count as secrets: one by its input, one by its name.
    assert!(out.contains("  FIXTURE_SECRET_VAR  upstream 'fx', env FIXTURE_SECRET_VAR\n  FIXTURE_TOKEN       upstream 'fx', env FIXTURE_TOKEN\n"), "{out}");
    assert!(!std::fs::read_to_string(&config).unwrap().contains("input:"));
    let (code, out, err) = cli(&[
        "wrap",
        file.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let backup = dir.join("mcp.json.bak");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original);
    assert!(
        out.starts_with(&format!(
            "--- {}\n+++ {}\n@@ -1,",
            backup.display(),
            file.display()
        )),
        "{out}"
    );
    assert!(out.contains("-    \"fx\": {\n"), "{out}");
    assert!(
        out.ends_with(&format!(
            "{}: every server now goes through the mcp-warden entry; the old file is {}\n",
            file.display(),
            backup.display()
        )),
        "{out}"
    );
    let wrapped: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let config_abs = std::fs::canonicalize(&config).unwrap();
    assert_eq!(
        wrapped["servers"],
        json!({"mcp-warden": {"type": "stdio", "command": WARDEN, "args": ["run", "--stdio", "--config", config_abs.display().to_string()]}})
    );
    assert_eq!(wrapped["inputs"][0]["id"], "fixture-token");
    // The client starts the entry as written; the gateway serves the fixture,
    // whose secret comes from the gateway's environment.
    let entry = &wrapped["servers"]["mcp-warden"];
    let mut cmd = Command::new(entry["command"].as_str().unwrap());
    cmd.args(
        entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap()),
    );
    cmd.env("FIXTURE_SECRET_VAR", "FIXTURE_TOKEN")
        .env("FIXTURE_TOKEN", "token-from-the-environment");
    let mut w = Warden::spawn_command(dir.clone(), cmd, None);
    w.handshake();
    assert!(w.tool_names().contains(&"fx.echo".to_owned()));
    let said = w.call_text("fx.secret", json!({}));
    assert!(
        said.starts_with("FIXTURE_TOKEN=token-from-the-environment pid="),
        "{said}"
    );
    // A second wrap finds nothing left to wrap.
    let (code, _, err) = cli(&[
        "wrap",
        file.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(err, format!("error: {}: servers already lists only the mcp-warden entry: the file is wrapped (the file is unchanged)\n", file.display()));
}
