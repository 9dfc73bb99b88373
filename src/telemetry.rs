//! Traces (OpenTelemetry): a SERVER span for each MCP request the proxy serves, a CLIENT
//! span for each HTTP request it sends upstream on the request's behalf, exported over
//! OTLP/HTTP (protobuf) when an endpoint is configured, and the W3C trace context carried
//! from the client (its `traceparent`, `tracestate` and `baggage`, in HTTP headers or in
//! `_meta` as SEP-414 has them) to the upstream.
//!
//! Off by default: with no endpoint nothing is started, no span is made and nothing
//! changes on the request path but one atomic read (a client's own `traceparent` header
//! still reaches an HTTP upstream as any end-to-end header does).
//!
//! - [`Telemetry::start`]: the exporter and its batching (bounded: spans beyond the queue
//!   are dropped, never waited for), from `[telemetry]` or the OpenTelemetry SDKs'
//!   variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`,
//!   `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
//! - [`server`]: the request's span, its parent the client's context.
//! - [`client`]: the upstream request's span, its context sent in the request's headers.
//! - [`background`]: the context an upstream session's ending runs in.
//!
//! Names and attributes follow the OpenTelemetry semantic conventions for MCP (in the
//! GenAI conventions).

pub mod background;
pub mod client;
mod context;
pub mod counted;
pub mod server;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};

use crate::config::TelemetryConfig;

/// The instrumentation scope every span is made in.
const SCOPE: &str = "mcp-session-proxy";
/// How long an export may take (a collector that does not answer costs no more).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the last spans are given at shutdown.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// The tracer, once traces are exported (set once, by [`Telemetry::start`]).
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer spans are made with, when traces are on.
fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Whether traces are exported (then requests get spans).
pub fn active() -> bool {
    TRACER.get().is_some()
}

/// The longest text a span takes from a client (bytes, cut at a character).
const MAX_TEXT: usize = 256;

/// `text` cut to [`MAX_TEXT`] bytes.
pub(crate) fn bounded(text: &str) -> &str {
    crate::error::head(text, MAX_TEXT)
}

/// Where traces go and which are kept, resolved: `[telemetry]` first, then the
/// OpenTelemetry SDKs' environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`…/v1/traces`).
    pub traces_url: String,
    pub service_name: String,
    pub sampler: SamplerChoice,
    /// Spans waiting to be exported at most (`OTEL_BSP_MAX_QUEUE_SIZE`); beyond it they
    /// are dropped, and counted.
    pub queue: usize,
}

/// The batch queue's size when `OTEL_BSP_MAX_QUEUE_SIZE` does not say (the SDKs' default).
const DEFAULT_QUEUE: usize = 2_048;

/// The sampler, by the names `OTEL_TRACES_SAMPLER` uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerChoice {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedTraceIdRatio(f64),
}

impl SamplerChoice {
    /// `name` (and `arg`, the ratio of the ratio samplers; 1.0 when absent) as
    /// `OTEL_TRACES_SAMPLER` names them.
    pub fn parse(name: &str, arg: Option<f64>) -> Result<SamplerChoice, String> {
        let ratio = arg.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!(
                "the sampler's ratio must be within 0 and 1, not {ratio}"
            ));
        }
        Ok(match name {
            "always_on" => SamplerChoice::AlwaysOn,
            "always_off" => SamplerChoice::AlwaysOff,
            "traceidratio" => SamplerChoice::TraceIdRatio(ratio),
            "" | "parentbased_always_on" => SamplerChoice::ParentBasedAlwaysOn,
            "parentbased_always_off" => SamplerChoice::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => SamplerChoice::ParentBasedTraceIdRatio(ratio),
            other => {
                return Err(format!(
                    "unknown sampler {other:?} (always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
                ));
            }
        })
    }

    fn sampler(self) -> Sampler {
        match self {
            SamplerChoice::AlwaysOn => Sampler::AlwaysOn,
            SamplerChoice::AlwaysOff => Sampler::AlwaysOff,
            SamplerChoice::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
            SamplerChoice::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            SamplerChoice::ParentBasedAlwaysOff => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOff))
            }
            SamplerChoice::ParentBasedTraceIdRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

