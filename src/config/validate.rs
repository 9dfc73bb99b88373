//! Raw → typed configuration. Every problem is collected (not just the first), each
//! naming its key path and saying what a good value looks like.

mod store;

use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use http::header::HeaderName;

use super::HEALTH_PATH;
use super::raw::{RawConfig, RawNamedUpstream, RawStateless};
use super::{
    AdminConfig, Affinity, AuthConfig, AuthKeys, ClusterConfig, CommandSpec, Config,
    DEFAULT_UPSTREAM, Era, Fallback, LimitsConfig, LogConfig, LogFormat, OldClients, OnSessionLost,
    Problem, Secret, SessionConfig, StatelessConfig, StoreConfig, Target, TelemetryConfig,
    UpgradeConfig, UpstreamConfig, UpstreamDef, UpstreamOverrides,
};
use crate::rewrite::handles::HandleTools;
use crate::upstream::PinSettings;

/// The longest duration any setting takes: a year. Longer ones are typos, and an expiry
/// past the year 9999 could not be written as RFC 3339.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

pub(super) struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: &str, why: impl std::fmt::Display) {
        let problem = Problem::new(key, why);
        // A `[stateless]` value an upstream inherits is checked with it: said once.
        if !self
            .0
            .iter()
            .any(|p| p.key == problem.key && p.why == problem.why)
        {
            self.0.push(problem);
        }
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
    let max_sessions_per_caller = match s.max_sessions_per_caller {
        None => default_per_caller(max_sessions),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let creations_per_caller_per_minute = u32::try_from(s.creations_per_caller_per_minute)
        .unwrap_or_else(|_| {
            p.add(
                "session.creations_per_caller_per_minute",
                format!(
                    "{} is too many; at most {} (0: no limit)",
                    s.creations_per_caller_per_minute,
                    u32::MAX
                ),
            );
            0
        });
    let state_key = s.state_key.as_deref().and_then(|key| match decode_hex(key.trim()) {
        Some(bytes) if bytes.len() >= 32 => Some(Secret(bytes)),
        _ => {
            p.add("session.state_key", "must be at least 64 hexadecimal digits (32 bytes), e.g. the output of `openssl rand -hex 32`");
            None
        }
    });

    let u = &raw.upstream;
    let target = p.target(
        "upstream",
        TargetKeys {
            url: u.url.as_deref(),
            urls: &u.urls,
            command: u.command.as_deref(),
            args: &u.args,
            env: &u.env,
            inherit_env: &u.inherit_env,
            cwd: u.cwd.as_deref(),
        },
    );
    let upstream_credentials = credentials(&mut p, "upstream", &u.credentials, &target);
    let upstream_exchange = token_exchange(
        &mut p,
        "upstream",
        u.token_exchange.as_ref(),
        &target,
        &raw.auth,
    );
    one_authorization(
        &mut p,
        "upstream",
        &upstream_credentials,
        upstream_exchange.as_ref(),
    );
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
    let on_session_lost = p.on_session_lost("upstream.on_session_lost", &u.on_session_lost);
    let health_interval = p.duration(
        "upstream.health_interval",
        &u.health_interval,
        Duration::from_millis(100),
    );
    let era = p.era("upstream.era", &u.era);
    let old_clients = p.old_clients("upstream.old_clients", &u.old_clients);
    let upstreams = named_upstreams(&mut p, &raw, &target);
    let store = store::store(&mut p, &raw, &target, on_session_lost, &upstreams);
    // A cap above the cap on every session would let one caller take them all (a sealed
    // store has no cap on every session: any value holds there).
    if max_sessions_per_caller > max_sessions && !matches!(store, StoreConfig::Sealed { .. }) {
        p.add(
            "session.max_sessions_per_caller",
            format!(
                "{max_sessions_per_caller} is more than session.max_sessions ({max_sessions}): one caller could take every session; write at most {max_sessions}, or 0 for no cap"
            ),
        );
    }
    let cluster = cluster(&mut p, &raw, listen, &store);
    let max_tombstones = p.size("session.max_tombstones", s.max_tombstones, 1);

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

    let stateless = stateless(&mut p, &|name| format!("stateless.{name}"), &raw.stateless);

    let l = &raw.limits;
    let client_timeout = Duration::from_millis(100);
    let limits = LimitsConfig {
        max_connections: p.size("limits.max_connections", l.max_connections, 1),
        max_connections_per_address: match l.max_connections_per_address {
            0 => None,
            n => Some(p.size("limits.max_connections_per_address", n, 1)),
        },
        header_read_timeout: p.duration(
            "limits.header_read_timeout",
            &l.header_read_timeout,
            client_timeout,
        ),
        idle_timeout: p.duration("limits.idle_timeout", &l.idle_timeout, client_timeout),
        request_body_timeout: p.duration(
            "limits.request_body_timeout",
            &l.request_body_timeout,
            client_timeout,
        ),
        upstream_idle_timeout: p.duration(
            "limits.upstream_idle_timeout",
            &l.upstream_idle_timeout,
            client_timeout,
        ),
        upstream_idle_connections: p.size(
            "limits.upstream_idle_connections",
            l.upstream_idle_connections,
            0,
        ),
        max_memory: match l.max_memory {
            0 => None,
            n if n < MIN_MAX_MEMORY => {
                p.add("limits.max_memory", format!("{n} is too small; write at least {MIN_MAX_MEMORY} (bytes of resident memory), or 0 for 90% of the cgroup's memory limit"));
                None
            }
            n => Some(n),
        },
        max_open_files: match l.max_open_files {
            0 => None,
            n if n < MIN_MAX_OPEN_FILES => {
                p.add("limits.max_open_files", format!("{n} is too small; write at least {MIN_MAX_OPEN_FILES}, or 0 for 90% of the open-file limit"));
                None
            }
            n => Some(n),
        },
    };

    let names: Vec<&str> = upstreams
        .iter()
        .map(|u| u.name.as_str())
        .chain(
            (!matches!(target, Target::Embedded) || upstreams.is_empty())
                .then_some(super::DEFAULT_UPSTREAM),
        )
        .collect();
    let auth = auth(&mut p, &raw.auth, &names);
    let upgrade = UpgradeConfig {
        socket: upgrade_socket(&mut p, &raw.upgrade.socket),
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
            max_sessions_per_caller,
            creations_per_caller_per_minute,
            reap_interval,
            state_key,
            store,
            max_tombstones,
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
            on_session_lost,
            health_interval,
            era,
            old_clients,
            credentials: upstream_credentials,
            token_exchange: upstream_exchange,
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
        upstreams,
        cluster,
        limits,
        auth,
        upgrade,
        telemetry: telemetry(&mut p, &raw.telemetry),
    })
}

