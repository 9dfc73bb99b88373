//! The Grafana dashboard (`docs/grafana/mcp-session-proxy.json`) and the metrics reference
//! (`docs/src/reference/metrics.md`) against what the real binary exports at `/metrics`.
//!
//! Two proxies are run so that every metric family shows (a family with labels shows
//! nothing until something is counted in it): one before its embedded demo server, with
//! `[auth]`, a rule, a per-caller limit, sessions in a real Redis and a short header
//! timeout, made to refuse a request without a token, open and use a session, refuse a
//! caller's second one, and close a
//! connection that sent nothing; one before a stdio server (its warm pool), over its
//! memory limit, made to shed a `sessions/create`. Their expositions together are what
//! the proxy exports (every metric the code registers shows there, as the very family it
//! registers: the test says when one needs traffic it does not make yet). Then:
//!
//! - every metric an expression of the dashboard queries (its panels' `expr`, its
//!   template variables' queries) is a series of that exposition;
//! - the dashboard is importable as the book says: schema 39, every query on the
//!   `${datasource}` variable, `job` and `instance` variables (panels inside collapsed
//!   rows, `panels[].panels[]`, as much as the others);
//! - its page (`docs/src/observe/dashboard.md`) has a `##` heading for each row and a
//!   `###` heading for each panel, under its row's, and no `###` heading that is not a
//!   panel's;
//! - every metric the reference's tables name is exported, with the type the table
//!   gives and every label its samples carry; and every family exported is in a table.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::pages;
use common::binary::ProxyProcess;
use common::fleet::Redis;
use common::{bearer, eventually_async, http_client, post_json};

const DASHBOARD: &str = "docs/grafana/mcp-session-proxy.json";
const REFERENCE: &str = "docs/src/reference/metrics.md";
const PAGE: &str = "docs/src/observe/dashboard.md";

/// The smallest `limits.max_memory` allowed (16 MiB): the shedding proxy's.
const MAX_MEMORY: u64 = 16 * 1024 * 1024;

const SECRET: &str = "the dashboard test's hs256 secret, 32 bytes or more";
const ISSUER: &str = "https://idp.test/";
const AUDIENCE: &str = "https://proxy.test/mcp";
const ADMIN_TOKEN: &str = "dashboard-test-admin-token";
/// The key sealing `state`, required with the Redis store.
const STATE_KEY: &str = "da5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5eda5e";

/// The whole test's bound: two proxies started, a few requests, a header timeout.
const WITHIN: Duration = Duration::from_secs(90);

/// What `/metrics` exports: each family's type, and the labels its samples carry.
#[derive(Debug, Default)]
struct Exposition {
    /// Family name (as its `# TYPE` line names it) → `counter`, `gauge`, `histogram`.
    families: BTreeMap<String, String>,
    /// Family name → label names seen on its samples (`le` aside).
    labels: BTreeMap<String, BTreeSet<String>>,
    /// Every sample's name (`…_total`, `…_bucket`…).
    samples: BTreeSet<String>,
}

impl Exposition {
    /// Parses an OpenMetrics text exposition.
    fn parse(text: &str) -> Exposition {
        let mut exposition = Exposition::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("a # TYPE line without a type: {line:?}"));
                exposition
                    .families
                    .insert(name.to_owned(), kind.trim().to_owned());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                let name = &line[..end];
                let labels = match line[end..].strip_prefix('{') {
                    Some(rest) => label_names(rest),
                    None => Vec::new(),
                };
                let family = exposition
                    .family_of(name)
                    .unwrap_or_else(|| panic!("the sample {name} follows no # TYPE line"));
                exposition
                    .labels
                    .entry(family)
                    .or_default()
                    .extend(labels.into_iter().filter(|l| l != "le"));
                exposition.samples.insert(name.to_owned());
            }
        }
        exposition
    }

    /// Both together (two processes' expositions).
    fn merge(mut self, other: Exposition) -> Exposition {
        self.families.extend(other.families);
        for (family, labels) in other.labels {
            self.labels.entry(family).or_default().extend(labels);
        }
        self.samples.extend(other.samples);
        self
    }

    /// The names of the samples a family of `kind` called `family` has.
    fn series_of(family: &str, kind: &str) -> Vec<String> {
        match kind {
            "counter" => vec![format!("{family}_total")],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{family}{suffix}"))
                .collect(),
            _ => vec![family.to_owned()],
        }
    }

    /// The family whose sample `name` is.
    fn family_of(&self, name: &str) -> Option<String> {
        self.families
            .iter()
            .find(|(family, kind)| {
                Exposition::series_of(family, kind)
                    .iter()
                    .any(|s| s == name)
            })
            .map(|(family, _)| family.clone())
    }

    /// Every series name the families have (whether a sample showed yet or not).
    fn series(&self) -> BTreeSet<String> {
        self.families
            .iter()
            .flat_map(|(family, kind)| Exposition::series_of(family, kind))
            .collect()
    }
}

