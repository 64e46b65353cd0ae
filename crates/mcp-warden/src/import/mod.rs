//! `mcp-warden import` and `mcp-warden wrap`: meeting users where their MCP
//! servers are configured today, in a desktop or IDE client.
//!
//! `import FILE` reads the client's server list ([`client`]) and writes a
//! commented `warden.toml` with one upstream per server ([`render`]), secrets
//! turned into the names of the variables to read them from ([`secrets`]); it
//! is checked as `mcp-warden check` would before anything is written. `wrap
//! FILE` then points the client at the gateway: its servers are replaced by one
//! entry that runs `mcp-warden run --stdio` ([`wrap`]), the old file is kept as
//! a backup and the change printed as a diff ([`diff`]). A file that cannot be
//! read as a client config is left untouched, with an error that says why.

mod client;
mod diff;
mod jsonc;
mod render;
mod secrets;
mod wrap;

use anyhow::{anyhow, Context};
use std::path::Path;
use warden_gateway::config::Config;

/// Reads a client's file, or says what is wrong with it.
fn read_client(file: &Path) -> anyhow::Result<client::ClientFile> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow!("{}: cannot read the file ({e})", file.display()))?;
    client::read(&text).map_err(|e| anyhow!("{}: {e} (the file is unchanged)", file.display()))
}

/// `mcp-warden import FILE -o OUT`: writes OUT, prints what to set.
pub fn import(file: &Path, out: &Path, force: bool) -> anyhow::Result<()> {
    let client = read_client(file)?;
    let imported = render::render(&client, &file.display().to_string())
        .map_err(|e| anyhow!("{}: {e}", file.display()))?;
    // The file must be one `check` accepts: checked before it is written.
    Config::parse(&imported.toml, &out.display().to_string()).map_err(|e| {
        anyhow!("the imported configuration would not pass the check ({e}); nothing was written")
    })?;
    if out.exists() && !force {
        return Err(anyhow!(
            "{} exists; pass --force to replace it, or -o another file",
            out.display()
        ));
    }
    std::fs::write(out, &imported.toml).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: {} upstream(s) imported from {}",
        out.display(),
        imported.upstreams,
        file.display()
    );
    if !imported.variables.is_empty() {
        println!("Set these environment variables where the gateway runs (the file holds none of their values):");
        let width = imported
            .variables
            .iter()
            .map(|(v, _)| v.len())
            .max()
            .unwrap_or(0);
        for (var, what) in &imported.variables {
            println!("  {var:width$}  {what}");
        }
    }
    for note in &imported.notes {
        println!("note: {note}");
    }
    println!("Next: mcp-warden check --config {}", out.display());
    Ok(())
}

/// `mcp-warden wrap FILE --config CONFIG`: rewrites FILE, keeps a backup, prints the diff.
pub fn wrap(file: &Path, config: &Path) -> anyhow::Result<()> {
    let client = read_client(file)?;
    let loaded = Config::load(config).map_err(|e| {
        anyhow!("{e}; wrap points the client at a checked configuration: run `mcp-warden import {} -o {}` first", file.display(), config.display())
    })?;
    let upstreams: Vec<String> = loaded.upstream.iter().map(|u| u.name.clone()).collect();
    let program = std::env::current_exe().context("finding this program's path")?;
    let config_abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let document = wrap::rewrite(
        &client,
        render::upstream_name,
        &upstreams,
        &program,
        &config_abs,
    )
    .map_err(|e| anyhow!("{}: {e} (the file is unchanged)", file.display()))?;
    let old =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let new = format!("{}\n", serde_json::to_string_pretty(&document)?);
    let backup = wrap::backup_path(file).map_err(|e| anyhow!(e))?;
    std::fs::copy(file, &backup)
        .with_context(|| format!("writing the backup {}", backup.display()))?;
    crate::write_whole(file, &new)?;
    print!(
        "{}",
        diff::unified(
            &old,
            &new,
            &backup.display().to_string(),
            &file.display().to_string()
        )
    );
    println!(
        "{}: every server now goes through the {} entry; the old file is {}",
        file.display(),
        wrap::ENTRY,
        backup.display()
    );
    Ok(())
}
