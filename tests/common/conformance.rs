//! The official MCP conformance suite (server side) as a comparison: one run of
//! `tests/interop/conformance/run.sh` against a URL, read back as the checks that passed
//! and the checks that ran, so that a run through the proxy can be compared check by
//! check with a run against the server itself.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::interop::{ensure_installed, repo_root, tools_dir};

/// How long one run of the suite may take (`--requirements 2026-07-28`: about 10 s).
const SUITE_LIMIT: Duration = Duration::from_secs(240);

/// One check of the suite: (scenario, check id).
pub type Check = (String, String);

/// What one run of the suite reported (its `summary.tsv`: INFO checks left out).
#[derive(Debug)]
pub struct Results {
    /// Every check that ran, with its status (SUCCESS, FAILURE, WARNING, SKIPPED).
    pub checks: Vec<(Check, String)>,
    /// Where the suite's own output is (`suite.log`, one `checks.json` per scenario).
    pub out: PathBuf,
}

impl Results {
    /// The checks that passed.
    pub fn passed(&self) -> BTreeSet<Check> {
        self.with_status("SUCCESS")
    }

    /// The checks that ran with `status`.
    pub fn with_status(&self, status: &str) -> BTreeSet<Check> {
        self.checks
            .iter()
            .filter(|(_, s)| s == status)
            .map(|(check, _)| check.clone())
            .collect()
    }

    /// The scenarios that ran.
    pub fn scenarios(&self) -> BTreeSet<String> {
        self.checks
            .iter()
            .map(|((scenario, _), _)| scenario.clone())
            .collect()
    }
}

/// Runs the suite at `spec` (`2026-07-28`) on `selection` (`required`, `all`, a scenario)
/// against `url`, writing into `target/conformance/<name>`. Failed checks are results,
/// not an error; a run that could not start (exit 2: usage, tools missing) or wrote no
/// summary panics.
pub async fn run_suite(spec: &str, url: &str, selection: &str, name: &str) -> Results {
    ensure_installed();
    let out = repo_root().join("target/conformance").join(name);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(repo_root().join("tests/interop/conformance/run.sh"))
        .args([spec, url])
        .arg(&out)
        .arg(selection)
        .env("INTEROP_TOOLS", tools_dir())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(SUITE_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| {
            panic!("conformance {spec} {selection} against {url}: over {SUITE_LIMIT:?}")
        })
        .unwrap_or_else(|e| panic!("run.sh could not be started: {e}"));
    let said = || {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    // 0: nothing failed; 1: some check failed. Anything else: the suite did not run.
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "conformance {spec} {selection} against {url} did not run ({}):\n{}",
        output.status,
        said()
    );
    let summary = std::fs::read_to_string(out.join("summary.tsv"))
        .unwrap_or_else(|e| panic!("no summary.tsv in {} ({e}):\n{}", out.display(), said()));
    let checks = summary
        .lines()
        .map(|line| {
            let mut fields = line.split('\t');
            let (Some(scenario), Some(check), Some(status)) =
                (fields.next(), fields.next(), fields.next())
            else {
                panic!("a summary line that is not scenario, check, status: {line:?}");
            };
            ((scenario.to_owned(), check.to_owned()), status.to_owned())
        })
        .collect();
    Results { checks, out }
}
