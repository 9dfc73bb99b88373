//! The tasks extension's wire (2026-07-28, SEP-2663, `io.modelcontextprotocol/tasks`):
//! what a task looks like to its client. Pure: bytes out of a [`TaskView`].
//!
//! - `CreateTaskResult`, the answer to a `tools/call` that became a task: the task's
//!   fields flat, `resultType: "task"`;
//! - `tasks/get`: the same fields with `resultType: "complete"`, plus `inputRequests`
//!   (`input_required`), the call's `result` (`completed`, a tool error included) or its
//!   JSON-RPC `error` (`failed`);
//! - `tasks/update` and `tasks/cancel`: an empty acknowledgement;
//! - `notifications/tasks` on a `subscriptions/listen` stream: the whole task as
//!   `tasks/get` would show it then (no `resultType`: it is no result).
//!
//! Never a `requestState`, never the related-task `_meta` of the 2025-11-25 tasks.

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the task has ended (nothing changes it any more).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// One task as its client sees it now.
#[derive(Debug)]
pub struct TaskView<'a> {
    pub task_id: &'a str,
    pub status: TaskStatus,
    pub status_message: Option<&'a str>,
    /// Unix milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
    pub ttl: Duration,
    pub poll_interval: Duration,
    /// The outstanding input requests, by key: `{method, params}` each (raw JSON).
    pub input_requests: &'a [(String, Vec<u8>)],
    /// `completed`: the call's result; `failed`: its error object (raw JSON each).
    pub outcome: Option<&'a [u8]>,
}

#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "resultType", skip_serializing_if = "Option::is_none")]
    result_type: Option<&'static str>,
    #[serde(rename = "taskId")]
    task_id: &'a str,
    status: &'static str,
    #[serde(rename = "statusMessage", skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    #[serde(rename = "createdAt")]
    created_at: String,
    #[serde(rename = "lastUpdatedAt")]
    last_updated_at: String,
    #[serde(rename = "ttlMs")]
    ttl_ms: u64,
    #[serde(rename = "pollIntervalMs")]
    poll_interval_ms: u64,
    #[serde(rename = "inputRequests", skip_serializing_if = "Option::is_none")]
    input_requests: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RawValue>,
}

/// ISO 8601 (RFC 3339, UTC, milliseconds) for Unix milliseconds.
fn timestamp(millis: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
}

fn wire<'a>(view: &'a TaskView<'a>, result_type: Option<&'static str>, detailed: bool) -> Vec<u8> {
    let outcome = view
        .outcome
        .and_then(|raw| std::str::from_utf8(raw).ok())
        .and_then(|text| serde_json::from_str::<&RawValue>(text).ok());
    let input_requests = (detailed && view.status == TaskStatus::InputRequired)
        .then(|| input_requests(view.input_requests))
        .flatten();
    let wire = Wire {
        result_type,
        task_id: view.task_id,
        status: view.status.as_str(),
        status_message: view.status_message,
        created_at: timestamp(view.created_at),
        last_updated_at: timestamp(view.updated_at),
        ttl_ms: view.ttl.as_millis() as u64,
        poll_interval_ms: (view.poll_interval.as_millis() as u64).max(1),
        input_requests,
        result: outcome.filter(|_| detailed && view.status == TaskStatus::Completed),
        error: outcome.filter(|_| detailed && view.status == TaskStatus::Failed),
    };
    // A struct of strings, integers and valid raw JSON always serializes.
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// `{"<key>": {method, params}, …}`.
fn input_requests(requests: &[(String, Vec<u8>)]) -> Option<Box<RawValue>> {
    let mut out = String::from("{");
    for (i, (key, request)) in requests.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        out.push_str(std::str::from_utf8(request).ok()?);
    }
    out.push('}');
    RawValue::from_string(out).ok()
}

/// The `CreateTaskResult` answering the `tools/call` that became the task.
pub fn create_result(view: &TaskView<'_>) -> Vec<u8> {
    wire(view, Some("task"), false)
}

/// The `tasks/get` result: the task in detail.
pub fn detailed(view: &TaskView<'_>) -> Vec<u8> {
    wire(view, Some("complete"), true)
}

/// The params of `notifications/tasks`: the task in detail, as `tasks/get` shows it.
pub fn status_params(view: &TaskView<'_>) -> Vec<u8> {
    wire(view, None, true)
}

/// What `tasks/update` and `tasks/cancel` answer.
pub const ACK: &[u8] = br#"{"resultType":"complete"}"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(
        status: TaskStatus,
        input: &'a [(String, Vec<u8>)],
        outcome: Option<&'a [u8]>,
    ) -> TaskView<'a> {
        TaskView {
            task_id: "t1",
            status,
            status_message: None,
            created_at: 1_780_000_000_000,
            updated_at: 1_780_000_000_500,
            ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            input_requests: input,
            outcome,
        }
    }

    fn parsed(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn a_create_result_is_flat_and_says_task() {
        let created = parsed(&create_result(&view(TaskStatus::Working, &[], None)));
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["taskId"], "t1");
        assert_eq!(created["status"], "working");
        assert_eq!(created["ttlMs"], 3_600_000);
        assert_eq!(created["pollIntervalMs"], 500);
        assert!(
            created["createdAt"]
                .as_str()
                .unwrap()
                .starts_with("2026-05-28T"),
            "{created}"
        );
        for absent in ["task", "result", "error", "inputRequests", "requestState"] {
            assert!(created.get(absent).is_none(), "{absent} in {created}");
        }
    }

    #[test]
    fn tasks_get_inlines_what_the_status_has() {
        let input = vec![(
            "elicit-1".to_owned(),
            br#"{"method":"elicitation/create","params":{"message":"ok?"}}"#.to_vec(),
        )];
        let waiting = parsed(&detailed(&view(TaskStatus::InputRequired, &input, None)));
        assert_eq!(waiting["resultType"], "complete");
        assert_eq!(
            waiting["inputRequests"]["elicit-1"]["method"],
            "elicitation/create"
        );
        let result = br#"{"content":[{"type":"text","text":"done"}],"isError":true}"#;
        let done = parsed(&detailed(&view(TaskStatus::Completed, &[], Some(result))));
        assert_eq!(done["result"]["isError"], true);
        assert!(done.get("error").is_none() && done.get("inputRequests").is_none());
        let error = br#"{"code":-32603,"message":"boom"}"#;
        let failed = parsed(&detailed(&view(TaskStatus::Failed, &[], Some(error))));
        assert_eq!(failed["error"]["code"], -32603);
        assert!(failed.get("result").is_none());
        let cancelled = parsed(&detailed(&view(TaskStatus::Cancelled, &[], None)));
        assert_eq!(cancelled["status"], "cancelled");
    }

    #[test]
    fn a_status_notification_is_the_task_without_a_result_type() {
        let result = br#"{"content":[]}"#;
        let status = parsed(&status_params(&view(
            TaskStatus::Completed,
            &[],
            Some(result),
        )));
        assert!(status.get("resultType").is_none(), "{status}");
        assert_eq!(status["taskId"], "t1");
        assert_eq!(status["status"], "completed");
        assert_eq!(status["result"]["content"], serde_json::json!([]));
    }
}
