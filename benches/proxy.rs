//! The proxy's benchmark: `benches/run.sh` (or `cargo bench --bench proxy`), one run,
//! one table. See `benches/README.md` for what it measures and how.
//!
//! Three targets in front of one fast legacy upstream (its own process, answering in
//! microseconds): the upstream **direct**, **nginx** as a plain reverse proxy, and the
//! **proxy** (the release binary) with data-layer sessions; at saturation also the proxy
//! passing a legacy client through (its HTTP hop without the sessions), and the floor
//! (`support::floor`: the least a tokio hop costs on this machine) with its variants
//! (the same hop with heads read and written as the proxy does, and as read; on
//! io_uring with monoio and with tokio-uring; on monoio with epoll). Same load
//! generator, same run. The session stores are compared the same way: the proxy with the
//! memory store, with Redis (a redis-server of its own; and the same server as the
//! primary a sentinel names, with a replica) and with sealed ids, paced. And the eras: a
//! 2026-07-28 client and an old one through the proxy in front of a modern-only upstream
//! (native pass-through, the reverse bridge) and an old client passed through to the
//! legacy one, each against its upstream direct, paced, rounds interleaved.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark harness"
)]

mod support;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::load::{self, Outcome, Protocol, Stop, Target, Tool, Work};
use support::procs;

const USAGE: &str = "\
usage: benches/run.sh [OPTIONS]      (= cargo bench --bench proxy -- [OPTIONS])

  --quick                 ~1.5 min smoke run: short windows, 1 round, 2,000/10,000 sessions
  --duration SECS         measured window per target for saturation and paced runs (6)
  --warmup SECS           warm-up before each measured window (1)
  --rounds N              saturation rounds, targets interleaved (3); the proxy/nginx
                          ratio quoted is the median of the rounds' ratios
  --connections N         closed-loop connections for saturation (32)
  --rate N                paced rate in requests/s for the added-latency runs (2000)
  --paced-connections N   connections (one thread each) of the paced runs (8)
  --create-duration SECS  measured window of the sessions/create runs (5)
  --create-connections N  concurrency of the sessions/create runs (16)
  --sessions A,B          idle-session counts for the memory measurement (10000,100000;
                          at most 990000: the proxy runs with max_sessions 1000000)
  --only LIST             run only some of: saturation,paced,stores,traces,eras,create,
                          memory
  --no-nginx              leave nginx out
  --fetch-fields          every client also sends the fields Node's fetch adds
                          (`Connection: keep-alive`, `User-Agent`, `Accept-Language`,
                          `Sec-Fetch-Mode`, `Accept-Encoding`): a real client's head
  --no-floor-variants     leave out the floor's variants (heads read and written,
                          io_uring), which only split the floor's cost further

Each option can also be given as MCP_BENCH_<NAME> (e.g. MCP_BENCH_DURATION=4,
MCP_BENCH_QUICK=1); flags win. The table is printed and written to
target/bench-results.md.";

const SCENARIOS: [&str; 7] = [
    "saturation",
    "paced",
    "stores",
    "traces",
    "eras",
    "create",
    "memory",
];

#[derive(Debug, Clone)]
struct Options {
    quick: bool,
    duration: Duration,
    warmup: Duration,
    rounds: usize,
    connections: usize,
    rate: u64,
    paced_connections: usize,
    create_duration: Duration,
    create_connections: usize,
    sessions: Vec<u64>,
    only: Vec<String>,
    nginx: bool,
    floor_variants: bool,
    fetch_fields: bool,
}

impl Options {
    fn parse() -> Options {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        // `cargo bench` passes `--bench` to every bench binary.
        args.retain(|a| a != "--bench");
        let flag = |name: &str| -> Option<String> {
            let env = format!("MCP_BENCH_{}", name.replace('-', "_").to_ascii_uppercase());
            let mut value = std::env::var(env).ok();
            let long = format!("--{name}");
            let mut i = 0;
            while i < args.len() {
                if args[i] == long {
                    value = Some(args.get(i + 1).cloned().unwrap_or_else(|| {
                        eprintln!("{long} needs a value\n\n{USAGE}");
                        std::process::exit(2)
                    }));
                    i += 1;
                } else if let Some(v) = args[i].strip_prefix(&format!("{long}=")) {
                    value = Some(v.to_owned());
                }
                i += 1;
            }
            value
        };
        let switch = |name: &str| -> bool {
            let env = format!("MCP_BENCH_{}", name.replace('-', "_").to_ascii_uppercase());
            args.iter().any(|a| *a == format!("--{name}"))
                || std::env::var(env).is_ok_and(|v| !v.is_empty() && v != "0")
        };
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let known = [
            "--quick",
            "--duration",
            "--warmup",
            "--rounds",
            "--connections",
            "--rate",
            "--paced-connections",
            "--create-duration",
            "--create-connections",
            "--sessions",
            "--only",
            "--no-nginx",
            "--no-floor-variants",
            "--fetch-fields",
        ];
        let mut i = 0;
        while i < args.len() {
            let name = args[i].split('=').next().unwrap_or("");
            if !known.contains(&name) {
                eprintln!("unknown argument {:?}\n\n{USAGE}", args[i]);
                std::process::exit(2);
            }
            let takes_value = !matches!(
                name,
                "--quick" | "--no-nginx" | "--no-floor-variants" | "--fetch-fields"
            ) && !args[i].contains('=');
            i += if takes_value { 2 } else { 1 };
        }
        fn num<T: std::str::FromStr>(name: &str, value: Option<String>, default: T) -> T {
            match value {
                None => default,
                Some(v) => v.parse().unwrap_or_else(|_| {
                    eprintln!("--{name}: not a number: {v:?}\n\n{USAGE}");
                    std::process::exit(2)
                }),
            }
        }
        let secs = |name: &str, default: f64| {
            Duration::from_secs_f64(num::<f64>(name, flag(name), default).max(0.1))
        };
        let quick = switch("quick");
        let sessions = flag("sessions")
            .map(|list| {
                list.split(',')
                    .map(|n| num::<u64>("sessions", Some(n.trim().replace('_', "")), 0))
                    .filter(|&n| n > 0)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_else(|| {
                if quick {
                    vec![2_000, 10_000]
                } else {
                    vec![10_000, 100_000]
                }
            });
        let only: Vec<String> = flag("only")
            .map(|l| l.split(',').map(|s| s.trim().to_owned()).collect())
            .unwrap_or_default();
        if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
            eprintln!(
                "--only: no scenario {bad:?} (one of {})\n\n{USAGE}",
                SCENARIOS.join(", ")
            );
            std::process::exit(2);
        }
        if sessions.iter().any(|&n| n > 990_000) {
            eprintln!("--sessions: at most 990000\n\n{USAGE}");
            std::process::exit(2);
        }
        Options {
            quick,
            duration: secs("duration", if quick { 2.0 } else { 6.0 }),
            warmup: secs("warmup", if quick { 0.5 } else { 1.0 }),
            rounds: num("rounds", flag("rounds"), if quick { 1 } else { 3 }).max(1),
            connections: num("connections", flag("connections"), 32).max(1),
            rate: num("rate", flag("rate"), 2000).max(1),
            paced_connections: num("paced-connections", flag("paced-connections"), 8).max(1),
            create_duration: secs("create-duration", if quick { 2.0 } else { 5.0 }),
            create_connections: num("create-connections", flag("create-connections"), 16).max(1),
            sessions,
            only,
            nginx: !switch("no-nginx"),
            floor_variants: !switch("no-floor-variants"),
            fetch_fields: switch("fetch-fields"),
        }
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }
}

fn main() {
    support::upstream::serve_if_asked();
    let options = Options::parse();
    if options.fetch_fields {
        support::http::send_fetch_fields();
    }
    install_signal_handler();
    let started = Instant::now();
    let runtime = support::runtime();
    let report = run(&options, &runtime);
    let elapsed = started.elapsed();
    let markdown = report.render(&options, elapsed);
    println!("\n{markdown}");
    support::write_report("bench-results.md", &markdown);
}

/// Ctrl-C / SIGTERM / SIGHUP: stop every child before exiting (guards do not run then).
fn install_signal_handler() {
    std::thread::spawn(|| {
        support::runtime().block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
        });
        procs::kill_all();
        eprintln!("interrupted; children stopped");
        std::process::exit(130);
    });
}