impl Settings {
    /// What `config` and the environment (`var`) say; `None`: traces are off (no
    /// endpoint anywhere, or `OTEL_SDK_DISABLED=true`).
    pub fn resolve(
        config: &TelemetryConfig,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, String> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let traces_url = match (&config.endpoint, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(base), _) => traces_url(base),
            // The signal's own variable is the whole URL; the general one its base.
            (None, Some(url)) => url,
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => traces_url(&base),
                None => return Ok(None),
            },
        };
        check_endpoint(&traces_url)?;
        let service_name = config
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| SCOPE.to_owned());
        // The file's ratio applies whichever sampler; the variables' sampler, as in every
        // SDK, falls back to the default with a warning when it is not one this knows.
        let arg = match (config.sampler_arg, var("OTEL_TRACES_SAMPLER_ARG")) {
            (Some(arg), _) => Some(arg),
            (None, Some(arg)) => match arg.trim().parse::<f64>() {
                Ok(arg) => Some(arg),
                Err(_) => {
                    tracing::warn!(value = %arg, "OTEL_TRACES_SAMPLER_ARG is not a number; ignored");
                    None
                }
            },
            (None, None) => None,
        };
        let sampler = match &config.sampler {
            Some(name) => SamplerChoice::parse(name, arg)?,
            None => {
                let name = var("OTEL_TRACES_SAMPLER").unwrap_or_default();
                SamplerChoice::parse(name.trim(), arg).unwrap_or_else(|why| {
                    tracing::warn!(%why, "OTEL_TRACES_SAMPLER: using parentbased_always_on");
                    SamplerChoice::ParentBasedAlwaysOn
                })
            }
        };
        let queue = match var("OTEL_BSP_MAX_QUEUE_SIZE").map(|v| v.trim().parse::<usize>()) {
            None => DEFAULT_QUEUE,
            Some(Ok(queue)) if queue > 0 => queue,
            Some(_) => {
                tracing::warn!(
                    "OTEL_BSP_MAX_QUEUE_SIZE is not a positive number; using {DEFAULT_QUEUE}"
                );
                DEFAULT_QUEUE
            }
        };
        Ok(Some(Settings {
            traces_url,
            service_name,
            sampler,
            queue,
        }))
    }
}

/// Whether `url` can take traces: an `http://` URL with a host. The exporter speaks no
/// TLS: traces go to a collector (an agent beside the proxy) over plain HTTP, which
/// sends them on.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let parsed = url
        .parse::<http::Uri>()
        .map_err(|_| format!("{url:?} is not a URL, e.g. \"http://127.0.0.1:4318\""))?;
    match (parsed.scheme_str(), parsed.host()) {
        (Some("http"), Some(host)) if !host.is_empty() => Ok(()),
        (Some("https"), _) => Err(format!(
            "{url:?}: traces are sent over plain HTTP only; point this at a collector \
             beside the proxy (e.g. \"http://127.0.0.1:4318\"), which sends them on over TLS"
        )),
        _ => Err(format!(
            "{url:?} is not an http:// URL with a host, e.g. \"http://127.0.0.1:4318\""
        )),
    }
}

