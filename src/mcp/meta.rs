//! `_meta`: where every MCP era keeps its per-message metadata.
//!
//! A [`Payload`] is a request's `params` or a response's `result` with its top level and
//! its `_meta` opened (values still raw), so one key can be read, removed or set while
//! everything else is written back byte for byte.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use serde_json::value::RawValue;

use crate::jsonrpc::{KeptObjects, RawObject, write_json_str};

/// Data-layer session metadata (the data-layer sessions draft): `{sessionId, state?, expiresAt?}`.
pub const SESSION: &str = "io.modelcontextprotocol/session";
/// Per-request client identity (2026-07-28; also read from `sessions/create`).
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Per-request client capabilities (2026-07-28; also read from `sessions/create`).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Per-request protocol version (2026-07-28).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Per-request log level (2026-07-28); absent means no log notifications.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The server's identity on results (2026-07-28).
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The listen request a notification belongs to (2026-07-28 `subscriptions/listen`).
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The token progress notifications for a request carry (2025-11-25 `ProgressToken`: a
/// string or a number).
pub const PROGRESS_TOKEN: &str = "progressToken";
/// The tasks extension's identifier (2026-07-28, SEP-2663), under
/// `capabilities.extensions` of a client (per request) and a server (`server/discover`).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The task a message relates to (2025-11-25 tasks: `{taskId: string}`).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

const META: &str = "_meta";

/// Why a payload's metadata cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("\"_meta\" must be an object")]
    MetaNotObject,
    #[error(
        "_meta[\"io.modelcontextprotocol/session\"] must be an object with a string \"sessionId\" (and an optional string \"state\")"
    )]
    MalformedSession,
    /// A `_meta` key the 2025-11-25 schema gives a type holds something else (a `null` or
    /// an object `progressToken`, say): a legacy server would refuse the whole message.
    #[error("_meta[\"{key}\"] must be {expected}")]
    Malformed {
        key: &'static str,
        expected: &'static str,
    },
}

/// A `params` or `result` object with its `_meta` opened.
#[derive(Debug, Clone)]
pub struct Payload<'a> {
    members: RawObject<'a>,
    meta: Option<RawObject<'a>>,
    /// The session's object in `_meta`, when the envelope's check kept it opened.
    session: Option<RawObject<'a>>,
}

/// The objects of a request's `params` opened on every call, below `params` itself:
/// what [`Envelope::parse_keeping`](crate::jsonrpc::Envelope::parse_keeping) is asked
/// to keep for [`Payload::open_kept`].
pub const OPENED: [&str; 2] = [META, SESSION];

/// The session a message names in its `_meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta<'a> {
    pub session_id: Cow<'a, str>,
    pub state: Option<Cow<'a, str>>,
}

impl<'a> Payload<'a> {
    /// Opens `raw`; `Ok(None)` when it is not an object (positional params, a scalar
    /// result): such payloads have no `_meta` to read or write.
    pub fn open(raw: &'a RawValue) -> Result<Option<Self>, MetaError> {
        Self::open_kept(raw, &mut KeptObjects::default())
    }

    /// [`open`](Self::open), taking what the envelope's check `kept` opened already
    /// (the path [`OPENED`]) rather than reading it again: the same payload.
    pub fn open_kept(
        raw: &'a RawValue,
        kept: &mut KeptObjects<'a>,
    ) -> Result<Option<Self>, MetaError> {
        let Some(members) = kept.take(0, raw).or_else(|| RawObject::parse(raw)) else {
            return Ok(None);
        };
        let meta = match members.get(META) {
            Some(meta) => Some(
                kept.take(1, meta)
                    .or_else(|| RawObject::parse(meta))
                    .ok_or(MetaError::MetaNotObject)?,
            ),
            None => None,
        };
        let session = meta
            .as_ref()
            .and_then(|meta| meta.get(SESSION))
            .and_then(|session| kept.take(2, session));
        Ok(Some(Payload {
            members,
            meta,
            session,
        }))
    }

