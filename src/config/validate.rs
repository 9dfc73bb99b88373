//! Raw → typed configuration. Every problem is collected (not just the first), each
//! naming its key path and saying what a good value looks like.

use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use http::header::HeaderName;

use super::HEALTH_PATH;
use super::raw::{RawConfig, RawStateless};
use super::{
    AdminConfig, Affinity, CommandSpec, Config, Fallback, LogConfig, LogFormat, Problem, Secret,
    SessionConfig, StatelessConfig, Target, UpstreamConfig,
};
use crate::rewrite::handles::HandleTools;
use crate::upstream::PinSettings;

/// The longest duration any setting takes: a year. Longer ones are typos, and an expiry
/// past the year 9999 could not be written as RFC 3339.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

pub(super) struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: &str, why: impl std::fmt::Display) {
        self.0.push(Problem::new(key, why));
    }

    fn duration(&mut self, key: &str, value: &str, min: Duration) -> Duration {
        match humantime::parse_duration(value.trim()) {
            Ok(d) if d > MAX_DURATION => {
                self.add(
                    key,
                    format!(
                        "{value:?} is too long; the maximum is {}",
                        humantime::format_duration(MAX_DURATION)
                    ),
                );
                MAX_DURATION
            }
            Ok(d) if d >= min => d,
            Ok(_) => {
                self.add(
                    key,
                    format!(
                        "{value:?} is too short; the minimum is {}",
                        humantime::format_duration(min)
                    ),
                );
                min
            }
            // The parser's own words ("expected number at 0") help nobody: say what to write.
            Err(_) => {
                self.add(
                    key,
                    format!(
                        "{value:?} is not a duration; write a number and a unit, e.g. \"30s\", \"5m\" or \"1h\""
                    ),
                );
                min
            }
        }
    }

    fn size(&mut self, key: &str, value: u64, min: u64) -> usize {
        if value < min {
            self.add(key, format!("{value} is too small; the minimum is {min}"));
        }
        usize::try_from(value).unwrap_or(usize::MAX)
    }
}

