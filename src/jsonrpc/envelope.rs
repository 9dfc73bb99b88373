//! The envelope of one JSON-RPC 2.0 message (<https://www.jsonrpc.org/specification>).
//!
//! Parsing validates the whole document (every byte is checked, in one pass of the
//! proxy's own — [`one_pass`] — or, for what that pass leaves to it, by serde_json), but
//! keeps `id`, `params`, `result` and `error` as raw slices of the input, so a rewrite can
//! splice new bytes into the original body instead of serializing it again.

mod one_pass;

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::RawObject;

/// What a message is, decided from which envelope fields it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// One parsed JSON-RPC message. Borrows from the body it was parsed from.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub kind: Kind,
    /// Raw id (a JSON string or number); absent on notifications; `null` only on error
    /// responses that could not name a request.
    pub id: Option<&'a RawValue>,
    /// The method of a request or notification.
    pub method: Option<Cow<'a, str>>,
    pub params: Option<&'a RawValue>,
    pub result: Option<&'a RawValue>,
    pub error: Option<&'a RawValue>,
    /// SEP-1364's top-level `sessionId`, when a client speaks that dialect.
    pub session_id: Option<&'a RawValue>,
}

/// Why a body is not one valid JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("Parse error: the body is not valid JSON ({0})")]
    Parse(String),
    #[error(
        "Invalid Request: JSON-RPC batches are not supported (MCP removed batching in 2025-06-18); send one message per request"
    )]
    Batch,
    #[error("Invalid Request: the body must be a JSON object")]
    NotObject,
    #[error("Invalid Request: \"jsonrpc\" must be exactly \"2.0\"")]
    NotJsonRpc2,
    /// Carries the offending id as raw JSON.
    #[error("Invalid Request: \"id\" must be a string or a number")]
    BadId(String),
    #[error("Invalid Request: {0}")]
    Invalid(&'static str),
}

impl EnvelopeError {
    /// The JSON-RPC error code for this rejection.
    pub fn code(&self) -> i32 {
        match self {
            EnvelopeError::Parse(_) => super::code::PARSE_ERROR,
            EnvelopeError::Batch
            | EnvelopeError::NotObject
            | EnvelopeError::NotJsonRpc2
            | EnvelopeError::BadId(_)
            | EnvelopeError::Invalid(_) => super::code::INVALID_REQUEST,
        }
    }
}

/// Deserializes a field that is present, keeping `null` as the raw `null` instead of `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The envelope's members as found in the body, before they are judged.
#[derive(Deserialize, Default)]
struct Wire<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "sessionId", deserialize_with = "present")]
    session_id: Option<&'a RawValue>,
}

/// Objects of a message's `params` that [`Envelope::parse_keeping`] found with their
/// members as it checked them — `params` itself and the objects at a path in it — to be
/// opened without reading their bytes again ([`KeptObjects::take`]).
#[derive(Debug, Default)]
pub struct KeptObjects<'a> {
    objects: [Option<RawObject<'a>>; KEPT_LEVELS],
}

/// `params`, and two steps of a path in it.
const KEPT_LEVELS: usize = 3;

impl<'a> KeptObjects<'a> {
    /// Keeps `object` at `level`, in place of the one kept there before. Which of a
    /// level's objects is the one a reader opens (the last member of a name, which may
    /// not be an object, or have an escaped key, and so not be kept) is not decided
    /// here: [`take`](Self::take) hands out an object only for its very text.
    fn keep(&mut self, level: usize, object: RawObject<'a>) {
        if let Some(slot) = self.objects.get_mut(level) {
            *slot = Some(object);
        }
    }

    /// The object kept at `level` (0: `params`; 1 and 2: the path's steps), if it is
    /// `raw` — the same text, not only the same bytes — taken.
    pub(crate) fn take(&mut self, level: usize, raw: &RawValue) -> Option<RawObject<'a>> {
        let slot = self.objects.get_mut(level)?;
        match slot {
            Some(object) if object.is_read_from(raw) => slot.take(),
            _ => None,
        }
    }
}

