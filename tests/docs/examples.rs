//! Every shell example of README.md and the book that talks to the proxy is run here, as
//! written, by `sh -e` (dash on Debian: POSIX only), against the built binary — and what it
//! prints must be what the page shows.
//!
//! The page says how to run a ```` ```sh ```` block in an HTML comment on the line before
//! it (invisible on GitHub and in the book):
//!
//! - `<!-- example: proxy [VAR=value…] [uses=PAGE#heading] -->`: against the proxy as
//!   `cargo run --release` starts it in the repository (its `proxy.toml`, the embedded
//!   demo server), with those `MCP_PROXY_*` variables set; `uses` runs the first paragraph
//!   of the first `sh` block under that heading of that page first (its shell functions);
//! - `<!-- example: self [uses=…] -->`: the block starts what it needs itself
//!   (`mcp-session-proxy` is the built binary on its `PATH`, `npx` finds the interop
//!   tools' everything server, `redis-server` is the system's);
//! - `<!-- example: skip REASON -->`: not run, for the reason given (several hosts, say).
//!
//! A block that mentions the proxy (`127.0.0.1:8080`, `mcp-session-proxy`, `curl`) and
//! says none of these fails the suite: an example nobody runs is one that rots.
//!
//! What the block prints is written in it as `#> ` lines, in order. `…` in such a line
//! stands for any text (an id, a time); a `#> …` line alone for any number of lines. Blank
//! lines of the output are not compared. Every `127.0.0.1:PORT` in a block is given a free
//! port of its own, and so is the same number anywhere else in the block (a server's
//! `--port 6379`, `PORT=3001`), so examples run side by side with the rest of the suite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::pages::{self, Page};
use common::binary::{ProxyProcess, bin, without_proxy_settings};
use common::fleet::{free_port, which};
use common::interop::{ensure_installed, tools_dir};

/// How long one example may take, everything it starts included.
const WITHIN: Duration = Duration::from_secs(40);

/// How a block is run.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// Against the proxy in the repository, with these variables.
    Proxy(Vec<(String, String)>),
    /// The block starts what it needs.
    SelfContained,
    /// Not run, for this reason.
    Skip(String),
}

/// One ```` ```sh ```` block of a page.
#[derive(Debug, Clone)]
struct Example {
    page: PathBuf,
    heading: String,
    script: String,
    /// What the comment before it says, if it says anything.
    kind: Option<Kind>,
    /// `PAGE#heading` whose first `sh` block runs first.
    uses: Option<String>,
    /// A ```` ```sh ```` block (the others are never run).
    runnable: bool,
}

impl Example {
    fn name(&self) -> String {
        format!("{} ({})", self.page.display(), self.heading)
    }

