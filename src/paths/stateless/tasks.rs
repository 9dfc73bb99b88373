//! The tasks the proxy runs for a legacy upstream (2026-07-28 tasks extension, SEP-2663):
//! a `tools/call` that did not answer within a moment goes on in the background as a
//! task its client polls (`tasks/get`), answers (`tasks/update`) and cancels
//! (`tasks/cancel`).
//!
//! This file is the table: each task's state as `tasks/get` shows it, and the channel
//! to the call's driver (`driver`), which holds the upstream call and its session and
//! writes the outcome here. A task id is sealed like a `requestState` (the replica
//! holding the task, bound to its caller, expiring with the task): unguessable, another
//! caller's is unknown, and a replica that does not hold it knows where it is.
//!
//! Bounded: [`MAX_TASKS`] in all and [`MAX_TASKS_PER_CALLER`] for one caller (ended ones
//! included, until their `ttlMs` passes); a running task also holds a waiting call's
//! place (`waiting`), as it holds an upstream session. Past the ttl a task is forgotten,
//! and one still running is cancelled upstream and ends `failed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::error::ProxyError;
use crate::jsonrpc::ErrorObject;
use crate::mcp::caller::{Caller, CallerKey};
use crate::rewrite::tasks::{TaskStatus, TaskView, create_result, detailed};
use crate::session::now_millis;
use crate::stateless::Sealer;
use crate::stateless::request_state::StateBinding;

/// Tasks held at once (running or ended, until forgotten).
pub const MAX_TASKS: usize = 10_000;
/// Tasks one caller holds at once.
pub const MAX_TASKS_PER_CALLER: usize = 256;
/// How often a client should poll (`pollIntervalMs`).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// What task ids are sealed for (never the method of a request a `requestState` binds).
const TASK_BINDING: &str = "io.modelcontextprotocol/tasks";

/// What a task's driver is told.
#[derive(Debug)]
pub enum Control {
    /// The client's response to one of the upstream's requests.
    Answer {
        upstream_id: Box<RawValue>,
        response: Box<RawValue>,
    },
    /// The client cancelled the task.
    Cancel,
}

/// An upstream request waiting for the task's client.
#[derive(Debug)]
pub struct InputRequest {
    pub key: String,
    pub upstream_id: Box<RawValue>,
    /// `{method, params}`, as `inputRequests` shows it.
    pub request: Vec<u8>,
}

#[derive(Debug)]
struct State {
    status: TaskStatus,
    message: Option<String>,
    updated_at: u64,
    input: Vec<InputRequest>,
    /// `completed`: the result; `failed`: the error object (raw JSON).
    outcome: Option<Vec<u8>>,
}

/// One task.
#[derive(Debug)]
pub struct Task {
    id: String,
    key: [u8; 16],
    caller_key: Option<CallerKey>,
    created_at: u64,
    ttl: Duration,
    state: Mutex<State>,
    control: mpsc::UnboundedSender<Control>,
}

impl Task {
    /// Its id, as its client names it.
    #[cfg(test)]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When it is forgotten (Unix milliseconds).
    pub fn expires_at(&self) -> u64 {
        self.created_at + self.ttl.as_millis() as u64
    }

