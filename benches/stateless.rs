//! What each `stateless.affinity` costs a 2026-07-28 client: `cargo bench --bench
//! stateless` (after `cargo build --release`; `--quick` for a smoke run). One run, one
//! table, also written to `target/bench-stateless.md`. See `benches/README.md`.
//!
//! The fast legacy upstream (its own process, answering in microseconds) behind the
//! proxy's release binary, started once per affinity: `shared` (a pooled upstream
//! session per call), `isolated` (a session of its own per call: `initialize`,
//! `notifications/initialized`, the call, `DELETE`), `pinned` (a session per
//! `X-Conversation-Id`, one per client) and `handles` (a session per handle, one per
//! client, opened before the window). Each is measured with one client (the latency a
//! call costs) and with several at once (throughput), every answer checked; CPU time of
//! the proxy and of the upstream per call comes from /proc.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark harness"
)]

mod support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use support::load::{self, Conversation, Outcome, Protocol, Stop, Target, Tool, Work};
use support::procs;

const USAGE: &str = "\
usage: cargo bench --bench stateless -- [OPTIONS]

  --quick           ~15 s smoke run (1 s windows; not for quoting)
  --duration SECS   measured window per affinity and concurrency (5)
  --warmup SECS     warm-up before each window (1)
  --connections N   clients at once for the throughput run (16)

The table is printed and written to target/bench-stateless.md.";

struct Options {
    duration: Duration,
    warmup: Duration,
    connections: usize,
}

impl Options {
    fn parse() -> Options {
        let args: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| a != "--bench")
            .collect();
        let mut options = Options {
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            connections: 16,
        };
        let mut i = 0;
        while i < args.len() {
            let value = || {
                args.get(i + 1).cloned().unwrap_or_else(|| {
                    eprintln!("{} needs a value\n\n{USAGE}", args[i]);
                    std::process::exit(2)
                })
            };
            let number = |v: String| -> u64 {
                v.parse().unwrap_or_else(|_| {
                    eprintln!("{} needs a number, not {v:?}\n\n{USAGE}", args[i]);
                    std::process::exit(2)
                })
            };
            match args[i].as_str() {
                "--quick" => {
                    options.duration = Duration::from_secs(1);
                    options.warmup = Duration::from_millis(300);
                    i += 1;
                    continue;
                }
                "--duration" => options.duration = Duration::from_secs(number(value())),
                "--warmup" => options.warmup = Duration::from_secs(number(value())),
                "--connections" => options.connections = number(value()).max(1) as usize,
                "--help" | "-h" => {
                    println!("{USAGE}");
                    std::process::exit(0)
                }
                other => {
                    eprintln!("unknown option {other}\n\n{USAGE}");
                    std::process::exit(2)
                }
            }
            i += 2;
        }
        options
    }
}

/// An affinity: its name, how its clients speak, the proxy's configuration.
struct Mode {
    name: &'static str,
    conversation: Conversation,
    env: &'static [(&'static str, &'static str)],
}

const MODES: [Mode; 4] = [
    Mode {
        name: "shared",
        conversation: Conversation::None,
        env: &[("MCP_PROXY_STATELESS__AFFINITY", "shared")],
    },
    Mode {
        name: "isolated",
        conversation: Conversation::None,
        env: &[("MCP_PROXY_STATELESS__AFFINITY", "isolated")],
    },
    Mode {
        name: "pinned",
        conversation: Conversation::Header,
        env: &[
            ("MCP_PROXY_STATELESS__AFFINITY", "pinned"),
            ("MCP_PROXY_STATELESS__PIN_HEADER", "X-Conversation-Id"),
        ],
    },
    Mode {
        name: "handles",
        conversation: Conversation::Handle,
        env: &[
            ("MCP_PROXY_STATELESS__AFFINITY", "handles"),
            ("MCP_PROXY_STATELESS__MAX_HANDLES_PER_CALLER", "1000"),
        ],
    },
];

/// One affinity's two runs.
struct Measured {
    name: &'static str,
    one: Outcome,
    many: Outcome,
}

/// [proxy CPU µs, upstream CPU µs, other processes' CPU µs].
fn cpu_probe(proxy: u32, upstream: u32, ticks: u64) -> impl Fn() -> Vec<u64> {
    let foreign = procs::Foreign::new(ticks);
    move || {
        vec![
            procs::cpu_micros(&[proxy], ticks),
            procs::cpu_micros(&[upstream], ticks),
            foreign.read(),
        ]
    }
}