    /// The `#> ` lines: what the block prints.
    fn expected(&self) -> Vec<String> {
        self.script
            .lines()
            .filter_map(|line| {
                let line = line.trim_start();
                (line == "#>")
                    .then_some("")
                    .or_else(|| line.strip_prefix("#> "))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Whether the block talks to the proxy (and so must say how it is run).
    fn talks_to_the_proxy(&self) -> bool {
        ["127.0.0.1:8080", "mcp-session-proxy", "curl "]
            .iter()
            .any(|needle| self.script.contains(needle))
    }
}

/// `<!-- example: … -->` read: the kind, and what it uses.
fn parse_comment(line: &str) -> Option<(Kind, Option<String>)> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix("example:")?
        .trim();
    let (kind, rest) = inner.split_once(' ').unwrap_or((inner, ""));
    if kind == "skip" {
        return Some((Kind::Skip(rest.trim().to_owned()), None));
    }
    let mut vars = Vec::new();
    let mut uses = None;
    for word in rest.split_whitespace() {
        if let Some(target) = word.strip_prefix("uses=") {
            uses = Some(target.to_owned());
        } else if let Some((key, value)) = word.split_once('=') {
            vars.push((key.to_owned(), value.to_owned()));
        } else {
            panic!("{line}: {word:?} is neither VAR=value nor uses=PAGE#heading");
        }
    }
    match kind {
        "proxy" => Some((Kind::Proxy(vars), uses)),
        "self" if vars.is_empty() => Some((Kind::SelfContained, uses)),
        _ => panic!("{line}: the kinds are `proxy`, `self` (no variables) and `skip`"),
    }
}

/// The languages of fenced blocks a reader would type into a shell (` ```sh ` runs; the
/// others must be skipped, with a reason).
const SHELL_FENCES: [&str; 5] = ["sh", "bash", "shell", "console", ""];

/// Every shell block of `page` — fenced in a shell language, or indented (four spaces
/// after a blank line, not inside a list) — with the heading it is under and what the
/// comment on the line before it says.
fn examples_of(page: &Page) -> Vec<Example> {
    let mut examples = Vec::new();
    let mut heading = String::from("(top)");
    // The last line that is not blank, whether a blank line came after it, and whether
    // it belonged to a list (whose indented lines are its paragraphs, not code).
    let mut previous = "";
    let mut after_blank = true;
    let mut in_list = false;
    let lines: Vec<&str> = page.text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if line.trim().is_empty() {
            after_blank = true;
            i += 1;
            continue;
        }
        let mut found: Option<(&str, String)> = None;
        if let Some(info) = trimmed.strip_prefix("```") {
            let mut body = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push_str(lines[i]);
                body.push('\n');
                i += 1;
            }
            i += 1;
            let info = info.split_whitespace().next().unwrap_or("");
            if SHELL_FENCES.contains(&info) {
                found = Some((info, body));
            }
        } else if line.starts_with("    ") && after_blank && !in_list {
            let mut body = String::new();
            while i < lines.len() && (lines[i].starts_with("    ") || lines[i].trim().is_empty()) {
                body.push_str(lines[i].get(4..).unwrap_or(""));
                body.push('\n');
                i += 1;
            }
            found = Some(("indented", body));
        } else {
            if line.starts_with('#') && line.contains(' ') {
                heading = line.to_owned();
            }
            in_list = (in_list && (line.starts_with(' ') || !after_blank))
                || trimmed.starts_with("- ")
                || trimmed.starts_with("* ")
                || trimmed
                    .split_once(". ")
                    .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
            previous = line;
            after_blank = false;
            i += 1;
            continue;
        }
        if let Some((info, script)) = found {
            let said = parse_comment(previous);
            examples.push(Example {
                page: page.path.clone(),
                heading: heading.clone(),
                script,
                kind: said.as_ref().map(|(kind, _)| kind.clone()),
                uses: said.and_then(|(_, uses)| uses),
                runnable: info == "sh",
            });
        }
        previous = "";
        after_blank = false;
        in_list = false;
    }
    examples
}

fn all_examples() -> Vec<Example> {
    pages::all().iter().flat_map(examples_of).collect()
}

/// The first paragraph (up to its first blank line: the shell functions) of the first
/// `sh` block under the heading `PAGE#id`.
fn used(target: &str) -> String {
    let (page, id) = target
        .split_once('#')
        .unwrap_or_else(|| panic!("uses={target}: say PAGE#heading"));
    let page = Page {
        path: PathBuf::from(page),
        text: pages::read(Path::new(page)),
    };
    examples_of(&page)
        .into_iter()
        .find(|e| e.runnable && pages::slug(e.heading.trim_start_matches('#')) == id)
        .unwrap_or_else(|| panic!("uses={target}: no sh block under that heading"))
        .script
        .split("\n\n")
        .next()
        .map(|prelude| format!("{prelude}\n"))
        .unwrap_or_default()
}

/// Whether `line` matches `pattern`, where `…` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whether `lines` match `expected` (where a `…` line stands for any number of lines).
fn output_matches(expected: &[String], lines: &[&str]) -> bool {
    match expected.split_first() {
        None => lines.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=lines.len()).any(|skip| output_matches(rest, &lines[skip..]))
        }
        Some((first, rest)) => lines
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && output_matches(rest, more)),
    }
}

/// `script` with each `127.0.0.1:PORT` given a port of its own (`fixed` first).
fn with_ports(script: &str, fixed: &BTreeMap<u16, u16>) -> String {
    let mut ports = fixed.clone();
    let mut out = String::with_capacity(script.len());
    let mut rest = script;
    while let Some(at) = rest.find("127.0.0.1:") {
        let (before, after) = rest.split_at(at + "127.0.0.1:".len());
        out.push_str(before);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<u16>() {
            Ok(port) if port != 0 => {
                let mapped = *ports.entry(port).or_insert_with(free_port);
                out.push_str(&mapped.to_string());
            }
            _ => out.push_str(&digits),
        }
        rest = &after[digits.len()..];
    }
    out.push_str(rest);
    // The same number elsewhere (`--port N`, `PORT=N`) is the same port.
    renumber(&out, &ports)
}

