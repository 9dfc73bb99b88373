//! The proxy's own request ids toward an HTTP upstream (2025-11-25 "Base Protocol": the
//! requestor chooses its request ids, and they must be unique within its session).
//!
//! Every request the proxy sends in an upstream session gets a fresh id from one
//! process-wide counter — an integer, which every JSON serializer writes back as it came
//! — and the client's id goes back, byte for byte, onto the response to it: in a JSON
//! body at once (or where its reader reads it, when the sender asked:
//! [`Outgoing::restored_by_reader`]), in an event stream as the event carrying it goes
//! by. The client's id never reaches the upstream, so however the upstream parses and
//! rewrites ids (`1.0` as `1`, `"\u00e9"` as `"é"`, `1E+2` as `100`), the client reads
//! its own; and two calls with the same id that share an upstream session (a pinned
//! conversation) never collide there. A JSON body answering the request with an error
//! whose id is `null` (the upstream could not read the request, e.g. a schema it
//! refuses) is the response to it too, and gets the client's id.
//!
//! A client's `notifications/cancelled` names its request by the client's id: while the
//! request is in flight, [`RenamedRequests`] (one table per replica) gives the proxy's id for it,
//! looked up by the id's value in the same upstream session. A cancellation the table
//! cannot place (the request is done, or another proxy replica sent it) goes on as it
//! came: the upstream ignores an id it does not know, as 2025-11-25 lets it.
//!
//! stdio children do the same for themselves (`stdio::child`); old clients passed
//! through are never touched.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use dashmap::DashMap;

use crate::jsonrpc::{
    Envelope, IdValue, Kind, range_in, same_id, splice, splice_at, write, write_json_str,
};
use crate::mcp::Method;
use crate::mcp::meta::Payload;

/// The next request id the proxy uses, for every upstream of the process: unique in
/// every upstream session, whichever calls share it.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh request id.
fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Requests in flight in the upstream sessions of one replica, by (upstream session, the
/// value of the client's id): the proxy's id for each, so that a client's cancellation
/// reaches the request it names.
#[derive(Debug, Default)]
pub struct RenamedRequests {
    /// A keyed hash of (upstream session, client id value) → the proxy's id. A collision
    /// (2⁻⁶⁴) could only name another request's id in the *same* table, and the
    /// cancellation still goes to the client's own upstream session, where an id of
    /// another session names nothing.
    table: DashMap<u64, u64, BuildHasherDefault<KeyAsHash>>,
    keys: RandomState,
}

/// Hashes a key of [`RenamedRequests`]'s table as itself: the key is a keyed hash
/// already, hashing it again would add nothing but the time.
#[derive(Debug, Default)]
struct KeyAsHash(u64);

impl Hasher for KeyAsHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }

    // The table hashes its `u64` keys with `write_u64` only; anything else is folded in.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

/// The longest (upstream session, client id) key [`RenamedRequests`] hashes in one write;
/// a longer one is hashed part by part.
const KEY_IN_ONE: usize = 128;

impl RenamedRequests {
    fn key(&self, session: &str, id: &IdValue<'_>) -> u64 {
        // One write of the key's bytes — the session, a byte no UTF-8 text holds (0xff),
        // the id's kind and its value — rather than one per part (each of SipHash's
        // writes pays for its own tail): the same key never spells another.
        let (kind, value): (u8, &[u8]) = match id {
            IdValue::Str(text) => (0, text.as_bytes()),
            IdValue::Int(n) => (1, &n.to_le_bytes()),
            IdValue::Float(bits) => (2, &bits.to_le_bytes()),
        };
        let len = session.len() + 2 + value.len();
        if len > KEY_IN_ONE {
            return self.keys.hash_one((session, id));
        }
        let mut bytes = [0u8; KEY_IN_ONE];
        bytes[..session.len()].copy_from_slice(session.as_bytes());
        bytes[session.len()] = 0xff;
        bytes[session.len() + 1] = kind;
        bytes[session.len() + 2..len].copy_from_slice(value);
        let mut hasher = self.keys.build_hasher();
        hasher.write(&bytes[..len]);
        hasher.finish()
    }

    fn insert(self: &Arc<Self>, session: &str, client_id: &[u8], ours: u64) -> Option<Registered> {
        let key = self.key(session, &IdValue::of(client_id)?);
        self.table.insert(key, ours);
        Some(Registered {
            table: self.clone(),
            key,
            ours,
        })
    }