/// The proxy with a legacy client: pass-through, no data-layer session.
const PASS_THROUGH: &str = "proxy pass-through";
/// The floor hop (`support::floor`): the least a tokio hop costs on this machine.
const FLOOR: &str = "floor";
/// The same hop with heads read and written as the proxy does (`support::floor::fields`).
const FLOOR_FIELDS: &str = "floor-fields";
/// The same with each field written on as read (no map).
const FLOOR_FIELDS_RAW: &str = "floor-fields-raw";
/// The same hop on monoio with io_uring (`support::floor::uring`).
const FLOOR_URING: &str = "floor-uring";
/// The same hop on monoio with epoll: what the runtime does, apart from io_uring.
const FLOOR_MONOIO: &str = "floor-monoio";
/// The same hop on tokio-uring (`support::floor::tokio_uring`).
const FLOOR_TOKIO_URING: &str = "floor-tokio-uring";

/// The floor's variants, in the order they are measured after the other targets of a
/// saturation round.
const FLOOR_VARIANTS: [&str; 5] = [
    FLOOR_FIELDS,
    FLOOR_FIELDS_RAW,
    FLOOR_URING,
    FLOOR_MONOIO,
    FLOOR_TOKIO_URING,
];

/// The targets measured at saturation only: the hops that split the proxy's cost (its
/// hop alone, the floors), not clients' paths of their own.
fn saturation_only(label: &str) -> bool {
    matches!(
        label,
        PASS_THROUGH
            | FLOOR
            | FLOOR_FIELDS
            | FLOOR_FIELDS_RAW
            | FLOOR_URING
            | FLOOR_MONOIO
            | FLOOR_TOKIO_URING
    )
}

/// A measured window on stderr: its rate, p50, p99 and errors, and where the CPU went.
fn progress_line(outcome: &Outcome) {
    eprintln!(
        "         {:>9.0} req/s  p50 {:>7.1} µs  p99 {:>7.1} µs  errors {}\n         {}",
        outcome.rate(),
        micros(outcome.p(0.5)),
        micros(outcome.p(0.99)),
        outcome.errors,
        cpu_line(outcome)
    );
}

/// Adds a round's `outcome` to what was measured of its target so far.
fn merge_into(slot: &mut Option<Outcome>, outcome: Outcome) {
    match slot {
        Some(merged) => merged.merge(outcome),
        None => *slot = Some(outcome),
    }
}

fn progress(what: &str) {
    eprintln!("[bench] {what}");
}

/// How many readings [`cpu_probe`] gives; the hop's user-space and kernel CPU are the
/// last two.
const CPU_READINGS: usize = 8;
const HOP_USER: usize = CPU_READINGS - 2;
const HOP_KERNEL: usize = CPU_READINGS - 1;

/// CPU of the processes a run involves, in µs: [the hop (proxy or nginx, with its child
/// processes; 0 for direct), the upstream, the load generator (this process), every other
/// process on the machine, interrupts machine-wide, stolen by the hypervisor].
fn cpu_probe(hop: Vec<u32>, upstream: u32, ticks: u64) -> impl Fn() -> Vec<u64> {
    let foreign = procs::Foreign::new(ticks);
    move || {
        // nginx's workers are read afresh each time (the proxy has no children).
        let mut hop_pids = hop.clone();
        hop_pids.extend(hop.iter().flat_map(|&pid| procs::children(pid)));
        let (_, interrupts, steal) = procs::machine_cpu_micros(ticks);
        let (user, system) = if hop.is_empty() {
            (0, 0)
        } else {
            procs::cpu_split_micros(&hop_pids, ticks)
        };
        // 0: the hop's CPU; 1: the upstream's; 2: the generator's; 3: other processes';
        // 4: interrupts; 5: steal; HOP_USER and HOP_KERNEL: the hop's in user space and
        // in the kernel (the last two; the array's type checks how many).
        let readings: [u64; CPU_READINGS] = [
            user + system,
            procs::cpu_micros(&[upstream], ticks),
            procs::cpu_micros(&[std::process::id()], ticks),
            foreign.read(),
            interrupts,
            steal,
            user,
            system,
        ];
        readings.to_vec()
    }
}

