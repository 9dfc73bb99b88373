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
//! included, until their `ttlMs` passes); what ended tasks keep (results, errors) to
//! [`MAX_KEPT_BYTES`] in all and [`MAX_KEPT_BYTES_PER_CALLER`] for one caller — an
//! outcome beyond them is not kept, and its task ends `failed` saying so; a running task
//! also holds a waiting call's place (`waiting`), as it holds an upstream session. Past
//! the ttl a task is forgotten, and one still running is cancelled upstream and ends
//! `failed`.
//!
//! Every change of a task is told to whoever watches it (`subscriptions/listen` with
//! `taskIds`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc};

use crate::error::ProxyError;
use crate::jsonrpc::ErrorObject;
use crate::mcp::caller::{Caller, CallerKey};
use crate::rewrite::tasks::{TaskStatus, TaskView, create_result, detailed, status_params};
use crate::session::now_millis;
use crate::stateless::Sealer;
use crate::stateless::request_state::StateBinding;

/// Tasks held at once (running or ended, until forgotten).
pub const MAX_TASKS: usize = 10_000;
/// Tasks one caller holds at once.
pub const MAX_TASKS_PER_CALLER: usize = 256;
/// Bytes of ended tasks' outcomes kept at once (per upstream, on this replica).
pub const MAX_KEPT_BYTES: usize = 256 << 20;
/// Bytes of ended tasks' outcomes one caller keeps at once.
pub const MAX_KEPT_BYTES_PER_CALLER: usize = 64 << 20;
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
    /// What `outcome` takes of the kept bytes.
    charged: usize,
}

/// The bytes ended tasks keep, in all and per caller.
#[derive(Debug, Default)]
struct Kept {
    total: usize,
    by_caller: HashMap<CallerKey, usize>,
}

#[derive(Debug, Default)]
struct Budget(Mutex<Kept>);

impl Budget {
    /// Whether `bytes` more may be kept for `caller` (and if so, they are).
    fn take(&self, caller: Option<CallerKey>, bytes: usize) -> bool {
        let mut kept = self.0.lock();
        if kept.total + bytes > MAX_KEPT_BYTES {
            return false;
        }
        if let Some(caller) = caller {
            let held = kept.by_caller.entry(caller).or_default();
            if *held + bytes > MAX_KEPT_BYTES_PER_CALLER {
                if *held == 0 {
                    kept.by_caller.remove(&caller);
                }
                return false;
            }
            *held += bytes;
        }
        kept.total += bytes;
        true
    }

    fn give(&self, caller: Option<CallerKey>, bytes: usize) {
        let mut kept = self.0.lock();
        kept.total = kept.total.saturating_sub(bytes);
        if let Some(caller) = caller
            && let Some(held) = kept.by_caller.get_mut(&caller)
        {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                kept.by_caller.remove(&caller);
            }
        }
    }
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
    /// Who is told of its changes: each listen stream watching it, and its index there.
    watchers: Mutex<Vec<(Weak<Watcher>, usize)>>,
    budget: Arc<Budget>,
}

impl Drop for Task {
    fn drop(&mut self) {
        let charged = self.state.get_mut().charged;
        self.budget.give(self.caller_key, charged);
    }
}

impl Task {
    /// Its id, as its client names it.
    #[cfg(test)]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its key, in hex: what the shared store keeps its outcome under.
    pub fn key_hex(&self) -> String {
        hex(&self.key)
    }

    /// Tells `watcher` of its changes from now on, as its task `index`.
    pub fn watch(&self, watcher: &Arc<Watcher>, index: usize) {
        let mut watchers = self.watchers.lock();
        watchers.retain(|(w, _)| w.strong_count() > 0);
        watchers.push((Arc::downgrade(watcher), index));
    }

