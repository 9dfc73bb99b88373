//! `mcp-session-proxy`: command line → configuration → run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use mcp_session_proxy::config::{self, Config, LogFormat, Overrides};

/// mimalloc: the request path allocates many small short-lived buffers across two
/// threads; the benchmark's profile showed glibc malloc/free at ~10% of the proxy's CPU.
/// It takes the C library's place (`libmimalloc-sys`'s `override`: its `malloc`, `free`,
/// `posix_memalign`… are the process's), and the standard library's own allocator calls
/// it — through the plain entry points for every alignment up to 16, its fast path,
/// rather than the aligned ones a `#[global_allocator]` of the `mimalloc` crate calls
/// for every allocation (benches/README.md, "The allocator's entry point"). mimalloc 3
/// gives freed memory back as `overload` needs.
use libmimalloc_sys as _;

/// A reverse proxy in front of MCP servers of every era (2025-11-25, 2026-07-28, HTTP+SSE,
/// stdio): every client reaches every server — data-layer sessions, 2026-07-28 stateless
/// clients and old clients alike.
///
/// With no upstream configured, an embedded demo server is started and proxied to.
#[derive(Debug, Parser)]
#[command(
    name = "mcp-session-proxy",
    version,
    after_help = "Options go before or after a subcommand: `mcp-session-proxy --listen 0.0.0.0:8080 check` \
                  is `mcp-session-proxy check --listen 0.0.0.0:8080`. A stdio server's command comes \
                  last, after `--`."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Layers,
}

/// The command-line layer of the configuration.
#[derive(Debug, Args)]
struct Layers {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The legacy MCP server's endpoint, e.g. http://127.0.0.1:3001/mcp.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Configuration file (default: ./proxy.toml when it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format: text (default) or json.
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// A stdio MCP server to run instead of an HTTP upstream, one process per session:
    /// `mcp-session-proxy -- npx -y some-mcp-server --flag`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// What `healthcheck` reads of the configuration: where the proxy listens.
#[derive(Debug, Args)]
struct ProbeLayers {
    /// The proxy's listen address (default: from the configuration, 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Configuration file (default: ./proxy.toml when it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the configuration (every layer: file, MCP_PROXY_* variables, flags) and
    /// exit: 0 when it is good, 2 with the problems when not.
    Check {
        #[command(flatten)]
        layers: Layers,
    },
    /// Probe a running proxy's /healthz (for container health checks): exit 0 when it
    /// answers 200 within 3 s, 1 otherwise.
    ///
    /// The address is the configured listen address (admin.listen when set), read like the
    /// proxy reads it: --listen, MCP_PROXY_LISTEN, proxy.toml or --config; or --url.
    Healthcheck {
        /// URL to probe instead, e.g. http://127.0.0.1:8080/healthz.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        #[command(flatten)]
        layers: ProbeLayers,
    },
}

/// A flag given on both sides of a subcommand, or one that does not apply to it.
fn misplaced(flag: &str, why: &str) -> ExitCode {
    eprintln!("mcp-session-proxy: {flag} {why}");
    ExitCode::from(2)
}

/// Flags given before the subcommand joined with those given after it; the same flag on
/// both sides is refused rather than one silently winning.
fn merge<T>(flag: &str, before: Option<T>, after: Option<T>) -> Result<Option<T>, ExitCode> {
    match (before, after) {
        (Some(_), Some(_)) => Err(misplaced(
            flag,
            "is given both before and after the subcommand; give it once",
        )),
        (before, after) => Ok(before.or(after)),
    }
}

impl Layers {
    /// These flags (given before `check`) joined with `check`'s own.
    fn merged(self, after: Layers) -> Result<Layers, ExitCode> {
        let command = match (self.command.is_empty(), after.command.is_empty()) {
            (false, false) => {
                return Err(misplaced(
                    "the stdio command after `--`",
                    "is given twice; give it once, last",
                ));
            }
            (true, _) => after.command,
            (false, true) => self.command,
        };
        Ok(Layers {
            listen: merge("--listen", self.listen, after.listen)?,
            upstream: merge("--upstream", self.upstream, after.upstream)?,
            config: merge("--config", self.config, after.config)?,
            log_format: merge("--log-format", self.log_format, after.log_format)?,
            command,
        })
    }

    /// These flags (given before `healthcheck`) as what `healthcheck` reads; the ones that
    /// do not apply to it are refused.
    fn probe(self, after: ProbeLayers) -> Result<ProbeLayers, ExitCode> {
        let unused = [
            ("--upstream", self.upstream.is_some()),
            ("--log-format", self.log_format.is_some()),
            ("a stdio command after `--`", !self.command.is_empty()),
        ];
        if let Some((flag, _)) = unused.iter().find(|(_, given)| *given) {
            return Err(misplaced(
                flag,
                "does not apply to healthcheck, which only probes a running proxy's /healthz \
                 (its options: --url, --listen, --config)",
            ));
        }
        Ok(ProbeLayers {
            listen: merge("--listen", self.listen, after.listen)?,
            config: merge("--config", self.config, after.config)?,
        })
    }

