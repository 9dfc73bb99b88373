//! The load generator: MCP clients of both kinds over the raw HTTP/1.1 client, a closed
//! loop (N keep-alive connections, each sending its next request as soon as the last one
//! is answered) and a paced open loop (requests scheduled at a fixed rate, latency counted
//! from the intended send time whenever the target made the generator late).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::http::{self, AsyncConn, BlockingConn, Response};

const SESSION_META: &[u8] = br#""io.modelcontextprotocol/session":{"#;

/// How a target is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// A 2025-11-25 client: `initialize`, then the upstream's `Mcp-Session-Id` header.
    Legacy,
    /// A data-layer session client: `sessions/create`, then the session in `_meta`.
    DataLayer,
    /// A 2026-07-28 client: no session, the protocol version and capabilities in every
    /// request's `_meta`, the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers.
    Stateless(Conversation),
}

/// What a stateless client adds to say which conversation a call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    dead_code,
    reason = "built by the stateless bench only; the proxy bench shares this module"
)]
pub enum Conversation {
    /// Nothing.
    None,
    /// An `X-Conversation-Id` header of its own per client (`stateless.affinity =
    /// "pinned"` with `pin_header = "X-Conversation-Id"`).
    Header,
    /// A session handle of its own per client: `session_open` once (not measured), then
    /// `arguments.session` on every call (`stateless.affinity = "handles"`).
    Handle,
}

/// The stateless protocol version the benchmark's clients speak.
const STATELESS_VERSION: &str = "2026-07-28";

/// Distinct conversation ids across every client of the run.
static CONVERSATIONS: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// Answered as `application/json`.
    Json,
    /// Answered as `text/event-stream` (one event).
    Sse,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Json => "ok",
            Tool::Sse => "sse",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Target {
    pub label: &'static str,
    pub addr: SocketAddr,
    pub protocol: Protocol,
}

/// One step of a client's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Initialize,
    Initialized,
    Create,
    /// A stateless client's `session_open` (handles).
    OpenHandle,
    Call(Tool),
}

/// What one connection repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// `tools/call` inside the connection's session (opened once, not measured).
    Call(Tool),
    /// Opening a session: `sessions/create` (data layer) or `initialize` +
    /// `notifications/initialized` (legacy).
    Open,
}

/// An MCP client's protocol state on one connection.
#[derive(Debug)]
struct Client {
    protocol: Protocol,
    host: String,
    session: Option<String>,
    state: Option<String>,
    next_id: u64,
    request: Vec<u8>,
    body: Vec<u8>,
    /// A stateless client's `X-Conversation-Id`.
    conversation: Option<String>,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// The JSON string value after `key` (`"key":"` … `"`), no escapes expected.
fn string_after<'a>(body: &'a [u8], key: &[u8]) -> Option<&'a str> {
    let at = find(body, key)? + key.len();
    let len = memchr::memchr(b'"', &body[at..])?;
    std::str::from_utf8(&body[at..at + len]).ok()
}

impl Client {
    fn new(protocol: Protocol, addr: SocketAddr) -> Self {
        Client {
            protocol,
            host: addr.to_string(),
            session: None,
            state: None,
            next_id: 1,
            request: Vec::with_capacity(1024),
            body: Vec::with_capacity(512),
            conversation: (protocol == Protocol::Stateless(Conversation::Header)).then(|| {
                format!(
                    "conversation-{}",
                    CONVERSATIONS.fetch_add(1, Ordering::Relaxed)
                )
            }),
        }
    }