/// `[telemetry]`: "" is unset; an endpoint must be an http:// URL with a host, a sampler one of
/// `OTEL_TRACES_SAMPLER`'s names with its ratio within 0 and 1.
fn telemetry(p: &mut Problems, t: &super::raw::RawTelemetry) -> TelemetryConfig {
    let set = |value: &str| Some(value.trim().to_owned()).filter(|v| !v.is_empty());
    let endpoint = set(&t.endpoint);
    if let Some(url) = &endpoint
        && let Err(why) = crate::telemetry::check_endpoint(url)
    {
        p.add("telemetry.endpoint", why);
    }
    let sampler = set(&t.sampler);
    if let Some(name) = &sampler
        && let Err(why) = crate::telemetry::SamplerChoice::parse(name, t.sampler_arg)
    {
        p.add("telemetry.sampler", why);
    }
    if let Some(arg) = t.sampler_arg
        && !(0.0..=1.0).contains(&arg)
    {
        p.add(
            "telemetry.sampler_arg",
            format!("{arg} is not a ratio within 0 and 1, e.g. 0.01"),
        );
    }
    TelemetryConfig {
        endpoint,
        service_name: set(&t.service_name),
        sampler,
        sampler_arg: t.sampler_arg,
    }
}

/// The longest `upgrade.socket` path: a Unix socket's path holds at most 107 bytes
/// (unix(7), `sun_path`), and the socket is first bound beside it under a name 12 bytes
/// longer (`.<pid>.new`).
const MAX_UPGRADE_SOCKET: usize = 95;

/// `upgrade.socket`: "" is off; otherwise a path short enough for a Unix socket.
fn upgrade_socket(p: &mut Problems, socket: &str) -> Option<std::path::PathBuf> {
    let socket = socket.trim();
    if socket.is_empty() {
        return None;
    }
    if socket.len() > MAX_UPGRADE_SOCKET || socket.ends_with('/') {
        p.add(
            "upgrade.socket",
            format!(
                "{socket:?} is not a usable Unix socket path: write a file path of at most \
                 {MAX_UPGRADE_SOCKET} bytes, e.g. \"/run/mcp-session-proxy/upgrade.sock\", or \"\" \
                 for no hand-over"
            ),
        );
        return None;
    }
    Some(std::path::PathBuf::from(socket))
}

/// The least `limits.max_memory` (16 MiB): the proxy itself needs some before any work.
const MIN_MAX_MEMORY: u64 = 16 * 1024 * 1024;
/// The least `limits.max_open_files`: the proxy's own descriptors (runtimes, listeners,
/// logs) before any connection.
const MIN_MAX_OPEN_FILES: u64 = 64;