    fn view<T>(&self, write: impl FnOnce(&TaskView<'_>) -> T) -> T {
        let state = self.state.lock();
        let input: Vec<(String, Vec<u8>)> = state
            .input
            .iter()
            .map(|r| (r.key.clone(), r.request.clone()))
            .collect();
        write(&TaskView {
            task_id: &self.id,
            status: state.status,
            status_message: state.message.as_deref(),
            created_at: self.created_at,
            updated_at: state.updated_at,
            ttl: self.ttl,
            poll_interval: POLL_INTERVAL,
            input_requests: &input,
            outcome: state.outcome.as_deref(),
        })
    }

    /// The `CreateTaskResult`.
    pub fn created(&self) -> Vec<u8> {
        self.view(create_result)
    }

    /// The `tasks/get` result.
    pub fn detailed(&self) -> Vec<u8> {
        self.view(detailed)
    }

    /// `tasks/update`: the responses to outstanding requests go to the upstream, and
    /// leave `inputRequests` at once; a key not outstanding (never asked, answered
    /// already) is ignored.
    pub fn update(&self, provided: Vec<(String, Box<RawValue>)>) {
        let mut state = self.state.lock();
        for (key, response) in provided {
            let Some(at) = state.input.iter().position(|r| r.key == key) else {
                continue;
            };
            let request = state.input.remove(at);
            let _ = self.control.send(Control::Answer {
                upstream_id: request.upstream_id,
                response,
            });
        }
        if state.status == TaskStatus::InputRequired && state.input.is_empty() {
            state.status = TaskStatus::Working;
            state.message = None;
        }
        state.updated_at = now_millis();
    }

    /// `tasks/cancel`: the task ends `cancelled` now (an ended one stays as it is) and
    /// its upstream call is cancelled.
    pub fn cancel(&self) {
        let mut state = self.state.lock();
        if state.status.is_terminal() {
            return;
        }
        state.status = TaskStatus::Cancelled;
        state.message = Some("cancelled by its client".to_owned());
        state.input.clear();
        state.updated_at = now_millis();
        let _ = self.control.send(Control::Cancel);
    }

    /// The driver: the upstream asks the client for `requests` (more may be waiting).
    pub fn ask(&self, requests: Vec<InputRequest>) {
        let mut state = self.state.lock();
        if state.status.is_terminal() {
            return;
        }
        state.input.extend(requests);
        state.status = TaskStatus::InputRequired;
        state.message = Some("the server needs the client's input".to_owned());
        state.updated_at = now_millis();
    }

    /// The driver: the call answered with `result` (a tool error included).
    pub fn complete(&self, result: Vec<u8>) {
        self.end(TaskStatus::Completed, None, Some(result));
    }

    /// The driver (or the sweep): the call ended with `error`.
    pub fn fail(&self, error: &ErrorObject) {
        let object = serde_json::to_vec(error).unwrap_or_default();
        self.end(
            TaskStatus::Failed,
            Some(error.message.clone()),
            Some(object),
        );
    }

    fn end(&self, status: TaskStatus, message: Option<String>, outcome: Option<Vec<u8>>) {
        let mut state = self.state.lock();
        // A cancelled task stays cancelled, whatever its call said last.
        if state.status.is_terminal() {
            return;
        }
        state.status = status;
        state.message = message;
        state.outcome = outcome;
        state.input.clear();
        state.updated_at = now_millis();
    }

    pub fn is_terminal(&self) -> bool {
        self.state.lock().status.is_terminal()
    }
}

/// The tasks of one upstream on this replica.
#[derive(Debug)]
pub struct Tasks {
    ids: Sealer,
    ttl: Duration,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    tasks: HashMap<[u8; 16], Arc<Task>>,
    by_caller: HashMap<CallerKey, usize>,
}

impl Tasks {
    /// Tasks whose ids `keys` seal (as they seal `requestState`), forgotten `ttl` after
    /// they were created.
    pub fn new(keys: &[Vec<u8>], ttl: Duration) -> Tasks {
        Tasks {
            ids: Sealer::with_keys(keys, ttl),
            ttl,
            table: Mutex::new(Table::default()),
        }
    }

    /// A new `working` task of `caller`, held by the replica `owner`, and what its
    /// driver hears; `None` beyond a bound (the call then goes on as a plain call).
    pub fn create(
        &self,
        caller: Caller,
        caller_key: Option<CallerKey>,
        owner: &str,
    ) -> Option<(Arc<Task>, mpsc::UnboundedReceiver<Control>)> {
        let mut table = self.table.lock();
        if table.tasks.len() >= MAX_TASKS {
            tracing::info!(
                max = MAX_TASKS,
                "a call did not become a task: too many tasks"
            );
            return None;
        }
        if let Some(key) = caller_key {
            let held = table.by_caller.get(&key).copied().unwrap_or(0);
            if held >= MAX_TASKS_PER_CALLER {
                tracing::info!(
                    max = MAX_TASKS_PER_CALLER,
                    "a call did not become a task: its caller holds too many"
                );
                return None;
            }
            table.by_caller.insert(key, held + 1);
        }
        let mut key = [0u8; 16];
        rand::fill(&mut key);
        let id = self.ids.seal(key, owner, binding(caller));
        let now = now_millis();
        let (control, heard) = mpsc::unbounded_channel();
        let task = Arc::new(Task {
            id,
            key,
            caller_key,
            created_at: now,
            ttl: self.ttl,
            state: Mutex::new(State {
                status: TaskStatus::Working,
                message: None,
                updated_at: now,
                input: Vec::new(),
                outcome: None,
            }),
            control,
        });
        table.tasks.insert(key, task.clone());
        Some((task, heard))
    }

    /// Where the task `task_id` of `caller` is held: its key and the replica.
    pub fn locate(&self, task_id: &str, caller: Caller) -> Result<([u8; 16], String), ProxyError> {
        self.ids
            .open(task_id, binding(caller))
            .map_err(|_| unknown(task_id))
    }