pub(super) fn check(raw: RawConfig) -> Result<Config, Vec<Problem>> {
    let mut p = Problems(Vec::new());

    let listen = raw.listen.parse::<SocketAddr>().unwrap_or_else(|_| {
        p.add(
            "listen",
            format!(
                "{:?} is not a socket address; write e.g. \"127.0.0.1:8080\"",
                raw.listen
            ),
        );
        SocketAddr::from(([127, 0, 0, 1], 0))
    });
    if !raw.path.starts_with('/') || raw.path.contains(['?', '#', ' ']) {
        p.add(
            "path",
            format!(
                "{:?} must be an absolute URL path such as \"/mcp\"",
                raw.path
            ),
        );
    } else if raw.path == HEALTH_PATH {
        p.add(
            "path",
            format!("{HEALTH_PATH} is reserved for health checks"),
        );
    }
    let max_body_bytes = p.size("max_body_bytes", raw.max_body_bytes, 1024);
    let workers = match raw.workers {
        0 => None,
        n if n > 1024 => {
            p.add(
                "workers",
                format!("{n} is too many; at most 1024 (0: one per core)"),
            );
            None
        }
        n => Some(usize::try_from(n).unwrap_or(1)),
    };
    for (i, origin) in raw.allowed_origins.iter().enumerate() {
        if !(origin.starts_with("http://") || origin.starts_with("https://"))
            || origin.ends_with('/')
        {
            p.add(&format!("allowed_origins[{i}]"), format!("{origin:?} must be an origin like \"https://app.example.com\" (scheme, host, optional port, no path)"));
        }
    }
    let shutdown_grace = p.duration("shutdown_grace", &raw.shutdown_grace, Duration::ZERO);

    let s = &raw.session;
    let idle_ttl = p.duration("session.idle_ttl", &s.idle_ttl, Duration::from_secs(1));
    let reap_interval = p.duration(
        "session.reap_interval",
        &s.reap_interval,
        Duration::from_millis(10),
    );
    let max_sessions = p.size("session.max_sessions", s.max_sessions, 1);
    let state_key = s.state_key.as_deref().and_then(|key| match decode_hex(key.trim()) {
        Some(bytes) if bytes.len() >= 32 => Some(Secret(bytes)),
        _ => {
            p.add("session.state_key", "must be at least 64 hexadecimal digits (32 bytes), e.g. the output of `openssl rand -hex 32`");
            None
        }
    });

    let u = &raw.upstream;
    let url = u
        .url
        .as_deref()
        .filter(|url| !url.trim().is_empty())
        .and_then(|url| match parse_upstream_url(url.trim()) {
            Ok(uri) => Some(uri),
            Err(why) => {
                p.add("upstream.url", why);
                None
            }
        });
    let command = u
        .command
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|program| CommandSpec {
            program: program.to_owned(),
            args: u.args.clone(),
            env: u.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cwd: u.cwd.as_deref().filter(|c| !c.is_empty()).map(Into::into),
        });
    let target = match (url, command) {
        (Some(_), Some(_)) => {
            p.add(
                "upstream",
                "set either url (a Streamable HTTP server) or command (a stdio server), not both",
            );
            Target::Embedded
        }
        (Some(url), None) => Target::Http(url),
        (None, Some(command)) => Target::Stdio(command),
        (None, None) => Target::Embedded,
    };
    if !matches!(target, Target::Stdio(_)) && !u.args.is_empty() {
        p.add("upstream.args", "arguments without upstream.command");
    }
    if let Target::Stdio(CommandSpec { cwd: Some(cwd), .. }) = &target
        && !cwd.is_dir()
    {
        p.add(
            "upstream.cwd",
            format!("{} is not a directory", cwd.display()),
        );
    }
    let pool_size = p.size("upstream.pool_size", u.pool_size, 0);
    let max_children = p.size("upstream.max_children", u.max_children, 1);
    let stop_grace = p.duration(
        "upstream.stop_grace",
        &u.stop_grace,
        Duration::from_millis(10),
    );
    let connect_timeout = p.duration(
        "upstream.connect_timeout",
        &u.connect_timeout,
        Duration::from_millis(1),
    );
    let timeout = p.duration("upstream.timeout", &u.timeout, Duration::from_millis(1));
    let sse_idle_timeout = p.duration(
        "upstream.sse_idle_timeout",
        &u.sse_idle_timeout,
        Duration::from_millis(1),
    );
    let max_message_bytes = p.size("upstream.max_message_bytes", u.max_message_bytes, 1024);

    let format = match raw.log.format.as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            p.add(
                "log.format",
                format!("{other:?} must be \"text\" or \"json\""),
            );
            LogFormat::Text
        }
    };
    if raw
        .log
        .level
        .parse::<tracing_subscriber::EnvFilter>()
        .is_err()
    {
        p.add("log.level", format!("{:?} is not a log filter; write a level (\"error\", \"warn\", \"info\", \"debug\" or \"trace\") or per-module levels such as \"info,mcp_session_proxy=debug\"", raw.log.level));
    }

    let a = &raw.admin;
    let admin_listen = match a.listen.trim() {
        "" => None,
        addr => match addr.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                p.add("admin.listen", format!("{addr:?} is not a socket address; write e.g. \"127.0.0.1:9090\", or \"\" to share the main listener"));
                None
            }
        },
    };
    let token = a.token.as_deref().map(str::trim).filter(|t| !t.is_empty()).and_then(|token| {
        if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            p.add("admin.token", "must be at least 16 visible ASCII characters, e.g. the output of `openssl rand -hex 16`");
            None
        } else {
            Some(Secret(token.as_bytes().to_vec()))
        }
    });

    let st = &raw.stateless;
    let stateless = StatelessConfig {
        affinity: affinity(&mut p, "stateless", st),
        max_pooled: p.size("stateless.max_pooled", st.max_pooled, 1),
        max_listens: p.size("stateless.max_listens", st.max_listens, 1),
        pool_idle_ttl: p.duration(
            "stateless.pool_idle_ttl",
            &st.pool_idle_ttl,
            Duration::from_secs(1),
        ),
        request_state_ttl: p.duration(
            "stateless.request_state_ttl",
            &st.request_state_ttl,
            Duration::from_secs(1),
        ),
    };

    if !p.0.is_empty() {
        return Err(p.0);
    }
    Ok(Config {
        listen,
        path: raw.path,
        max_body_bytes,
        allowed_origins: raw.allowed_origins,
        shutdown_grace,
        workers,
        session: SessionConfig {
            idle_ttl,
            max_sessions,
            reap_interval,
            state_key,
        },
        upstream: UpstreamConfig {
            target,
            pool_size,
            max_children,
            stop_grace,
            require_session: u.require_session,
            connect_timeout,
            timeout,
            sse_idle_timeout,
            max_message_bytes,
        },
        log: LogConfig {
            level: raw.log.level,
            format,
        },
        admin: AdminConfig {
            listen: admin_listen,
            metrics: a.metrics,
            token,
        },
        stateless,
    })
}