/// The most clock skew `auth.leeway` allows: more would keep expired tokens alive.
const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// `[auth]`: on when an issuer or a key is given; then `issuer` is required, and
/// `audience` unless `public_url` names each endpoint's own. The keys are the HS256
/// secret, the JWKS file (read now, so that `check` and start-up report what is wrong
/// with it), or the authorization server's (from `jwks_uri`, else found through the
/// issuer's metadata) — one of them.
fn auth(p: &mut Problems, a: &super::RawAuth, upstreams: &[&str]) -> Option<AuthConfig> {
    let secret = a.hs256_secret.as_deref().filter(|s| !s.is_empty());
    let file = a
        .jwks_file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let jwks_uri = Some(a.jwks_uri.trim()).filter(|u| !u.is_empty());
    let issuer = a.issuer.trim();
    let leeway = p.duration("auth.leeway", &a.leeway, Duration::ZERO);
    if leeway > MAX_LEEWAY {
        p.add(
            "auth.leeway",
            format!(
                "{:?} is too long; at most 5m (a few seconds of clock skew is usual)",
                a.leeway
            ),
        );
    }
    let resource_metadata = match a.resource_metadata.trim() {
        "" => None,
        url if web_url(url) => Some(url.to_owned()),
        url => {
            p.add("auth.resource_metadata", format!("{url:?} must be the URL of this server's protected resource metadata, e.g. \"https://mcp.example.com/.well-known/oauth-protected-resource\""));
            None
        }
    };
    // Stored as its origin, normalized as clients write a resource (`new URL().href`:
    // lower-case host, no default port), so the audience compares equal.
    let public_url = match a.public_url.trim().trim_end_matches('/') {
        "" => None,
        url if let Ok(parsed) = url::Url::parse(url)
            && web_url(url)
            && parsed.path() == "/"
            && parsed.query().is_none()
            && parsed.fragment().is_none()
            && parsed.username().is_empty()
            && parsed.password().is_none() =>
        {
            Some(parsed.origin().ascii_serialization())
        }
        url => {
            p.add("auth.public_url", format!("{url:?} must be where clients reach this proxy, scheme, host and port only, e.g. \"https://mcp.example.com\""));
            None
        }
    };
    if secret.is_none() && file.is_none() && jwks_uri.is_none() && issuer.is_empty() {
        let set: [(&str, bool); 9] = [
            ("auth.rules", !a.rules.is_empty()),
            ("auth.limits", !a.limits.is_empty()),
            ("auth.audience", !a.audience.trim().is_empty()),
            ("auth.forward_token", a.forward_token),
            ("auth.resource_metadata", resource_metadata.is_some()),
            ("auth.public_url", public_url.is_some()),
            (
                "auth.authorization_servers",
                !a.authorization_servers.is_empty(),
            ),
            ("auth.scopes_supported", !a.scopes_supported.is_empty()),
            ("auth.required_scopes", !a.required_scopes.is_empty()),
        ];
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            p.add(key, "has no effect while [auth] is off; set auth.issuer (its keys are fetched from it) to verify bearer tokens");
        }
        return None;
    }
    let keys = match (secret, file, jwks_uri) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            p.add(
                "auth.jwks_uri",
                "set one of auth.jwks_uri, auth.jwks_file and auth.hs256_secret (or none: the keys the issuer's metadata names)",
            );
            return None;
        }
        (Some(secret), None, None) => {
            if secret.len() < 32 {
                p.add("auth.hs256_secret", "must be at least 32 bytes (256 bits, RFC 7518 §3.2), e.g. the output of `openssl rand -hex 32`");
            }
            AuthKeys::Fixed {
                keys: vec![crate::auth::Key::hs256(secret.as_bytes())],
                skipped: Vec::new(),
            }
        }
        (None, Some(path), None) => match std::fs::read_to_string(path) {
            Err(e) => {
                p.add("auth.jwks_file", format!("{path:?} cannot be read: {e}"));
                AuthKeys::Fixed {
                    keys: Vec::new(),
                    skipped: Vec::new(),
                }
            }
            Ok(text) => match crate::auth::jwt::read_jwks(&text) {
                Ok(read) => AuthKeys::Fixed {
                    keys: read.keys,
                    skipped: read.skipped,
                },
                Err(why) => {
                    p.add("auth.jwks_file", format!("{path:?} {why}"));
                    AuthKeys::Fixed {
                        keys: Vec::new(),
                        skipped: Vec::new(),
                    }
                }
            },
        },
        (None, None, fetched) => {
            // At least 10 s: an unknown `kid` is fetched at once anyway.
            let max_age = p.duration(
                "auth.jwks_max_age",
                &a.jwks_max_age,
                Duration::from_secs(10),
            );
            let source = match fetched {
                // Keys as securely as the issuer: https unless the issuer is plain http
                // (a loopback or in-cluster server).
                Some(url)
                    if web_url(url)
                        && (url.starts_with("https://") || !issuer.starts_with("https://")) =>
                {
                    crate::auth::keys::Source::Jwks(url.to_owned())
                }
                Some(url) => {
                    p.add(
                        "auth.jwks_uri",
                        format!("{url:?} must be the https URL of the authorization server's JWKS (plain http only for an http issuer)"),
                    );
                    crate::auth::keys::Source::Jwks(String::new())
                }
                None => {
                    if !issuer.is_empty() && !web_url(issuer) {
                        p.add("auth.issuer", format!("{issuer:?} must be the issuer's URL to find its keys (its metadata names them); or set auth.jwks_uri, auth.jwks_file or auth.hs256_secret"));
                    }
                    crate::auth::keys::Source::Discover {
                        issuer: issuer.to_owned(),
                    }
                }
            };
            AuthKeys::Fetched { source, max_age }
        }
    };
    if issuer.is_empty() {
        p.add("auth.issuer", "is required with [auth]: the iss every token must carry, e.g. \"https://auth.example.com/\"");
    }
    let audience = a.audience.trim();
    if audience.is_empty() && public_url.is_none() {
        p.add("auth.audience", "is required with [auth] unless auth.public_url is set (then a token's aud must name the endpoint it is used at): the aud a token for this server names, e.g. \"https://mcp.example.com/mcp\"");
    }
    let authorization_servers = match a.authorization_servers.as_slice() {
        [] => vec![issuer.to_owned()],
        servers => listed(p, "auth.authorization_servers", servers),
    };
    let required_scopes = listed(p, "auth.required_scopes", &a.required_scopes);
    let mut scopes_supported = listed(p, "auth.scopes_supported", &a.scopes_supported);
    for scope in &required_scopes {
        if !scopes_supported.contains(scope) {
            scopes_supported.push(scope.clone());
        }
    }
    let policy = policy(p, &a.rules, upstreams);
    let limits = tool_limits(p, &a.limits, upstreams);
    Some(AuthConfig {
        policy,
        limits,
        keys,
        rules: crate::auth::Rules {
            issuer: issuer.to_owned(),
            audience: Some(audience)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .into_iter()
                .collect(),
            leeway: leeway.min(MAX_LEEWAY),
        },
        forward_token: a.forward_token,
        resource: crate::auth::Resource {
            public_url,
            metadata_url: resource_metadata,
            authorization_servers,
            scopes_supported,
            required_scopes,
        },
    })
}