/// The label names of a sample, from just after its `{`.
fn label_names(rest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        let name: String = chars
            .by_ref()
            .take_while(|&c| c != '=' && c != '}')
            .collect();
        let name = name.trim().trim_start_matches(',').trim();
        if name.is_empty() {
            return names;
        }
        names.push(name.to_owned());
        // The quoted value, escapes and all.
        if chars.next() != Some('"') {
            return names;
        }
        let mut escaped = false;
        for c in chars.by_ref() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => break,
                _ => {}
            }
        }
    }
}

/// The metric names a PromQL expression queries: its identifiers, less functions and
/// aggregations (followed by `(`), keywords, the label lists of `by`, `without`, `on`,
/// `ignoring`, `group_left` and `group_right`, label matchers (`{…}`), ranges (`[…]`),
/// strings, numbers and Grafana variables (`$…`).
fn queried_metrics(expr: &str) -> BTreeSet<String> {
    const GROUPING: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
    // Aggregations may be followed by their grouping (`sum by (le) (…)`), not `(`.
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut metrics = BTreeSet::new();
    let mut i = 0;
    // Skips from the opener at `i` to just after its closer.
    let skip = |i: usize, open: char, close: char| -> usize {
        let mut depth = 0;
        let mut quoted = false;
        let mut j = i;
        while j < chars.len() {
            let c = chars[j];
            if quoted {
                if c == '\\' {
                    j += 1;
                } else if c == '"' {
                    quoted = false;
                }
            } else if c == '"' {
                quoted = true;
            } else if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            j += 1;
        }
        panic!("unbalanced {open}{close} in {expr:?}")
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip(i, '{', '}');
        } else if c == '[' {
            i = skip(i, '[', ']');
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A variable or a number: the whole word.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.:".contains(chars[i]))
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = chars.get(next) == Some(&'(');
            if GROUPING.contains(&word.as_str()) {
                if called {
                    i = skip(next, '(', ')');
                }
            } else if !called
                && !AGGREGATIONS.contains(&word.as_str())
                && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
            {
                metrics.insert(word);
            }
        } else {
            i += 1;
        }
    }
    metrics
}

/// A panel of the dashboard, wherever it is.
struct Panel<'a> {
    /// Its JSON.
    value: &'a Value,
    /// Its title (`?` without one).
    title: &'a str,
    /// Whether it is a row.
    row: bool,
    /// The title of the row it is in, if any: the row it is nested in (a collapsed row's
    /// `panels`), or else the last row before it.
    within: Option<&'a str>,
}

/// Every panel of the dashboard, in order: those of `panels[]`, and those nested in
/// rows (`panels[].panels[]`, a collapsed row's), after their row.
fn panels(dashboard: &Value) -> Vec<Panel<'_>> {
    fn walk<'a>(list: &'a Value, parent: Option<&'a str>, into: &mut Vec<Panel<'a>>) {
        let mut last_row = parent;
        for value in list.as_array().into_iter().flatten() {
            let title = value["title"].as_str().unwrap_or("?");
            let row = value["type"] == "row";
            into.push(Panel {
                value,
                title,
                row,
                within: if row { parent } else { last_row },
            });
            if row && parent.is_none() {
                last_row = Some(title);
            }
            walk(&value["panels"], Some(title), into);
        }
    }
    let mut all = Vec::new();
    walk(&dashboard["panels"], None, &mut all);
    all
}