impl<'a> Envelope<'a> {
    /// Parses and validates one JSON-RPC 2.0 message.
    pub fn parse(body: &'a [u8]) -> Result<Self, EnvelopeError> {
        let text = object_text(body)?;
        let wire = match one_pass::read(text, None) {
            Some(wire) => wire,
            None => read_by_serde_json(text)?,
        };
        Self::judge(body, wire)
    }

    /// [`parse`](Self::parse), keeping what the check found of `params` — the object and
    /// those at `path` in it (its first two steps), each with its members, unless one of
    /// its keys has an escape — for the message to be opened without reading them again.
    /// Nothing is kept of a body the proxy's one pass leaves to serde_json.
    pub fn parse_keeping(
        body: &'a [u8],
        path: &[&str],
    ) -> Result<(Self, KeptObjects<'a>), EnvelopeError> {
        let text = object_text(body)?;
        let mut kept = KeptObjects::default();
        let keep = one_pass::Keep {
            path: &path[..path.len().min(KEPT_LEVELS - 1)],
            kept: &mut kept,
        };
        let wire = match one_pass::read(text, Some(keep)) {
            Some(wire) => wire,
            None => {
                kept = KeptObjects::default();
                read_by_serde_json(text)?
            }
        };
        Ok((Self::judge(body, wire)?, kept))
    }

    /// [`parse`](Self::parse) with serde_json reading every body: the reference the
    /// proxy's one pass is held to (its unit tests and the `envelope` fuzz target compare
    /// the two on every input). Not for the request path.
    #[doc(hidden)]
    pub fn parse_by_serde_json(body: &'a [u8]) -> Result<Self, EnvelopeError> {
        let text = object_text(body)?;
        Self::judge(body, read_by_serde_json(text)?)
    }

    /// The message the members read from `body` make, if they make one.
    fn judge(body: &'a [u8], wire: Wire<'a>) -> Result<Self, EnvelopeError> {
        if let Some(at) = lone_surrogate(body) {
            return Err(EnvelopeError::Parse(format!(
                "the body holds an unpaired UTF-16 surrogate escape at offset {at}, which \
                 cannot be read as text (RFC 8259 §8.2)"
            )));
        }
        if wire.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
            return Err(EnvelopeError::NotJsonRpc2);
        }
        let id = match wire.id {
            Some(id) if is_string_or_number(id) => Some(id),
            Some(id) if id.get() == "null" && wire.method.is_none() && wire.error.is_some() => {
                Some(id)
            }
            Some(id) => return Err(EnvelopeError::BadId(id.get().to_owned())),
            None => None,
        };
        if let Some(params) = wire.params
            && !matches!(params.get().as_bytes().first(), Some(b'{' | b'['))
        {
            return Err(EnvelopeError::Invalid(
                "\"params\" must be an object or an array",
            ));
        }
        let kind = match (&wire.method, id, wire.result, wire.error) {
            (Some(_), _, Some(_), _) | (Some(_), _, _, Some(_)) => {
                return Err(EnvelopeError::Invalid(
                    "a message cannot carry both \"method\" and \"result\"/\"error\"",
                ));
            }
            (Some(_), Some(_), None, None) => Kind::Request,
            (Some(_), None, None, None) => Kind::Notification,
            (None, Some(_), Some(_), None) | (None, Some(_), None, Some(_)) => Kind::Response,
            (None, Some(_), Some(_), Some(_)) => {
                return Err(EnvelopeError::Invalid(
                    "a response carries either \"result\" or \"error\", not both",
                ));
            }
            (None, _, _, _) => {
                return Err(EnvelopeError::Invalid(
                    "\"method\" is missing: the message is neither a request, a notification nor a response",
                ));
            }
        };
        let method = match wire.method {
            Some(raw) => {
                Some(raw_str(raw).ok_or(EnvelopeError::Invalid("\"method\" must be a string"))?)
            }
            None => None,
        };
        Ok(Envelope {
            kind,
            id,
            method,
            params: wire.params,
            result: wire.result,
            error: wire.error,
            session_id: wire.session_id,
        })
    }

    /// The method, or `""` for responses.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// What the message carries: a request's or notification's `params`, a response's
    /// `result` (the place MCP keeps its `_meta`).
    pub fn params_or_result(&self) -> Option<&'a RawValue> {
        match self.kind {
            Kind::Response => self.result,
            Kind::Request | Kind::Notification => self.params,
        }
    }
}

