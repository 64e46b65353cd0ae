//! `warden-rmcp-notes`: the rmcp notes server over stdio.
//!
//! - `warden-rmcp-notes`: plain, as a gateway's upstream;
//! - `warden-rmcp-notes --config warden.toml --upstream notes`: governed in
//!   process by that file's settings for the upstream `notes`, answering as the
//!   gateway would in front of the plain one.

#[path = "notes.rs"]
mod notes;

use rmcp::ServiceExt;
use std::sync::Arc;
use warden_rmcp::{Governance, Governed};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let notes = notes::Notes::default();
    let stdio = rmcp::transport::stdio();
    match flag("--config") {
        None => notes.serve(stdio).await?.waiting().await?,
        Some(path) => {
            let config = warden_gateway::config::Config::load(path.as_ref())?;
            let upstream = flag("--upstream").unwrap_or_else(|| "notes".into());
            let governance = Arc::new(Governance::from_config(&config, &upstream)?);
            Governed::new(notes, governance)
                .serve(stdio)
                .await?
                .waiting()
                .await?
        }
    };
    Ok(())
}
