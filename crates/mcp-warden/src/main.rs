//! `mcp-warden`: the command line. Commands map onto the gateway library; this
//! file only parses arguments, sets up logging and turns errors into exit codes.

mod import;

use anyhow::{anyhow, Context};
use clap::{Parser, Subcommand};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::mpsc;
use warden_core::Caller;
use warden_gateway::config::{Config, Front};
use warden_gateway::gateway::{ClientSession, Gateway, Outgoing};
use warden_gateway::pins;

mod audit;
mod policy_test;
mod replay;
mod tools;

#[derive(Parser)]
#[command(
    name = "mcp-warden",
    version,
    about = "Governs MCP tool calls between clients and servers",
    long_about = "mcp-warden sits between MCP clients and MCP servers. For every tools/list and tools/call it \
decides what a caller may see, checks that the arguments are the ones the tool declared (unknown keys: \
warn, strip or reject with did-you-mean hints; JSON Schema validation; pinned arguments), and relays \
everything else unchanged.\n\nLogs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct ConfigArg {
    /// The TOML configuration file.
    #[arg(long, short, env = "MCP_WARDEN_CONFIG", default_value = "warden.toml")]
    config: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP clients: over stdio (newline-delimited JSON-RPC on stdin/stdout) or
    /// Streamable HTTP (POST/GET/DELETE on http://ADDR/mcp). Default: gateway.front.
    Run {
        #[command(flatten)]
        config: ConfigArg,
        /// Serve on stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve Streamable HTTP on ADDR, path /mcp (no ADDR: gateway.listen, 127.0.0.1:8931 by default).
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
        http: Option<String>,
        /// Reload the configuration when the file (or the pins lock beside it) changes;
        /// SIGHUP reloads it either way.
        #[arg(long)]
        watch: bool,
        /// Serve the virtual server NAME (a [[server]] table) on stdin/stdout instead
        /// of the whole catalogue. Over HTTP it is at /mcp/NAME.
        #[arg(long, value_name = "NAME", conflicts_with = "http")]
        server: Option<String>,
    },
    /// Validate the configuration and print warnings; on errors, print every
    /// problem of the file (each with FILE:LINE:COLUMN) and exit 1.
    Check {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Write a warden.toml from a client's MCP server list (Claude Desktop's
    /// claude_desktop_config.json, VS Code's .vscode/mcp.json, Cursor's
    /// .cursor/mcp.json, any `mcpServers` file). Secrets become the names of
    /// environment variables, which it prints.
    Import {
        /// The client's config file.
        file: PathBuf,
        /// Where to write the configuration.
        #[arg(long, short, default_value = "warden.toml")]
        output: PathBuf,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Rewrite a client's config so every server goes through one mcp-warden
    /// entry (run `import` first); keeps FILE.bak and prints the diff.
    Wrap {
        /// The client's config file.
        file: PathBuf,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Print the tool catalogue one caller would see (starts the upstreams).
    Tools {
        #[command(flatten)]
        config: ConfigArg,
        /// The caller whose view to print (default: gateway.stdio_caller).
        #[arg(long)]
        caller: Option<String>,
        /// Print the declarations as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Query the audit trail (needs [store] url); `audit verify` checks its hash chains.
    #[command(args_conflicts_with_subcommands = true)]
    Audit {
        #[command(subcommand)]
        action: Option<AuditAction>,
        #[command(flatten)]
        config: ConfigArg,
        /// Only calls made by this caller.
        #[arg(long)]
        caller: Option<String>,
        /// Only calls to this tool (as callers name it).
        #[arg(long)]
        tool: Option<String>,
        /// Only calls with this outcome: ok, tool_error, upstream_error, failed, cancelled, refused.
        #[arg(long)]
        outcome: Option<String>,
        /// Only calls since: a duration back from now (15m, 2h, 7d) or a UTC time (2026-11-30T04:00:00Z).
        #[arg(long)]
        since: Option<String>,
        /// At most this many records, oldest first.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Judge the recorded calls of the audit trail by this configuration's access
    /// rules, offline; list the calls whose decision changes; exit 1 when one that
    /// ran would now be refused.
    Replay(replay::Args),
    /// Policy as code: `policy test CASES.toml` judges cases of caller, tool and
    /// arguments by this configuration's access rules.
    Policy {
        #[command(subcommand)]
        action: policy_test::Action,
    },
    /// Pin tool definitions against rug pulls: lock, diff, approve (starts the upstreams).
    Pins {
        #[command(subcommand)]
        action: PinsAction,
    },
    /// Make one tool call through the pipeline and print the result as JSON.
    Call {
        #[command(flatten)]
        config: ConfigArg,
        /// The caller to act for (default: gateway.stdio_caller).
        #[arg(long)]
        caller: Option<String>,
        /// `_meta` for the call, as a JSON object.
        #[arg(long)]
        meta: Option<String>,
        /// The tool, as callers see it (e.g. notes.create_note).
        tool: String,
        /// The arguments, as a JSON object (default: {}).
        args: Option<String>,
    },
}

#[derive(Subcommand)]
enum AuditAction {
    /// Check every replica's hash chain in the trail and name the first broken
    /// link of each (an edited, deleted or reordered record); exit 1 when one is.
    Verify {
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Subcommand)]
enum PinsAction {
    /// Write the lock file beside the config: every upstream's tools as listed now.
    Lock {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Show, per tool, how the upstreams' tools differ from the lock; exit 1 when they do.
    Diff {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Accept the named tools (`upstream.tool` or the upstream's name; none: all) into the lock.
    Approve {
        #[command(flatten)]
        config: ConfigArg,
        tools: Vec<String>,
    },
    /// Record the named tools' definitions as listed now as rejected: withheld
    /// in every mode until the upstream lists another (`pins approve` lifts it).
    Reject {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(required = true)]
        tools: Vec<String>,
    },
}

impl PinsAction {
    fn config(&self) -> &ConfigArg {
        match self {
            PinsAction::Lock { config }
            | PinsAction::Diff { config }
            | PinsAction::Approve { config, .. }
            | PinsAction::Reject { config, .. } => config,
        }
    }
}

/// mimalloc serves the many small, short-lived allocations of a call (JSON
/// trees, futures, channel blocks) with less processor time than glibc's malloc
/// (issue 25's measurements).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the pages mimalloc freed on this thread back to the system: after a
/// catalogue build, which frees most of what it allocated
/// (`warden_gateway::memory`).
#[allow(unsafe_code)]
fn release_freed_memory() {
    // SAFETY: mi_collect takes no pointer and may be called on any thread at
    // any time; it only frees pages no allocation lives in.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// mimalloc's `mi_option_purge_delay`: its place in `mi_option_e` (the same
/// in both versions the crate bundles), for which `libmimalloc-sys` names no
/// constant.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc give pages that fall free back to the system at once, not a
/// second later (its default; a delay of 10 ms kept as much as that, since
/// nothing purges an idle heap): the resident memory after an HTTP load was
/// 1.0–1.5 MiB lower. The cost is a third of a page fault per request (0.30–0.39
/// against 0.01), which the processor time of the same runs did not tell apart
/// from noise (issue 25). A `MIMALLOC_PURGE_DELAY` in the environment still
/// decides.
#[allow(unsafe_code)]
fn purge_freed_pages_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: mi_option_set takes no pointer and may be called at any time; it
    // only sets the value mimalloc reads when it next schedules a purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

fn main() -> ExitCode {
    purge_freed_pages_at_once();
    warden_gateway::memory::set_release(release_freed_memory);
    let cli = Cli::parse();
    let quiet = !matches!(cli.command, Command::Run { .. });
    init_logging(quiet);
    // One thread serves a stdio session best: every hop between the client, the
    // pipeline and the upstreams stays on it, with no cross-thread wake-ups. Many
    // HTTP clients at once are served on every core.
    let http = match &cli.command {
        Command::Run {
            config,
            stdio,
            http,
            ..
        } => {
            !stdio
                && (http.is_some()
                    || Config::load(&config.config).is_ok_and(|c| c.gateway.front == Front::Http))
        }
        _ => false,
    };
    let mut builder = if http {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if quiet { "warn" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
}

fn load(arg: &ConfigArg) -> anyhow::Result<Config> {
    Ok(Config::load(&arg.config)?)
}

/// Writes `path` whole, never a part of it ([`pins::write_whole`]).
fn write_whole(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    pins::write_whole(path, text).map_err(|e| anyhow!(e))
}

/// A configuration a gateway may start with: the file, and the pins lock beside
/// it as `check` reads it (one that cannot be read refuses the start rather than
/// leave every tool unpinned). Logs the lock's warnings.
fn load_to_serve(arg: &ConfigArg) -> anyhow::Result<Config> {
    let config = load(arg)?;
    match warden_gateway::live::check_lock(&config) {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("config: {}", warden_gateway::logged::logged(&w));
            }
            Ok(config)
        }
        Err(errors) => Err(anyhow!(errors.join("\n"))),
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            config,
            stdio,
            http,
            watch,
            server,
        } => serve(&config, stdio, http, watch, server).await,
        Command::Check { config } => check(&config).await,
        Command::Import {
            file,
            output,
            force,
        } => {
            import::import(&file, &output, force)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Wrap { file, config } => {
            import::wrap(&file, &config.config)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools {
            config,
            caller,
            json,
        } => tools::tools(&config, caller, json).await,
        Command::Audit {
            action: Some(AuditAction::Verify { config }),
            ..
        } => audit::verify(&load(&config)?).await,
        Command::Audit {
            action: None,
            config,
            caller,
            tool,
            outcome,
            since,
            limit,
            json,
        } => {
            let filter = audit::Filter {
                caller,
                tool,
                outcome,
                since,
                limit,
            };
            audit::list(&load(&config)?, filter, json).await
        }
        Command::Replay(args) => replay::replay(&load(&args.config)?, &args).await,
        Command::Policy {
            action: policy_test::Action::Test { cases, config },
        } => policy_test::run(&load(&config)?, &cases),
        Command::Pins { action } => pins_command(action).await,
        Command::Call {
            config,
            caller,
            meta,
            tool,
            args,
        } => call(&config, caller, meta, tool, args).await,
    }
}

/// `run`: the gateway, serving stdio or HTTP until its input ends or a signal.
async fn serve(
    config: &ConfigArg,
    stdio: bool,
    http: Option<String>,
    watch: bool,
    server: Option<String>,
) -> anyhow::Result<ExitCode> {
    let path = config.config.clone();
    let config = load_to_serve(config)?;
    if let Some(name) = &server {
        if config.server(name).is_none() {
            return Err(anyhow!(
                "--server {name}: no [[server]] is named '{name}' in the config"
            ));
        }
    }
    let stdio = stdio || server.is_some();
    let serves_http = http.is_some() || (!stdio && config.gateway.front == Front::Http);
    if config.audit.stdout && !serves_http {
        return Err(anyhow!("{}: audit.stdout: audit records cannot go to stdout when serving stdio: stdout carries the MCP messages there. Serve over HTTP (--http, or gateway.front = \"http\"), or write them to a file with audit.jsonl", path.display()));
    }
    for w in config.warnings() {
        tracing::warn!("config: {w}");
    }
    let gateway = Gateway::new(config).await.map_err(|e| anyhow!(e))?;
    warden_gateway::live::spawn(gateway.clone(), path, watch);
    if let Some(listen) = gateway.config.admin_listen().map(str::to_owned) {
        let addr = warden_gateway::admin::serve(&listen, gateway.clone())
            .await
            .map_err(|e| anyhow!(e))?;
        tracing::info!("metrics on http://{addr}/metrics");
        // Tests and scripts read the address from here when binding port 0.
        eprintln!("mcp-warden: admin listener on http://{addr}/ (console, /api/, /metrics)");
    }
    let http = match http {
        Some(addr) if addr.is_empty() => Some(gateway.config.gateway.listen.clone()),
        Some(addr) => Some(addr),
        None if !stdio && gateway.config.gateway.front == Front::Http => {
            Some(gateway.config.gateway.listen.clone())
        }
        None => None,
    };
    match http {
        Some(addr) => {
            if gateway.config.audit.stdout {
                gateway.audit_to_stdout();
            }
            let server = warden_gateway::front::http::Server::bind(gateway, &addr)
                .await
                .map_err(|e| anyhow!(e))?;
            let local = server.local_addr().context("reading the bound address")?;
            let scheme = server.scheme();
            tracing::info!("serving MCP over Streamable HTTP at {scheme}://{local}/mcp");
            // Tests and scripts read the address from here when binding port 0.
            eprintln!("mcp-warden: listening on {scheme}://{local}/mcp");
            server.run(shutdown_signal()).await;
        }
        None => warden_gateway::front::stdio::serve_as(gateway, server)
            .await
            .context("serving stdio")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `check`: validates a config file (and its pins lock) without serving it.
async fn check(config: &ConfigArg) -> anyhow::Result<ExitCode> {
    let path = config.config.display().to_string();
    // With a pins lock, the tools' schemas as reviewed are known too (G6).
    let checked = warden_gateway::live::check_file(&config.config).await;
    let warden_gateway::live::Checked { config, warnings } = match checked {
        Ok(checked) => checked,
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {}", e.text);
                if let Some(at) = &e.at {
                    eprintln!("  --> {at}");
                }
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &warnings {
        println!("warning: {w}");
    }
    println!(
        "{path}: ok ({} upstream(s), {} warning(s))",
        config.upstream.len(),
        warnings.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `pins lock|diff|approve|reject`.
async fn pins_command(action: PinsAction) -> anyhow::Result<ExitCode> {
    let config = load(action.config())?;
    let path = pins::lock_path(&config.path);
    let (gateway, _session) = start(config, None, Audit::CallsOnly).await?;
    let listings = gateway.upstream_listings();
    gateway.shutdown().await;
    // `lock` replaces the file whole, so one that no longer reads or
    // verifies is no obstacle to it: its errors say to run it.
    let mut lock = match &action {
        PinsAction::Lock { .. } => pins::Lock::default(),
        _ => pins::Lock::read(&path)
            .map_err(|e| anyhow!(e))?
            .unwrap_or_default(),
    };
    match action {
        PinsAction::Lock { .. } => {
            lock = pins::Lock::of(&listings);
        }
        PinsAction::Approve { tools, .. } => {
            let n = pins::approve_into(&path, &listings, &tools).map_err(|e| anyhow!(e))?;
            println!("{}: {n} tool(s) locked", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        PinsAction::Reject { tools, .. } => {
            let n = pins::reject_into(&path, &listings, &tools).map_err(|e| anyhow!(e))?;
            println!("{}: {n} definition(s) rejected", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        PinsAction::Diff { .. } => {
            let none = Default::default();
            let mut drifted = false;
            for (up, tools) in &listings {
                let locked = lock.upstreams.get(up).unwrap_or(&none);
                for d in pins::diff(locked, tools) {
                    drifted = true;
                    print!("{}", pins::render(up, &d));
                }
            }
            if !drifted {
                println!("no drift: every tool is as locked in {}", path.display());
            }
            return Ok(if drifted {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
    }
    write_whole(&path, &lock.to_text())?;
    let n: usize = lock.upstreams.values().map(|t| t.len()).sum();
    println!("{}: {n} tool(s) locked", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `call`: one tool call through the whole pipeline, printed.
async fn call(
    config: &ConfigArg,
    caller: Option<String>,
    meta: Option<String>,
    tool: String,
    args: Option<String>,
) -> anyhow::Result<ExitCode> {
    let config = load_to_serve(config)?;
    let args: Value = match args {
        Some(a) => serde_json::from_str(&a).context("JSON_ARGS is not valid JSON")?,
        None => Value::Object(Default::default()),
    };
    let mut params = serde_json::json!({"name": tool, "arguments": args});
    if let Some(m) = meta {
        params["_meta"] = serde_json::from_str(&m).context("--meta is not valid JSON")?;
    }
    let (gateway, session) = start(config, caller, Audit::All).await?;
    let body = gateway.call_tool(&session, None, params).await;
    // With durability = "async" the call's record may still be queued.
    let flush = warden_gateway::gateway::audit::FLUSH_AT_EXIT;
    if !gateway.flush_audit(flush).await {
        tracing::error!("audit records still waited for the store after {flush:?}; each is in the log above, whole");
    }
    gateway.shutdown().await;
    match body {
        Some(Ok(result)) => {
            println!("{}", serde_json::to_string_pretty(&result)?);
            let failed = result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Some(Err(error)) => {
            eprintln!("{}", serde_json::to_string_pretty(&error)?);
            Ok(ExitCode::FAILURE)
        }
        None => Ok(ExitCode::FAILURE),
    }
}

/// What a command's gateway leaves in the audit trail: `tools` and `pins` only
/// look at the upstreams, so the tool drift they see is not recorded (P2).
#[derive(PartialEq)]
enum Audit {
    All,
    CallsOnly,
}

/// A gateway with its upstreams started, and a session acting for `caller`.
async fn start(
    config: Config,
    caller: Option<String>,
    audit: Audit,
) -> anyhow::Result<(Arc<Gateway>, Arc<ClientSession>)> {
    let name = caller.unwrap_or_else(|| config.gateway.stdio_caller.clone());
    let caller = Caller {
        groups: config.groups_of(&name),
        name,
    };
    let gateway = Gateway::new(config).await.map_err(|e| anyhow!(e))?;
    if audit == Audit::CallsOnly {
        gateway.keep_drift_out_of_audit();
    }
    // Messages the upstream sends the client (progress, logs) are shown on stderr.
    let (tx, mut rx) = mpsc::channel::<Outgoing>(64);
    tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            eprintln!("{}", out.msg);
        }
    });
    let session = ClientSession::new(Some(caller), tx);
    gateway.add_session(&session);
    gateway.connect(None).await;
    Ok((gateway, session))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    /// The option set is the purge delay: nothing here sets it, so it holds
    /// mimalloc's own default for it (1,000 ms in version 3), which no option
    /// near it has.
    #[test]
    #[allow(unsafe_code)]
    fn the_option_set_is_the_purge_delay() {
        // SAFETY: mi_option_get takes no pointer and only reads.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