/// `base` (`http://collector:4318`) with the traces path.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The exporter, running (or nothing, when traces are off). Flushes what it holds when
/// shut down.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Starts exporting traces as `config` (and the environment) say. Call once, before
    /// serving.
    pub fn start(config: &TelemetryConfig) -> Result<Telemetry, String> {
        let Some(settings) = Settings::resolve(config, |name| std::env::var(name).ok())? else {
            return Ok(Telemetry::default());
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("the OTLP exporter for {}: {e}", settings.traces_url))?;
        // The queue's size is set here, not left to the SDK, so that the tally that
        // keeps it from overflowing (and counts what it drops) has the same bound.
        let in_flight = counted::InFlight::new(settings.queue);
        let batch = BatchSpanProcessor::builder(counted::CountingExporter::new(
            exporter,
            in_flight.clone(),
        ))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(settings.queue)
                .build(),
        )
        .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(counted::Counting::new(batch, in_flight))
            .with_sampler(settings.sampler.sampler())
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        if TRACER.set(provider.tracer(SCOPE)).is_err() {
            return Err("traces were started twice".into());
        }
        tracing::info!(
            endpoint = %settings.traces_url,
            service = %settings.service_name,
            sampler = ?settings.sampler,
            "exporting traces over OTLP/HTTP"
        );
        Ok(Telemetry {
            provider: Some(provider),
        })
    }

    /// Exports what is left, waiting at most a moment for a collector that does not
    /// answer.
    pub fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = provider.shutdown();
            let _ = done.send(());
        });
        if finished.recv_timeout(FLUSH_AT_EXIT).is_err() {
            tracing::warn!("the last spans were not exported in time at shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(config: &TelemetryConfig, env: &[(&str, &str)]) -> Option<Settings> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::resolve(config, |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    #[test]
    fn off_without_an_endpoint_and_when_the_sdk_is_disabled() {
        assert_eq!(resolve(&TelemetryConfig::default(), &[]), None);
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(resolve(&TelemetryConfig::default(), &env), None);
    }

    #[test]
    fn the_configuration_comes_before_the_environment() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ];
        let from_env = resolve(&TelemetryConfig::default(), &env).unwrap();
        assert_eq!(from_env.traces_url, "http://env:4318/v1/traces");
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(from_env.sampler, SamplerChoice::TraceIdRatio(0.01));
        let config = TelemetryConfig {
            endpoint: Some("http://file:4318".into()),
            service_name: Some("gateway".into()),
            sampler: Some("always_on".into()),
            sampler_arg: None,
        };
        let from_file = resolve(&config, &env).unwrap();
        assert_eq!(from_file.traces_url, "http://file:4318/v1/traces");
        assert_eq!(from_file.service_name, "gateway");
        assert_eq!(from_file.sampler, SamplerChoice::AlwaysOn);
        let signal = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/x")];
        let whole = resolve(&TelemetryConfig::default(), &signal).unwrap();
        assert_eq!(whole.traces_url, "http://t:1/x");
        assert_eq!(whole.sampler, SamplerChoice::ParentBasedAlwaysOn);
    }

    #[test]
    fn endpoints_are_plain_http_with_a_host_and_the_files_ratio_applies_to_any_sampler() {
        assert!(check_endpoint("http://c:4318").is_ok());
        for bad in ["https://c:4318", "http://", "c:4318", "not a url"] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
        let config = TelemetryConfig {
            sampler_arg: Some(0.5),
            ..TelemetryConfig::default()
        };
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ];
        assert_eq!(
            resolve(&config, &env).unwrap().sampler,
            SamplerChoice::TraceIdRatio(0.5)
        );
        // A sampler of the variables this does not know: the default, not a refusal.
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_SAMPLER", "xray"),
        ];
        assert_eq!(
            resolve(&TelemetryConfig::default(), &env).unwrap().sampler,
            SamplerChoice::ParentBasedAlwaysOn
        );
        let https = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://saas.example")];
        assert!(
            Settings::resolve(&TelemetryConfig::default(), |n| {
                https
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| (*v).to_owned())
            })
            .is_err()
        );
    }

    #[test]
    fn a_bad_sampler_is_refused_with_the_names_it_could_be() {
        let config = TelemetryConfig {
            endpoint: Some("http://c:4318".into()),
            sampler: Some("sometimes".into()),
            ..TelemetryConfig::default()
        };
        let refused = Settings::resolve(&config, |_| None).unwrap_err();
        assert!(refused.contains("traceidratio"), "{refused}");
        assert!(SamplerChoice::parse("traceidratio", Some(2.0)).is_err());
    }
}