    fn overrides(self) -> Overrides {
        Overrides {
            config_file: self.config,
            listen: self.listen,
            upstream: self.upstream,
            log_format: self.log_format,
            command: self.command,
        }
    }
}

fn load(overrides: &Overrides) -> Result<Config, ExitCode> {
    config::load(overrides).map_err(|e| {
        eprintln!("mcp-session-proxy: {e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Command::Check { layers }) => cli.run.merged(layers).and_then(check),
        Some(Command::Healthcheck { url, layers }) => cli.run.probe(layers).and_then(|layers| {
            let probe = match url {
                Some(url) => Probe::Given(url),
                None => {
                    let config = load(&Overrides {
                        config_file: layers.config,
                        listen: layers.listen,
                        ..Overrides::default()
                    })?;
                    Probe::Configured(health_url(&config))
                }
            };
            Ok(healthcheck(&probe))
        }),
        None => {
            let overrides = cli.run.overrides();
            load(&overrides).map(|config| serve(config, overrides))
        }
    };
    outcome.unwrap_or_else(|code| code)
}

fn check(layers: Layers) -> Result<ExitCode, ExitCode> {
    let config = load(&layers.overrides())?;
    println!(
        "configuration OK: listen {}{}, upstream {}",
        config.listen,
        config.path,
        config.upstreams_summary(),
    );
    Ok(ExitCode::SUCCESS)
}

fn serve(mut config: Config, overrides: Overrides) -> ExitCode {
    init_logging(&config);
    // Traces are set up once: a reload (SIGHUP) does not change where they go.
    let telemetry = match mcp_session_proxy::telemetry::Telemetry::start(&config.telemetry) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("mcp-session-proxy: traces: {e}");
            return ExitCode::FAILURE;
        }
    };
    config.workers = Some(mcp_session_proxy::workers::count(config.workers));
    // Thread per core: `start` runs each of the `workers` on a thread with its own runtime
    // and listener (src/workers.rs); this thread's runtime keeps the background work.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-session-proxy: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        let signal = match shutdown_signal() {
            Ok(signal) => signal,
            Err(e) => {
                eprintln!("mcp-session-proxy: cannot install signal handlers: {e}");
                return Ok(false);
            }
        };
        // SIGHUP reads every layer again, as at start-up.
        let reload = move || config::load(&overrides);
        mcp_session_proxy::run(config, signal, reload)
            .await
            .map(|()| true)
    });
    telemetry.shutdown();
    match served {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            tracing::error!(error = %e, "mcp-session-proxy could not start");
            eprintln!("mcp-session-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `/healthz` on the listen address, with an unspecified address probed on loopback.
fn health_url(config: &Config) -> String {
    let mut addr = config.admin.listen.unwrap_or(config.listen);
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    format!("http://{addr}{}", config::HEALTH_PATH)
}

/// What `healthcheck` probes, and where that came from (for the hint when it fails).
enum Probe {
    /// `--url`.
    Given(String),
    /// The configured listen address.
    Configured(String),
}

impl Probe {
    fn url(&self) -> &str {
        match self {
            Probe::Given(url) | Probe::Configured(url) => url,
        }
    }

    /// What to check when the probe failed.
    fn hint(&self) -> &'static str {
        match self {
            Probe::Given(_) => "Check the URL given with --url.",
            Probe::Configured(_) => {
                "Is the proxy running, and listening there? healthcheck probes the configured \
                 listen address (--listen, MCP_PROXY_LISTEN or listen in proxy.toml; \
                 admin.listen when set); --url probes another."
            }
        }
    }
}

fn healthcheck(probe: &Probe) -> ExitCode {
    let url = probe.url();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-session-proxy healthcheck: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let uri = url
            .parse::<http::Uri>()
            .ok()
            .filter(|uri| uri.scheme_str() == Some("http") && uri.host().is_some())
            .ok_or_else(|| {
                format!("{url:?} is not an http:// URL; write e.g. http://127.0.0.1:8080/healthz")
            })?;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
        match tokio::time::timeout(PROBE_TIMEOUT, client.get(uri)).await {
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => Err(format!(
                "{url} answered {}\n  {}",
                response.status(),
                probe.hint()
            )),
            Ok(Err(e)) => Err(format!(
                "cannot reach {url}: {}\n  {}",
                why_unreachable(&e),
                probe.hint()
            )),
            Err(_) => Err(format!(
                "{url} did not answer within {} s\n  {}",
                PROBE_TIMEOUT.as_secs(),
                probe.hint()
            )),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("mcp-session-proxy healthcheck: {why}");
            ExitCode::FAILURE
        }
    }
}

/// How long `healthcheck` waits for `/healthz`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a request could not be sent, in the words of the innermost cause (the client's own
/// "client error (Connect)" says nothing).
fn why_unreachable(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut innermost = error;
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "connection refused (nothing listens there)".to_owned()
                }
                std::io::ErrorKind::TimedOut => "the connection timed out".to_owned(),
                _ => io.to_string(),
            };
        }
        innermost = e;
        cause = e.source();
    }
    innermost.to_string()
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal (and not when NO_COLOR asks for none): a
    // file, a pipe or a container log gets plain text.
    let colours = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    match config.log.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        LogFormat::Text => builder.init(),
    }
}

/// Ctrl-C or SIGTERM. The handlers are installed here, before the proxy starts serving,
/// so that a signal that arrives during start-up already means "shut down gracefully".
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