/// The most rules `[[auth.rules]]` takes.
const MAX_RULES: usize = 1024;

/// `[[auth.rules]]`: each names an upstream served (or `*`); names and patterns are
/// checked for what cannot match anything.
fn policy(
    p: &mut Problems,
    raw: &[super::raw::RawRule],
    upstreams: &[&str],
) -> crate::auth::Policy {
    if raw.len() > MAX_RULES {
        p.add("auth.rules", format!("at most {MAX_RULES} rules"));
        return crate::auth::Policy::default();
    }
    let rules = raw
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = format!("auth.rules[{i}]");
            let upstream = r.upstream.trim();
            if upstream != "*" && !upstreams.contains(&upstream) {
                p.add(
                    &format!("{at}.upstream"),
                    format!(
                        "{upstream:?} is no upstream served here (they are {}; or \"*\")",
                        upstreams.join(", ")
                    ),
                );
            }
            let names = |p: &mut Problems, key: &str, names: &[String]| -> Vec<String> {
                let names: Vec<String> = names.iter().map(|n| n.trim().to_owned()).collect();
                if names
                    .iter()
                    .any(|n| n.is_empty() || n.strip_suffix('*').unwrap_or(n).contains('*'))
                {
                    p.add(
                        &format!("{at}.{key}"),
                        "names, or a prefix ending in *, e.g. \"get_*\"",
                    );
                }
                names
            };
            crate::auth::policy::Rule {
                upstream: upstream.to_owned(),
                tools: names(p, "tools", &r.tools),
                prompts: names(p, "prompts", &r.prompts),
                resources: names(p, "resources", &r.resources),
                scopes: listed(p, &format!("{at}.scopes"), &r.scopes),
                claims: r
                    .claims
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect(),
            }
        })
        .collect();
    crate::auth::Policy::new(rules)
}

/// `[[auth.limits]]`: each names an upstream served (or `*`), the tools it covers, and
/// a rate of at least one call per interval of at least a second, a timeout of at
/// least 10 ms, or both.
fn tool_limits(
    p: &mut Problems,
    raw: &[super::raw::RawToolLimit],
    upstreams: &[&str],
) -> Vec<crate::auth::rates::Limit> {
    if raw.len() > MAX_RULES {
        p.add("auth.limits", format!("at most {MAX_RULES} limits"));
        return Vec::new();
    }
    raw.iter()
        .enumerate()
        .map(|(i, l)| {
            let at = format!("auth.limits[{i}]");
            let upstream = l.upstream.trim();
            if upstream != "*" && !upstreams.contains(&upstream) {
                p.add(
                    &format!("{at}.upstream"),
                    format!("{upstream:?} is no upstream served here (they are {}; or \"*\")", upstreams.join(", ")),
                );
            }
            let tools: Vec<String> = l.tools.iter().map(|t| t.trim().to_owned()).collect();
            if tools.is_empty()
                || tools
                    .iter()
                    .any(|n| n.is_empty() || n.strip_suffix('*').unwrap_or(n).contains('*'))
            {
                p.add(&format!("{at}.tools"), "the tools it counts: names, or a prefix ending in *, e.g. [\"search\", \"get_*\"]");
            }
            let timeout = match l.timeout.trim() {
                "" => None,
                t => Some(p.duration(&format!("{at}.timeout"), t, MIN_TOOL_TIMEOUT)),
            };
            let rate = match u32::try_from(l.rate) {
                Ok(0) if timeout.is_some() => 0,
                Ok(rate) if rate > 0 => rate,
                _ => {
                    p.add(&format!("{at}.rate"), "calls allowed per interval: a whole number of 1 or more (or set a timeout)");
                    1
                }
            };
            let per = p.duration(&format!("{at}.per"), &l.per, Duration::from_secs(1));
            crate::auth::rates::Limit {
                upstream: upstream.to_owned(),
                tools,
                rate,
                per,
                timeout,
            }
        })
        .collect()
}

/// The shortest `timeout` of `[[auth.limits]]`: a call needs some time to reach its
/// upstream at all.
const MIN_TOOL_TIMEOUT: Duration = Duration::from_millis(10);