/// Every string under an `expr` key in `value` (a panel's nested panels aside: they are
/// panels of their own), with where it is.
fn expressions(value: &Value, at: &str, into: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => into.push((at.to_owned(), expr.clone())),
                    ("panels", _) => {}
                    _ => expressions(v, at, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| expressions(v, at, into)),
        _ => {}
    }
}

/// Every expression of the dashboard's panels, nested ones included, with its panel.
fn panel_expressions(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for panel in panels(dashboard) {
        expressions(panel.value, &format!("panel {:?}", panel.title), &mut found);
    }
    found
}

/// What is wrong with the dashboard's panels' data sources: each panel that is not a row,
/// nested or not, and each of its queries that names one, on `${datasource}`.
fn datasource_problems(dashboard: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for panel in panels(dashboard).iter().filter(|p| !p.row) {
        let title = panel.title;
        if panel.value["datasource"]["uid"] != "${datasource}" {
            problems.push(format!(
                "{DASHBOARD}: panel {title:?} does not query the ${{datasource}} variable"
            ));
        }
        for target in panel.value["targets"].as_array().into_iter().flatten() {
            let source = &target["datasource"];
            if !source.is_null() && source["uid"] != "${datasource}" {
                problems.push(format!(
                    "{DASHBOARD}: a query of panel {title:?} ({}) is not on the \
                     ${{datasource}} variable",
                    target["refId"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    problems
}

/// The headings of a page outside its code blocks: `(level, text, the text of the `##`
/// heading it is under)`.
fn headings(text: &str) -> Vec<(usize, String, Option<String>)> {
    let mut found = Vec::new();
    let mut section: Option<String> = None;
    for line in pages::prose_lines(text) {
        if !line.starts_with('#') {
            continue;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        let Some(text) = line[level..].strip_prefix(' ') else {
            continue;
        };
        let text = text.trim().to_owned();
        if level == 2 {
            section = Some(text.clone());
        }
        found.push((level, text, section.clone()));
    }
    found
}

/// What is wrong between the dashboard's panels and its page: each row a `##` heading,
/// each panel a `###` heading under its row's, each `###` heading a panel.
fn page_problems(dashboard: &Value, page: &str) -> Vec<String> {
    let headings = headings(page);
    let mut problems = Vec::new();
    let panels = panels(dashboard);
    for panel in &panels {
        let title = panel.title;
        let level = if panel.row { 2 } else { 3 };
        let marks = "#".repeat(level);
        let found: Vec<&Option<String>> = headings
            .iter()
            .filter(|(l, text, _)| *l == level && text == title)
            .map(|(_, _, section)| section)
            .collect();
        let what = if panel.row { "row" } else { "panel" };
        match found.as_slice() {
            [] => problems.push(format!(
                "{PAGE}: no heading `{marks} {title}` for the dashboard's {what} {title:?}"
            )),
            [section] if !panel.row && section.as_deref() != panel.within => {
                problems.push(format!(
                    "{PAGE}: `{marks} {title}` is under {:?}, but the panel is in the row {:?}",
                    section.as_deref().unwrap_or("no `##` heading"),
                    panel.within.unwrap_or("(none)")
                ));
            }
            [_] => {}
            _ => problems.push(format!("{PAGE}: `{marks} {title}` is there twice")),
        }
    }
    for (level, text, _) in &headings {
        if *level == 3 && !panels.iter().any(|p| !p.row && p.title == text) {
            problems.push(format!(
                "{PAGE}: `### {text}` names no panel of {DASHBOARD}"
            ));
        }
    }
    problems
}

/// The dashboard's template variables' queries: for `label_values(METRIC…, label)`, the
/// selector it reads.
fn variable_queries(dashboard: &Value) -> Vec<(String, String)> {
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("the dashboard has templating.list");
    variables
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().unwrap_or("?");
            let query = v["definition"]
                .as_str()
                .or_else(|| v["query"]["query"].as_str())
                .or_else(|| v["query"].as_str())
                .unwrap_or_else(|| panic!("the variable {name} has no query"));
            let selector = query
                .strip_prefix("label_values(")
                .and_then(|inner| inner.rsplit_once(','))
                .map_or(query, |(selector, _)| selector);
            (format!("variable ${name}"), selector.to_owned())
        })
        .collect()
}

/// A row of the reference's tables: the metric, its type and labels cells, its line.
struct Row {
    metric: String,
    kind: String,
    labels: String,
    line: usize,
}

/// The rows of every table of the reference whose first cell is a metric in backticks.
fn reference_rows(text: &str) -> Vec<Row> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with('|'))
        .filter_map(|(n, line)| {
            let cells: Vec<&str> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let metric = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            Some(Row {
                metric: metric.to_owned(),
                kind: cells.get(1).copied().unwrap_or("").to_owned(),
                labels: cells.get(2).copied().unwrap_or("").to_owned(),
                line: n + 1,
            })
        })
        .collect()
}

/// The family a row's metric names: itself, or the counter it is the `_total` of.
fn family_named(exposition: &Exposition, metric: &str) -> Option<String> {
    if exposition.families.contains_key(metric) {
        return Some(metric.to_owned());
    }
    exposition.family_of(metric)
}

/// How the reference names a family: a histogram by its name, a counter or a gauge by
/// its sample's.
fn shown_as(family: &str, kind: &str) -> String {
    match kind {
        "histogram" => family.to_owned(),
        _ => Exposition::series_of(family, kind).remove(0),
    }
}

/// The families `register(…)` and `register_with_unit(…)` make anywhere in `src/`, with
/// the file: every metric the code registers. A call's name is its first string literal;
/// `registry.register` is on the sub-registry the file makes with
/// `sub_registry_with_prefix("…")`, so its family is `PREFIX_NAME`; `root.register_with_unit`
/// is on the root, unprefixed (the OpenTelemetry conventions' names), and its family is
/// `NAME_UNIT`.
fn registered_in_source() -> Vec<(String, String)> {
    let mut registered = Vec::new();
    for path in pages::files_under(&pages::root().join("src"), "rs") {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(pages::root()).unwrap_or(&path);
        let file = file.display().to_string();
        for call in ["registry.register(", "root.register_with_unit("] {
            for (at, _) in text.match_indices(call) {
                let rest = &text[at + call.len()..];
                let Some((name, args)) = rest
                    .trim_start()
                    .strip_prefix('"')
                    .and_then(|r| r.split_once('"'))
                else {
                    continue;
                };
                let family = if call.starts_with("registry.") {
                    let prefix = text
                        .split_once("sub_registry_with_prefix(\"")
                        .and_then(|(_, r)| r.split_once('"'))
                        .map(|(prefix, _)| prefix)
                        .unwrap_or_else(|| {
                            panic!(
                                "{file} registers {name} on a `registry` it makes \
                                 with no sub_registry_with_prefix(\"…\")"
                            )
                        });
                    format!("{prefix}_{name}")
                } else {
                    // The call's own arguments: up to its `);`.
                    let args = args.split(");").next().unwrap_or(args);
                    let unit: String = args
                        .split_once("Unit::")
                        .map(|(_, r)| r.chars().take_while(char::is_ascii_alphanumeric).collect())
                        .unwrap_or_else(|| {
                            panic!("{file}: no Unit:: in the registration of {name}")
                        });
                    assert!(
                        unit != "Other",
                        "{file}: {name} has a unit of its own (Unit::Other), which \
                         this test does not read"
                    );
                    format!("{name}_{}", unit.to_ascii_lowercase())
                };
                registered.push((file.clone(), family));
            }
        }
    }
    registered
}

/// A bearer JWT for `sub` that the first proxy's `[auth]` accepts.
fn token(sub: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + 600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// The proxy's `/metrics`, read with the admin token.
async fn metrics(proxy: &ProxyProcess) -> String {
    let response = http_client()
        .get(proxy.url("/metrics"))
        .headers(bearer(ADMIN_TOKEN))
        .send()
        .await
        .expect("GET /metrics is answered");
    assert_eq!(response.status(), 200, "GET /metrics");
    response.text().await.expect("the /metrics body")
}

fn create() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"})
}

/// The embedded demo server behind `[auth]` with a rule, one session per caller (kept in
/// a real Redis) and a 1 s header timeout: a refusal of each kind counted, a session open
/// and used, a connection closed. Its exposition.
async fn guarded_proxy() -> Exposition {
    let redis = Redis::start().await;
    let toml = format!(
        "[session]\nmax_sessions_per_caller = 1\n\
         store = \"redis\"\nredis_url = \"{}\"\nstate_key = \"{STATE_KEY}\"\n\
         [limits]\nheader_read_timeout = \"1s\"\n\
         [admin]\ntoken = \"{ADMIN_TOKEN}\"\n\
         [auth]\nhs256_secret = \"{SECRET}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n\
         [[auth.rules]]\nupstream = \"*\"\n",
        redis.url()
    );
    let proxy = ProxyProcess::launch().toml(&toml).start().await;
    let http = http_client();
    let url = proxy.url("/mcp");

    let anonymous = post_json(&http, &url, &create(), &HeaderMap::new()).await;
    assert_eq!(anonymous.status, 401, "no token: {}", anonymous.text);
    let alice = token("alice");
    let first = post_json(&http, &url, &create(), &bearer(&alice)).await;
    assert_eq!(first.status, 200, "alice's session: {}", first.text);
    // Used: the session store counts how it served the use.
    let session = first.json()["result"]["session"].clone();
    let listed = post_json(
        &http,
        &url,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/session": {"sessionId": session["sessionId"], "state": session["state"]}
        }}}),
        &bearer(&alice),
    )
    .await;
    assert_eq!(listed.status, 200, "alice's session used: {}", listed.text);
    let second = post_json(&http, &url, &create(), &bearer(&alice)).await;
    assert_eq!(
        second.status, 429,
        "alice's second session: {}",
        second.text
    );

    // A connection that sends nothing is closed after the header timeout.
    let mut silent = TcpStream::connect(proxy.listen).await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "a silent connection still open 10 s on, with header_read_timeout = 1s: {closed:?}"
    );
    let counted = eventually_async(Duration::from_secs(5), || async {
        metrics(&proxy)
            .await
            .contains("mcp_proxy_connections_closed_total{")
    })
    .await;
    assert!(
        counted,
        "the connection closed at its header timeout is not counted:\n{}",
        metrics(&proxy).await
    );

    Exposition::parse(&metrics(&proxy).await)
}