#[derive(Default)]
struct Report {
    /// Per target label (direct, nginx, proxy), rounds merged.
    saturation: Vec<(&'static str, Outcome)>,
    /// proxy/nginx throughput of each round.
    round_ratios: Vec<f64>,
    paced_json: Vec<(&'static str, Outcome)>,
    paced_sse: Vec<(&'static str, Outcome)>,
    /// sessions/create (proxy) vs initialize + initialized (direct), per concurrency.
    creates: Vec<Creates>,
    memory: Option<Memory>,
    /// The proxy paced at `rate`, JSON, per session store (memory, redis, sealed), rounds
    /// merged.
    stores: Vec<(&'static str, Outcome)>,
    /// One loopback Redis round trip (PING), p50 and p99.
    redis_rtt: Option<(Duration, Duration)>,
    /// The proxy paced with traces off, on and sampled.
    traces: Option<Traces>,
    rewrite_proof: Option<Result<u16, String>>,
    /// Each client era through the proxy in front of each upstream era, paced.
    eras: Option<Eras>,
    nginx_version: String,
    notes: Vec<String>,
}

/// The era rows: each path's paced run (rounds merged), and what the modern upstream
/// counted of `server/discover`.
struct Eras {
    paths: Vec<(&'static EraPath, Outcome)>,
    /// `server/discover`s the modern upstream answered before the first measured window
    /// (the proxy finding its era).
    discovers_before: u64,
    /// ... and in all at the end.
    discovers_after: u64,
}

/// One path of the era rows.
struct EraPath {
    label: &'static str,
    /// What it is, for the table.
    what: &'static str,
    /// The label of the direct path it is compared with (itself for a baseline).
    baseline: &'static str,
    protocol: Protocol,
    /// Through the proxy (else direct to the upstream).
    proxied: bool,
    /// In front of the modern upstream (else the legacy one).
    modern: bool,
}

const MODERN_DIRECT: &str = "modern direct";
const MODERN_PASS: &str = "modern pass-through";
const BRIDGE: &str = "reverse bridge";
const LEGACY_DIRECT: &str = "legacy direct";
const LEGACY_PASS: &str = "legacy pass-through";

const ERA_PATHS: [EraPath; 5] = [
    EraPath {
        label: MODERN_DIRECT,
        what: "2026-07-28 client → modern upstream, direct (baseline)",
        baseline: MODERN_DIRECT,
        protocol: Protocol::Stateless(load::Conversation::None),
        proxied: false,
        modern: true,
    },
    EraPath {
        label: MODERN_PASS,
        what: "2026-07-28 client → proxy → modern upstream (native pass-through)",
        baseline: MODERN_DIRECT,
        protocol: Protocol::Stateless(load::Conversation::None),
        proxied: true,
        modern: true,
    },
    EraPath {
        label: BRIDGE,
        what: "2025-11-25 client → proxy → modern upstream (the reverse bridge)",
        baseline: MODERN_DIRECT,
        protocol: Protocol::Legacy,
        proxied: true,
        modern: true,
    },
    EraPath {
        label: LEGACY_DIRECT,
        what: "2025-11-25 client → legacy upstream, direct (baseline)",
        baseline: LEGACY_DIRECT,
        protocol: Protocol::Legacy,
        proxied: false,
        modern: false,
    },
    EraPath {
        label: LEGACY_PASS,
        what: "2025-11-25 client → proxy → legacy upstream (pass-through)",
        baseline: LEGACY_DIRECT,
        protocol: Protocol::Legacy,
        proxied: true,
        modern: false,
    },
];

/// Where [`eras`]' probe puts the modern upstream's `server/discover` count: after
/// [`cpu_probe`]'s readings.
const DISCOVERS: usize = CPU_READINGS;

struct Creates {
    connections: usize,
    direct: Option<Outcome>,
    proxy: Option<Outcome>,
}

struct Memory {
    warm_sessions: u64,
    baseline: u64,
    points: Vec<(u64, u64)>,
    errors: u64,
    first_error: Option<String>,
    create_rate: f64,
}

fn run(options: &Options, runtime: &tokio::runtime::Runtime) -> Report {
    let mut report = Report {
        nginx_version: procs::nginx_version(),
        ..Report::default()
    };
    let ticks = procs::clock_ticks();
    let nginx_available = options.nginx
        && std::process::Command::new("nginx")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success());
    if options.nginx && !nginx_available {
        report.notes.push(
            "nginx is not installed: its column is empty (benches/run.sh installs nginx-light)"
                .into(),
        );
        eprintln!("warning: nginx not found; run benches/run.sh to install nginx-light");
    }
    progress("starting the upstream, nginx and the proxy");
    let (upstream, upstream_addr) = procs::spawn_upstream();
    let nginx = nginx_available.then(|| procs::spawn_nginx(upstream_addr, 2));
    let (proxy, proxy_addr) = procs::spawn_proxy(upstream_addr);
    let (floor, floor_addr) = procs::spawn_floor(upstream_addr);
    // The floor's variants (saturation only): what heads read and written cost a hop, and
    // what io_uring would take off it. One whose runtime cannot start here (io_uring
    // refused) is left out, and the notes say why.
    let mut variants: Vec<(&'static str, (procs::Guard, SocketAddr))> = Vec::new();
    if options.floor_variants && options.runs("saturation") {
        for label in FLOOR_VARIANTS {
            match procs::spawn_floor_on(upstream_addr, label) {
                Ok(started) => variants.push((label, started)),
                Err(why) => report.notes.push(format!("{label} is left out: {why}")),
            }
        }
    }

    let mut targets: Vec<(Target, Vec<u32>)> = vec![(
        Target {
            label: "direct",
            addr: upstream_addr,
            protocol: Protocol::Legacy,
        },
        Vec::new(),
    )];
    if let Some((guard, addr)) = &nginx {
        targets.push((
            Target {
                label: "nginx",
                addr: *addr,
                protocol: Protocol::Legacy,
            },
            vec![guard.pid()],
        ));
    }
    targets.push((
        Target {
            label: "proxy",
            addr: proxy_addr,
            protocol: Protocol::DataLayer,
        },
        vec![proxy.pid()],
    ));
    // The proxy's HTTP hop alone: a legacy client, passed through untouched (saturation
    // only), to split the proxy's cost into the hop and the session handling.
    targets.push((
        Target {
            label: PASS_THROUGH,
            addr: proxy_addr,
            protocol: Protocol::Legacy,
        },
        vec![proxy.pid()],
    ));
    // The floor (saturation only): what the runtime and the kernel cost a hop.
    targets.push((
        Target {
            label: FLOOR,
            addr: floor_addr,
            protocol: Protocol::Legacy,
        },
        vec![floor.pid()],
    ));
    // The same floor with heads read and written as the proxy does, and as read: what
    // they and their maps cost a hop. And on io_uring (monoio's and tokio-uring's) and on
    // monoio with epoll: whether io_uring would take anything off the kernel's part of a
    // hop, and how much of that is the runtime's.
    for &(label, (ref guard, addr)) in &variants {
        targets.push((
            Target {
                label,
                addr,
                protocol: Protocol::Legacy,
            },
            vec![guard.pid()],
        ));
    }
    for (target, _) in &targets {
        if let Err(e) = load::smoke(target) {
            panic!("{} does not answer correctly: {e}", target.label);
        }
    }
    report.rewrite_proof = Some(load::upstream_refuses_session_meta(upstream_addr));
    if !matches!(report.rewrite_proof, Some(Ok(400))) {
        panic!(
            "the upstream accepted a tools/call carrying the session _meta ({:?}): it could not tell whether the proxy strips it",
            report.rewrite_proof
        );
    }

    if options.runs("saturation") {
        let mut merged: Vec<(&'static str, Option<Outcome>)> =
            targets.iter().map(|(t, _)| (t.label, None)).collect();
        // The proxy and its yardsticks rotate among themselves, side by side in every
        // round; the floor's variants come after them, rotating among themselves, so
        // that they do not put minutes between nginx's window and the proxy's.
        let (core, after): (Vec<usize>, Vec<usize>) =
            (0..targets.len()).partition(|&i| !FLOOR_VARIANTS.contains(&targets[i].0.label));
        let rotated = |group: &[usize], round: usize| {
            let mut group = group.to_vec();
            if !group.is_empty() {
                let by = round % group.len();
                group.rotate_left(by);
            }
            group
        };
        for round in 0..options.rounds {
            let order = [rotated(&core, round), rotated(&after, round)].concat();
            let mut rates = std::collections::HashMap::new();
            for i in order {
                let (target, pids) = &targets[i];
                progress(&format!(
                    "saturation round {}/{}: {} ({} connections, {:?})",
                    round + 1,
                    options.rounds,
                    target.label,
                    options.connections,
                    options.duration
                ));
                let probe = cpu_probe(pids.clone(), upstream.pid(), ticks);
                let outcome = runtime.block_on(load::closed_loop(
                    target,
                    options.connections,
                    Work::Call(Tool::Json),
                    Stop::Timed {
                        warmup: options.warmup,
                        measure: options.duration,
                    },
                    &probe,
                ));
                progress_line(&outcome);
                rates.insert(target.label, outcome.rate());
                merge_into(&mut merged[i].1, outcome);
            }
            if let (Some(p), Some(n)) = (rates.get("proxy"), rates.get("nginx")) {
                report.round_ratios.push(p / n);
            }
        }
        report.saturation = merged
            .into_iter()
            .filter_map(|(l, o)| o.map(|o| (l, o)))
            .collect();
    }

    if options.runs("paced") {
        for tool in [Tool::Json, Tool::Sse] {
            for (target, pids) in targets.iter().filter(|(t, _)| !saturation_only(t.label)) {
                progress(&format!(
                    "paced {} req/s, {}: {} ({} connections, {:?})",
                    options.rate,
                    if tool == Tool::Json { "JSON" } else { "SSE" },
                    target.label,
                    options.paced_connections,
                    options.duration
                ));
                let probe = cpu_probe(pids.clone(), upstream.pid(), ticks);
                let outcome = load::open_loop(
                    target,
                    options.paced_connections,
                    options.rate,
                    tool,
                    options.warmup,
                    options.duration,
                    &probe,
                );
                eprintln!(
                    "         {:>9.0} req/s  p50 {:>7.1} µs  p99 {:>7.1} µs  p99.9 {:>7.1} µs  errors {}",
                    outcome.rate(),
                    micros(outcome.p(0.5)),
                    micros(outcome.p(0.99)),
                    micros(outcome.p(0.999)),
                    outcome.errors
                );
                eprintln!("         {}", cpu_line(&outcome));
                match tool {
                    Tool::Json => report.paced_json.push((target.label, outcome)),
                    Tool::Sse => report.paced_sse.push((target.label, outcome)),
                }
            }
        }
    }

    if options.runs("stores") {
        stores(
            options,
            &mut report,
            upstream_addr,
            proxy_addr,
            proxy.pid(),
            upstream.pid(),
        );
    }

    if options.runs("traces") {
        report.traces = Some(traces(
            options,
            upstream_addr,
            (proxy_addr, proxy.pid()),
            upstream.pid(),
        ));
    }

    if options.runs("eras") {
        report.eras = Some(eras(
            options,
            (upstream_addr, upstream.pid()),
            (proxy_addr, proxy.pid()),
        ));
    }

    if options.runs("create") {
        let stop = Stop::Timed {
            warmup: options.warmup,
            measure: options.create_duration,
        };
        // At the set concurrency (saturating: latency is mostly queueing), then one at a
        // time (unloaded: latency is the round trips themselves).
        let mut levels = vec![options.create_connections];
        if options.create_connections > 1 {
            levels.push(1);
        }
        for connections in levels {
            let mut creates = Creates {
                connections,
                direct: None,
                proxy: None,
            };
            for (target, pids) in targets
                .iter()
                .filter(|(t, _)| t.label != "nginx" && !saturation_only(t.label))
            {
                progress(&format!(
                    "{}: {} ({} connections, {:?})",
                    if target.protocol == Protocol::DataLayer {
                        "sessions/create"
                    } else {
                        "initialize + initialized"
                    },
                    target.label,
                    connections,
                    options.create_duration
                ));
                let probe = cpu_probe(pids.clone(), upstream.pid(), ticks);
                let outcome = runtime.block_on(load::closed_loop(
                    target,
                    connections,
                    Work::Open,
                    stop,
                    &probe,
                ));
                eprintln!(
                    "         {:>9.0} /s  p50 {:>7.3} ms  p99 {:>7.3} ms  errors {}",
                    outcome.rate(),
                    millis(outcome.p(0.5)),
                    millis(outcome.p(0.99)),
                    outcome.errors
                );
                eprintln!("         {}", cpu_line(&outcome));
                if target.protocol == Protocol::DataLayer {
                    creates.proxy = Some(outcome);
                } else {
                    creates.direct = Some(outcome);
                }
            }
            report.creates.push(creates);
        }
    }
    drop(proxy);
    drop(nginx);

    if options.runs("memory") && !options.sessions.is_empty() {
        report.memory = Some(memory(options, runtime, upstream_addr));
    }
    drop(upstream);
    report
}

/// `tools/call` (JSON, data-layer sessions) paced at `rate` against each of `targets`
/// (label, address, the pid whose CPU counts), `options.rounds` rounds with the targets
/// interleaved (each round starting with the next one), each checked first; the rounds
/// merged per target. `what` names a target in the progress lines (`traces on`, `the
/// redis store`).
fn paced_rounds(
    options: &Options,
    targets: &[(&'static str, SocketAddr, u32)],
    upstream_pid: u32,
    what: impl Fn(&str) -> String,
) -> Vec<(&'static str, Outcome)> {
    let ticks = procs::clock_ticks();
    let mut merged: Vec<(&'static str, Option<Outcome>)> =
        targets.iter().map(|(label, _, _)| (*label, None)).collect();
    for round in 0..options.rounds {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        order.rotate_left(round % targets.len());
        for i in order {
            let (label, addr, pid) = targets[i];
            let target = Target {
                label,
                addr,
                protocol: Protocol::DataLayer,
            };
            if let Err(e) = load::smoke(&target) {
                panic!(
                    "the proxy with {} does not answer correctly: {e}",
                    what(label)
                );
            }
            progress(&format!(
                "round {}/{}: paced {} req/s, JSON, {}",
                round + 1,
                options.rounds,
                options.rate,
                what(label)
            ));
            let probe = cpu_probe(vec![pid], upstream_pid, ticks);
            let outcome = load::open_loop(
                &target,
                options.paced_connections,
                options.rate,
                Tool::Json,
                options.warmup,
                options.duration,
                &probe,
            );
            progress_line(&outcome);
            merge_into(&mut merged[i].1, outcome);
        }
    }
    merged
        .into_iter()
        .filter_map(|(l, o)| o.map(|o| (l, o)))
        .collect()
}

/// The traces rows: `tools/call` (JSON, data-layer sessions) paced at `rate` through the
/// main table's proxy (traces off) and two more exporting every span to a collector
/// stand-in on loopback (`otlp_sink`) — one sampling every request, one 1% of them —
/// rounds interleaved.
struct Traces {
    rows: Vec<(&'static str, Outcome)>,
    /// Spans the collector stand-in received.
    exported: u64,
}

const TRACES_OFF: &str = "off";
const TRACES_ON: &str = "on";
const TRACES_SAMPLED: &str = "sampled 1%";

fn traces(
    options: &Options,
    upstream: SocketAddr,
    (off_addr, off_pid): (SocketAddr, u32),
    upstream_pid: u32,
) -> Traces {
    let sink = support::otlp_sink::Sink::spawn();
    progress("traces: proxies exporting every span, and 1% of them, to an OTLP receiver");
    let exporting = |name, sampler: &str, arg: &str| {
        procs::spawn_proxy_with(
            upstream,
            name,
            &[
                ("MCP_PROXY_TELEMETRY__ENDPOINT", sink.endpoint()),
                ("MCP_PROXY_TELEMETRY__SAMPLER", sampler.to_owned()),
                ("MCP_PROXY_TELEMETRY__SAMPLER_ARG", arg.to_owned()),
            ],
        )
    };
    let (on, on_addr) = exporting("proxy-traces-on", "always_on", "1");
    let (sampled, sampled_addr) = exporting("proxy-traces-sampled", "traceidratio", "0.01");
    let targets = [
        (TRACES_OFF, off_addr, off_pid),
        (TRACES_ON, on_addr, on.pid()),
        (TRACES_SAMPLED, sampled_addr, sampled.pid()),
    ];
    let rows = paced_rounds(options, &targets, upstream_pid, |label| {
        format!("traces {label}")
    });
    // What is still batched goes out within the exporter's delay (5 s).
    std::thread::sleep(Duration::from_secs(6));
    drop(on);
    drop(sampled);
    Traces {
        rows,
        exported: sink.spans(),
    }
}

impl Traces {
    fn render(&self, options: &Options) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "#### Traces: `tools/call` at {} req/s, JSON, data-layer sessions, traces off / on / sampled 1%
",
            thousands(options.rate as f64)
        );
        let _ = writeln!(
            md,
            "| traces | p50 / p99 (µs) | added over off: p50 / p99 (µs) | proxy CPU per call (µs) | CPU over off |
| --- | ---: | ---: | ---: | ---: |"
        );
        let off = find(&self.rows, TRACES_OFF);
        for (label, o) in &self.rows {
            let (added, cpu_ratio) = match off {
                Some(base) if *label != TRACES_OFF => (
                    format!(
                        "{:+.0} / {:+.0}",
                        micros(o.p(0.5)) - micros(base.p(0.5)),
                        micros(o.p(0.99)) - micros(base.p(0.99))
                    ),
                    match (o.per_op(0), base.per_op(0)) {
                        (Some(c), Some(b)) if b > 0.0 => format!("{:.2}×", c / b),
                        _ => "—".into(),
                    },
                ),
                _ => ("—".into(), "—".into()),
            };
            let _ = writeln!(
                md,
                "| {label} | {} | {added} | {} | {cpu_ratio} |",
                cell(Some(o), lat_us),
                o.per_op(0).map_or("—".into(), |c| format!("{c:.1}")),
            );
        }
        let _ = writeln!(
            md,
            "
Spans the OTLP receiver got from the two exporting proxies: {} (two per call on: the request's and its upstream call's).",
            thousands(self.exported as f64)
        );
        md
    }
}

/// The proxy paced at `rate` with each session store, rounds interleaved, and one
/// loopback Redis round trip for scale.
fn stores(
    options: &Options,
    report: &mut Report,
    upstream: SocketAddr,
    memory_addr: SocketAddr,
    memory_pid: u32,
    upstream_pid: u32,
) {
    let Some((redis, redis_addr)) = procs::spawn_redis() else {
        report.notes.push(
            "redis-server is not installed: no store rows (benches/run.sh installs it)".into(),
        );
        return;
    };
    progress(
        "stores: a proxy with the Redis store (one server, and under Sentinel) and one with sealed ids",
    );
    let key = "5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1".to_owned();
    let (with_redis, redis_proxy) = procs::spawn_proxy_with(
        upstream,
        "proxy-redis",
        &[
            ("MCP_PROXY_SESSION__STORE", "redis".into()),
            (
                "MCP_PROXY_SESSION__REDIS_URL",
                format!("redis://{redis_addr}/0"),
            ),
            ("MCP_PROXY_SESSION__STATE_KEY", key.clone()),
        ],
    );
    let sentinel_set = procs::spawn_sentinel_set(redis_addr);
    let with_sentinel = sentinel_set.as_ref().map(|(_, sentinel)| {
        procs::spawn_proxy_with(
            upstream,
            "proxy-redis-sentinel",
            &[
                ("MCP_PROXY_SESSION__STORE", "redis".into()),
                (
                    "MCP_PROXY_SESSION__REDIS_SENTINELS",
                    format!("[\"redis://{sentinel}\"]"),
                ),
                ("MCP_PROXY_SESSION__REDIS_MASTER_NAME", "sessions".into()),
                ("MCP_PROXY_SESSION__STATE_KEY", key.clone()),
            ],
        )
    });
    let (with_sealed, sealed_proxy) = procs::spawn_proxy_with(
        upstream,
        "proxy-sealed",
        &[
            ("MCP_PROXY_SESSION__STORE", "sealed".into()),
            ("MCP_PROXY_SESSION__SEALED_KEYS", format!("[\"{key}\"]")),
        ],
    );
    let mut targets = vec![
        ("memory", memory_addr, memory_pid),
        ("redis", redis_proxy, with_redis.pid()),
        ("sealed", sealed_proxy, with_sealed.pid()),
    ];
    if let Some((proxy, addr)) = &with_sentinel {
        targets.push(("redis-sentinel", *addr, proxy.pid()));
    }
    report.stores = paced_rounds(options, &targets, upstream_pid, |label| {
        format!("the {label} store")
    });
    let mut rtts = procs::redis_round_trips(redis_addr, 2000, options.rate);
    rtts.sort();
    if !rtts.is_empty() {
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
        report.redis_rtt = Some((at(0.5), at(0.99)));
    }
    drop(with_redis);
    drop(with_sentinel);
    drop(with_sealed);
    drop(sentinel_set);
    drop(redis);
}

/// Each client era through the proxy in front of each upstream era, paced at `rate`, JSON,
/// rounds interleaved ([`ERA_PATHS`]): the modern upstream (`support/modern.rs`) with a
/// proxy of its own, and the legacy `upstream` with its `proxy` (both `(address, pid)`).
fn eras(options: &Options, upstream: (SocketAddr, u32), proxy: (SocketAddr, u32)) -> Eras {
    progress("eras: the modern upstream and a proxy in front of it");
    let (modern, modern_addr) = procs::spawn_modern_upstream();
    // No periodic health probe during the windows (each one is a `server/discover`): what
    // the windows count is then what the requests themselves cost.
    let (modern_proxy, modern_proxy_addr) = procs::spawn_proxy_with(
        modern_addr,
        "proxy-modern",
        &[("MCP_PROXY_UPSTREAM__HEALTH_INTERVAL", "1h".into())],
    );
    let ticks = procs::clock_ticks();
    let place = |path: &EraPath| {
        let (addr, hop) = match (path.proxied, path.modern) {
            (false, true) => (modern_addr, None),
            (true, true) => (modern_proxy_addr, Some(modern_proxy.pid())),
            (false, false) => (upstream.0, None),
            (true, false) => (proxy.0, Some(proxy.1)),
        };
        let upstream_pid = if path.modern {
            modern.pid()
        } else {
            upstream.1
        };
        let target = Target {
            label: path.label,
            addr,
            protocol: path.protocol,
        };
        (target, hop, upstream_pid)
    };
    for path in &ERA_PATHS {
        let (target, _, _) = place(path);
        // The bridge answers the `sse` tool's one-event stream as JSON (no message came
        // before the response): checked with JSON calls only.
        let tools: &[Tool] = if path.label == BRIDGE {
            &[Tool::Json, Tool::Json]
        } else {
            &[Tool::Json, Tool::Sse, Tool::Json]
        };
        if let Err(e) = load::smoke_calls(&target, tools) {
            panic!(
                "{} ({}) does not answer correctly: {e}",
                path.label, path.what
            );
        }
    }
    let counted = || {
        support::modern::stats(modern_addr)
            .expect("the modern upstream's GET /stats")
            .0
    };
    let discovers_before = counted();
    let mut merged: Vec<Option<Outcome>> = ERA_PATHS.iter().map(|_| None).collect();
    for round in 0..options.rounds {
        let mut order: Vec<usize> = (0..ERA_PATHS.len()).collect();
        order.rotate_left(round % ERA_PATHS.len());
        for i in order {
            let path = &ERA_PATHS[i];
            let (target, hop, upstream_pid) = place(path);
            progress(&format!(
                "eras round {}/{}: paced {} req/s, JSON, {}",
                round + 1,
                options.rounds,
                options.rate,
                path.what
            ));
            let cpu = cpu_probe(hop.into_iter().collect(), upstream_pid, ticks);
            let probe = || {
                let mut readings = cpu();
                readings.push(counted());
                readings
            };
            let outcome = load::open_loop(
                &target,
                options.paced_connections,
                options.rate,
                Tool::Json,
                options.warmup,
                options.duration,
                &probe,
            );
            progress_line(&outcome);
            merge_into(&mut merged[i], outcome);
        }
    }
    let discovers_after = counted();
    drop(modern_proxy);
    drop(modern);
    Eras {
        paths: ERA_PATHS
            .iter()
            .zip(merged)
            .filter_map(|(path, o)| o.map(|o| (path, o)))
            .collect(),
        discovers_before,
        discovers_after,
    }
}

/// Resident memory per idle session, in a fresh proxy.
fn memory(options: &Options, runtime: &tokio::runtime::Runtime, upstream: SocketAddr) -> Memory {
    progress("memory: a fresh proxy");
    let (proxy, addr) = procs::spawn_proxy(upstream);
    let target = Target {
        label: "proxy",
        addr,
        protocol: Protocol::DataLayer,
    };
    let no_probe = || Vec::new();
    let create = |n: u64| {
        runtime.block_on(load::closed_loop(
            &target,
            options.create_connections,
            Work::Open,
            Stop::Count(n),
            &no_probe,
        ))
    };
    let settle = |pid: u32| {
        std::thread::sleep(Duration::from_millis(500));
        procs::rss_bytes(pid)
    };
    // Warm-up: connections, runtime, allocator arenas, the upstream connection pool.
    let warm = 1_000u64;
    let _ = load::smoke(&target);
    let warm_outcome = create(warm);
    let baseline = settle(proxy.pid());
    let mut memory = Memory {
        warm_sessions: warm + 1,
        baseline,
        points: Vec::new(),
        errors: warm_outcome.errors,
        first_error: warm_outcome.first_error,
        create_rate: 0.0,
    };
    let mut created = 0u64;
    let (mut ops, mut secs) = (0u64, 0f64);
    let mut sessions = options.sessions.clone();
    sessions.sort_unstable();
    for count in sessions {
        progress(&format!("memory: up to {count} idle sessions"));
        let outcome = create(count - created.min(count));
        created = count.max(created);
        ops += outcome.ops;
        secs += outcome.window.as_secs_f64();
        memory.errors += outcome.errors;
        if memory.first_error.is_none() {
            memory.first_error = outcome.first_error;
        }
        let rss = settle(proxy.pid());
        eprintln!(
            "         RSS {:.1} MiB (baseline {:.1} MiB): {:.0} B/session",
            rss as f64 / 1048576.0,
            baseline as f64 / 1048576.0,
            (rss.saturating_sub(baseline)) as f64 / count as f64
        );
        memory.points.push((count, rss));
    }
    memory.create_rate = ops as f64 / secs.max(1e-9);
    memory
}

/// Where the CPU went during a run, in cores.
fn cpu_line(o: &Outcome) -> String {
    let cores = |i: usize| o.share(i).unwrap_or(0.0) * cpus();
    format!(
        "cores: hop {:.2}, upstream {:.2}, generator {:.2}, other processes {:.2}; interrupts {:.2} (tick-sampled), steal {:.2}",
        cores(0),
        cores(1),
        cores(2),
        foreign(o),
        cores(4),
        cores(5)
    )
}

/// CPUs of the machine.
fn cpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// Cores used by processes that are not part of the benchmark during a run's window
/// (another build on the machine, say): the run is then not to be trusted.
fn foreign(o: &Outcome) -> f64 {
    o.share(3).unwrap_or(0.0) * cpus()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// 12345.6 → "12,346".
fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn find<'a>(list: &'a [(&'static str, Outcome)], label: &str) -> Option<&'a Outcome> {
    list.iter().find(|(l, _)| *l == label).map(|(_, o)| o)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "yes" } else { "**NO**" }
}

/// "yes"/"NO", or "ERRORS" when any of the runs behind it had errors.
fn judged(ok: bool, runs: &[Option<&Outcome>]) -> &'static str {
    if runs.iter().flatten().any(|o| o.errors > 0) {
        "**ERRORS**"
    } else {
        verdict(ok)
    }
}

fn cell<F: Fn(&Outcome) -> String>(o: Option<&Outcome>, f: F) -> String {
    match o {
        None => "—".into(),
        Some(o) if o.errors > 0 => format!("{} ({} errors)", f(o), thousands(o.errors as f64)),
        Some(o) => f(o),
    }
}

fn lat_us(o: &Outcome) -> String {
    format!("{:.0} / {:.0}", micros(o.p(0.5)), micros(o.p(0.99)))
}

impl Report {
    fn render(&self, options: &Options, elapsed: Duration) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "### mcp-session-proxy benchmark\n");
        // The main table, unless only the era rows ran (`--only eras`).
        let main_table = !(self.saturation.is_empty()
            && self.paced_json.is_empty()
            && self.stores.is_empty()
            && self.creates.is_empty()
            && self.memory.is_none());
        if main_table {
            let _ = writeln!(
                md,
                "| scenario | direct | nginx | proxy | ratio / goal | met? |\n| --- | ---: | ---: | ---: | --- | --- |"
            );
        }
        let mut row = |cells: [String; 6]| {
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        };

        if !self.saturation.is_empty() {
            let d = find(&self.saturation, "direct");
            let n = find(&self.saturation, "nginx");
            let p = find(&self.saturation, "proxy");
            let rate = |o: &Outcome| thousands(o.rate());
            let (ratio, met) = match (p, n) {
                (Some(p), Some(n)) => {
                    let mut sorted = self.round_ratios.clone();
                    sorted.sort_by(f64::total_cmp);
                    let r = match sorted.len() {
                        0 => p.rate() / n.rate(),
                        len if len % 2 == 1 => sorted[len / 2],
                        len => (sorted[len / 2 - 1] + sorted[len / 2]) / 2.0,
                    };
                    let rounds: Vec<String> = self
                        .round_ratios
                        .iter()
                        .map(|r| format!("{r:.2}"))
                        .collect();
                    (
                        format!(
                            "proxy/nginx **{r:.2}** (goal ≥ 1.00; median of rounds {})",
                            rounds.join(", ")
                        ),
                        judged(r >= 1.0, &[Some(p), Some(n)]),
                    )
                }
                _ => ("—".into(), "—"),
            };
            row([
                format!(
                    "`tools/call` saturation, JSON, {} connections (req/s)",
                    options.connections
                ),
                cell(d, rate),
                cell(n, rate),
                cell(p, rate),
                ratio,
                met.into(),
            ]);
            row([
                "… its latency p50 / p99 (µs)".into(),
                cell(d, lat_us),
                cell(n, lat_us),
                cell(p, lat_us),
                "—".into(),
                "—".into(),
            ]);
        }

        for (list, kind) in [(&self.paced_json, "JSON"), (&self.paced_sse, "SSE")] {
            if list.is_empty() {
                continue;
            }
            let d = find(list, "direct");
            let n = find(list, "nginx");
            let p = find(list, "proxy");
            let added = |o: &Outcome, base: &Outcome, q: f64| micros(o.p(q)) - micros(base.p(q));
            let (ratio, met) = match (p, d) {
                (Some(p), Some(d)) => {
                    let (a50, a99) = (added(p, d, 0.5), added(p, d, 0.99));
                    // The p50 goal is what nginx adds in the same run (under 100 µs
                    // where nginx was not measured; errors in nginx's run void the
                    // judgement), compared as shown, in whole µs; the p99 goal under
                    // 1,000 µs.
                    let nginx_added = n.map(|n| (added(n, d, 0.5), added(n, d, 0.99)));
                    let (goal50, within50) = match nginx_added {
                        Some((nginx50, _)) => (
                            format!("goal ≤ nginx's {nginx50:+.0}"),
                            a50.round() <= nginx50.round(),
                        ),
                        None => ("goal < 100".to_owned(), a50 < 100.0),
                    };
                    let nginx = nginx_added
                        .map(|(n50, n99)| format!("; nginx adds {n50:+.0} / {n99:+.0} µs"))
                        .unwrap_or_default();
                    (
                        format!(
                            "proxy adds p50 **{a50:+.0} µs** ({goal50}), p99 **{a99:+.0} µs** (goal < 1,000){nginx}"
                        ),
                        judged(within50 && a99 < 1000.0, &[Some(p), Some(d), n]),
                    )
                }
                _ => ("—".into(), "—"),
            };
            row([
                format!(
                    "`tools/call` at {} req/s, {kind}: latency p50 / p99 (µs)",
                    thousands(options.rate as f64)
                ),
                cell(d, lat_us),
                cell(n, lat_us),
                cell(p, lat_us),
                ratio,
                met.into(),
            ]);
        }

        if let Some(memory) = find(&self.stores, "memory") {
            row([
                format!(
                    "`tools/call` at {} req/s, JSON, `session.store = \"memory\"` (the store rows' baseline, same rounds): p50 / p99 (µs)",
                    thousands(options.rate as f64)
                ),
                "—".into(),
                "—".into(),
                lat_us(memory),
                "—".into(),
                "—".into(),
            ]);
            let added = |o: &Outcome, q: f64| micros(o.p(q)) - micros(memory.p(q));
            let rtt = self.redis_rtt.map(|(p50, _)| micros(p50));
            for (store, goal) in [
                ("redis", rtt),
                ("redis-sentinel", rtt),
                ("sealed", Some(20.0)),
            ] {
                let Some(o) = find(&self.stores, store) else {
                    continue;
                };
                let (a50, a99) = (added(o, 0.5), added(o, 0.99));
                let (goal_text, met) = match (store, goal) {
                    ("redis" | "redis-sentinel", Some(rtt)) => (
                        format!(
                            "goal: within one loopback Redis round trip (PING paced at the same rate: p50 {rtt:.0} µs, p99 {:.0} µs)",
                            self.redis_rtt.map_or(0.0, |(_, p99)| micros(p99))
                        ),
                        judged(a50 <= rtt, &[Some(o), Some(memory)]),
                    ),
                    (_, Some(limit)) => (
                        format!("goal: p50 within {limit:.0} µs of memory"),
                        judged(a50 <= limit, &[Some(o), Some(memory)]),
                    ),
                    _ => ("—".into(), "—"),
                };
                let name = match store {
                    "redis-sentinel" => "`session.store = \"redis\"` under Sentinel (the primary a sentinel names; a replica)".to_owned(),
                    _ => format!("`session.store = \"{store}\"`"),
                };
                row([
                    format!("… {name}: p50 / p99 (µs)"),
                    "—".into(),
                    "—".into(),
                    lat_us(o),
                    format!(
                        "adds p50 **{a50:+.0} µs**, p99 **{a99:+.0} µs** over memory; {goal_text}"
                    ),
                    met.into(),
                ]);
            }
        }

        for creates in &self.creates {
            let d = creates.direct.as_ref();
            let p = creates.proxy.as_ref();
            let c = creates.connections;
            let rate = |o: &Outcome| thousands(o.rate());
            let lat = |o: &Outcome| format!("{:.3} / {:.3}", millis(o.p(0.5)), millis(o.p(0.99)));
            let ratio = match (p, d) {
                (Some(p), Some(d)) => format!("proxy/direct {:.2}", p.rate() / d.rate()),
                _ => "—".into(),
            };
            row([
                format!(
                    "`sessions/create` per second, {c} connection{} (direct: `initialize` + `initialized`)",
                    if c == 1 { "" } else { "s" }
                ),
                cell(d, rate),
                "—".into(),
                cell(p, rate),
                ratio,
                "—".into(),
            ]);
            let (ratio, met) = match (p, d) {
                (Some(p), Some(d)) => {
                    let diff = millis(p.p(0.5)) - millis(d.p(0.5));
                    (
                        format!("p50 difference **{diff:+.3} ms** (goal ≤ 0.200)"),
                        judged(diff <= 0.2, &[Some(p), Some(d)]),
                    )
                }
                _ => ("—".into(), "—"),
            };
            row([
                "… its latency p50 / p99 (ms)".into(),
                cell(d, lat),
                "—".into(),
                cell(p, lat),
                ratio,
                met.into(),
            ]);
        }

        if let Some(m) = &self.memory {
            for &(count, rss) in &m.points {
                let per = rss.saturating_sub(m.baseline) as f64 / count as f64;
                row([
                    format!(
                        "resident memory per idle session, {} sessions (memory store)",
                        thousands(count as f64)
                    ),
                    "—".into(),
                    "—".into(),
                    format!("{} B", thousands(per)),
                    format!(
                        "ΔRSS {:.1} MiB / {} sessions (goal < 2,048 B)",
                        rss.saturating_sub(m.baseline) as f64 / 1048576.0,
                        thousands(count as f64)
                    ),
                    if m.errors > 0 {
                        "**ERRORS**"
                    } else {
                        verdict(per < 2048.0)
                    }
                    .into(),
                ]);
            }
        }

        for (list, what) in [
            (&self.saturation, "at saturation"),
            (
                &self.paced_json,
                &*format!("at {} req/s, JSON", thousands(options.rate as f64)),
            ),
        ] {
            if list.is_empty() {
                continue;
            }
            let d = find(list, "direct");
            let n = find(list, "nginx");
            let p = find(list, "proxy");
            let hop = |o: &Outcome, name: &str| match (o.per_op(0), o.per_op(1)) {
                (Some(h), Some(u)) => format!("{name} {h:.1} (upstream {u:.1})"),
                _ => "—".into(),
            };
            let ratio = match (p.and_then(|p| p.per_op(0)), n.and_then(|n| n.per_op(0))) {
                (Some(p), Some(n)) if n > 0.0 => format!("proxy/nginx {:.2}", p / n),
                _ => "—".into(),
            };
            row([
                format!("CPU time per `tools/call` {what} (µs)"),
                d.and_then(|o| o.per_op(1))
                    .map_or("—".into(), |u| format!("upstream {u:.1}")),
                n.map_or("—".into(), |o| hop(o, "nginx")),
                p.map_or("—".into(), |o| hop(o, "proxy")),
                ratio,
                "—".into(),
            ]);
        }

        if let Some(eras) = &self.eras {
            let _ = writeln!(md);
            let _ = write!(md, "{}", eras.render(options));
        }
        if let Some(traces) = &self.traces {
            let _ = writeln!(md);
            let _ = write!(md, "{}", traces.render(options));
        }
        let _ = writeln!(md);
        let _ = writeln!(md, "{}", self.details(options));
        let _ = writeln!(md, "{}", machine(options, elapsed, &self.nginx_version));
        md
    }

    fn details(&self, options: &Options) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Notes:\n");
        let _ = writeln!(
            out,
            "- direct: the client's own `initialize` and `Mcp-Session-Id`; nginx: the same requests through nginx (`proxy_pass`, keep-alive upstream, `proxy_buffering off`, 2 workers, `access_log off`); proxy: a data-layer session per connection (`sessions/create`), `_meta[\"io.modelcontextprotocol/session\"]` with the latest `state` on every call, every answer checked for the session `_meta`; the proxy runs with `workers = {}` (`MCP_BENCH_PROXY_WORKERS`).",
            procs::proxy_workers()
        );
        if options.fetch_fields {
            let _ = writeln!(
                out,
                "- `--fetch-fields`: every request also carries the fields Node's `fetch` adds ({}).",
                support::http::FETCH_FIELDS
                    .iter()
                    .map(|(name, value)| format!("`{name}: {value}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(Ok(status)) = &self.rewrite_proof {
            let _ = writeln!(
                out,
                "- The upstream refuses a call that still carries the session `_meta` (checked at start: HTTP {status}), so every successful call through the proxy was rewritten."
            );
        }
        let _ = writeln!(
            out,
            "- Saturation: closed loop, {} keep-alive connections, {} round(s) of {} s per target (targets interleaved, {} s warm-up each); req/s and latencies over all rounds, the ratio is the median of the rounds' ratios. Paced: open loop at {} req/s over {} connections for {} s per target; latency counts from the due time whenever the target made the generator late (no coordinated omission). Added latency = proxy percentile − direct percentile in the same run.",
            options.connections,
            options.rounds,
            options.duration.as_secs_f64(),
            options.warmup.as_secs_f64(),
            thousands(options.rate as f64),
            options.paced_connections,
            options.duration.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "- CPU: user + system time of each process (/proc/<pid>/stat, the scheduler's exact runtime) over the measured window ÷ calls; nginx = master + workers. The load generator (this process) shares the same 2 cores."
        );
        if let Some(m) = &self.memory {
            let _ = writeln!(
                out,
                "- Memory: a fresh proxy; baseline VmRSS {:.1} MiB after {} warm-up sessions; then sessions created at {} /s ({} connections) and VmRSS read 0.5 s later: {}.",
                m.baseline as f64 / 1048576.0,
                thousands(m.warm_sessions as f64),
                thousands(m.create_rate),
                options.create_connections,
                m.points
                    .iter()
                    .map(|(n, rss)| format!(
                        "{} → {:.1} MiB",
                        thousands(*n as f64),
                        *rss as f64 / 1048576.0
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if m.points.len() >= 2 {
                let (n0, r0) = m.points[m.points.len() - 2];
                let (n1, r1) = m.points[m.points.len() - 1];
                let _ = writeln!(
                    out,
                    "- Marginal memory {}→{} sessions: {} B/session.",
                    thousands(n0 as f64),
                    thousands(n1 as f64),
                    thousands(r1.saturating_sub(r0) as f64 / (n1 - n0).max(1) as f64)
                );
            }
            if let Some(e) = &m.first_error {
                let _ = writeln!(out, "- Memory run: {} errors, first: `{e}`", m.errors);
            }
        }
        let all = self
            .saturation
            .iter()
            .map(|(l, o)| ("saturation", *l, o))
            .chain(self.paced_json.iter().map(|(l, o)| ("paced JSON", *l, o)))
            .chain(self.paced_sse.iter().map(|(l, o)| ("paced SSE", *l, o)))
            .chain(
                self.eras
                    .iter()
                    .flat_map(|e| e.paths.iter().map(|(p, o)| ("eras", p.label, o))),
            )
            .chain(
                self.creates
                    .iter()
                    .flat_map(|c| c.direct.iter().map(|o| ("handshake", "direct", o))),
            )
            .chain(
                self.creates
                    .iter()
                    .flat_map(|c| c.proxy.iter().map(|o| ("sessions/create", "proxy", o))),
            );
        let mut clean = true;
        let all: Vec<_> = all.collect();
        let noisy: Vec<String> = all
            .iter()
            .filter(|(_, _, o)| foreign(o) > 0.15)
            .map(|(scenario, label, o)| format!("{scenario} / {label} ({:.2} cores)", foreign(o)))
            .collect();
        let worst = all.iter().map(|(_, _, o)| foreign(o)).fold(0.0, f64::max);
        if noisy.is_empty() {
            let _ = writeln!(
                out,
                "- Other processes on the machine used at most {worst:.2} cores during any measured window."
            );
        } else {
            let _ = writeln!(
                out,
                "- **Other processes loaded the machine during: {}** — those numbers are not to be quoted; run again on a quiet machine.",
                noisy.join(", ")
            );
        }
        if let (Some(t), Some(p)) = (
            find(&self.saturation, PASS_THROUGH),
            find(&self.saturation, "proxy"),
        ) {
            let cpu = |o: &Outcome| o.per_op(0).map_or("?".into(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "- The proxy's HTTP hop alone (a legacy client through the same proxy, passed through untouched, measured in the same saturation rounds): {} req/s, p50 / p99 {} µs, proxy CPU {} µs per call — against {} µs per call with data-layer sessions.",
                thousands(t.rate()),
                lat_us(t),
                cpu(t),
                cpu(p)
            );
        }
        if let Some(f) = find(&self.saturation, FLOOR) {
            let cpu = |o: &Outcome| o.per_op(0).map_or("?".into(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "- The floor (a minimal HTTP/1.1 hop on one current-thread tokio runtime, `benches/support/floor.rs`: each message copied whole, nothing parsed beyond its framing; the same saturation rounds): {} req/s, p50 / p99 {} µs, CPU {} µs per call — what the runtime and the kernel cost one hop on this machine.",
                thousands(f.rate()),
                lat_us(f),
                cpu(f)
            );
        }
        if let (Some(f), Some(h), Some(r)) = (
            find(&self.saturation, FLOOR),
            find(&self.saturation, FLOOR_FIELDS),
            find(&self.saturation, FLOOR_FIELDS_RAW),
        ) {
            let cpu = |o: &Outcome| o.per_op(0).map_or("?".into(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "- The floor with heads read and written (`benches/support/floor/fields.rs`: each message taken out of its buffer as shared bytes, each head's fields made an `http::HeaderMap` of slices as the proxy's loops make it, the request's written on from it for the upstream (the fields that pass), the answer's written field by field; the same saturation rounds): {} req/s, CPU {} µs per call against the floor's {}; with each field written on as read, no map: {} req/s, {} µs — what the proxy's way with heads costs a hop, and what its maps do.",
                thousands(h.rate()),
                cpu(h),
                cpu(f),
                thousands(r.rate()),
                cpu(r)
            );
        }
        let on_uring: Vec<String> = [
            (FLOOR_URING, "on monoio"),
            (FLOOR_MONOIO, "on monoio with epoll"),
            (FLOOR_TOKIO_URING, "on tokio-uring"),
        ]
        .into_iter()
        .filter_map(|(label, what)| {
            let o = find(&self.saturation, label)?;
            let cpu = o.per_op(0).map_or("?".into(), |v| format!("{v:.1}"));
            Some(format!(
                "{what} {} req/s, CPU {cpu} µs per call",
                thousands(o.rate())
            ))
        })
        .collect();
        // Only beside an io_uring figure: monoio's epoll one is their control.
        let any_uring = [FLOOR_URING, FLOOR_TOKIO_URING]
            .iter()
            .any(|label| find(&self.saturation, label).is_some());
        if any_uring {
            let _ = writeln!(
                out,
                "- The same floor on io_uring (`benches/support/floor/`, the ring set up with {}; the same saturation rounds): {} — what io_uring, and what the runtime, would take off a hop.",
                support::floor::uring::setup_named(),
                on_uring.join("; ")
            );
        }
        // Where each hop's CPU went: its own user-space code, or the kernel on its behalf.
        let split = |o: &Outcome| match (o.per_op(HOP_USER), o.per_op(HOP_KERNEL)) {
            (Some(u), Some(s)) => format!("{u:.1} / {s:.1}"),
            _ => "?".into(),
        };
        // At saturation only: /proc's split is sampled by the scheduler's tick, steady
        // for a hop that runs all the time, not for a paced one that runs in short bursts
        // (benches/README.md, "The split is sampled").
        let splits: Vec<String> = self
            .saturation
            .iter()
            .filter(|(label, _)| *label != "direct")
            .map(|(label, o)| format!("{label} {}", split(o)))
            .collect();
        if !splits.is_empty() {
            let _ = writeln!(
                out,
                "- CPU per call at saturation, user / kernel (µs, the hop's own /proc accounting): {}.",
                splits.join(", ")
            );
        }
        if let (Some(n), Some(p)) = (
            find(&self.saturation, "nginx"),
            find(&self.saturation, "proxy"),
        ) {
            let irq = |o: &Outcome| o.per_op(4).map_or("?".into(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "- Interrupt time (the loopback network's receive path; charged to no process) per call at saturation: direct {}, nginx {}, proxy {} µs.",
                find(&self.saturation, "direct").map_or("?".into(), irq),
                irq(n),
                irq(p)
            );
        }
        for (scenario, label, o) in all {
            if o.errors > 0 || o.reconnects > 0 {
                clean = false;
                let _ = writeln!(
                    out,
                    "- **{scenario} / {label}: {} errors, {} reconnects** of {} calls; first error: `{}`",
                    o.errors,
                    o.reconnects,
                    o.ops,
                    o.first_error.as_deref().unwrap_or("-")
                );
            }
        }
        if clean {
            let _ = writeln!(out, "- No errors and no reconnects in any run.");
        }
        for note in &self.notes {
            let _ = writeln!(out, "- {note}");
        }
        out
    }
}

impl Eras {
    fn find(&self, label: &str) -> Option<&Outcome> {
        self.paths
            .iter()
            .find(|(p, _)| p.label == label)
            .map(|(_, o)| o)
    }

    /// The modern upstream's `server/discover`s during a path's measured windows.
    fn discovers(o: &Outcome) -> u64 {
        let (a, b) = &o.probe;
        match (a.get(DISCOVERS), b.get(DISCOVERS)) {
            (Some(a), Some(b)) => b.saturating_sub(*a),
            _ => 0,
        }
    }

    fn render(&self, options: &Options) -> String {
        let mut md = String::new();
        let rate = thousands(options.rate as f64);
        let _ = writeln!(
            md,
            "#### The eras: `tools/call` at {rate} req/s, JSON, each client era in front of each upstream era
"
        );
        let _ = writeln!(
            md,
            "| path | p50 / p99 (µs) | added over its baseline: p50 / p99 (µs) | proxy CPU per call (µs) | upstream CPU per call (µs) | `server/discover` during the windows |
| --- | ---: | ---: | ---: | ---: | ---: |"
        );
        let bridge_cpu = self.find(BRIDGE).and_then(|o| o.per_op(0));
        for (path, o) in &self.paths {
            let added = match self.find(path.baseline) {
                Some(base) if path.baseline != path.label => format!(
                    "{:+.0} / {:+.0}",
                    micros(o.p(0.5)) - micros(base.p(0.5)),
                    micros(o.p(0.99)) - micros(base.p(0.99))
                ),
                _ => "—".into(),
            };
            let proxy_cpu = match (path.proxied, o.per_op(0)) {
                (true, Some(cpu)) => match bridge_cpu {
                    Some(bridge) if path.label != BRIDGE && bridge > 0.0 => {
                        format!("{cpu:.1} ({:.2}× the bridge's)", cpu / bridge)
                    }
                    _ => format!("{cpu:.1}"),
                },
                _ => "—".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {added} | {proxy_cpu} | {} | {} |",
                path.what,
                cell(Some(o), lat_us),
                o.per_op(1).map_or("—".into(), |u| format!("{u:.1}")),
                if path.modern {
                    Self::discovers(o).to_string()
                } else {
                    "—".into()
                },
            );
        }
        let _ = writeln!(md);
        if let (Some(native), Some(bridge)) = (self.find(MODERN_PASS), self.find(BRIDGE))
            && let (Some(n), Some(b)) = (native.per_op(0), bridge.per_op(0))
        {
            let legacy = self
                .find(LEGACY_PASS)
                .and_then(|o| o.per_op(0))
                .map(|l| {
                    format!(
                        "; an old client passed through to the legacy upstream: {l:.1} µs ({:.2}× the native path's)",
                        l / n
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "- Proxy CPU per call, the native modern path against the reverse bridge (same run): **{n:.1} µs against {b:.1} µs ({:.2}×)**; added p50 {:+.0} µs against {:+.0} µs over the modern upstream direct{legacy}.",
                n / b,
                self.find(MODERN_DIRECT)
                    .map_or(0.0, |d| micros(native.p(0.5)) - micros(d.p(0.5))),
                self.find(MODERN_DIRECT)
                    .map_or(0.0, |d| micros(bridge.p(0.5)) - micros(d.p(0.5))),
            );
        }
        let calls: u64 = self
            .paths
            .iter()
            .filter(|(p, _)| p.modern && p.proxied)
            .map(|(_, o)| o.ops)
            .sum();
        let during: u64 = self
            .paths
            .iter()
            .filter(|(p, _)| p.modern)
            .map(|(_, o)| Self::discovers(o))
            .sum();
        let _ = writeln!(
            md,
            "- Finding the era: the modern upstream answered {} `server/discover` before the first window (the proxy finding its era, at start-up and first use) and **{during} during the measured windows**, in which the proxy in front of it served {} calls (its periodic health probe, one `server/discover` per `upstream.health_interval`, set to 1 h for this proxy so as not to count it); {} in all by the end.",
            self.discovers_before,
            thousands(calls as f64),
            self.discovers_after,
        );
        let _ = writeln!(
            md,
            "- Each path: open loop at {rate} req/s over {} connections, {} round(s) of {} s (paths interleaved, {} s warm-up each); the 2026-07-28 clients send the per-request `_meta` and the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers (the modern upstream refuses a request without them, 400 -32020); the old clients `initialize` once per connection (outside the windows) and call in their `Mcp-Session-Id`; every answer is checked (an old client's has no `resultType`). Proxy CPU: user + system of the proxy process over the windows ÷ calls; the modern paths share one proxy, the legacy pass-through is the main table's proxy.",
            options.paced_connections,
            options.rounds,
            options.duration.as_secs_f64(),
            options.warmup.as_secs_f64(),
        );
        md
    }
}

fn machine(options: &Options, elapsed: Duration, nginx: &str) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb as f64 / 1048576.0));
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("PRETTY_NAME=")
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_default();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR")])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = match (
        git(&["rev-parse", "--short", "HEAD"]),
        git(&["status", "--porcelain"]),
    ) {
        (Some(c), Some(s)) if !s.is_empty() => format!("{c} + local changes"),
        (Some(c), _) => c,
        _ => "unknown".into(),
    };
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    format!(
        "Machine: {cpus} CPUs ({cpu}), {mem}, Linux {kernel}, {os}; {nginx}; proxy at {commit}.  \n\
         Run: `benches/run.sh{}`{} on {}, {:.0} s in all (load generator, proxy, nginx and upstream on the same machine, loopback).",
        if args.is_empty() {
            String::new()
        } else {
            format!(" {}", args.join(" "))
        },
        if options.quick {
            " (quick mode: not for quoting)"
        } else {
            ""
        },
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        elapsed.as_secs_f64()
    )
}