    /// The raw value of a top-level member of the payload.
    pub fn member(&self, key: &str) -> Option<&'a RawValue> {
        self.members.get(key)
    }

    /// The raw value of `_meta[key]`.
    pub fn meta(&self, key: &str) -> Option<&'a RawValue> {
        self.meta.as_ref()?.get(key)
    }

    /// The data-layer session this payload names, if any.
    pub fn session(&self) -> Result<Option<SessionMeta<'a>>, MetaError> {
        let Some(raw) = self.meta(SESSION) else {
            return Ok(None);
        };
        let read;
        let object = match &self.session {
            Some(kept) if kept.is_read_from(raw) => kept,
            _ => {
                read = RawObject::parse(raw).ok_or(MetaError::MalformedSession)?;
                &read
            }
        };
        let session_id = object
            .get("sessionId")
            .and_then(crate::jsonrpc::raw_str)
            .ok_or(MetaError::MalformedSession)?;
        let state = match object.get("state") {
            None => None,
            Some(raw) if raw.get() == "null" => None,
            Some(raw) => Some(crate::jsonrpc::raw_str(raw).ok_or(MetaError::MalformedSession)?),
        };
        Ok(Some(SessionMeta { session_id, state }))
    }

    /// Checks the `_meta` keys whose type MCP 2025-11-25 fixes (`progressToken`, a string
    /// or a number; `io.modelcontextprotocol/related-task`, `{taskId: string}`), which a
    /// 2025-11-25 server validates before anything else and refuses the message for.
    pub fn check_typed_meta(&self) -> Result<(), MetaError> {
        if let Some(token) = self.meta(PROGRESS_TOKEN)
            && !matches!(
                token.get().as_bytes().first(),
                Some(b'"' | b'-' | b'0'..=b'9')
            )
        {
            return Err(MetaError::Malformed {
                key: PROGRESS_TOKEN,
                expected: "a string or a number",
            });
        }
        if let Some(task) = self.meta(RELATED_TASK) {
            let well_formed = RawObject::parse(task)
                .and_then(|t| t.get("taskId"))
                .is_some_and(|id| id.get().starts_with('"'));
            if !well_formed {
                return Err(MetaError::Malformed {
                    key: RELATED_TASK,
                    expected: "an object with a string \"taskId\"",
                });
            }
        }
        Ok(())
    }

    /// The payload without `_meta[key]`, dropping `_meta` when nothing is left in it.
    /// `None` when the key is not there (nothing to rewrite).
    pub fn without_meta(&self, key: &str) -> Option<Vec<u8>> {
        let mut meta = self.meta.clone()?;
        meta.remove(key)?;
        let mut members = self.members.clone();
        members.remove(META);
        let mut out = Vec::with_capacity(256);
        if meta.is_empty() {
            members.write(&mut out, &[]);
        } else {
            let mut meta_bytes = Vec::with_capacity(64);
            meta.write(&mut meta_bytes, &[]);
            members.write(&mut out, &[(META, &meta_bytes)]);
        }
        Some(out)
    }

    /// Where to cut the text this payload was opened from to drop its `_meta` when that
    /// holds `key` alone: the payload [`without_meta`](Self::without_meta) writes, but
    /// with the other members' bytes as they came (spacing, key spelling). `None` for any
    /// other `_meta` (more keys, `key` absent, a member named twice), which is written
    /// again instead.
    pub fn sole_meta_cut(&self, key: &str) -> Option<Range<usize>> {
        let mut keys = self.meta.as_ref()?.entries();
        match (keys.next(), keys.next()) {
            (Some((only, _)), None) if only == key => self.members.cut(META),
            _ => None,
        }
    }

    /// The payload with `_meta[key]` set to the raw JSON `value` (replacing any).
    pub fn with_meta(&self, key: &str, value: &[u8]) -> Vec<u8> {
        let mut meta = self.meta.clone().unwrap_or_default();
        meta.remove(key);
        let mut meta_bytes = Vec::with_capacity(64 + value.len());
        meta.write(&mut meta_bytes, &[(key, value)]);
        let mut members = self.members.clone();
        members.remove(META);
        let mut out = Vec::with_capacity(meta_bytes.len() + 256);
        members.write(&mut out, &[(META, &meta_bytes)]);
        out
    }
}