    fn changed(&self) {
        self.watchers
            .lock()
            .retain(|(watcher, index)| match watcher.upgrade() {
                Some(watcher) => {
                    watcher.mark(*index);
                    true
                }
                None => false,
            });
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

    /// The params of its `notifications/tasks`, and whether it has ended — read
    /// together, so that the end is never missed.
    pub fn status_params(&self) -> (Vec<u8>, bool) {
        self.view(|view| (status_params(view), view.status.is_terminal()))
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
        drop(state);
        self.changed();
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
        drop(state);
        let _ = self.control.send(Control::Cancel);
        self.changed();
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
        drop(state);
        self.changed();
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
        let size = outcome.as_ref().map_or(0, Vec::len);
        if self.budget.take(self.caller_key, size) {
            state.status = status;
            state.message = message;
            state.outcome = outcome;
            state.charged = size;
        } else {
            tracing::info!(
                bytes = size,
                "a task's outcome was not kept: more than the proxy keeps for tasks"
            );
            let error = too_large(size);
            state.status = TaskStatus::Failed;
            state.message = Some(error.message.clone());
            state.outcome = serde_json::to_vec(&error).ok();
        }
        state.input.clear();
        state.updated_at = now_millis();
        drop(state);
        self.changed();
    }

    pub fn is_terminal(&self) -> bool {
        self.state.lock().status.is_terminal()
    }
}

/// What one listen stream watches: which of its tasks changed since it last looked
/// (changes in between coalesce: each is told with the whole task as it is then).
#[derive(Debug)]
pub struct Watcher {
    changed: Mutex<Vec<bool>>,
    notify: Notify,
}

impl Watcher {
    /// A watcher of `tasks` tasks, each marked changed (its first look tells them as
    /// they are).
    pub fn new(tasks: usize) -> Arc<Watcher> {
        Arc::new(Watcher {
            changed: Mutex::new(vec![true; tasks]),
            notify: Notify::new(),
        })
    }

    fn mark(&self, index: usize) {
        if let Some(flag) = self.changed.lock().get_mut(index) {
            *flag = true;
        }
        self.notify.notify_one();
    }

    /// The tasks that changed since the last look, waiting for one if none did.
    /// Cancel-safe: what it did not return stays marked.
    pub async fn changes(&self) -> Vec<usize> {
        loop {
            let changed: Vec<usize> = {
                let mut flags = self.changed.lock();
                let changed = flags
                    .iter()
                    .enumerate()
                    .filter_map(|(i, flag)| flag.then_some(i))
                    .collect();
                flags.iter_mut().for_each(|flag| *flag = false);
                changed
            };
            if !changed.is_empty() {
                return changed;
            }
            self.notify.notified().await;
        }
    }
}

/// The tasks of one upstream on this replica.
#[derive(Debug)]
pub struct Tasks {
    ids: Sealer,
    /// The upstream's name, which ids are bound to (an id is unknown at another).
    upstream: Arc<str>,
    ttl: Duration,
    table: Mutex<Table>,
    budget: Arc<Budget>,
}

/// Where a task is, from its id alone.
#[derive(Debug)]
pub struct Located {
    pub key: [u8; 16],
    /// The replica holding it.
    pub owner: String,
    /// When it was created (Unix milliseconds).
    pub created_at: u64,
}

impl Located {
    /// Its key, in hex (as [`Task::key_hex`]).
    pub fn key_hex(&self) -> String {
        hex(&self.key)
    }
}

#[derive(Debug, Default)]
struct Table {
    tasks: HashMap<[u8; 16], Arc<Task>>,
    by_caller: HashMap<CallerKey, usize>,
}

impl Tasks {
    /// Tasks of the upstream `upstream` whose ids `keys` seal (as they seal
    /// `requestState`), forgotten `ttl` after they were created.
    pub fn new(upstream: Arc<str>, keys: &[Vec<u8>], ttl: Duration) -> Tasks {
        Tasks {
            ids: Sealer::with_keys(keys, ttl),
            upstream,
            ttl,
            table: Mutex::new(Table::default()),
            budget: Arc::default(),
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
        let now = now_millis();
        let expires_at = now + self.ttl.as_millis() as u64;
        let id = self
            .ids
            .seal_until(key, owner, self.binding(caller), expires_at);
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
                charged: 0,
            }),
            control,
            watchers: Mutex::default(),
            budget: self.budget.clone(),
        });
        table.tasks.insert(key, task.clone());
        Some((task, heard))
    }

    /// Where the task `task_id` of `caller` is held.
    pub fn locate(&self, task_id: &str, caller: Caller) -> Result<Located, ProxyError> {
        let (key, owner, expires_at) = self
            .ids
            .open_until(task_id, self.binding(caller))
            .map_err(|_| unknown(task_id))?;
        Ok(Located {
            key,
            owner,
            created_at: expires_at.saturating_sub(self.ttl.as_millis() as u64),
        })
    }

    /// The `tasks/get` result of a task whose replica stopped before the task ended
    /// (nothing kept its outcome): `failed`, saying so.
    pub fn orphaned(&self, task_id: &str, created_at: u64) -> Vec<u8> {
        let error = ErrorObject {
            code: crate::jsonrpc::code::INTERNAL_ERROR,
            message: ORPHANED.into(),
            data: None,
        };
        let outcome = serde_json::to_vec(&error).unwrap_or_default();
        detailed(&TaskView {
            task_id,
            status: TaskStatus::Failed,
            status_message: Some(ORPHANED),
            created_at,
            // It changes no more: the same answer at every poll.
            updated_at: created_at,
            ttl: self.ttl,
            poll_interval: POLL_INTERVAL,
            input_requests: &[],
            outcome: Some(&outcome),
        })
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

impl Tasks {
    /// What a task id is bound to: its caller, tasks (never a `requestState`), and the
    /// upstream.
    fn binding(&self, caller: Caller) -> StateBinding<'_> {
        StateBinding {
            caller,
            method: TASK_BINDING,
            params: &self.upstream,
        }
    }
}