/// `body` as text, when it is UTF-8 and starts (after whitespace) with `{`.
fn object_text(body: &[u8]) -> Result<&str, EnvelopeError> {
    // JSON is UTF-8 (RFC 8259 §8.1). serde_json checks it in the values it reads, but
    // not in those it skips (an unknown member), so the whole body is checked first:
    // nothing that is not JSON reaches the other side.
    // Checked with the CPU's vector instructions; where a body fails is found again by
    // the standard library's check, for the message.
    let text = simdutf8::basic::from_utf8(body).map_err(|_| {
        let at = std::str::from_utf8(body).map_or_else(|e| e.valid_up_to(), |_| 0);
        EnvelopeError::Parse(format!(
            "the body is not UTF-8 (invalid byte at offset {at})"
        ))
    })?;
    // serde would read an array as a struct with positional fields: shapes other than
    // an object are told apart before it runs.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(not_an_object(body, first));
    }
    Ok(text)
}

/// The envelope's members of `text` as serde_json reads them.
fn read_by_serde_json(text: &str) -> Result<Wire<'_>, EnvelopeError> {
    serde_json::from_str(text).map_err(|e| classify_failure(&e))
}

fn is_string_or_number(raw: &RawValue) -> bool {
    matches!(
        raw.get().as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9')
    )
}

/// Reads a raw JSON string without allocating when it has no escapes.
pub fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    // `memchr` itself, not `str::contains`'s character searcher around it.
    if memchr::memchr(b'\\', inner.as_bytes()).is_some() {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// Where `json` (valid JSON) holds a `\uXXXX` escape of a UTF-16 surrogate that is not
/// half of a pair. serde_json skips such a string where it keeps raw JSON, but refuses it
/// where it reads text (a member name the proxy looks up), so a message holding one would
/// be read differently by different steps: it is refused up front instead. Backslashes
/// only occur inside strings, so the whole body is scanned, escape by escape.
fn lone_surrogate(json: &[u8]) -> Option<usize> {
    let hex = |at: usize| -> Option<u16> {
        let digits = std::str::from_utf8(json.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    };
    let mut from = 0;
    while let Some(offset) = memchr::memchr(b'\\', &json[from..]) {
        let at = from + offset;
        if json.get(at + 1) != Some(&b'u') {
            from = at + 2;
            continue;
        }
        let unit = hex(at + 2)?;
        from = at + 6;
        match unit {
            0xD800..=0xDBFF => {
                let pair = json.get(from..from + 2) == Some(b"\\u")
                    && hex(from + 2).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
                if !pair {
                    return Some(at);
                }
                from += 6;
            }
            0xDC00..=0xDFFF => return Some(at),
            _ => {}
        }
    }
    None
}

/// A body that does not start with `{`: not JSON at all (-32700), a batch, or another
/// JSON value (-32600).
fn not_an_object(body: &[u8], first: Option<&u8>) -> EnvelopeError {
    if let Err(syntax) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        return EnvelopeError::Parse(syntax.to_string());
    }
    if first == Some(&b'[') {
        EnvelopeError::Batch
    } else {
        EnvelopeError::NotObject
    }
}

/// An object that serde could not read: broken JSON, or members of the wrong shape (a
/// duplicate "id", say).
fn classify_failure(e: &serde_json::Error) -> EnvelopeError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => EnvelopeError::Parse(e.to_string()),
        Category::Data => {
            EnvelopeError::Invalid("the message does not have the JSON-RPC 2.0 shape")
        }
    }
}

#[cfg(test)]
mod tests;
