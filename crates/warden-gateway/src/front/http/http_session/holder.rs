//! Who an HTTP session counts against, for the session and request caps.

use crate::front::auth::Identity;
use std::net::IpAddr;

/// Whose sessions count together against `gateway.max_sessions_per_caller`: a
/// caller's, except the anonymous caller's (`gateway.anonymous_caller`), which
/// count per client address (an IPv4 address or an IPv6 /64, as connections
/// do), so that one client without credentials cannot hold every session the
/// other anonymous clients could have had.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(in crate::front::http) struct Holder {
    caller: String,
    /// The client address, for the anonymous caller only.
    client: Option<IpAddr>,
}

impl Holder {
    /// The holder for a request from `client` by `who`.
    pub(in crate::front::http) fn of(who: &Identity, client: IpAddr) -> Holder {
        Holder {
            caller: who.caller.name.clone(),
            client: who.anonymous.then_some(client),
        }
    }

    /// A caller with a credential: its sessions count together wherever they come from.
    pub(in crate::front::http) fn caller(name: &str) -> Holder {
        Holder {
            caller: name.to_owned(),
            client: None,
        }
    }

    /// Its key for budgets kept by name (`gateway.http_caller_rate`), and for logs.
    pub(in crate::front::http) fn key(&self) -> std::borrow::Cow<'_, str> {
        match self.client {
            None => std::borrow::Cow::Borrowed(&self.caller),
            Some(client) => std::borrow::Cow::Owned(format!("{}@{client}", self.caller)),
        }
    }
}
