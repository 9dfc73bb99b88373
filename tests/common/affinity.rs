//! The `stateless.affinity` settings the suites share, as configuration functions for
//! `Harness::with_config`, `Interop::start_with` and the like.

use std::time::Duration;

use mcp_session_proxy::config::{Affinity, Config, Fallback};
use mcp_session_proxy::rewrite::handles::HandleTools;
use mcp_session_proxy::upstream::PinSettings;

/// `handles`: the default tool names, a call without a handle on its own session,
/// 16 handles per caller.
pub fn handles(c: &mut Config) {
    c.stateless.affinity = Affinity::Handles {
        tools: HandleTools::default(),
        fallback: Fallback::Isolated,
        max_per_caller: 16,
    };
}

/// `pinned` by the conversation header `header` (by caller when `None`); a call without
/// one on its own session; room for 100 pins, none expiring within a test.
pub fn pinned(header: Option<&'static str>) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.stateless.affinity = Affinity::Pinned {
            header: header.map(http::HeaderName::from_static),
            fallback: Fallback::Isolated,
            limits: PinSettings {
                max_pinned: 100,
                idle_ttl: Duration::from_secs(300),
            },
        };
    }
}