/// Why a task whose replica stopped failed.
const ORPHANED: &str =
    "the proxy replica running this task stopped before the task ended; its outcome is lost";

/// Why an outcome was not kept.
fn too_large(bytes: usize) -> ErrorObject {
    ErrorObject {
        code: crate::jsonrpc::code::INTERNAL_ERROR,
        message: format!(
            "the task's outcome ({bytes} bytes) is more than the proxy keeps for tasks now ({MAX_KEPT_BYTES_PER_CALLER} bytes per caller, {MAX_KEPT_BYTES} in all); it was dropped"
        ),
        data: None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        Tasks::new("up".into(), &[vec![7u8; 32]], Duration::from_secs(60))
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_task_is_found_by_its_caller_only() {
        let tasks = tasks();
        let (task, _heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        let located = tasks.locate(task.id(), Caller::ANONYMOUS).unwrap();
        assert_eq!(located.owner, "me");
        assert!(tasks.get(&located.key, task.id()).is_ok());
        let created: serde_json::Value = serde_json::from_slice(&task.created()).unwrap();
        let orphaned: serde_json::Value =
            serde_json::from_slice(&tasks.orphaned(task.id(), located.created_at)).unwrap();
        assert_eq!(orphaned["createdAt"], created["createdAt"]);
        assert_eq!(orphaned["status"], "failed");
        assert!(
            orphaned["error"]["message"]
                .as_str()
                .unwrap()
                .contains("stopped")
        );
        let other = Caller::subject("https://issuer", "other");
        assert!(matches!(
            tasks.locate(task.id(), other),
            Err(ProxyError::UnknownTask { .. })
        ));
        assert!(tasks.locate("made-up", Caller::ANONYMOUS).is_err());
        let elsewhere = Tasks::new("other".into(), &[vec![7u8; 32]], Duration::from_secs(60));
        assert!(
            elsewhere.locate(task.id(), Caller::ANONYMOUS).is_err(),
            "another upstream's task is unknown"
        );
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
        let tasks = Tasks::new("up".into(), &[vec![7u8; 32]], Duration::ZERO);
        let (task, mut heard) = tasks.create(Caller::ANONYMOUS, None, "me").unwrap();
        tasks.sweep();
        assert_eq!(tasks.len(), 0);
        let now: serde_json::Value = serde_json::from_slice(&task.detailed()).unwrap();
        assert_eq!(now["status"], "failed");
        assert!(matches!(heard.try_recv(), Ok(Control::Cancel)));
    }

    #[test]
    fn outcomes_are_kept_within_their_bounds_and_given_back_when_forgotten() {
        let tasks = Tasks::new("up".into(), &[vec![7u8; 32]], Duration::ZERO);
        let caller = CallerKey::of(Caller::ANONYMOUS, Some("10.0.0.1".parse().unwrap()));
        let (big, _heard) = tasks.create(Caller::ANONYMOUS, caller, "me").unwrap();
        big.complete(vec![b' '; MAX_KEPT_BYTES_PER_CALLER + 1]);
        let now: serde_json::Value = serde_json::from_slice(&big.detailed()).unwrap();
        assert_eq!(now["status"], "failed", "too large to keep");
        assert!(now["error"]["message"].as_str().unwrap().contains("bytes"));
        let (fits, _heard) = tasks.create(Caller::ANONYMOUS, caller, "me").unwrap();
        let watcher = Watcher::new(1);
        fits.watch(&watcher, 0);
        assert_eq!(
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(watcher.changes()),
            vec![0],
            "first: as it is"
        );
        assert!(!watcher.changed.lock()[0]);
        fits.complete(format!("{{\"content\":[],\"pad\":\"{}\"}}", " ".repeat(1000)).into_bytes());
        assert!(watcher.changed.lock()[0], "a change is told");
        let now: serde_json::Value = serde_json::from_slice(&fits.detailed()).unwrap();
        assert_eq!(now["status"], "completed");
        assert!(tasks.budget.0.lock().total > 1000);
        tasks.sweep();
        drop((big, fits));
        assert_eq!(
            tasks.budget.0.lock().total,
            0,
            "forgotten tasks give their bytes back"
        );
        assert!(tasks.budget.0.lock().by_caller.is_empty());
    }
}
