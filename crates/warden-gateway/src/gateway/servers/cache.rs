//! What each virtual server of a configuration makes of one catalogue (V2,
//! V4), worked out once per catalogue rather than on every listing and query:
//! every tool it could show anyone, renamed and described its way, and, in
//! search mode, the words of each counted for ranking.
//!
//! Which of those tools a caller may see is decided on each request from the
//! caller's own listing ([`View::visible`]), so one view serves every caller,
//! and search ranks within the visible ones only
//! ([`super::search::Index::rank`]). A new catalogue (an upstream's tools
//! changed) makes a new view; a reload makes a new policy, and with it a new
//! cache, as a server's renames and descriptions may have changed.

use super::search::Index;
use crate::config::servers::VirtualServer;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use warden_core::{Catalogue, ToolEntry};

/// One server's view of one catalogue.
pub struct View {
    /// Every catalogue tool the server shows, as it shows it, in catalogue order.
    pub tools: Vec<Value>,
    /// Catalogue name → its place in `tools`.
    places: HashMap<String, usize>,
    /// The words of `tools`, counted (search mode only; empty otherwise).
    pub index: Index,
}

impl View {
    /// For each of [`View::tools`], whether the caller's own listing `listed`
    /// holds its tool.
    pub fn visible(&self, listed: &[&Arc<ToolEntry>]) -> Vec<bool> {
        let mut seen = vec![false; self.tools.len()];
        for t in listed {
            if let Some(&d) = self.places.get(t.name.as_str()) {
                seen[d] = true;
            }
        }
        seen
    }

    /// The place in [`View::tools`] of the catalogue tool `real`, if the
    /// server shows it.
    pub fn place(&self, real: &str) -> Option<usize> {
        self.places.get(real).copied()
    }
}

/// A view, with the catalogue it was made of. The weak reference keeps that
/// catalogue's address from being reused while the entry stands, so an
/// address that matches is that very catalogue.
type Made = (Weak<Catalogue>, Arc<View>);

/// The views, by server name.
#[derive(Default)]
pub struct Views {
    by_server: Mutex<HashMap<String, Made>>,
}

impl Views {
    /// `server`'s view of `catalogue`, made now if it is not yet.
    pub fn get(&self, server: &VirtualServer, catalogue: &Arc<Catalogue>) -> Arc<View> {
        let mut map = self.by_server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((of, view)) = map.get(&server.name) {
            if Weak::ptr_eq(of, &Arc::downgrade(catalogue)) {
                return view.clone();
            }
        }
        let view = Arc::new(make(server, catalogue));
        map.insert(
            server.name.clone(),
            (Arc::downgrade(catalogue), view.clone()),
        );
        view
    }
}

/// `server`'s view of every tool of `catalogue`.
fn make(server: &VirtualServer, catalogue: &Catalogue) -> View {
    let published: Vec<Value> = catalogue
        .tools()
        .iter()
        .map(|t| t.published_value())
        .collect();
    let tools = server.view(published.iter());
    let places = tools.iter().enumerate().map(|(d, t)| {
        let shown = t.get("name").and_then(Value::as_str).unwrap_or_default();
        (server.real(shown).unwrap_or_default().to_owned(), d)
    });
    let places = places.collect();
    let index = match server.discovery.searches() {
        false => Index::default(),
        true => Index::build(&tools),
    };
    View {
        tools,
        places,
        index,
    }
}