/// `text` with every number that is a key of `ports` (a whole run of digits) replaced.
fn renumber(text: &str, ports: &BTreeMap<u16, u16>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match digits.parse::<u16>().ok().and_then(|n| ports.get(&n)) {
            Some(mapped) => out.push_str(&mapped.to_string()),
            None => out.push_str(digits),
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// The directories put before `PATH`: the binary's, the interop tools' npm programs.
fn search_path() -> String {
    let bin = bin().parent().expect("the binary's directory");
    let npm = tools_dir().join("npm/node_modules/.bin");
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{}:{path}", bin.display(), npm.display())
}

/// What running a block printed, and how it ended.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

/// `script` run by `sh -e` in a process group of its own, in the interop tools' npm
/// directory (so `npx -y @modelcontextprotocol/server-everything` finds it there, and npm
/// is told to stay offline); everything it started is killed when it ends (or after
/// [`WITHIN`]).
async fn run_script(script: &str) -> Run {
    // The test's own `MCP_PROXY_*` and `RUST_LOG` are not the page's.
    let mut child = without_proxy_settings(&mut Command::new("sh"))
        .args(["-e", "-c", script])
        .current_dir(tools_dir().join("npm"))
        .env("PATH", search_path())
        .env("npm_config_offline", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("sh");
    let group = Group(Pid::from_raw(child.id().expect("a running sh") as i32));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    // Background processes keep the pipes open: read while the shell runs, and stop
    // reading once it has ended and its group is gone.
    let reading = tokio::spawn(async move {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let _ = tokio::join!(out.read_to_end(&mut stdout), err.read_to_end(&mut stderr));
        (stdout, stderr)
    });
    let status = tokio::time::timeout(WITHIN, child.wait()).await;
    group.end().await;
    let read = tokio::time::timeout(Duration::from_secs(5), reading).await;
    let ((stdout, stderr), lost) = match read {
        Ok(Ok(output)) => (output, false),
        _ => (Default::default(), true),
    };
    let mut stderr = String::from_utf8_lossy(&stderr).into_owned();
    if lost {
        stderr.push_str("\n(its output was lost: something it started held the pipes open)");
    }
    let success = match status {
        Ok(Ok(status)) => status.success() && !lost,
        Ok(Err(e)) => panic!("waiting for sh: {e}"),
        Err(_) => {
            stderr.push_str(&format!("\n(still running after {WITHIN:?}: killed)"));
            false
        }
    };
    Run {
        success,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr,
    }
}

/// A block's process group: whatever the block started in the background (a proxy, its
/// stdio children's own groups aside, which the proxy ends as it shuts down; Redis; a
/// server) is in it. Ended on drop too, so that a panicking test leaves nothing behind.
struct Group(Pid);

impl Group {
    /// SIGTERM to the group, time to shut down (a proxy ends its children), then SIGKILL.
    async fn end(&self) {
        if killpg(self.0, Signal::SIGTERM).is_err() {
            return;
        }
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Signal 0: is anyone left in the group?
            if killpg(self.0, None).is_err() {
                return;
            }
        }
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

/// How many times an example is run when a port it was given was taken before it bound
/// it (a free port is found by binding port 0 and letting it go: until the example binds
/// it, another process of the suite may be given it).
const PORT_RACE_RUNS: usize = 3;

/// Runs `example` and says what is wrong, if anything; run again, with other ports, when
/// it lost one of its ports to another process (its stderr says the address was in use).
async fn check(example: &Example) -> Option<String> {
    let mut problem = None;
    for _ in 0..PORT_RACE_RUNS {
        problem = check_once(example).await;
        match &problem {
            Some(text) if text.contains("address already in use") => continue,
            _ => break,
        }
    }
    problem
}

/// Runs `example` once and says what is wrong, if anything.
async fn check_once(example: &Example) -> Option<String> {
    let mut script = example.uses.as_deref().map(used).unwrap_or_default();
    script.push_str(&example.script);
    let mut fixed = BTreeMap::new();
    let proxy = match &example.kind {
        Some(Kind::Proxy(vars)) => {
            let vars: Vec<(&str, &str)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let proxy = ProxyProcess::launch()
                .cwd(pages::root())
                .args(&["--listen", "127.0.0.1:0"])
                .env(&vars)
                .startup_within(Duration::from_secs(20))
                .start()
                .await;
            fixed.insert(8080, proxy.listen.port());
            Some(proxy)
        }
        Some(Kind::SelfContained) => None,
        Some(Kind::Skip(_)) | None => return None,
    };
    let run = run_script(&with_ports(&script, &fixed)).await;
    drop(proxy);
    let expected = example.expected();
    let lines: Vec<&str> = run
        .stdout
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let expected: Vec<String> = expected.into_iter().filter(|l| !l.is_empty()).collect();
    if run.success && output_matches(&expected, &lines) {
        return None;
    }
    Some(format!(
        "{}: {}\n--- the page shows:\n{}\n--- it printed:\n{}\n--- stderr:\n{}",
        example.name(),
        if run.success {
            "its output is not what the page shows"
        } else {
            "it failed"
        },
        expected.join("\n"),
        lines.join("\n"),
        run.stderr.trim_end()
    ))
}

#[test]
fn every_example_that_talks_to_the_proxy_says_how_it_runs() {
    let examples = all_examples();
    let unsaid: Vec<String> = examples
        .iter()
        .filter(|e| e.kind.is_none() && e.talks_to_the_proxy())
        .map(Example::name)
        .collect();
    assert!(
        unsaid.is_empty(),
        "shell blocks that talk to the proxy without an `<!-- example: … -->` line before \
         them (proxy, self, or skip REASON): {unsaid:#?}"
    );
    for example in &examples {
        let runs = matches!(example.kind, Some(Kind::Proxy(_) | Kind::SelfContained));
        assert!(
            example.runnable || !runs,
            "{}: only ```sh blocks run (POSIX sh); fence it as sh, or skip it with a reason",
            example.name()
        );
        if let Some(target) = &example.uses {
            assert!(
                !used(target).is_empty(),
                "{}: uses={target} is empty",
                example.name()
            );
        }
        if let Some(Kind::Skip(reason)) = &example.kind {
            assert!(
                !reason.is_empty(),
                "{}: skip needs a reason",
                example.name()
            );
        }
        if matches!(example.kind, Some(Kind::Proxy(_) | Kind::SelfContained)) {
            assert!(
                example
                    .expected()
                    .iter()
                    .any(|line| !line.is_empty() && line != "…"),
                "{}: shows nothing it prints (#> lines other than …)",
                example.name()
            );
        }
    }
    let run = examples
        .iter()
        .filter(|e| e.runnable && matches!(e.kind, Some(Kind::Proxy(_) | Kind::SelfContained)))
        .count();
    assert!(run >= 4, "only {run} examples are run");
}

#[tokio::test]
async fn every_example_prints_what_its_page_shows() {
    ensure_installed();
    assert!(
        which("curl").is_some(),
        "the examples use curl: install it (apt-get install curl)"
    );
    let examples: Vec<Example> = all_examples()
        .into_iter()
        .filter(|e| e.runnable && matches!(e.kind, Some(Kind::Proxy(_) | Kind::SelfContained)))
        .collect();
    // Side by side: each has its own ports (and its own proxy).
    let checks = examples.iter().map(check);
    let problems: Vec<String> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        problems.is_empty(),
        "{} of {} examples do not do what their page shows:\n\n{}",
        problems.len(),
        examples.len(),
        problems.join("\n\n")
    );
}

#[test]
fn outputs_are_compared_with_ellipses() {
    let expected = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(line_matches(
        r#"{"id":"mcps_…","n":1}"#,
        r#"{"id":"mcps_x1","n":1}"#
    ));
    assert!(line_matches("a…", "a"));
    assert!(!line_matches("a…b", "ab-c"));
    assert!(!line_matches("abc", "abcd"));
    assert!(output_matches(
        &expected(&["x", "…", "z"]),
        &["x", "y1", "y2", "z"]
    ));
    assert!(output_matches(&expected(&["x", "…", "z"]), &["x", "z"]));
    assert!(!output_matches(&expected(&["x", "z"]), &["x", "y", "z"]));
    let fixed = BTreeMap::from([(8080, 1234)]);
    let script = with_ports(
        "a 127.0.0.1:8080 b 127.0.0.1:8081 c 127.0.0.1:8081 --port 8080",
        &fixed,
    );
    assert!(
        script.starts_with("a 127.0.0.1:1234 b 127.0.0.1:"),
        "{script}"
    );
    let other = script.split("b 127.0.0.1:").nth(1).unwrap();
    let port = other.split(' ').next().unwrap();
    assert_ne!(port, "8081");
    assert!(
        script.ends_with(&format!("c 127.0.0.1:{port} --port 1234")),
        "{script}"
    );
    assert_eq!(
        parse_comment("<!-- example: proxy MCP_PROXY_X=1s uses=README.md#a -->"),
        Some((
            Kind::Proxy(vec![("MCP_PROXY_X".into(), "1s".into())]),
            Some("README.md#a".into())
        ))
    );
    assert_eq!(
        parse_comment("<!-- example: skip three hosts -->"),
        Some((Kind::Skip("three hosts".into()), None))
    );
}