/// The value of `mcp_proxy_resident_memory_bytes` in an exposition (0 if absent).
fn resident_memory(text: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix("mcp_proxy_resident_memory_bytes "))
        .map_or(0, |value| {
            value
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("mcp_proxy_resident_memory_bytes {value:?}: {e}"))
        })
}

/// A stdio server (its warm pool) behind a proxy over its memory limit, shedding a
/// `sessions/create`. Its exposition.
async fn shedding_proxy() -> Exposition {
    let server = pages::root().join("tests/interop/misbehaving_server.py");
    // 16 MiB, the least allowed: below what the binary holds once started.
    let toml = format!(
        "[admin]\ntoken = \"{ADMIN_TOKEN}\"\n\
         [limits]\nmax_memory = {MAX_MEMORY}\n\
         [upstream]\ncommand = \"python3\"\nargs = [{:?}]\npool_size = 1\n",
        server.display().to_string()
    );
    let proxy = ProxyProcess::launch().toml(&toml).start().await;
    // The test's premise: the proxy holds more than that once started. The gauge is 0
    // until the first sample.
    let sampled = std::cell::Cell::new(0);
    eventually_async(Duration::from_secs(10), || async {
        sampled.set(resident_memory(&metrics(&proxy).await));
        sampled.get() > 0
    })
    .await;
    let resident = sampled.get();
    assert!(
        resident > MAX_MEMORY,
        "the proxy started with {resident} bytes of resident memory \
         (mcp_proxy_resident_memory_bytes; 0: never sampled in 10 s), not above \
         limits.max_memory = {MAX_MEMORY} (16 MiB, the least allowed), so it cannot be made \
         to shed for memory: this test needs another way to make it shed"
    );
    let shedding = eventually_async(Duration::from_secs(10), || async {
        metrics(&proxy)
            .await
            .contains("mcp_proxy_overload_active{resource=\"memory\"} 1")
    })
    .await;
    assert!(
        shedding,
        "not shedding for memory 10 s after starting with max_memory = 16 MiB:\n{}",
        metrics(&proxy).await
    );
    let shed = post_json(
        &http_client(),
        &proxy.url("/mcp"),
        &create(),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(shed.status, 503, "a session while shedding: {}", shed.text);
    Exposition::parse(&metrics(&proxy).await)
}

/// Everything the proxy exports, from both proxies.
async fn exported() -> Exposition {
    let guarded = guarded_proxy().await;
    let shedding = shedding_proxy().await;
    guarded.merge(shedding)
}

/// The parser of dashboard expressions finds metrics, and only them.
#[test]
fn dashboard_expressions_name_their_metrics() {
    let found = queried_metrics(
        "sum by (outcome, le) (rate(a_total{job=~\"$job\", x=\"sum(b)\"}[$__rate_interval] offset 5m)) \
         / ignoring (outcome) group_left sum(c_bucket) by (le) > bool 0.5 and on(x) d:recorded * 1e3 \
         - max without (instance) (e)",
    );
    let expected: BTreeSet<String> = ["a_total", "c_bucket", "d:recorded", "e"]
        .iter()
        .map(|&s| s.to_owned())
        .collect();
    assert_eq!(found, expected);
}

/// Panels nested in a collapsed row are read as the others: their data sources, their
/// expressions, their row.
#[test]
fn dashboard_panels_nested_in_rows_are_read() {
    let dashboard = json!({"panels": [
        {"type": "row", "title": "Open", "panels": []},
        {"type": "timeseries", "title": "a", "datasource": {"uid": "${datasource}"},
         "targets": [{"expr": "a_total"}]},
        {"type": "row", "title": "Collapsed", "collapsed": true, "panels": [
            {"type": "timeseries", "title": "b", "datasource": {"uid": "prom"},
             "targets": [{"expr": "b_total", "datasource": {"uid": "prom"}, "refId": "A"}]}
        ]},
    ]});
    let found: Vec<(&str, bool, Option<&str>)> = panels(&dashboard)
        .iter()
        .map(|p| (p.title, p.row, p.within))
        .collect();
    assert_eq!(
        found,
        [
            ("Open", true, None),
            ("a", false, Some("Open")),
            ("Collapsed", true, None),
            ("b", false, Some("Collapsed")),
        ]
    );
    assert_eq!(
        panel_expressions(&dashboard),
        [
            ("panel \"a\"".to_owned(), "a_total".to_owned()),
            ("panel \"b\"".to_owned(), "b_total".to_owned()),
        ]
    );
    let problems = datasource_problems(&dashboard);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems.iter().all(|p| p.contains("\"b\"")),
        "{problems:#?}"
    );
    let page = "# D\n\n```\n### not a heading\n```\n\n## Open\n\n### a\n\n## Collapsed\n\n\
                ### b\n\n### c\n";
    assert_eq!(
        page_problems(&dashboard, page),
        [format!("{PAGE}: `### c` names no panel of {DASHBOARD}")]
    );
}