    fn find(&self, session: &str, client_id: &[u8]) -> Option<u64> {
        let key = self.key(session, &IdValue::of(client_id)?);
        self.table.get(&key).map(|ours| *ours)
    }

    /// Requests in flight (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }
}

/// A request's entry in [`RenamedRequests`], removed when its answer is done with.
#[derive(Debug)]
struct Registered {
    table: Arc<RenamedRequests>,
    key: u64,
    ours: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Only its own entry: a later request with the same client id keeps its own.
        self.table
            .table
            .remove_if(&self.key, |_, ours| *ours == self.ours);
    }
}

/// One request the proxy renamed: how to give its response the client's id back.
#[derive(Debug)]
pub struct Restore {
    /// The proxy's id, as written on the request.
    ours: Digits,
    /// The client's id, raw JSON as it wrote it.
    client: Bytes,
    registered: Option<Registered>,
    /// The response went by.
    done: bool,
}

impl Restore {
    /// The id the upstream knows the request by, until its response went by.
    pub fn upstream_id(&self) -> Option<&[u8]> {
        (!self.done).then_some(self.ours.as_bytes())
    }

    /// `message` with the client's id, if it is the response to the request; `None` for
    /// anything else (a notification, the upstream's own request, another id). `whole`:
    /// `message` is the entire answer (a JSON body), so an error with a `null` id is the
    /// response too.
    pub fn response(&mut self, message: &[u8], whole: bool) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        // Whatever spelling the upstream chose for the integer, its digits are there.
        let maybe = memchr::memmem::find(message, self.ours.as_bytes()).is_some() || whole;
        if !maybe {
            return None;
        }
        let envelope = Envelope::parse(message).ok()?;
        let at = self.answered(message, &envelope, whole)?;
        splice_at(message, at, &self.client)
    }

    /// Where the client's id goes in `message` — an entire answer (a JSON body) its
    /// reader parsed already (`envelope`) — if it is the response to the request: the
    /// range of the upstream's id. The reader writes the client's ([`Self::client_id`])
    /// there, with whatever else it changes.
    pub fn response_read(
        &mut self,
        message: &[u8],
        envelope: &Envelope<'_>,
    ) -> Option<Range<usize>> {
        if self.done {
            return None;
        }
        self.answered(message, envelope, true)
    }

    /// The client's id, raw JSON as it wrote it.
    pub fn client_id(&self) -> &[u8] {
        &self.client
    }

    /// Where the upstream's id is in `message` (read as `envelope`), if it is the
    /// response to the request; it is done with then.
    fn answered(
        &mut self,
        message: &[u8],
        envelope: &Envelope<'_>,
        whole: bool,
    ) -> Option<Range<usize>> {
        if envelope.kind != Kind::Response {
            return None;
        }
        let id = envelope.id?;
        let answered = same_id(id.get(), self.ours.as_bytes())
            || (whole && id.get() == "null" && envelope.error.is_some());
        if !answered {
            return None;
        }
        let at = range_in(message, id)?;
        self.done = true;
        self.registered = None;
        Some(at)
    }
}

/// An id the proxy gave a request, in decimal digits (kept inline: a `u64` has at most
/// 20).
#[derive(Debug, Clone, Copy)]
struct Digits {
    digits: [u8; 20],
    len: u8,
}

impl Digits {
    fn of(id: u64) -> Digits {
        let mut buffer = itoa::Buffer::new();
        let written = buffer.format(id).as_bytes();
        let mut digits = [0; 20];
        digits[..written.len()].copy_from_slice(written);
        Digits {
            digits,
            len: written.len() as u8,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[..usize::from(self.len)]
    }
}

/// A message on its way upstream, with what its sender knows of it already: where a
/// request's id is, when the sender read the message (so it is not read again here), and
/// whether the sender reads a JSON answer itself (so the client's id goes back there).
#[derive(Debug)]
pub struct Outgoing {
    body: Bytes,
    request_id: Option<Range<usize>>,
    restored_by_reader: bool,
}

impl Outgoing {
    /// The request `body`, its id (raw JSON, a top-level member) at `id`.
    pub fn request(body: Bytes, id: Range<usize>) -> Outgoing {
        Outgoing {
            body,
            request_id: Some(id),
            restored_by_reader: false,
        }
    }

    /// The request's answer, when it is a JSON body, is read by its sender, who puts the
    /// client's id back as it reads it: the answer keeps its [`Restore`]
    /// (`Answer::renamed`) instead of being read for it here.
    pub fn restored_by_reader(self) -> Outgoing {
        Outgoing {
            restored_by_reader: true,
            ..self
        }
    }