/// `values` trimmed; each must be a name without spaces or quotes (a scope, a URL).
fn listed(p: &mut Problems, key: &str, values: &[String]) -> Vec<String> {
    let values: Vec<String> = values.iter().map(|v| v.trim().to_owned()).collect();
    if values
        .iter()
        .any(|v| v.is_empty() || v.contains(['"', '\\', ' ']))
    {
        p.add(key, "must be a list of names without spaces or quotes");
    }
    values
}

/// Whether `url` is an `http(s)://` URL that fits in a challenge's quoted string.
fn web_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && url.parse::<Uri>().is_ok()
        && !url.contains(['"', '\\', ' '])
}

/// Why a stdio child may not inherit the proxy's variable `name`, if it may not.
fn not_inheritable(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Some(format!(
            "{name:?} is not the name of an environment variable"
        ));
    }
    // The proxy's own settings (its keys, tokens, secrets) never reach a child.
    crate::upstream::is_proxy_setting(name).then(|| {
        format!(
            "{name} is one of the proxy's own settings, which a child never inherits; give \
             the child a value of its own in env instead"
        )
    })
}

/// The keys that say where an upstream is.
struct TargetKeys<'a> {
    url: Option<&'a str>,
    urls: &'a [String],
    command: Option<&'a str>,
    args: &'a [String],
    env: &'a std::collections::BTreeMap<String, String>,
    inherit_env: &'a [String],
    cwd: Option<&'a str>,
}

impl Problems {
    /// Where an upstream is: `url` or `urls` (replicas), or `command`; neither is
    /// `Target::Embedded`. `table` is the key path of the table (`upstream`,
    /// `upstreams.NAME`).
    fn target(&mut self, table: &str, k: TargetKeys<'_>) -> Target {
        let mut urls = Vec::new();
        let single = k.url.map(str::trim).filter(|url| !url.is_empty());
        if single.is_some() && !k.urls.is_empty() {
            self.add(
                table,
                "set url (one server) or urls (its replicas), not both",
            );
        }
        for (key, url) in single
            .map(|url| (format!("{table}.url"), url))
            .into_iter()
            .chain(
                k.urls
                    .iter()
                    .enumerate()
                    .map(|(i, url)| (format!("{table}.urls[{i}]"), url.trim())),
            )
        {
            match parse_upstream_url(url) {
                Ok(uri) if urls.contains(&uri) => {
                    self.add(&key, format!("{url:?} is listed twice"))
                }
                Ok(uri) => urls.push(uri),
                Err(why) => self.add(&key, why),
            }
        }
        let command = k
            .command
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|program| CommandSpec {
                program: program.to_owned(),
                args: k.args.to_vec(),
                env: k.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                inherit_env: k.inherit_env.to_vec(),
                cwd: k.cwd.filter(|c| !c.is_empty()).map(Into::into),
            });
        let target = match (urls.is_empty(), command) {
            (false, Some(_)) => {
                self.add(
                    table,
                    "set either url (a Streamable HTTP server) or command (a stdio server), not both",
                );
                Target::Embedded
            }
            (false, None) => Target::Http(urls),
            (true, Some(command)) => Target::Stdio(command),
            (true, None) => Target::Embedded,
        };
        if !matches!(target, Target::Stdio(_)) && !k.args.is_empty() {
            self.add(
                &format!("{table}.args"),
                format!("arguments without {table}.command"),
            );
        }
        if !matches!(target, Target::Stdio(_)) && !k.inherit_env.is_empty() {
            self.add(
                &format!("{table}.inherit_env"),
                format!("variables for a child without {table}.command"),
            );
        }
        for (i, name) in k.inherit_env.iter().enumerate() {
            if let Some(why) = not_inheritable(name) {
                self.add(&format!("{table}.inherit_env[{i}]"), why);
            }
        }
        if let Target::Stdio(CommandSpec { cwd: Some(cwd), .. }) = &target
            && !cwd.is_dir()
        {
            self.add(
                &format!("{table}.cwd"),
                format!("{} is not a directory", cwd.display()),
            );
        }
        target
    }

    fn era(&mut self, key: &str, value: &str) -> Option<Era> {
        match value.trim() {
            "auto" => None,
            other => Era::parse(other).or_else(|| {
                self.add(
                    key,
                    format!("{other:?} must be \"auto\" (found by probing), \"legacy\", \"modern\" or \"sse\""),
                );
                None
            }),
        }
    }

    fn old_clients(&mut self, key: &str, value: &str) -> OldClients {
        match value.trim() {
            "bridge" => OldClients::Bridge,
            "pass_through" => OldClients::PassThrough,
            other => {
                self.add(
                    key,
                    format!("{other:?} must be \"bridge\" or \"pass_through\""),
                );
                OldClients::Bridge
            }
        }
    }

    fn on_session_lost(&mut self, key: &str, value: &str) -> OnSessionLost {
        match value.trim() {
            "fail" => OnSessionLost::Fail,
            "reinitialize" => OnSessionLost::Reinitialize,
            other => {
                self.add(
                    key,
                    format!("{other:?} must be \"fail\" or \"reinitialize\""),
                );
                OnSessionLost::Fail
            }
        }
    }

    fn optional_duration(
        &mut self,
        key: &str,
        value: Option<&str>,
        min: Duration,
    ) -> Option<Duration> {
        value.map(|v| self.duration(key, v, min))
    }
}