/// The metrics the code registers are read as their families' exact names.
#[test]
fn dashboard_registered_metrics_are_their_families() {
    let registered: BTreeSet<String> = registered_in_source()
        .into_iter()
        .map(|(_, family)| family)
        .collect();
    for family in [
        "mcp_proxy_sealed_tombstones",
        "mcp_proxy_sealed_tombstones_dropped",
        "mcp_proxy_requests",
        "mcp_server_operation_duration_seconds",
    ] {
        assert!(registered.contains(family), "{family} in {registered:#?}");
    }
}

/// The dashboard's page describes each of its rows and panels under its own heading, and
/// no panel the dashboard does not have.
#[test]
fn dashboard_page_has_a_heading_for_every_panel() {
    let dashboard: Value = serde_json::from_str(&pages::read(Path::new(DASHBOARD)))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    assert!(
        panels(&dashboard).iter().filter(|p| !p.row).count() > 10,
        "{DASHBOARD}: few panels found"
    );
    let problems = page_problems(&dashboard, &pages::read(Path::new(PAGE)));
    assert!(
        problems.is_empty(),
        "the dashboard's page and the dashboard disagree:\n  {}",
        problems.join("\n  ")
    );
}

/// Every metric the dashboard queries and the reference names is one the proxy exports,
/// and the reference names every family it exports (see the module documentation).
#[tokio::test]
async fn the_dashboard_and_the_metrics_reference_name_what_the_proxy_exports() {
    let exposition = tokio::time::timeout(WITHIN, exported())
        .await
        .unwrap_or_else(|_| panic!("the proxies were not run and read within {WITHIN:?}"));
    // Every metric the code registers showed: the traffic made here reaches them all.
    let registered = registered_in_source();
    assert!(
        registered.len() > 10,
        "found only {registered:?} registered in src/"
    );
    let unseen: Vec<String> = registered
        .iter()
        .filter(|(_, family)| !exposition.families.contains_key(family))
        .map(|(file, name)| format!("{name} ({file})"))
        .collect();
    assert!(
        unseen.is_empty(),
        "metrics registered in the code that the proxies run here never showed: make this \
         test's traffic count something in them: {unseen:?}"
    );
    let series = exposition.series();
    // The suffixes assumed are the ones the proxy writes.
    let unexpected: Vec<&String> = exposition.samples.difference(&series).collect();
    assert!(
        unexpected.is_empty(),
        "samples of no family's usual series: {unexpected:?}"
    );
    let mut problems = Vec::new();

    // The dashboard.
    let dashboard: Value = serde_json::from_str(&pages::read(Path::new(DASHBOARD)))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    if dashboard["schemaVersion"] != 39 {
        problems.push(format!(
            "{DASHBOARD}: schemaVersion {}, not 39",
            dashboard["schemaVersion"]
        ));
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for wanted in ["datasource", "job", "instance"] {
        if !variables.contains(&wanted) {
            problems.push(format!("{DASHBOARD}: no template variable ${wanted}"));
        }
    }
    let mut queries = panel_expressions(&dashboard);
    assert!(!queries.is_empty(), "{DASHBOARD} has no panel expression");
    problems.extend(datasource_problems(&dashboard));
    queries.extend(variable_queries(&dashboard));
    for (at, expr) in &queries {
        for metric in queried_metrics(expr) {
            if !series.contains(&metric) {
                problems.push(format!(
                    "{DASHBOARD}: {at} queries {metric}, which the proxy does not export \
                     (in {expr})"
                ));
            }
        }
    }

    // The reference.
    let reference = pages::read(Path::new(REFERENCE));
    let rows = reference_rows(&reference);
    assert!(!rows.is_empty(), "{REFERENCE} has no table of metrics");
    let mut documented = BTreeSet::new();
    for row in &rows {
        let at = format!("{REFERENCE}:{}", row.line);
        let Some(family) = family_named(&exposition, &row.metric) else {
            problems.push(format!(
                "{at}: {} is not a metric the proxy exports",
                row.metric
            ));
            continue;
        };
        let kind = &exposition.families[&family];
        let shown = shown_as(&family, kind);
        if row.metric != shown {
            problems.push(format!(
                "{at}: {} appears in /metrics as {shown}: name it so",
                row.metric
            ));
        }
        if &row.kind != kind {
            problems.push(format!(
                "{at}: {} is a {kind}, not a {:?}",
                row.metric, row.kind
            ));
        }
        for label in exposition.labels.get(&family).into_iter().flatten() {
            if !row.labels.contains(&format!("`{label}`")) {
                problems.push(format!(
                    "{at}: {} has the label `{label}`, which its row does not name",
                    row.metric
                ));
            }
        }
        if !documented.insert(family.clone()) {
            problems.push(format!("{at}: {} is in the tables twice", row.metric));
        }
    }
    for (family, kind) in &exposition.families {
        if !documented.contains(family) {
            let shown = shown_as(family, kind);
            problems.push(format!(
                "{REFERENCE}: the proxy exports {shown} ({kind}), which no table names"
            ));
        }
    }

    assert!(
        problems.is_empty(),
        "the dashboard or the metrics reference disagree with /metrics:\n  {}",
        problems.join("\n  ")
    );
}
