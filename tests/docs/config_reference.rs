//! The configuration reference (`docs/src/reference/configuration.md`) against the code,
//! both ways: every key the configuration reads is in its table, and every key of the
//! table is one the configuration reads; each default is the code's, each variable the
//! one the layering rule gives, and the built binary takes each variable as that key.
//! `proxy.toml`, which documents every key in place, names no key that does not exist.
//!
//! The code's keys are found by asking serde, not from a list kept here: the raw
//! configuration refuses unknown keys (`deny_unknown_fields`), and its refusal of one
//! lists every key of that table ("unknown field `x`, expected one of `a`, `b`"). A key
//! is a table when a table with an unknown key, given as its value, is refused that way;
//! its own keys are then asked for in turn. Likewise a list of tables (`[[auth.limits]]`)
//! and a table of named tables (`[upstreams.NAME]`).
//!
//! How the reference writes keys: `session.idle_ttl`; `auth.limits[].rate` for the key of
//! each table of a list; `upstreams.NAME.url` for the key of each named table; and
//! `upstreams.NAME.*` (`upstreams.NAME.stateless.*`) for "every key of `[upstream]`
//! (`[stateless]`)", which is checked as a claim about the code too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use mcp_session_proxy::config::{ENV_PREFIX, RawConfig};
use serde_json::{Value, json};

use crate::pages;
use common::binary::{WorkDir, command};

/// The reference's page, from the repository's root.
const PAGE: &str = "docs/src/reference/configuration.md";
/// A key no table has: the refusal of it lists the keys a table has.
const PROBE: &str = "zz_not_a_key";
/// The name a named table (`[upstreams.NAME]`) is given when the code is asked.
const NAME: &str = "a";
/// How long `check` may take.
const CHECK_WITHIN: Duration = Duration::from_secs(20);
/// Wildcard rows: the keys of the first table are those of the second.
const TEMPLATES: [(&str, &str); 2] = [
    ("upstreams.NAME.stateless.", "stateless."),
    ("upstreams.NAME.", "upstream."),
];

// === the code's keys ===

/// One step of a key's path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A key of a table.
    Key(String),
    /// Each table of a list of tables (`[]`).
    Each,
    /// Each named table of a table of them (`NAME`).
    Named,
}

/// A key's path as the reference writes it.
fn written(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Step::Each => out.push_str("[]"),
            Step::Named => out.push_str(".NAME"),
        }
    }
    out
}

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A value: a string, number, switch, a list of values.
    Value,
    /// A table of names and values of the user's choosing (`upstream.env`).
    Names,
    /// A table of keys (`[session]`, `upstream.token_exchange`).
    Table,
    /// A list of tables of keys (`[[auth.limits]]`).
    Tables,
    /// A table of named tables of keys (`[upstreams.NAME]`).
    NamedTables,
}

/// A configuration with `value` at `path` (and every other key at its default).
fn with(path: &[Step], value: Value) -> Value {
    path.iter().rev().fold(value, |inner, step| match step {
        Step::Key(key) => json!({ key.as_str(): inner }),
        Step::Each => json!([inner]),
        Step::Named => json!({ NAME: inner }),
    })
}