impl<'a> Payload<'a> {
    /// The payload with members and `_meta` keys dropped and added (added ones replace
    /// any of the same name). `_meta` is left out when it ends up empty.
    pub fn edited(
        &self,
        drop_members: &[&str],
        drop_meta: &[&str],
        add_members: &[(&str, &[u8])],
        add_meta: &[(&str, &[u8])],
    ) -> Vec<u8> {
        let mut members = self.members.clone();
        members.remove(META);
        for key in drop_members
            .iter()
            .chain(add_members.iter().map(|(k, _)| k))
        {
            members.remove(key);
        }
        let mut meta = self.meta.clone().unwrap_or_default();
        for key in drop_meta.iter().chain(add_meta.iter().map(|(k, _)| k)) {
            meta.remove(key);
        }
        let mut meta_bytes = Vec::new();
        if !meta.is_empty() || !add_meta.is_empty() {
            meta.write(&mut meta_bytes, add_meta);
        }
        let mut extra: Vec<(&str, &[u8])> = add_members.to_vec();
        if !meta_bytes.is_empty() {
            extra.push((META, &meta_bytes));
        }
        let mut out = Vec::with_capacity(256 + meta_bytes.len());
        members.write(&mut out, &extra);
        out
    }
}

/// `message` (a JSON object: a request without `params`) with `params` made of `_meta`
/// alone, holding `add`; `None` when `message` is not an object.
pub fn with_params_of_meta(message: &[u8], add: &[(&str, &[u8])]) -> Option<Vec<u8>> {
    let mut meta = Vec::with_capacity(128);
    RawObject::default().write(&mut meta, add);
    let mut params = Vec::with_capacity(meta.len() + 12);
    params.extend_from_slice(br#"{"_meta":"#);
    params.extend_from_slice(&meta);
    params.push(b'}');
    let top = serde_json::from_slice::<&RawValue>(message).ok()?;
    let object = RawObject::parse(top)?;
    let mut out = Vec::with_capacity(message.len() + params.len() + 12);
    object.write(&mut out, &[("params", &params)]);
    Some(out)
}

/// Where members can be added to `raw` (a JSON object) without reading it: the offset
/// of its closing brace, and whether a comma must come before them (it has members).
/// `None` when it is not an object, or when it may have a member named `_meta` or one
/// of `keys` — to be opened then ([`Payload`]). It has none when their names are not in
/// its text and no `\u` escape could spell one.
pub fn append_point(raw: &RawValue, keys: &[&str]) -> Option<(usize, bool)> {
    use memchr::memmem::{self, Finder};
    // Made once: a search made per call costs more than it finds in a small result.
    static SEARCHES: LazyLock<[Finder<'static>; 2]> =
        LazyLock::new(|| [Finder::new(META), Finder::new("\\u")]);
    let text = raw.get().as_bytes();
    let (b'{', b'}') = (*text.first()?, *text.last()?) else {
        return None;
    };
    let absent = |name: &str| memmem::find(text, name.as_bytes()).is_none();
    if SEARCHES.iter().any(|search| search.find(text).is_some())
        || !keys.iter().all(|key| absent(key))
    {
        return None;
    }
    let close = text.len() - 1;
    let has_members = text[1..close].iter().any(|b| !b.is_ascii_whitespace());
    Some((close, has_members))
}

/// The session metadata a response carries back to the client:
/// `{"sessionId":…,"state":…,"expiresAt":…}` — [`crate::jsonrpc::string_object`]'s object, its keys
/// written as the literals they are (each answer in a session carries one; a key looked
/// over for bytes to escape costs as much as a value).
pub fn session_stamp(session_id: &str, state: &str, expires_at: &str) -> Vec<u8> {
    const KEYS: [&[u8]; 3] = [br#"{"sessionId":"#, br#","state":"#, br#","expiresAt":"#];
    let values = [session_id, state, expires_at];
    // Exactly the size of a stamp whose values need no escape (all of the proxy's own),
    // which a `Bytes` made of it keeps without allocating again.
    let size = KEYS.iter().map(|key| key.len()).sum::<usize>()
        + values.iter().map(|value| value.len() + 2).sum::<usize>()
        + 1;
    let mut out = Vec::with_capacity(size);
    for (key, value) in KEYS.iter().zip(values) {
        out.extend_from_slice(key);
        write_json_str(&mut out, value);
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests;