    /// The task `key` held here.
    pub fn get(&self, key: &[u8; 16], task_id: &str) -> Result<Arc<Task>, ProxyError> {
        self.table
            .lock()
            .tasks
            .get(key)
            .cloned()
            .ok_or_else(|| unknown(task_id))
    }

    /// Forgets the tasks past their ttl; one still running is cancelled upstream and
    /// ends `failed`.
    pub fn sweep(&self) {
        let now = now_millis();
        let expired: Vec<Arc<Task>> = {
            let mut table = self.table.lock();
            let keys: Vec<[u8; 16]> = table
                .tasks
                .values()
                .filter(|task| task.expires_at() <= now)
                .map(|task| task.key)
                .collect();
            let mut gone = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(task) = table.tasks.remove(&key) {
                    if let Some(caller) = task.caller_key
                        && let Some(held) = table.by_caller.get_mut(&caller)
                    {
                        *held = held.saturating_sub(1);
                        if *held == 0 {
                            table.by_caller.remove(&caller);
                        }
                    }
                    gone.push(task);
                }
            }
            gone
        };
        for task in expired {
            if !task.is_terminal() {
                task.fail(&ErrorObject {
                    code: crate::jsonrpc::code::INTERNAL_ERROR,
                    message: "the task ran longer than its ttlMs and was cancelled".into(),
                    data: None,
                });
                let _ = task.control.send(Control::Cancel);
            }
        }
    }

    /// Tasks held now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table.lock().tasks.len()
    }
}

fn binding(caller: Caller) -> StateBinding<'static> {
    StateBinding {
        caller,
        method: TASK_BINDING,
        params: "",
    }
}

fn unknown(task_id: &str) -> ProxyError {
    ProxyError::UnknownTask {
        task_id: task_id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks() -> Tasks {
        Tasks::new(&[vec![7u8; 32]], Duration::from_secs(60))
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_task_is_found_by_its_caller_only() {
        let tasks = tasks();
        let (task, _heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        let (key, owner) = tasks.locate(task.id(), Caller::ANONYMOUS).unwrap();
        assert_eq!(owner, "me");
        assert!(tasks.get(&key, task.id()).is_ok());
        let other = Caller::subject("https://issuer", "other");
        assert!(matches!(
            tasks.locate(task.id(), other),
            Err(ProxyError::UnknownTask { .. })
        ));
        assert!(tasks.locate("made-up", Caller::ANONYMOUS).is_err());
    }

    #[test]
    fn answers_leave_input_requests_at_once_and_unknown_keys_are_ignored() {
        let tasks = tasks();
        let (task, mut heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        let request = |key: &str| InputRequest {
            key: key.to_owned(),
            upstream_id: raw("1"),
            request: br#"{"method":"elicitation/create","params":{}}"#.to_vec(),
        };
        task.ask(vec![request("a"), request("b")]);
        task.update(vec![
            ("a".to_owned(), raw(r#"{"action":"accept"}"#)),
            ("nope".to_owned(), raw("{}")),
        ]);
        let now: serde_json::Value = serde_json::from_slice(&task.detailed()).unwrap();
        assert_eq!(now["status"], "input_required");
        assert!(now["inputRequests"].get("a").is_none());
        assert!(now["inputRequests"].get("b").is_some());
        assert!(matches!(heard.try_recv(), Ok(Control::Answer { .. })));
        assert!(heard.try_recv().is_err());
        task.update(vec![("b".to_owned(), raw("{}"))]);
        let now: serde_json::Value = serde_json::from_slice(&task.detailed()).unwrap();
        assert_eq!(now["status"], "working");
    }

    #[test]
    fn a_cancelled_task_stays_cancelled_and_cancel_is_idempotent() {
        let tasks = tasks();
        let (task, mut heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        task.cancel();
        task.cancel();
        task.complete(b"{}".to_vec());
        let now: serde_json::Value = serde_json::from_slice(&task.detailed()).unwrap();
        assert_eq!(now["status"], "cancelled");
        assert!(matches!(heard.try_recv(), Ok(Control::Cancel)));
        assert!(heard.try_recv().is_err());
    }

    #[test]
    fn expired_tasks_are_forgotten_and_a_running_one_fails() {
        let tasks = Tasks::new(&[vec![7u8; 32]], Duration::ZERO);
        let (task, mut heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        tasks.sweep();
        assert_eq!(tasks.len(), 0);
        let now: serde_json::Value = serde_json::from_slice(&task.detailed()).unwrap();
        assert_eq!(now["status"], "failed");
        assert!(matches!(heard.try_recv(), Ok(Control::Cancel)));
    }
}