/// The keys of the table a refusal of [`PROBE`] names, if it is one.
fn refusal_lists(config: Value) -> Option<Vec<String>> {
    let error = serde_json::from_value::<RawConfig>(config)
        .err()?
        .to_string();
    let rest = error.strip_prefix(&format!("unknown field `{PROBE}`"))?;
    // ", expected `a`", ", expected `a` or `b`", ", expected one of `a`, `b`", or ", there
    // are no fields".
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// The keys of the table at `path`.
fn keys_of_table(path: &[Step]) -> Option<Vec<String>> {
    refusal_lists(with(path, json!({ PROBE: 0 })))
}

/// Every key the configuration reads, by its written path.
fn code_keys() -> BTreeMap<String, Kind> {
    let mut keys = BTreeMap::new();
    let top = keys_of_table(&[]).expect("the configuration refuses an unknown top-level key");
    explore(&[], &top, &mut keys);
    keys
}

fn explore(table: &[Step], names: &[String], into: &mut BTreeMap<String, Kind>) {
    for name in names {
        let mut path = table.to_vec();
        path.push(Step::Key(name.clone()));
        let nested = |step: Step| {
            let mut inner = path.clone();
            inner.push(step);
            keys_of_table(&inner).map(|keys| (inner, keys))
        };
        let kind = if let Some(keys) = keys_of_table(&path) {
            explore(&path, &keys, into);
            Kind::Table
        } else if let Some((each, keys)) = nested(Step::Each) {
            explore(&each, &keys, into);
            Kind::Tables
        } else if let Some((named, keys)) = nested(Step::Named) {
            explore(&named, &keys, into);
            Kind::NamedTables
        } else if serde_json::from_value::<RawConfig>(with(&path, json!({ PROBE: "v" }))).is_ok() {
            Kind::Names
        } else {
            Kind::Value
        };
        into.insert(written(&path), kind);
    }
}

/// The written path read back into steps.
fn steps(key: &str) -> Vec<Step> {
    let mut path = Vec::new();
    for part in key.split('.') {
        if part == "NAME" {
            path.push(Step::Named);
            continue;
        }
        let (name, each) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        path.push(Step::Key(name.to_owned()));
        if each {
            path.push(Step::Each);
        }
    }
    path
}

/// The code's default of `key`, as the configuration writes it back: `None` for a key
/// absent unless written. A key inside a list or named table is read in one made with
/// every key at its default.
fn code_default(key: &str) -> Option<Value> {
    let path = steps(key);
    let made = with(&path[..path.len() - 1], json!({}));
    let config: RawConfig = serde_json::from_value(made).ok()?;
    let mut value = serde_json::to_value(config).ok()?;
    for step in &path {
        value = match step {
            Step::Key(key) => value.get(key)?.clone(),
            Step::Each => value.get(0)?.clone(),
            Step::Named => value.get(NAME)?.clone(),
        };
    }
    (!value.is_null()).then_some(value)
}

/// Whether the configuration's defaults have `key` (not inside a list, a named table, or
/// a table absent unless written).
fn in_the_defaults(key: &str) -> bool {
    let Ok(defaults) = serde_json::to_value(RawConfig::default()) else {
        return false;
    };
    let mut value = &defaults;
    for step in steps(key) {
        match (step, value) {
            (Step::Key(key), Value::Object(map)) => match map.get(&key) {
                Some(inner) => value = inner,
                None => return false,
            },
            _ => return false,
        }
    }
    true
}

/// Whether a default cell says the key is unset unless written, as the reference writes
/// it: `none`, or `none: ` and what is done without it.
fn says_unset(cell: &str) -> bool {
    cell == "none" || cell.starts_with("none: ")
}

/// A default as the reference writes it in code: `30m`, `""`, `[]`, `{}`, `4096`.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "\"\"".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The variable the layering rule gives `key`: `MCP_PROXY_`, then the path in capitals
/// joined by `__`; a key of a list's tables is set with the list's.
fn variable(key: &str) -> String {
    let key = key.split("[]").next().unwrap_or(key).replace('*', "KEY");
    let parts: Vec<String> = key.split('.').map(str::to_ascii_uppercase).collect();
    format!("{ENV_PREFIX}{}", parts.join("__"))
}

// === the reference ===

/// One row of the reference's table.
#[derive(Debug, Clone)]
struct Row {
    line: usize,
    key: String,
    default: String,
    variable: String,
}

/// The code span a cell begins with: a default's value (`` `30m`: … ``).
fn leading_code(cell: &str) -> Option<&str> {
    let (span, _) = cell.strip_prefix('`')?.split_once('`')?;
    Some(span)
}

/// The text of each code span of `cell`.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// A table row's cells (`\|` is a `|` inside a cell).
fn cells(line: &str) -> Vec<String> {
    let line = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().unwrap().push('|');
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// The rows of the page's `| key | default | variable | meaning |` table.
fn rows() -> Vec<Row> {
    let text = pages::read(Path::new(PAGE));
    let mut columns: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !line.trim_start().starts_with('|') {
            columns = None;
            continue;
        }
        let cells = cells(line);
        let Some(names) = &columns else {
            columns = Some(cells);
            continue;
        };
        if cells
            .iter()
            .all(|c| c.chars().all(|c| matches!(c, '-' | ':')))
        {
            continue;
        }
        let column = |name: &str| {
            let at = names
                .iter()
                .position(|n| n == name)
                .unwrap_or_else(|| panic!("{PAGE}:{}: the table has no column `{name}`", i + 1));
            cells.get(at).cloned().unwrap_or_default()
        };
        if !names.iter().any(|n| n == "key") {
            continue;
        }
        let key_cell = column("key");
        let key = match code_spans(&key_cell).as_slice() {
            [key] if key_cell == format!("`{key}`") => (*key).to_owned(),
            _ => panic!(
                "{PAGE}:{}: a key cell is one key in backticks, not {key_cell:?}",
                i + 1
            ),
        };
        rows.push(Row {
            line: i + 1,
            key,
            default: column("default"),
            variable: column("variable"),
        });
    }
    assert!(
        rows.len() > 100,
        "{PAGE}: only {} rows in its table of keys",
        rows.len()
    );
    rows
}

/// The template a wildcard row stands for: `upstreams.NAME.*` → `upstream.`.
fn template(key: &str) -> Option<(&'static str, &'static str)> {
    let prefix = key.strip_suffix('*')?;
    TEMPLATES.iter().copied().find(|(of, _)| *of == prefix)
}

/// The documented row that covers the code's `key`: its own, or a wildcard one whose
/// template table's key of the same name has its own.
fn covered(key: &str, documented: &BTreeSet<String>) -> bool {
    if documented.contains(key) {
        return true;
    }
    TEMPLATES.iter().any(|(of, like)| {
        key.strip_prefix(of).is_some_and(|rest| {
            documented.contains(&format!("{of}*")) && documented.contains(&format!("{like}{rest}"))
        })
    })
}

#[test]
fn config_reference_keys_are_found_by_asking_serde() {
    let keys = code_keys();
    for (key, kind) in [
        ("listen", Kind::Value),
        ("session", Kind::Table),
        ("session.idle_ttl", Kind::Value),
        ("upstream.env", Kind::Names),
        ("upstream.credentials", Kind::Tables),
        ("upstream.credentials[].header", Kind::Value),
        ("upstream.token_exchange", Kind::Table),
        ("upstream.token_exchange.client_id", Kind::Value),
        ("upstreams", Kind::NamedTables),
        ("upstreams.NAME.url", Kind::Value),
        ("upstreams.NAME.stateless", Kind::Table),
        ("upstreams.NAME.stateless.affinity", Kind::Value),
        ("auth.rules[].claims", Kind::Names),
        ("auth.limits[].rate", Kind::Value),
        ("telemetry.sampler_arg", Kind::Value),
    ] {
        assert_eq!(keys.get(key), Some(&kind), "{key} in {keys:#?}");
    }
    assert_eq!(code_default("auth.limits[].per"), Some(json!("1m")));
    assert_eq!(code_default("upstreams.NAME.url"), None);
    assert_eq!(variable("auth.limits[].rate"), "MCP_PROXY_AUTH__LIMITS");
    assert!(in_the_defaults("session.idle_ttl"));
    assert!(!in_the_defaults("upstream.token_exchange.resource"));
    assert_eq!(cells(r"| `a` | x \| y | z |"), ["`a`", "x | y", "z"]);
    assert!(says_unset("none"));
    assert!(says_unset("none: the embedded demo server"));
    assert!(!says_unset("`0`"));
    assert!(!says_unset("none of them"));
}

#[test]
fn config_reference_names_every_key_the_code_reads_and_no_other() {
    let keys = code_keys();
    let rows = rows();
    let mut documented = BTreeSet::new();
    let mut problems = Vec::new();
    for row in &rows {
        if !documented.insert(row.key.clone()) {
            problems.push(format!("`{}` (line {}) has two rows", row.key, row.line));
        }
    }
    for (key, kind) in &keys {
        // A table's keys have rows; the table itself may.
        let required = !matches!(kind, Kind::Table | Kind::NamedTables);
        if required && !covered(key, &documented) {
            problems.push(format!(
                "`{key}` is a key of the configuration (src/config/raw.rs) the reference \
                 leaves out"
            ));
        }
    }
    for row in &rows {
        if let Some((of, like)) = template(&row.key) {
            // "Every key of [upstream]": each of them is a key of [upstreams.NAME] too.
            for key in keys.keys().filter_map(|k| k.strip_prefix(like)) {
                if !keys.contains_key(&format!("{of}{key}")) {
                    problems.push(format!(
                        "`{}` (line {}) stands for every `{like}*` key, but `{of}{key}` is \
                         no key of the configuration",
                        row.key, row.line
                    ));
                }
            }
        } else if !keys.contains_key(&row.key) {
            problems.push(format!(
                "`{}` (line {}) is no key of the configuration (src/config/raw.rs)",
                row.key, row.line
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{PAGE} against the code:\n{}",
        problems.join("\n")
    );
}

#[test]
fn config_reference_defaults_are_the_codes() {
    let mut problems = Vec::new();
    for row in rows() {
        if row.key.contains('*') {
            continue;
        }
        let Some(default) = code_default(&row.key) else {
            // Unset unless written: the cell must say so, and show no value.
            if !says_unset(&row.default) {
                problems.push(format!(
                    "`{}` (line {}): the key is unset unless written (no default in the \
                     code), but the reference says {:?}: write \"none\" (or \"none: \" and \
                     what is done without it)",
                    row.key, row.line, row.default
                ));
            }
            continue;
        };
        let expected = shown(&default);
        if leading_code(&row.default) != Some(expected.as_str()) {
            problems.push(format!(
                "`{}` (line {}): the code's default is `{expected}`, the reference says {:?}",
                row.key, row.line, row.default
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{PAGE}: defaults (the first code span of the cell, or \"none\" for a key unset \
         unless written) that are not the code's:\n{}",
        problems.join("\n")
    );
}

#[test]
fn config_reference_variables_follow_the_layering_rule() {
    let mut problems = Vec::new();
    for row in rows() {
        let expected = variable(&row.key);
        let written = code_spans(&row.variable).first().copied();
        if written != Some(expected.as_str()) {
            problems.push(format!(
                "`{}` (line {}): its variable is `{expected}`, the reference says {:?}",
                row.key, row.line, row.variable
            ));
        }
        if row.key.contains("[]") && !row.variable.starts_with("in `") {
            problems.push(format!(
                "`{}` (line {}): a key of a list's tables has no variable of its own; say \
                 it is set in the list's: \"in `{expected}`\"",
                row.key, row.line
            ));
        }
    }
    assert!(problems.is_empty(), "{PAGE}:\n{}", problems.join("\n"));
}

/// `check` run with only `env` (in an empty directory): whether it passed, and its
/// stdout and stderr.
async fn check(env: &[(String, String)]) -> (bool, String) {
    let dir = WorkDir::new();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let child = command(dir.path(), &["check"], &env).spawn().unwrap();
    let output = tokio::time::timeout(CHECK_WITHIN, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("check did not end within {CHECK_WITHIN:?}"))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test]
async fn config_reference_variables_set_to_their_defaults_are_accepted() {
    let mut env = Vec::new();
    for row in rows() {
        if row.key.contains(['*', '[']) || !in_the_defaults(&row.key) {
            continue;
        }
        // Keys whose default is a value in code; the others are absent unless written.
        let Some(value) = leading_code(&row.default) else {
            continue;
        };
        env.push((variable(&row.key), value.to_owned()));
    }
    assert!(env.len() > 80, "only {} variables with defaults", env.len());
    let (passed, output) = check(&env).await;
    assert!(
        passed,
        "`check` refused the reference's variables set to its defaults ({env:?}):\n{output}"
    );
}

/// A value no key takes: a table where a value is wanted (and a list where a table of
/// names wants a string).
const BAD: &str = "{zz = [1]}";

#[tokio::test]
async fn config_reference_variables_reach_their_keys() {
    let keys = code_keys();
    let rows = rows();
    // Every concrete key: the reference's own, and those its wildcard rows stand for.
    let mut concrete: BTreeSet<String> = BTreeSet::new();
    for row in &rows {
        match template(&row.key) {
            Some((of, like)) => concrete.extend(
                rows.iter()
                    .filter_map(|r| r.key.strip_prefix(like))
                    .map(|rest| format!("{of}{rest}")),
            ),
            None => {
                concrete.insert(row.key.clone());
            }
        }
    }
    // Tables are set key by key, lists of tables whole (with each of their keys bad).
    let mut env: Vec<(String, String)> = Vec::new();
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut expected: Vec<(String, String)> = Vec::new();
    for key in &concrete {
        let named = key.replace("NAME", NAME);
        match key.split_once("[]") {
            Some((list, field)) => {
                let field = field.trim_start_matches('.').to_owned();
                lists
                    .entry(list.to_owned())
                    .or_default()
                    .push(field.clone());
                let list = list.replace("NAME", NAME);
                expected.push((format!("{list}[0].{field}"), variable(&list)));
            }
            None => match keys.get(key) {
                Some(Kind::Table | Kind::NamedTables) => {}
                Some(Kind::Tables)
                    if concrete.iter().any(|k| k.starts_with(&format!("{key}[]"))) => {}
                _ => {
                    env.push((variable(&named), BAD.to_owned()));
                    expected.push((named.clone(), variable(&named)));
                }
            },
        }
    }
    for (list, fields) in &lists {
        let entry: Vec<String> = fields.iter().map(|f| format!("{f} = {BAD}")).collect();
        env.push((
            variable(&list.replace("NAME", NAME)),
            format!("[{{{}}}]", entry.join(", ")),
        ));
    }
    let (passed, output) = check(&env).await;
    assert!(!passed, "`check` took every key's bad value:\n{output}");
    // "  upstream.timeout (from the environment variable MCP_PROXY_UPSTREAM__TIMEOUT): …"
    let problems: Vec<(&str, &str)> = output
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter_map(|line| line.split_once(' '))
        .collect();
    let mut missing = Vec::new();
    for (key, variable) in &expected {
        let own = format!("(from the environment variable {variable})");
        let reached = problems.iter().any(|(problem, rest)| {
            // Refused as a value of that key, not as a key that does not exist.
            let as_value = rest.starts_with("(from the environment variable ")
                && !rest.contains("unknown key");
            // A value of a list's table or of a table of names is reported under its own
            // key, with a variable of its path.
            let within = (key.contains('[') && *problem == key)
                || [".", "["]
                    .iter()
                    .any(|sep| problem.starts_with(&format!("{key}{sep}")));
            as_value && ((*problem == key && rest.starts_with(&own)) || within)
        });
        if !reached {
            missing.push(format!("`{key}` through {variable}"));
        }
    }
    assert!(
        missing.is_empty(),
        "set to {BAD} by the variables of the reference, these keys were not reported as \
         bad by `check`, so the variable does not reach them:\n{}\n\nwhat it said:\n{output}",
        missing.join("\n")
    );
}

// === proxy.toml ===

/// A key path as `proxy.toml` writes it (`[upstreams.search]`, `[[auth.rules]]`), in the
/// reference's way (`upstreams.NAME`, `auth.rules[]`), judged against the code's keys:
/// `None` when it names no key.
fn resolve(parts: &[String], keys: &BTreeMap<String, Kind>) -> Option<String> {
    let mut path = String::new();
    let mut parts = parts.iter();
    while let Some(part) = parts.next() {
        if part == "[]" {
            path.push_str("[]");
            continue;
        }
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
        let kind = *keys.get(&path)?;
        // Any name of the user's choosing.
        if kind == Kind::Names {
            return Some(path);
        }
        // The next part is the table's name.
        if kind == Kind::NamedTables && parts.next().is_some() {
            path.push_str(".NAME");
        }
    }
    Some(path)
}

/// `key = value` (commented out or not, spaced as TOML is written there, unlike a
/// variable in a sentence: `MCP_PROXY_X=1`): the key, and the value.
fn assignment(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(" = ")?;
    let key = key.trim();
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    plain.then(|| (key, value.trim()))
}

/// The keys of inline tables in `text`: `{ a = 1, b = "x" }` → `a`, `b`.
fn inline_keys(text: &str) -> Vec<&str> {
    let inner = text
        .trim()
        .trim_end_matches(',')
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}');
    inner
        .split(',')
        .filter_map(|part| assignment(part).map(|(key, _)| key))
        .collect()
}

/// Every key `proxy.toml` mentions, set or commented out, with its line.
fn proxy_toml_mentions() -> Vec<(usize, Vec<String>)> {
    let text = pages::read(Path::new("proxy.toml"));
    let header = |name: &str, each: bool| -> Option<Vec<String>> {
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        plain.then(|| {
            let mut path: Vec<String> = name.split('.').map(str::to_owned).collect();
            if each {
                path.push("[]".into());
            }
            path
        })
    };
    let mut table: Vec<String> = Vec::new();
    // A table header commented out holds the commented lines after it, until a line that
    // is not a comment.
    let mut commented_table: Option<Vec<String>> = None;
    // A multi-line list of inline tables: its key.
    let mut open_list: Option<Vec<String>> = None;
    let mut mentions = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        let commented = trimmed.starts_with('#');
        if !commented && !trimmed.is_empty() {
            commented_table = None;
        }
        let body = trimmed.trim_start_matches('#').trim();
        let body = body.strip_prefix("e.g. ").unwrap_or(body);
        let current = if commented {
            commented_table.clone().unwrap_or_else(|| table.clone())
        } else {
            table.clone()
        };
        if let Some(list) = &open_list {
            if body.starts_with(']') {
                open_list = None;
            } else if body.starts_with('{') {
                for key in inline_keys(body) {
                    let mut path = list.clone();
                    path.extend(["[]".to_owned(), key.to_owned()]);
                    mentions.push((i + 1, path));
                }
            }
            continue;
        }
        let found = if let Some(rest) = body.strip_prefix("[[") {
            rest.split_once("]]")
                .and_then(|(name, _)| header(name, true))
        } else if let Some(rest) = body.strip_prefix('[') {
            rest.split_once(']')
                .and_then(|(name, _)| header(name, false))
        } else {
            None
        };
        if let Some(path) = found {
            mentions.push((i + 1, path.clone()));
            if commented {
                commented_table = Some(path);
            } else {
                table = path;
            }
            continue;
        }
        let Some((key, value)) = assignment(body) else {
            continue;
        };
        let mut path = current.clone();
        path.push(key.to_owned());
        if value.starts_with('{') {
            for inner in inline_keys(value.split('#').next().unwrap_or(value)) {
                let mut inner_path = path.clone();
                inner_path.push(inner.to_owned());
                mentions.push((i + 1, inner_path));
            }
        } else if value == "[" {
            open_list = Some(path.clone());
        }
        mentions.push((i + 1, path));
    }
    mentions
}

#[test]
fn config_reference_proxy_toml_mentions_only_keys_that_exist() {
    let keys = code_keys();
    let mentions = proxy_toml_mentions();
    assert!(
        mentions.len() > 100,
        "only {} keys found in proxy.toml",
        mentions.len()
    );
    let unknown: Vec<String> = mentions
        .iter()
        .filter(|(_, path)| resolve(path, &keys).is_none())
        .map(|(line, path)| {
            format!(
                "proxy.toml:{line}: `{}`",
                path.join(".").replace(".[]", "[]")
            )
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "proxy.toml mentions keys the configuration does not have:\n{}",
        unknown.join("\n")
    );
}