/// The `[upstreams.NAME]` tables, checked; `own` is what `[upstream]` itself names.
fn named_upstreams(p: &mut Problems, raw: &RawConfig, own: &Target) -> Vec<UpstreamDef> {
    let mut defs = Vec::new();
    for (name, def) in &raw.upstreams {
        let table = format!("upstreams.{name}");
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            p.add(
                &table,
                "an upstream's name is its URL path segment: 1 to 64 letters, digits, '-' or '_'",
            );
        }
        if name == DEFAULT_UPSTREAM && !matches!(own, Target::Embedded) {
            p.add(&table, format!("the name {DEFAULT_UPSTREAM:?} is taken by the upstream [upstream] url / command (or --upstream) defines"));
        }
        let target = p.target(
            &table,
            TargetKeys {
                url: def.url.as_deref(),
                urls: &def.urls,
                command: def.command.as_deref(),
                args: &def.args,
                env: &def.env,
                inherit_env: &def.inherit_env,
                cwd: def.cwd.as_deref(),
            },
        );
        if matches!(target, Target::Embedded) {
            p.add(&table, "needs url, urls or command");
        }
        let credentials = credentials(p, &table, &def.credentials, &target);
        let token_exchange =
            token_exchange(p, &table, def.token_exchange.as_ref(), &target, &raw.auth);
        one_authorization(p, &table, &credentials, token_exchange.as_ref());
        let overrides = overrides(p, &table, def);
        let stateless = (!def.stateless.is_empty()).then(|| {
            let (merged, set) = def.stateless.over(&raw.stateless);
            let key = |name: &str| match set.contains(&name) {
                true => format!("{table}.stateless.{name}"),
                false => format!("stateless.{name}"),
            };
            stateless(p, &key, &merged)
        });
        defs.push(UpstreamDef {
            name: name.clone(),
            default: def.default,
            target,
            credentials,
            token_exchange,
            overrides,
            stateless,
        });
    }
    let defaults: Vec<&str> = defs
        .iter()
        .filter(|d| d.default)
        .map(|d| d.name.as_str())
        .collect();
    let own = !matches!(own, Target::Embedded);
    match (own, defaults.as_slice(), defs.len()) {
        (true, [], _) | (false, [_], _) | (false, [], 0 | 1) => {}
        (true, named, _) => p.add(
            &format!("upstreams.{}.default", named.join(", upstreams.")),
            "[upstream] url / command (or --upstream) already defines the default upstream",
        ),
        (false, [], _) => p.add(
            "upstreams",
            "with several upstreams, mark the one served at the bare endpoint path with default = true",
        ),
        (false, named, _) => p.add(
            "upstreams",
            format!("only one upstream can be the default; {} all say default = true", named.join(", ")),
        ),
    }
    defs
}

/// The most credential headers one upstream takes.
const MAX_CREDENTIALS: usize = 16;

/// Headers the proxy itself sets on every upstream request: never a credential's.
const PROXY_HEADERS: [&str; 9] = [
    "host",
    "content-type",
    "content-length",
    "accept",
    "connection",
    "transfer-encoding",
    "mcp-session-id",
    "mcp-protocol-version",
    "traceparent",
];

/// `{table}.credentials`: headers the proxy adds to every request to an HTTP upstream,
/// each read from a file or a variable (checked now, so `check` reports what is wrong).
fn credentials(
    p: &mut Problems,
    table: &str,
    raw: &[super::raw::RawCredential],
    target: &Target,
) -> Vec<super::Credential> {
    let key = format!("{table}.credentials");
    if raw.is_empty() {
        return Vec::new();
    }
    if !matches!(target, Target::Http(_)) {
        p.add(&key, "credentials are headers of requests to an HTTP upstream; give a stdio child its secrets in env");
        return Vec::new();
    }
    if raw.len() > MAX_CREDENTIALS {
        p.add(&key, format!("at most {MAX_CREDENTIALS} headers"));
        return Vec::new();
    }
    let mut credentials: Vec<super::Credential> = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        let at = format!("{key}[{i}]");
        let Ok(header) = http::HeaderName::from_bytes(c.header.trim().as_bytes()) else {
            p.add(
                &format!("{at}.header"),
                format!("{:?} is not a header name", c.header),
            );
            continue;
        };
        if PROXY_HEADERS.contains(&header.as_str()) {
            p.add(
                &format!("{at}.header"),
                format!("{header} is set by the proxy itself"),
            );
            continue;
        }
        if credentials.iter().any(|c| c.header == header) {
            p.add(&format!("{at}.header"), format!("{header} is named twice"));
            continue;
        }
        if http::HeaderValue::from_str(&c.prefix).is_err() {
            p.add(&format!("{at}.prefix"), "must be visible ASCII");
            continue;
        }
        let file = (format!("{at}.file"), c.file.as_deref());
        let env = (format!("{at}.env"), c.env.as_deref());
        let Some(source) = secret_source(p, file, env) else {
            p.add(
                &at,
                "set file (read again when it changes) or env, one of them",
            );
            continue;
        };
        credentials.push(super::Credential {
            header,
            prefix: c.prefix.clone(),
            source,
        });
    }
    credentials
}