fn main() {
    support::upstream::serve_if_asked();
    let options = Options::parse();
    let started = Instant::now();
    let runtime = support::runtime();
    let ticks = procs::clock_ticks();
    let (upstream, upstream_addr) = procs::spawn_upstream();
    let stop = Stop::Timed {
        warmup: options.warmup,
        measure: options.duration,
    };
    let mut measured = Vec::new();
    for mode in &MODES {
        eprintln!("[bench] {}", mode.name);
        let env: Vec<(&str, String)> = mode.env.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let (proxy, addr) = procs::spawn_proxy_with(upstream_addr, "proxy", &env);
        let target = Target {
            label: mode.name,
            addr,
            protocol: Protocol::Stateless(mode.conversation),
        };
        let probe = cpu_probe(proxy.pid(), upstream.pid(), ticks);
        let work = Work::Call(Tool::Json);
        let one = runtime.block_on(load::closed_loop(&target, 1, work, stop, &probe));
        let many = runtime.block_on(load::closed_loop(
            &target,
            options.connections,
            work,
            stop,
            &probe,
        ));
        for (outcome, clients) in [(&one, 1), (&many, options.connections)] {
            if outcome.errors > 0 || outcome.ops == 0 {
                panic!(
                    "{} with {clients} client(s): {} calls, {} errors, first: {:?}",
                    mode.name, outcome.ops, outcome.errors, outcome.first_error
                );
            }
        }
        measured.push(Measured {
            name: mode.name,
            one,
            many,
        });
        drop(proxy);
    }
    drop(upstream);
    let table = render(&measured, &options, started.elapsed());
    println!("\n{table}");
    support::write_report("bench-stateless.md", &table);
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn render(measured: &[Measured], options: &Options, took: Duration) -> String {
    let mut out = String::new();
    let n = options.connections;
    let _ = writeln!(
        out,
        "| `stateless.affinity` | 1 client: calls/s | p50 / p99 (ms) | {n} clients: calls/s | p50 / p99 (ms) | proxy CPU per call (µs) | upstream CPU per call (µs) |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for m in measured {
        let cpu = |i: usize| {
            m.many
                .per_op(i)
                .map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"))
        };
        let _ = writeln!(
            out,
            "| `{}` | {:.0} | {} / {} | {:.0} | {} / {} | {} | {} |",
            m.name,
            m.one.rate(),
            ms(m.one.p(0.5)),
            ms(m.one.p(0.99)),
            m.many.rate(),
            ms(m.many.p(0.5)),
            ms(m.many.p(0.99)),
            cpu(0),
            cpu(1),
        );
    }
    let find = |name: &str| measured.iter().find(|m| m.name == name);
    if let (Some(shared), Some(isolated)) = (find("shared"), find("isolated")) {
        let added = isolated.one.p(0.5).as_secs_f64() - shared.one.p(0.5).as_secs_f64();
        let _ = writeln!(
            out,
            "\n`isolated` against `shared`: {:+.3} ms per call at p50 with one client (the \
             upstream handshake and the DELETE of a session per call); {:.2}× the calls/s \
             with {n} clients; {:.1}× the proxy's and {:.1}× the upstream's CPU per call.",
            added * 1e3,
            isolated.many.rate() / shared.many.rate(),
            isolated.many.per_op(0).unwrap_or(0.0) / shared.many.per_op(0).unwrap_or(1.0),
            isolated.many.per_op(1).unwrap_or(0.0) / shared.many.per_op(1).unwrap_or(1.0),
        );
    }
    let busy: Vec<String> = measured
        .iter()
        .flat_map(|m| [(m.name, 1, &m.one), (m.name, n, &m.many)])
        .filter_map(|(name, clients, o)| {
            let share = o.share(2)?;
            (share > 0.05).then(|| format!("{name} × {clients}: {:.0}%", share * 100.0))
        })
        .collect();
    let _ = writeln!(
        out,
        "\nWindows of {:?} after {:?} of warm-up; CPU per call from the {n}-client runs; the \
         proxy with {} worker thread(s); run took {:.0} s. {}",
        options.duration,
        options.warmup,
        procs::proxy_workers(),
        took.as_secs_f64(),
        if busy.is_empty() {
            "Other processes used under 5% of the machine in every window.".to_owned()
        } else {
            format!(
                "Other processes were busy (share of the machine) in: {}; not a run to quote.",
                busy.join(", ")
            )
        }
    );
    out
}