/// `stateless.affinity` and the keys of its mode, named under `prefix` (an upstream of
/// its own may be given its own).
pub(super) fn affinity(p: &mut Problems, prefix: &str, st: &RawStateless) -> Affinity {
    let key = |name: &str| format!("{prefix}.{name}");
    let fallback = match st.fallback.trim() {
        "isolated" => Fallback::Isolated,
        "shared" => Fallback::Shared,
        other => {
            p.add(
                &key("fallback"),
                format!("{other:?} must be \"isolated\" or \"shared\""),
            );
            Fallback::Isolated
        }
    };
    match st.affinity.trim() {
        "isolated" => Affinity::Isolated,
        "shared" => Affinity::Shared,
        "handles" => {
            let mut tools = HandleTools {
                open: st.handle_open_tool.trim().to_owned(),
                close: st.handle_close_tool.trim().to_owned(),
                argument: st.handle_argument.trim().to_owned(),
            };
            for (name, value) in [
                ("handle_open_tool", &tools.open),
                ("handle_close_tool", &tools.close),
                ("handle_argument", &tools.argument),
            ] {
                if !is_tool_name(value) {
                    p.add(
                        &key(name),
                        format!(
                            "{value:?} must be 1 to 128 letters, digits, '_', '-' or '.' (an MCP \
                             tool or argument name)"
                        ),
                    );
                }
            }
            if tools.open == tools.close {
                p.add(
                    &key("handle_close_tool"),
                    "must differ from handle_open_tool",
                );
                tools.close.push_str("_close");
            }
            Affinity::Handles {
                tools,
                fallback,
                max_per_caller: p.size(
                    &key("max_handles_per_caller"),
                    st.max_handles_per_caller,
                    1,
                ),
            }
        }
        "pinned" => {
            let header = match st.pin_header.trim() {
                "" => None,
                name => match HeaderName::from_bytes(name.as_bytes()) {
                    Ok(header) if PROXY_OWNED.contains(&header.as_str()) => {
                        p.add(
                            &key("pin_header"),
                            format!("{name:?} is a header the proxy or the transport owns; name the client's own, e.g. \"X-Conversation-Id\""),
                        );
                        None
                    }
                    Ok(header) => Some(header),
                    Err(_) => {
                        p.add(
                            &key("pin_header"),
                            format!("{name:?} is not an HTTP header name; write e.g. \"X-Conversation-Id\", or \"\" to pin by credentials"),
                        );
                        None
                    }
                },
            };
            Affinity::Pinned {
                header,
                fallback,
                limits: PinSettings {
                    max_pinned: p.size(&key("max_pinned"), st.max_pinned, 1),
                    idle_ttl: p.duration(
                        &key("pin_idle_ttl"),
                        &st.pin_idle_ttl,
                        Duration::from_secs(1),
                    ),
                },
            }
        }
        other => {
            p.add(
                &key("affinity"),
                format!("{other:?} must be \"isolated\", \"shared\", \"handles\" or \"pinned\""),
            );
            Affinity::Isolated
        }
    }
}

/// Headers a pin cannot be: the MCP transport's, the body's, hop-by-hop ones.
const PROXY_OWNED: [&str; 10] = [
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "content-type",
    "content-length",
    "accept",
    "host",
    "connection",
    "transfer-encoding",
];

/// An MCP tool name: 1 to 128 of `A-Z a-z 0-9 _ - .`.
fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn parse_upstream_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| format!("{url:?} is not a URL; write e.g. \"http://127.0.0.1:3001/mcp\""))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{url:?}: https upstreams are not supported yet; put the proxy next to the server and use http"
            ));
        }
        _ => return Err(format!("{url:?} must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} has no host"));
    }
    Ok(uri)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