/// `{table}.token_exchange`: for an HTTP upstream, behind an `[auth]` that verifies
/// tokens from an issuer (or names the token endpoint itself); a resource or an
/// audience to ask for, and the proxy's own client (its secret checked now).
fn token_exchange(
    p: &mut Problems,
    table: &str,
    raw: Option<&super::raw::RawTokenExchange>,
    target: &Target,
    auth: &super::RawAuth,
) -> Option<super::TokenExchangeConfig> {
    let raw = raw?;
    let key = format!("{table}.token_exchange");
    if !matches!(target, Target::Http(_)) {
        p.add(
            &key,
            "a token is exchanged for an HTTP upstream; a stdio child gets no client tokens",
        );
        return None;
    }
    let issuer = auth.issuer.trim();
    let token_endpoint = match raw.token_endpoint.trim() {
        "" => None,
        url if web_url(url) => Some(url.to_owned()),
        url => {
            p.add(
                &format!("{key}.token_endpoint"),
                format!("{url:?} is not an http(s) URL"),
            );
            None
        }
    };
    if issuer.is_empty() {
        p.add(
            &key,
            "exchanges the tokens [auth] verified: set auth.issuer",
        );
    }
    if issuer.starts_with("https://")
        && token_endpoint
            .as_deref()
            .is_some_and(|url| !url.starts_with("https://"))
    {
        p.add(
            &format!("{key}.token_endpoint"),
            "must be https:// like auth.issuer: it is sent the proxy's secret and callers' tokens",
        );
    }
    let given = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
    let (resource, audience, scope) = (
        given(&raw.resource),
        given(&raw.audience),
        given(&raw.scope),
    );
    if resource.is_none() && audience.is_none() {
        p.add(&key, "name the upstream to the authorization server: resource (its URL, the token's aud) or audience");
    }
    if resource
        .as_deref()
        .is_some_and(|r| url::Url::parse(r).is_err())
    {
        p.add(
            &format!("{key}.resource"),
            "must be an absolute URI (RFC 8707), e.g. \"https://mcp.example.com/mcp\"",
        );
    }
    let client_id = raw.client_id.trim().to_owned();
    if client_id.is_empty() || client_id.contains(':') {
        p.add(
            &format!("{key}.client_id"),
            "the proxy's client at the authorization server (without ':')",
        );
    }
    let file = (
        format!("{key}.client_secret_file"),
        raw.client_secret_file.as_deref(),
    );
    let env = (
        format!("{key}.client_secret_env"),
        raw.client_secret_env.as_deref(),
    );
    let Some(client_secret) = secret_source(p, file, env) else {
        p.add(
            &key,
            "set client_secret_file or client_secret_env, one of them",
        );
        return None;
    };
    Some(super::TokenExchangeConfig {
        issuer: issuer.to_owned(),
        token_endpoint,
        resource,
        audience,
        scope,
        client_id,
        client_secret,
    })
}

/// A secret's source: a file or an environment variable (each under its key), checked
/// now; `None` unless exactly one is set.
fn secret_source(
    p: &mut Problems,
    (file_key, file): (String, Option<&str>),
    (env_key, env): (String, Option<&str>),
) -> Option<super::CredentialSource> {
    let file = file.map(str::trim).filter(|f| !f.is_empty());
    let env = env.map(str::trim).filter(|e| !e.is_empty());
    match (file, env) {
        (Some(file), None) => {
            if let Err(e) = std::fs::metadata(file) {
                p.add(&file_key, format!("{file:?} cannot be read: {e}"));
            }
            Some(super::CredentialSource::File(file.into()))
        }
        (None, Some(env)) => {
            if std::env::var_os(env).is_none() {
                p.add(&env_key, format!("the variable {env} is not set"));
            }
            Some(super::CredentialSource::Env(env.to_owned()))
        }
        _ => None,
    }
}

/// An upstream's `Authorization` comes from its credentials or its token exchange, not
/// both.
fn one_authorization(
    p: &mut Problems,
    table: &str,
    credentials: &[super::Credential],
    exchange: Option<&super::TokenExchangeConfig>,
) {
    if exchange.is_some()
        && credentials
            .iter()
            .any(|c| c.header == http::header::AUTHORIZATION)
    {
        p.add(
            &format!("{table}.token_exchange"),
            "the upstream's Authorization would be both a credential and the exchanged token; keep one",
        );
    }
}