    fn open_steps(&self) -> &'static [Step] {
        match self.protocol {
            Protocol::Legacy => &[Step::Initialize, Step::Initialized],
            Protocol::DataLayer => &[Step::Create],
            Protocol::Stateless(Conversation::Handle) => &[Step::OpenHandle],
            Protocol::Stateless(_) => &[],
        }
    }

    fn steps(&self, work: Work) -> &'static [Step] {
        match work {
            Work::Open => self.open_steps(),
            Work::Call(Tool::Json) => &[Step::Call(Tool::Json)],
            Work::Call(Tool::Sse) => &[Step::Call(Tool::Sse)],
        }
    }

    /// The request bytes for `step`.
    fn request(&mut self, step: Step) -> &[u8] {
        if let Protocol::Stateless(_) = self.protocol {
            return self.stateless_request(step);
        }
        let id = self.next_id;
        self.next_id += 1;
        let body = &mut self.body;
        body.clear();
        body.extend_from_slice(br#"{"jsonrpc":"2.0","#);
        match step {
            Step::Initialize => {
                body.extend_from_slice(format!(r#""id":{id},"method":"initialize","params":{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"mcp-bench","version":"1.0.0"}}}}}}"#, super::upstream::VERSION).as_bytes());
            }
            Step::Initialized => {
                body.extend_from_slice(br#""method":"notifications/initialized"}"#);
            }
            Step::Create => {
                body.extend_from_slice(
                    format!(r#""id":{id},"method":"sessions/create"}}"#).as_bytes(),
                );
            }
            Step::OpenHandle => unreachable!("stateless only"),
            Step::Call(tool) => {
                body.extend_from_slice(
                    format!(
                        r#""id":{id},"method":"tools/call","params":{{"name":"{}","arguments":{{}}"#,
                        tool.name()
                    )
                    .as_bytes(),
                );
                if self.protocol == Protocol::DataLayer {
                    body.extend_from_slice(
                        br#","_meta":{"io.modelcontextprotocol/session":{"sessionId":""#,
                    );
                    body.extend_from_slice(self.session.as_deref().unwrap_or("").as_bytes());
                    body.push(b'"');
                    if let Some(state) = &self.state {
                        body.extend_from_slice(br#","state":""#);
                        body.extend_from_slice(state.as_bytes());
                        body.push(b'"');
                    }
                    body.extend_from_slice(b"}}");
                }
                body.extend_from_slice(b"}}");
            }
        }
        self.request.clear();
        let session = if step == Step::Initialize || step == Step::Create {
            None
        } else {
            self.session.as_deref()
        };
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(2);
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session));
            if self.protocol == Protocol::Legacy {
                headers.push(("MCP-Protocol-Version", super::upstream::VERSION));
            }
        }
        http::post(&mut self.request, &self.host, "/mcp", &headers, &self.body);
        &self.request
    }

    /// A stateless client's request: `tools/call` (or `session_open`) with the per-request
    /// `_meta` and headers of 2026-07-28, its conversation header or handle if it has one.
    fn stateless_request(&mut self, step: Step) -> &[u8] {
        let id = self.next_id;
        self.next_id += 1;
        let name = match step {
            Step::OpenHandle => "session_open",
            Step::Call(tool) => tool.name(),
            other => unreachable!("{other:?} is not a stateless step"),
        };
        let body = &mut self.body;
        body.clear();
        body.extend_from_slice(
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{"#)
                .as_bytes(),
        );
        if let (Step::Call(_), Some(handle)) = (step, &self.session) {
            body.extend_from_slice(br#""session":""#);
            body.extend_from_slice(handle.as_bytes());
            body.push(b'"');
        }
        body.extend_from_slice(
            format!(r#"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{STATELESS_VERSION}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#)
                .as_bytes(),
        );
        let mut headers: Vec<(&str, &str)> = vec![
            ("MCP-Protocol-Version", STATELESS_VERSION),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", name),
        ];
        if let Some(conversation) = &self.conversation {
            headers.push(("X-Conversation-Id", conversation));
        }
        self.request.clear();
        http::post(&mut self.request, &self.host, "/mcp", &headers, &self.body);
        &self.request
    }

    /// Checks the answer to `step` and takes what the client keeps from it.
    fn accept(&mut self, step: Step, response: &Response) -> Result<(), String> {
        let id = self.next_id - 1;
        let fail = |why: &str| Err(format!("{step:?}: {why}: {}", response.describe()));
        match step {
            Step::OpenHandle => {
                if response.status != 200 || find(&response.body, br#""isError":false"#).is_none() {
                    return fail("session_open failed");
                }
                let Some(handle) = string_after(&response.body, br#""session":""#) else {
                    return fail("no handle in structuredContent");
                };
                self.session = Some(handle.to_owned());
            }
            Step::Initialize => {
                if response.status != 200
                    || find(&response.body, br#""protocolVersion":"2025-11-25""#).is_none()
                {
                    return fail("not an InitializeResult");
                }
                match &response.session_id {
                    Some(session) => self.session = Some(session.clone()),
                    None => return fail("no Mcp-Session-Id"),
                }
            }
            Step::Initialized => {
                if response.status != 202 {
                    return fail("expected 202");
                }
            }
            Step::Create => {
                if response.status != 200 {
                    return fail("expected 200");
                }
                let Some(session) = string_after(&response.body, br#""sessionId":""#) else {
                    return fail("no sessionId");
                };
                if response.session_id.as_deref() != Some(session) {
                    return fail("Mcp-Session-Id header differs from the sessionId");
                }
                self.session = Some(session.to_owned());
                self.state = string_after(&response.body, br#""state":""#).map(str::to_owned);
                if self.state.is_none() {
                    return fail("no state");
                }
            }
            Step::Call(tool) => {
                if response.status != 200 {
                    return fail("expected 200");
                }
                if (tool == Tool::Sse) != response.is_sse() {
                    return fail("unexpected Content-Type");
                }
                if tool == Tool::Sse && !response.body.starts_with(b"event: message\ndata: {") {
                    return fail("not one message event");
                }
                // `resultType` comes first from a modern server, last when the proxy
                // adds it to a legacy server's result.
                let result = find(&response.body, br#""result":{"#);
                let content = find(
                    &response.body,
                    br#""content":[{"type":"text","text":"ok"}]"#,
                );
                if find(&response.body, format!(r#""id":{id},"#).as_bytes()).is_none()
                    || !matches!((result, content), (Some(r), Some(c)) if r < c)
                {
                    return fail("not the tool's result for this id");
                }
                let complete = find(&response.body, br#""resultType":"complete""#).is_some();
                match self.protocol {
                    Protocol::Stateless(_) if !complete => {
                        return fail("not a complete 2026-07-28 result");
                    }
                    // An old client never sees 2026-07-28's members (through the
                    // reverse bridge, the proxy takes them off).
                    Protocol::Legacy if find(&response.body, b"\"resultType\"").is_some() => {
                        return fail("a 2026-07-28 resultType reached a 2025-11-25 client");
                    }
                    _ => {}
                }
                if self.protocol == Protocol::DataLayer {
                    let Some(at) = find(&response.body, SESSION_META) else {
                        return fail("no session _meta in the result");
                    };
                    let stamp = &response.body[at..];
                    let session = self.session.as_deref().unwrap_or("");
                    if string_after(stamp, br#""sessionId":""#) != Some(session) {
                        return fail("session _meta names another session");
                    }
                    match string_after(stamp, br#""state":""#) {
                        Some(state) => self.state = Some(state.to_owned()),
                        None => return fail("no state in the session _meta"),
                    }
                }
            }
        }
        Ok(())
    }
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Operations completed inside the measured window.
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Length of the measured window.
    pub window: Duration,
    /// Latency in nanoseconds.
    pub latency: Histogram<u64>,
    /// TCP connections opened (reconnects included) beyond one per client.
    pub reconnects: u64,
    /// The probe's readings at the start and the end of the window.
    pub probe: (Vec<u64>, Vec<u64>),
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64()
    }

    pub fn p(&self, q: f64) -> Duration {
        Duration::from_nanos(self.latency.value_at_quantile(q))
    }

    /// Probe difference per operation (CPU µs per op for CPU probes).
    pub fn per_op(&self, index: usize) -> Option<f64> {
        let (a, b) = &self.probe;
        let delta = b.get(index)?.checked_sub(*a.get(index)?)?;
        (self.ops > 0).then(|| delta as f64 / self.ops as f64)
    }

    /// Probe difference as a share of the window on all CPUs (0.5 = one of two cores).
    pub fn share(&self, index: usize) -> Option<f64> {
        let (a, b) = &self.probe;
        let delta = b.get(index)?.checked_sub(*a.get(index)?)?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        Some(delta as f64 / 1e6 / self.window.as_secs_f64() / cpus)
    }

    /// Merges another run of the same scenario (more rounds).
    pub fn merge(&mut self, other: Outcome) {
        self.ops += other.ops;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.window += other.window;
        self.latency.add(&other.latency).ok();
        self.reconnects += other.reconnects;
        let (a, b) = other.probe;
        for (mine, theirs) in [(&mut self.probe.0, a), (&mut self.probe.1, b)] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            // Keep differences additive: start sums with start, end with end.
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 120_000_000_000, 3).expect("histogram")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1_000)
}

/// When a closed loop stops.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// Run `warmup`, then measure for `measure`.
    Timed { warmup: Duration, measure: Duration },
    /// Do `n` operations in all (every one measured).
    Count(u64),
}

#[derive(Debug, Default)]
struct Tally {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    reconnects: u64,
}

/// Closed loop: `connections` clients, each on its own keep-alive connection, doing
/// `work` back to back. `probe` is read at the start and the end of the measured window.
pub async fn closed_loop(
    target: &Target,
    connections: usize,
    work: Work,
    stop: Stop,
    probe: &dyn Fn() -> Vec<u64>,
) -> Outcome {
    let (times_tx, times_rx) = tokio::sync::watch::channel(None::<(Instant, Instant)>);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(connections);
    let remaining = Arc::new(AtomicU64::new(match stop {
        Stop::Count(n) => n,
        Stop::Timed { .. } => u64::MAX,
    }));
    let mut workers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let target = target.clone();
        let mut times_rx = times_rx.clone();
        let ready_tx = ready_tx.clone();
        let remaining = remaining.clone();
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut latency = histogram();
            let mut client = Client::new(target.protocol, target.addr);
            let mut conn = match AsyncConn::connect(target.addr).await {
                Ok(conn) => conn,
                Err(e) => {
                    let _ = ready_tx
                        .send(Err(format!("connect {}: {e}", target.addr)))
                        .await;
                    return (tally, latency);
                }
            };
            if let Work::Call(_) = work {
                for &step in client.open_steps() {
                    let request = client.request(step);
                    let answer = conn.roundtrip(request).await.map_err(|e| e.to_string());
                    if let Err(e) = answer.and_then(|r| client.accept(step, &r)) {
                        let _ = ready_tx.send(Err(e)).await;
                        return (tally, latency);
                    }
                }
            }
            let _ = ready_tx.send(Ok(())).await;
            drop(ready_tx);
            let Ok(times) = times_rx.wait_for(Option::is_some).await.map(|t| *t) else {
                return (tally, latency);
            };
            let (measure_from, end) = times.unwrap_or_else(|| (Instant::now(), Instant::now()));
            loop {
                let sent = Instant::now();
                match stop {
                    Stop::Timed { .. } if sent >= end => break,
                    Stop::Count(_) => {
                        if remaining
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                                n.checked_sub(1)
                            })
                            .is_err()
                        {
                            break;
                        }
                    }
                    Stop::Timed { .. } => {}
                }
                let mut result = Ok(());
                for &step in client.steps(work) {
                    let request = client.request(step);
                    result = match conn.roundtrip(request).await {
                        Ok(response) => client.accept(step, &response),
                        Err(e) => Err(format!("{step:?}: {e}")),
                    };
                    if result.is_err() {
                        break;
                    }
                }
                let done = Instant::now();
                let counted = match stop {
                    Stop::Timed { .. } => sent >= measure_from && done <= end,
                    Stop::Count(_) => true,
                };
                match result {
                    Ok(()) if counted => {
                        tally.ops += 1;
                        latency.saturating_record(nanos(done - sent));
                    }
                    Ok(()) => {}
                    Err(e) => {
                        if counted {
                            tally.errors += 1;
                        }
                        tally.first_error.get_or_insert(e);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            tally.reconnects = conn.connects - 1;
            (tally, latency)
        }));
    }
    drop(ready_tx);
    let mut setup_error = None;
    while let Some(ready) = ready_rx.recv().await {
        if let Err(e) = ready {
            setup_error.get_or_insert(e);
        }
    }
    if let Some(e) = setup_error {
        panic!(
            "{}: could not open the clients' sessions: {e}",
            target.label
        );
    }
    let start = Instant::now();
    let (measure_from, end) = match stop {
        Stop::Timed { warmup, measure } => (start + warmup, start + warmup + measure),
        Stop::Count(_) => (start, start + Duration::from_secs(3600)),
    };
    let _ = times_tx.send(Some((measure_from, end)));
    tokio::time::sleep_until(measure_from.into()).await;
    let before = probe();
    let mut results = Vec::with_capacity(workers.len());
    if let Stop::Timed { .. } = stop {
        tokio::time::sleep_until(end.into()).await;
    }
    let mut after = probe();
    for worker in workers {
        results.push(worker.await.expect("worker"));
    }
    let finished = Instant::now();
    if let Stop::Count(_) = stop {
        after = probe();
    }
    let window = match stop {
        Stop::Timed { measure, .. } => measure,
        Stop::Count(_) => finished - start,
    };
    let mut outcome = Outcome {
        ops: 0,
        errors: 0,
        first_error: None,
        window,
        latency: histogram(),
        reconnects: 0,
        probe: (before, after),
    };
    for (tally, latency) in results {
        outcome.ops += tally.ops;
        outcome.errors += tally.errors;
        outcome.reconnects += tally.reconnects;
        if outcome.first_error.is_none() {
            outcome.first_error = tally.first_error;
        }
        outcome.latency.add(&latency).ok();
    }
    outcome
}

/// Open loop at `rate` requests/s over `connections` blocking connections (one thread
/// each). Request `i` is due at `t0 + i / rate`; whichever connection is free takes the
/// next due request and sends it on time. If none was free when it fell due (the target
/// is behind), its latency is counted from when it was due, so a slow target cannot hide
/// its queueing (no coordinated omission). The generator's own timer overshoot (sleeping
/// until a due time) is not counted against the target.
pub fn open_loop(
    target: &Target,
    connections: usize,
    rate: u64,
    tool: Tool,
    warmup: Duration,
    measure: Duration,
    probe: &dyn Fn() -> Vec<u64>,
) -> Outcome {
    let next = AtomicU64::new(0);
    let times: OnceLock<(Instant, Instant, Instant)> = OnceLock::new();
    let ready = Barrier::new(connections + 1);
    let go = Barrier::new(connections + 1);
    let period_ns = 1_000_000_000u128 / u128::from(rate.max(1));
    let (results, before, after) = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(connections);
        for _ in 0..connections {
            handles.push(scope.spawn(|| {
                let mut tally = Tally::default();
                let mut latency = histogram();
                let mut client = Client::new(target.protocol, target.addr);
                let setup = BlockingConn::connect(target.addr)
                    .map_err(|e| format!("connect {}: {e}", target.addr))
                    .and_then(|mut conn| {
                        for &step in client.open_steps() {
                            let request = client.request(step);
                            let response = conn.roundtrip(request).map_err(|e| e.to_string())?;
                            client.accept(step, &response)?;
                        }
                        Ok(conn)
                    });
                ready.wait();
                go.wait();
                let mut conn = match setup {
                    Ok(conn) => conn,
                    Err(e) => {
                        tally.first_error = Some(e);
                        tally.errors = u64::MAX;
                        return (tally, latency);
                    }
                };
                let Some(&(t0, measure_from, end)) = times.get() else {
                    return (tally, latency);
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let due = t0
                        + Duration::from_nanos(
                            u64::try_from(period_ns * u128::from(i)).unwrap_or(u64::MAX),
                        );
                    if due >= end {
                        break;
                    }
                    let picked = Instant::now();
                    let from = if picked <= due {
                        std::thread::sleep(due - picked);
                        Instant::now()
                    } else {
                        due
                    };
                    let request = client.request(Step::Call(tool));
                    let result = match conn.roundtrip(request) {
                        Ok(response) => client.accept(Step::Call(tool), &response),
                        Err(e) => Err(e.to_string()),
                    };
                    let done = Instant::now();
                    let counted = due >= measure_from;
                    match result {
                        Ok(()) if counted => {
                            tally.ops += 1;
                            latency.saturating_record(nanos(done - from));
                        }
                        Ok(()) => {}
                        Err(e) => {
                            if counted {
                                tally.errors += 1;
                            }
                            tally.first_error.get_or_insert(e);
                        }
                    }
                }
                tally.reconnects = conn.connects - 1;
                (tally, latency)
            }));
        }
        ready.wait();
        let t0 = Instant::now() + Duration::from_millis(5);
        let measure_from = t0 + warmup;
        let end = measure_from + measure;
        let _ = times.set((t0, measure_from, end));
        go.wait();
        std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
        let before = probe();
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let after = probe();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("open-loop thread"))
            .collect();
        (results, before, after)
    });
    let mut outcome = Outcome {
        ops: 0,
        errors: 0,
        first_error: None,
        window: measure,
        latency: histogram(),
        reconnects: 0,
        probe: (before, after),
    };
    for (tally, latency) in results {
        if tally.errors == u64::MAX {
            panic!(
                "{}: could not open the clients' sessions: {}",
                target.label,
                tally.first_error.unwrap_or_default()
            );
        }
        outcome.ops += tally.ops;
        outcome.errors += tally.errors;
        outcome.reconnects += tally.reconnects;
        if outcome.first_error.is_none() {
            outcome.first_error = tally.first_error;
        }
        outcome.latency.add(&latency).ok();
    }
    outcome
}

/// One session opened and one call of each kind, checked: the targets work before they
/// are measured.
pub fn smoke(target: &Target) -> Result<(), String> {
    smoke_calls(target, &[Tool::Json, Tool::Sse, Tool::Json])
}

/// A session opened and a call of each of `tools`, checked (a target that may answer
/// an event stream's one response as JSON — the reverse bridge — is smoked with JSON
/// calls only).
pub fn smoke_calls(target: &Target, tools: &[Tool]) -> Result<(), String> {
    let mut client = Client::new(target.protocol, target.addr);
    let mut conn = BlockingConn::connect(target.addr).map_err(|e| e.to_string())?;
    let steps: Vec<Step> = client
        .open_steps()
        .iter()
        .copied()
        .chain(tools.iter().map(|&tool| Step::Call(tool)))
        .collect();
    for step in steps {
        let request = client.request(step);
        let response = conn.roundtrip(request).map_err(|e| e.to_string())?;
        client.accept(step, &response)?;
    }
    Ok(())
}

/// Sends a `tools/call` that still carries the session `_meta` straight to the upstream
/// (in a legacy session) and returns the HTTP status: the upstream must refuse it (400),
/// which is what makes every successful call through the proxy proof of the rewrite.
pub fn upstream_refuses_session_meta(upstream: SocketAddr) -> Result<u16, String> {
    let mut client = Client::new(Protocol::Legacy, upstream);
    let mut conn = BlockingConn::connect(upstream).map_err(|e| e.to_string())?;
    for &step in client.open_steps() {
        let request = client.request(step);
        let response = conn.roundtrip(request).map_err(|e| e.to_string())?;
        client.accept(step, &response)?;
    }
    let session = client.session.clone().unwrap_or_default();
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ok","arguments":{},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"mcps_x"}}}}"#;
    let mut request = Vec::new();
    http::post(
        &mut request,
        &upstream.to_string(),
        "/mcp",
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", super::upstream::VERSION),
        ],
        body,
    );
    conn.roundtrip(&request)
        .map(|r| r.status)
        .map_err(|e| e.to_string())
}
