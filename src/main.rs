//! `mcp-session-proxy`: command line → configuration → run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use mcp_session_proxy::config::{self, Config, LogFormat, Overrides};

/// mimalloc: the request path allocates many small short-lived buffers across two
/// threads; the benchmark's profile showed glibc malloc/free at ~10% of the proxy's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Data-layer sessions for MCP servers that only speak the 2025-11-25 protocol.
///
/// With no upstream configured, an embedded demo server is started and proxied to.
#[derive(Debug, Parser)]
#[command(
    name = "mcp-session-proxy",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Layers,
}

/// The command-line layer of the configuration.
#[derive(Debug, Clone, Args)]
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
    Healthcheck {
        /// URL to probe; default: /healthz on the configured listen address.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        #[command(flatten)]
        layers: Layers,
    },
}

impl Layers {
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

fn load(layers: Layers) -> Result<Config, ExitCode> {
    config::load(&layers.overrides()).map_err(|e| {
        eprintln!("mcp-session-proxy: {e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check { layers }) => match load(layers) {
            Ok(config) => {
                println!(
                    "configuration OK: listen {}{}, upstream {}",
                    config.listen,
                    config.path,
                    config.upstreams_summary(),
                );
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Some(Command::Healthcheck { url, layers }) => {
            let url = match url {
                Some(url) => url,
                None => match load(layers) {
                    Ok(config) => health_url(&config),
                    Err(code) => return code,
                },
            };
            healthcheck(&url)
        }
        None => match load(cli.run.clone()) {
            Ok(config) => serve(config, cli.run.overrides()),
            Err(code) => code,
        },
    }
}

fn serve(config: Config, overrides: Overrides) -> ExitCode {
    init_logging(&config);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = config.workers {
        builder.worker_threads(workers);
    }
    let runtime = match builder.enable_all().build() {
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

fn healthcheck(url: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(_) => return ExitCode::FAILURE,
    };
    let outcome = runtime.block_on(async {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
        match tokio::time::timeout(Duration::from_secs(3), client.get(uri)).await {
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => Err(format!("{url} answered {}", response.status())),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => Err(format!("{url}: no answer within 3 s")),
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

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