fn overrides(p: &mut Problems, table: &str, def: &RawNamedUpstream) -> UpstreamOverrides {
    let key = |name: &str| format!("{table}.{name}");
    let ms = Duration::from_millis;
    UpstreamOverrides {
        pool_size: def.pool_size.map(|v| p.size(&key("pool_size"), v, 0)),
        max_children: def.max_children.map(|v| p.size(&key("max_children"), v, 1)),
        stop_grace: p.optional_duration(&key("stop_grace"), def.stop_grace.as_deref(), ms(10)),
        require_session: def.require_session,
        connect_timeout: p.optional_duration(
            &key("connect_timeout"),
            def.connect_timeout.as_deref(),
            ms(1),
        ),
        timeout: p.optional_duration(&key("timeout"), def.timeout.as_deref(), ms(1)),
        sse_idle_timeout: p.optional_duration(
            &key("sse_idle_timeout"),
            def.sse_idle_timeout.as_deref(),
            ms(1),
        ),
        max_message_bytes: def
            .max_message_bytes
            .map(|v| p.size(&key("max_message_bytes"), v, 1024)),
        on_session_lost: def
            .on_session_lost
            .as_deref()
            .map(|v| p.on_session_lost(&key("on_session_lost"), v)),
        health_interval: p.optional_duration(
            &key("health_interval"),
            def.health_interval.as_deref(),
            ms(100),
        ),
        era: def.era.as_deref().map(|v| p.era(&key("era"), v)),
        old_clients: def
            .old_clients
            .as_deref()
            .map(|v| p.old_clients(&key("old_clients"), v)),
    }
}

/// `session.max_sessions_per_caller` when it is not written: a tenth of the cap on every
/// session (at least one), so that one caller never holds more than a tenth of them and
/// it takes ten to fill the proxy.
/// `[cluster]`: where other replicas reach this one, its peers, and the bound on one
/// caller's forwarded requests.
fn cluster(
    p: &mut Problems,
    raw: &RawConfig,
    listen: SocketAddr,
    store: &StoreConfig,
) -> ClusterConfig {
    let c = &raw.cluster;
    let base_url = |p: &mut Problems, key: &str, url: &str| match url.parse::<Uri>() {
        Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => {
            Some(url.trim_end_matches('/').to_owned())
        }
        _ => {
            p.add(key, format!("{url:?} must be the http:// base URL other proxy replicas reach this one at, e.g. \"http://10.0.0.5:8080\""));
            None
        }
    };
    let advertise = match c.advertise.trim() {
        "" => None,
        url => base_url(p, "cluster.advertise", url),
    };
    // With a wildcard listen address, the advertised default would be loopback: replicas
    // on other hosts would take this one's sessions for gone (its stdio children, its
    // waiting calls). Only a shared store makes other replicas look here at all.
    let shared = matches!(
        store,
        StoreConfig::Redis { .. } | StoreConfig::Sealed { .. }
    );
    if advertise.is_none() && shared && listen.ip().is_unspecified() {
        p.add(
            "cluster.advertise",
            format!(
                "must be set when listen is a wildcard address ({listen}) and sessions are shared (session.store = {:?}): other proxy replicas cannot reach this one at {}; write the URL they reach it at, e.g. \"http://10.0.0.5:{}\"",
                match store {
                    StoreConfig::Redis { .. } => "redis",
                    _ => "sealed",
                },
                if listen.is_ipv4() { "127.0.0.1" } else { "[::1]" },
                listen.port()
            ),
        );
    }
    let peers = c
        .peers
        .iter()
        .enumerate()
        .filter_map(|(i, url)| base_url(p, &format!("cluster.peers[{i}]"), url.trim()))
        .collect();
    let max_forwarded_per_caller = p.size(
        "cluster.max_forwarded_per_caller",
        c.max_forwarded_per_caller,
        1,
    );
    ClusterConfig {
        advertise,
        peers,
        max_forwarded_per_caller,
    }
}

fn default_per_caller(max_sessions: usize) -> usize {
    (max_sessions / 10).max(1)
}

/// The `[stateless]` settings, each problem named by `key` (an upstream's own
/// `[upstreams.NAME.stateless]` values are named there, the ones it inherits in
/// `[stateless]`).
fn stateless(p: &mut Problems, key: &dyn Fn(&str) -> String, st: &RawStateless) -> StatelessConfig {
    StatelessConfig {
        affinity: affinity(p, key, st),
        max_pooled: p.size(&key("max_pooled"), st.max_pooled, 1),
        max_listens: p.size(&key("max_listens"), st.max_listens, 1),
        pool_idle_ttl: p.duration(
            &key("pool_idle_ttl"),
            &st.pool_idle_ttl,
            Duration::from_secs(1),
        ),
        request_state_ttl: p.duration(
            &key("request_state_ttl"),
            &st.request_state_ttl,
            Duration::from_secs(1),
        ),
        max_waiting_per_caller: p.size(
            &key("max_waiting_per_caller"),
            st.max_waiting_per_caller,
            0,
        ),
        tasks: st.tasks,
        task_tools: st
            .task_tools
            .iter()
            .map(|tool| tool.trim().to_owned())
            .filter(|tool| !tool.is_empty())
            .collect(),
        task_after: (!st.task_after.trim().is_empty()).then(|| {
            p.duration(
                &key("task_after"),
                &st.task_after,
                Duration::from_millis(100),
            )
        }),
        task_ttl: p.duration(&key("task_ttl"), &st.task_ttl, Duration::from_secs(1)),
    }
}

/// `stateless.affinity` and the keys of its mode.
fn affinity(p: &mut Problems, key: &dyn Fn(&str) -> String, st: &RawStateless) -> Affinity {
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
    // Its authority is the upstream's `Host`, and the URL names the upstream in logs and
    // errors: credentials in it would go out in both (so they are not repeated here).
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "the URL carries credentials (user:password@host); give the upstream its \
             credentials with upstream.credentials (a header), not in the URL"
                .into(),
        );
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
