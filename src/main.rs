//! `mcp-session-proxy`: command line → configuration → run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use mcp_session_proxy::config::{self, Config, LogFormat, Overrides};

/// Data-layer sessions for MCP servers that only speak the 2025-11-25 protocol.
///
/// With no upstream configured, an embedded demo server is started and proxied to.
#[derive(Debug, Parser)]
#[command(name = "mcp-session-proxy", version)]
struct Cli {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The legacy MCP server's endpoint, e.g. http://127.0.0.1:3001/mcp.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Configuration file (default: ./proxy.toml when it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = Overrides {
        config_file: cli.config,
        listen: cli.listen,
        upstream: cli.upstream,
    };
    let config = match config::load(&overrides) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("mcp-session-proxy: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-session-proxy: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(mcp_session_proxy::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "mcp-session-proxy could not start");
            eprintln!("mcp-session-proxy: {e}");
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
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