    /// Whether the sender puts the client's id back on a JSON answer itself.
    pub fn is_restored_by_reader(&self) -> bool {
        self.restored_by_reader
    }

    /// The message as it is sent when the upstream does not rename ids.
    pub fn into_body(self) -> Bytes {
        self.body
    }
}

impl From<Bytes> for Outgoing {
    fn from(body: Bytes) -> Outgoing {
        Outgoing {
            body,
            request_id: None,
            restored_by_reader: false,
        }
    }
}

/// A message on its way to an upstream session (`session`: its `Mcp-Session-Id`): a
/// request gets the proxy's id (and, in a session, an entry in `in_flight`), a client's
/// `notifications/cancelled` the proxy's id of the request it names; anything else goes
/// as it is. Returns what to send and, for a request, how to restore its answer.
pub fn outgoing(
    message: Outgoing,
    session: Option<&str>,
    in_flight: &Arc<RenamedRequests>,
) -> (Bytes, Option<Restore>) {
    let Outgoing {
        body: message,
        request_id,
        ..
    } = message;
    // A range not within the message is not trusted: it is read instead.
    if let Some(id) = request_id.filter(|id| id.end <= message.len() && !id.is_empty()) {
        return renamed(message, id, session, in_flight);
    }
    let Ok(envelope) = Envelope::parse(&message) else {
        return (message, None);
    };
    match (envelope.kind, envelope.id) {
        (Kind::Request, Some(id)) => match range_in(&message, id) {
            Some(id) => renamed(message, id, session, in_flight),
            None => (message, None),
        },
        (Kind::Notification, _) if envelope.method() == Method::Cancelled.as_str() => {
            let renamed = session.and_then(|s| cancelled(&message, &envelope, s, in_flight));
            (renamed.map(Bytes::from).unwrap_or(message), None)
        }
        _ => (message, None),
    }
}

/// The request `message` with the proxy's id in place of the client's (at `id`).
fn renamed(
    message: Bytes,
    id: Range<usize>,
    session: Option<&str>,
    in_flight: &Arc<RenamedRequests>,
) -> (Bytes, Option<Restore>) {
    let ours = next();
    let rendered = Digits::of(ours);
    let Some(renamed) = splice_at(&message, id.clone(), rendered.as_bytes()) else {
        return (message, None);
    };
    let client = message.slice(id);
    // An upstream that issues no session id cannot tell its clients' requests apart:
    // there is no session to find a cancelled request in.
    let registered = session.and_then(|s| in_flight.insert(s, &client, ours));
    let restore = Restore {
        ours: rendered,
        client,
        registered,
        done: false,
    };
    (Bytes::from(renamed), Some(restore))
}

/// A `notifications/cancelled` naming a request in flight, with `requestId` replaced by
/// the proxy's id for it.
fn cancelled(
    message: &[u8],
    envelope: &Envelope<'_>,
    session: &str,
    in_flight: &RenamedRequests,
) -> Option<Vec<u8>> {
    let params_raw = envelope.params?;
    let params = Payload::open(params_raw).ok()??;
    let request_id = params.member("requestId")?;
    let ours = in_flight.find(session, request_id.get().as_bytes())?;
    let rewritten = params.edited(&[], &[], &[("requestId", ours.to_string().as_bytes())], &[]);
    splice(message, params_raw, &rewritten)
}

/// `notifications/cancelled` for request `id` (raw JSON, as the upstream knows it).
pub fn cancellation(id: &[u8], reason: &str) -> Bytes {
    let mut params = Vec::with_capacity(id.len() + reason.len() + 32);
    params.extend_from_slice(br#"{"requestId":"#);
    params.extend_from_slice(id);
    params.extend_from_slice(br#","reason":"#);
    write_json_str(&mut params, reason);
    params.push(b'}');
    write::notification(Method::Cancelled.as_str(), Some(&params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_hashes_a_key_as_itself() {
        let hashing = BuildHasherDefault::<KeyAsHash>::default();
        for key in [0, 5, u64::MAX, 0x9e37_79b9_7f4a_7c15] {
            assert_eq!(hashing.hash_one(key), key);
        }
    }

    #[test]
    fn a_key_is_its_session_and_its_ids_value_and_nothing_else() {
        let table = RenamedRequests::default();
        let key =
            |session: &str, id: &str| table.key(session, &IdValue::of(id.as_bytes()).unwrap());
        // The same value, spelled another way: the same key.
        assert_eq!(key("s1", r#""é""#), key("s1", r#""\u00e9""#));
        assert_eq!(key("s1", "1"), key("s1", "1.0"));
        // Where the session ends and the id begins is part of it, and so is the id's kind.
        assert_ne!(key("s1", r#""23""#), key("s12", r#""3""#));
        assert_ne!(key("s1", "7"), key("s1", r#""7""#));
        assert_ne!(key("s1", "7"), key("s2", "7"));
        // A session id too long for one write is hashed part by part, as the same key
        // every time.
        let long = "s".repeat(KEY_IN_ONE);
        assert_eq!(key(&long, "7"), key(&long, "7.0"));
        assert_ne!(key(&long, "7"), key(&long, "8"));
    }

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    fn id_of(message: &[u8]) -> String {
        Envelope::parse(message)
            .unwrap()
            .id
            .unwrap()
            .get()
            .to_owned()
    }

    fn request(id: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo"}}}}"#
        ))
    }

    #[test]
    fn a_request_goes_with_the_proxys_id_and_its_response_comes_back_with_the_clients() {
        let table = Arc::new(RenamedRequests::default());
        for client in [
            r#""\u00e9""#,
            r#""\/x""#,
            "1E+2",
            "-0",
            "1.0",
            "7",
            r#""a""#,
        ] {
            let (sent, restore) = outgoing(request(client).into(), Some("s1"), &table);
            let mut restore = restore.unwrap();
            let ours = id_of(&sent);
            assert!(
                ours.parse::<u64>().is_ok(),
                "{client}: the proxy's id, {ours}"
            );
            assert!(text(&sent).ends_with(r#","method":"tools/call","params":{"name":"echo"}}"#));
            // The upstream answers its way: result first, the id as it reads it.
            let answer = format!(r#"{{"result":{{"ok":true}},"jsonrpc":"2.0","id":{ours}}}"#);
            let back = restore.response(answer.as_bytes(), true).unwrap();
            assert_eq!(
                text(&back),
                format!(r#"{{"result":{{"ok":true}},"jsonrpc":"2.0","id":{client}}}"#)
            );
            assert_eq!(restore.upstream_id(), None, "done once answered");
        }
        assert_eq!(table.len(), 0, "answered requests leave the table");
    }

    #[test]
    fn a_request_is_renamed_where_its_sender_found_its_id() {
        let table = Arc::new(RenamedRequests::default());
        let body = request(r#""c-7""#);
        let start = text(&body).find(r#""c-7""#).unwrap();
        let at = start..start + 5;
        let (sent, restore) = outgoing(Outgoing::request(body, at), Some("s"), &table);
        let mut restore = restore.unwrap();
        let ours = id_of(&sent);
        assert!(ours.parse::<u64>().is_ok(), "the proxy's id, {ours}");
        assert_eq!(table.len(), 1, "in flight, it can be cancelled");
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{ours},"result":{{}}}}"#);
        let back = restore.response(answer.as_bytes(), true).unwrap();
        assert_eq!(text(&back), r#"{"jsonrpc":"2.0","id":"c-7","result":{}}"#);
        // A range that is not in the message is not trusted: the message is read.
        let (sent, restore) = outgoing(Outgoing::request(request("3"), 500..503), None, &table);
        assert!(restore.is_some());
        assert_ne!(id_of(&sent), "3");
    }

    #[test]
    fn a_reader_that_parsed_the_answer_is_told_where_the_clients_id_goes() {
        let table = Arc::new(RenamedRequests::default());
        let (sent, restore) = outgoing(request(r#""c-9""#).into(), Some("s"), &table);
        let mut restore = restore.unwrap();
        let ours = id_of(&sent);
        // Another id: not the response.
        let other = r#"{"jsonrpc":"2.0","id":123456789012,"result":{}}"#;
        let read = Envelope::parse(other.as_bytes()).unwrap();
        assert_eq!(restore.response_read(other.as_bytes(), &read), None);
        assert_eq!(table.len(), 1);
        let answer = format!(r#"{{"jsonrpc":"2.0","result":{{}},"id":{ours}}}"#);
        let read = Envelope::parse(answer.as_bytes()).unwrap();
        let at = restore.response_read(answer.as_bytes(), &read).unwrap();
        assert_eq!(&answer[at], ours);
        assert_eq!(restore.client_id(), br#""c-9""#);
        assert_eq!(table.len(), 0, "answered, it leaves the table");
        assert_eq!(
            restore.response_read(answer.as_bytes(), &read),
            None,
            "once"
        );
        // An error the upstream could not tie to a request is the response too.
        let (_, restore) = outgoing(request("4").into(), Some("s"), &table);
        let mut restore = restore.unwrap();
        let unnamed = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#;
        let read = Envelope::parse(unnamed.as_bytes()).unwrap();
        let at = restore.response_read(unnamed.as_bytes(), &read).unwrap();
        assert_eq!(&unnamed[at], "null");
    }

    #[test]
    fn every_request_gets_another_id() {
        let table = Arc::new(RenamedRequests::default());
        let (a, _ra) = outgoing(request("1").into(), Some("s"), &table);
        let (b, _rb) = outgoing(request("1").into(), Some("s"), &table);
        assert_ne!(id_of(&a), id_of(&b));
    }

    #[test]
    fn only_the_response_to_the_request_is_restored() {
        let table = Arc::new(RenamedRequests::default());
        let (sent, restore) = outgoing(request("1").into(), Some("s"), &table);
        let mut restore = restore.unwrap();
        let ours = id_of(&sent);
        let progress = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{ours},"progress":1}}}}"#
        );
        assert_eq!(restore.response(progress.as_bytes(), false), None);
        let server_request = format!(r#"{{"jsonrpc":"2.0","id":{ours},"method":"roots/list"}}"#);
        assert_eq!(restore.response(server_request.as_bytes(), false), None);
        let other = r#"{"jsonrpc":"2.0","id":999999999999,"result":{}}"#;
        assert_eq!(restore.response(other.as_bytes(), false), None);
        // In a stream, a null-id error is not known to be about this request.
        let null = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#;
        assert_eq!(restore.response(null.as_bytes(), false), None);
        assert_eq!(restore.upstream_id(), Some(ours.as_bytes()));
        // Re-serialized the float way, it is still ours.
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{ours}.0,"result":{{}}}}"#);
        let back = restore.response(answer.as_bytes(), false).unwrap();
        assert_eq!(text(&back), r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    }

    #[test]
    fn a_json_error_with_a_null_id_answers_the_request() {
        let table = Arc::new(RenamedRequests::default());
        let (_, restore) = outgoing(request(r#""c-1""#).into(), Some("s"), &table);
        let mut restore = restore.unwrap();
        let null = r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#;
        let back = restore.response(null.as_bytes(), true).unwrap();
        assert_eq!(
            text(&back),
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":"c-1"}"#
        );
    }

    #[test]
    fn a_clients_cancellation_names_the_proxys_id_while_the_request_is_in_flight() {
        let table = Arc::new(RenamedRequests::default());
        let (sent, restore) = outgoing(request(r#""\u00e9""#).into(), Some("s1"), &table);
        let ours = id_of(&sent);
        // Another session's request with the same id is not the one cancelled.
        let (_other, _keep) = outgoing(request(r#""é""#).into(), Some("s2"), &table);
        let cancel = Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\u00e9","reason":"stop"}}"#,
        );
        let (renamed, none) = outgoing(cancel.clone().into(), Some("s1"), &table);
        assert!(none.is_none());
        assert_eq!(
            text(&renamed),
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"reason":"stop","requestId":{ours}}}}}"#
            )
        );
        // By value: the client may spell the id another way.
        let spelled = Bytes::from(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"é"}}"#,
        );
        let (renamed, _) = outgoing(spelled.into(), Some("s1"), &table);
        assert!(text(&renamed).contains(&format!(r#""requestId":{ours}"#)));
        // Once the request is done, the cancellation goes as it came.
        drop(restore);
        let (unchanged, _) = outgoing(cancel.clone().into(), Some("s1"), &table);
        assert_eq!(unchanged, cancel);
    }

    #[test]
    fn other_messages_pass_as_they_are() {
        let table = Arc::new(RenamedRequests::default());
        for message in [
            &br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#[..],
            br#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#,
            br#"not json"#,
        ] {
            let (sent, restore) = outgoing(Bytes::from_static(message).into(), Some("s"), &table);
            assert_eq!(&sent[..], message);
            assert!(restore.is_none());
        }
    }

    #[test]
    fn without_an_upstream_session_nothing_is_registered() {
        let table = Arc::new(RenamedRequests::default());
        let (_, restore) = outgoing(request("1").into(), None, &table);
        assert!(restore.is_some());
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn the_proxys_own_cancellation() {
        assert_eq!(
            text(&cancellation(b"42", "the client went away")),
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42,"reason":"the client went away"}}"#
        );
    }
}
