//! What the fuzz targets check, one function per target; each panics when an invariant
//! does not hold. The proxy's own test suite runs the same functions over the committed
//! corpus (`tests/fuzz_corpus.rs` includes this file), so every corpus entry — crash
//! inputs kept as regressions included — is checked by `cargo test` on stable Rust.
//!
//! - [`envelope`]: the JSON-RPC envelope and `_meta` parser (`Envelope::parse`,
//!   `Payload`): it reads every body as serde_json alone does (the envelope's one pass
//!   is held to `Envelope::parse_by_serde_json`), what it accepts is JSON (UTF-8), of
//!   the kind it says, its raw parts are slices of the input, an object in it can be read
//!   as an object, `params` opened from what the check kept (`Envelope::parse_keeping`)
//!   is the payload read again, and `_meta` edits give JSON objects.
//! - [`rewrite`]: the rewrites — the session `_meta` off (to the upstream), the session
//!   stamped into a response (to the client, with SEP-1364's top-level `sessionId`), the
//!   2026-07-28 `_meta` off (stateless), the top-level `sessionId` off: the output is
//!   valid JSON-RPC of the same kind, method and id (byte for byte), everything outside
//!   the edited object is byte for byte the input, and inside it every member the
//!   rewrite does not own keeps its key, its order and its value bytes.
//! - [`sse`]: the event-stream decoder gives the same items (and the same refusal of an
//!   oversized event) however the stream is cut into chunks — one chunk, byte by byte, or
//!   two at any point — and the stamped event stream (`EventBody` with the session
//!   rewrite) writes the same bytes however its input is cut, and always carries the
//!   response to the request (stamped, or the error the proxy adds).
//! - [`sse_upstream`]: an HTTP+SSE (2024-11-05) session's stream as the proxy reads it
//!   (the decoder behind a body, each event framed as `endpoint` or `message`) gives the
//!   same frames however the stream is cut, each message the data of its event; and an
//!   endpoint is only ever resolved to a request target at the stream's own origin.
//! - [`id_restore`]: the proxy's own request ids toward an upstream and the client's id
//!   put back on the answer (`upstream::ids`): a request is renamed to a fresh integer id
//!   and is otherwise byte for byte the input; whatever the upstream answers, what comes
//!   back as the response carries the client's id byte for byte and is otherwise the
//!   upstream's bytes; only a response naming the proxy's id (or, in a whole body, an
//!   error with a `null` id) is taken for it, and only once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use mcp_session_proxy::jsonrpc::{Envelope, EnvelopeError, Kind, RawObject, range_in, same_id};
use mcp_session_proxy::mcp::meta::{self, Payload};
use mcp_session_proxy::response::EventRewrite;
use mcp_session_proxy::rewrite::stateless;
use mcp_session_proxy::rewrite::to_client::{Stamp, StampEvents, Stamped, stamp_message};
use mcp_session_proxy::rewrite::to_upstream::{strip_session, strip_top_level_session};
use mcp_session_proxy::sse::{Decoded, Decoder, EventBody, Item, ItemSource};
use mcp_session_proxy::upstream::ids::{RenamedRequests, outgoing};
use mcp_session_proxy::upstream::{self, Frame as SseFrame};
use serde_json::value::RawValue;

/// The `_meta` keys `stateless::to_upstream` takes off: the stateless protocol's, and the
/// session a 2026-07-28 client in a data-layer session names.
const NOT_UPSTREAM_META: [&str; 5] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_INFO,
    meta::CLIENT_CAPABILITIES,
    meta::LOG_LEVEL,
    meta::SESSION,
];
/// The members of a retried stateless request that `stateless::to_upstream` takes off,
/// and a 2025-11-25 `task`.
const NOT_UPSTREAM_MEMBERS: [&str; 3] = ["inputResponses", "requestState", "task"];
/// A session stamp, as the proxy writes one.
const SESSION_STAMP: &[u8] =
    br#"{"sessionId":"mcps_fuzz","state":"AQAAAAAAAAAB","expiresAt":"2026-01-01T00:00:00Z"}"#;

// === envelope ===

/// The envelope and `_meta` parser.
pub fn envelope(data: &[u8]) {
    let parsed = Envelope::parse(data);
    // The proxy's one pass reads every body as serde_json alone does: the same result,
    // the same raw parts at the same places, or the same error.
    assert_eq!(
        reading(data, &parsed),
        reading(data, &Envelope::parse_by_serde_json(data)),
        "the envelope's one pass and serde_json read a body differently"
    );
    // What the front keeps of `params` as it checks the envelope (`_meta`, the session
    // in it) opens the payload as reading it again does.
    let keeping = Envelope::parse_keeping(data, &meta::OPENED);
    let kept_envelope = keeping.as_ref().map(|(envelope, _)| envelope.clone());
    assert_eq!(
        reading(data, &kept_envelope.map_err(Clone::clone)),
        reading(data, &parsed),
        "the envelope read while keeping params differs"
    );
    if let Ok((envelope, mut kept)) = keeping
        && let Some(params) = envelope.params
    {
        same_payload(Payload::open_kept(params, &mut kept), Payload::open(params));
    }
    let Ok(envelope) = parsed else {
        return;
    };
    // Valid JSON by the grammar, in UTF-8 (a number beyond f64's range is valid JSON,
    // passed on as it is: `serde_json::Value` would refuse it, a raw value does not).
    assert!(
        serde_json::from_slice::<&RawValue>(data).is_ok(),
        "an envelope was accepted from invalid JSON"
    );
    let (id, method) = (envelope.id.is_some(), envelope.method.is_some());
    match envelope.kind {
        Kind::Request => assert!(id && method, "a request without id or method"),
        Kind::Notification => assert!(!id && method, "a notification with an id"),
        Kind::Response => assert!(
            id && !method && (envelope.result.is_some() != envelope.error.is_some()),
            "a response without id, with a method, or with both or neither result and error"
        ),
    }
    for raw in [
        envelope.id,
        envelope.params,
        envelope.result,
        envelope.error,
        envelope.session_id,
    ]
    .into_iter()
    .flatten()
    {
        assert!(
            range_in(data, raw).is_some(),
            "a raw part is not a slice of the input"
        );
    }
    for raw in [envelope.params, envelope.result].into_iter().flatten() {
        // An object in an accepted message is one the proxy can read as an object
        // (else a session `_meta` in it would be neither found nor taken off).
        if raw.get().starts_with('{') {
            assert!(
                RawObject::parse(raw).is_some(),
                "an accepted object cannot be read as one"
            );
        }
        read_as_serde_json_reads(raw);
        let Ok(Some(payload)) = Payload::open(raw) else {
            continue;
        };
        let _ = payload.session();
        for key in NOT_UPSTREAM_META {
            if let Some(value) = payload.meta(key) {
                assert!(is_json(value.get().as_bytes()));
            }
        }
        if let Some(out) = payload.without_meta(meta::SESSION) {
            assert_object(&out, "without_meta");
        }
        assert_object(
            &payload.with_meta(meta::SESSION, SESSION_STAMP),
            "with_meta",
        );
        assert_object(
            &payload.edited(
                &["name"],
                &[meta::LOG_LEVEL],
                &[("x", b"1")],
                &[("y", b"[]")],
            ),
            "edited",
        );
    }
}

/// A payload opened from what the envelope's check kept and one read again: the same
/// session, `_meta` and members (as written back), or the same refusal.
fn same_payload(
    from_kept: Result<Option<Payload<'_>>, meta::MetaError>,
    read_again: Result<Option<Payload<'_>>, meta::MetaError>,
) {
    assert_eq!(
        from_kept.as_ref().map(Option::is_some),
        read_again.as_ref().map(Option::is_some),
        "a payload opened from what was kept differs"
    );
    let (Ok(Some(from_kept)), Ok(Some(read_again))) = (from_kept, read_again) else {
        return;
    };
    assert_eq!(from_kept.session(), read_again.session());
    assert_eq!(from_kept.check_typed_meta(), read_again.check_typed_meta());
    assert_eq!(
        from_kept.with_meta(meta::SESSION, SESSION_STAMP),
        read_again.with_meta(meta::SESSION, SESSION_STAMP)
    );
    assert_eq!(
        from_kept.without_meta(meta::SESSION),
        read_again.without_meta(meta::SESSION)
    );
    assert_eq!(
        from_kept.sole_meta_cut(meta::SESSION),
        read_again.sole_meta_cut(meta::SESSION)
    );
}

/// What a parse of `data` gave: each raw part as its place in `data` and its text, or
/// the error.
fn reading(data: &[u8], parsed: &Result<Envelope<'_>, EnvelopeError>) -> String {
    let Ok(envelope) = parsed else {
        return format!("{parsed:?}");
    };
    let parts = [
        envelope.id,
        envelope.params,
        envelope.result,
        envelope.error,
        envelope.session_id,
    ]
    .map(|raw| raw.map(|raw| (range_in(data, raw), raw.get())));
    format!("{:?} {:?} {parts:?}", envelope.kind, envelope.method)
}

// === rewrite ===

/// The rewrites of both paths, on `data` as a client's message or an upstream's answer.
pub fn rewrite(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    let Ok(envelope) = Envelope::parse(&body) else {
        return;
    };
    let payload_raw = match envelope.kind {
        Kind::Response => envelope.result,
        Kind::Request | Kind::Notification => envelope.params,
    };
    if let Some(raw) = payload_raw
        && let Ok(Some(payload)) = Payload::open(raw)
    {
        // To the upstream: the session `_meta` off.
        let (out, id_at) = strip_session(&body, raw, &payload, envelope.id);
        // Wherever the id was, the range given for it names it in what goes out.
        if let Some(id) = envelope.id {
            let at = id_at.expect("the id is found");
            assert_eq!(&out[at], id.get().as_bytes(), "the id's range is off");
        }
        check_edit(
            &body,
            raw,
            &out,
            &Edit {
                meta_off: &[meta::SESSION],
                ..Edit::default()
            },
        );
        // Stateless, to the upstream: the 2026-07-28 `_meta` (and a session's), the
        // round-trip members and a 2025-11-25 `task` off.
        if let Some(out) = stateless::to_upstream(&body, raw, &payload) {
            check_edit(
                &body,
                raw,
                &out,
                &Edit {
                    members_off: &NOT_UPSTREAM_MEMBERS,
                    meta_off: &NOT_UPSTREAM_META,
                    ..Edit::default()
                },
            );
        }
    }
    // To the client: the message stamped as the answer to a request with its own id.
    if let Some(id) = envelope.id {
        for (top_level, complete) in [(false, false), (true, true)] {
            let stamp = Stamp {
                request_id: Bytes::copy_from_slice(id.get().as_bytes()),
                session: Bytes::from_static(SESSION_STAMP),
                top_level: top_level.then(|| Bytes::from_static(br#""mcps_fuzz""#)),
                complete,
            };
            match stamp_message(&body, &stamp) {
                Stamped::Response(Some(out)) => {
                    assert_eq!(envelope.kind, Kind::Response);
                    check_stamped(&body, &stamp, &out);
                }
                Stamped::Response(None) => assert!(
                    envelope.kind == Kind::Response
                        && (envelope.error.is_some()
                            || envelope.result.is_some_and(|r| !r.get().starts_with('{'))),
                    "a result object was left unstamped"
                ),
                Stamped::Other => assert_ne!(
                    envelope.kind,
                    Kind::Response,
                    "the response to the request was not recognised"
                ),
            }
        }
    }
    // SEP-1364, to the upstream: the top-level `sessionId` off.
    let out = strip_top_level_session(body.clone());
    let after = parse_same(&body, &out, "strip_top_level_session");
    assert!(after.session_id.is_none(), "a top-level sessionId was left");
}

/// What a rewrite of a payload object may change.
#[derive(Default)]
struct Edit<'a> {
    members_off: &'a [&'a str],
    members_on: &'a [(&'a str, &'a [u8])],
    meta_off: &'a [&'a str],
    meta_on: &'a [(&'a str, &'a [u8])],
}

/// `after` is `before` with the payload object at `raw` rewritten as `edit` allows.
fn check_edit(before: &[u8], raw: &RawValue, after: &[u8], edit: &Edit<'_>) {
    parse_same(before, after, "a payload rewrite");
    let range = range_in(before, raw).expect("the payload is a slice of the message");
    // Outside the payload: byte for byte.
    let tail = before.len() - range.end;
    assert!(
        after.len() >= range.start + tail
            && after[..range.start] == before[..range.start]
            && after[after.len() - tail..] == before[range.end..],
        "bytes outside the rewritten payload changed"
    );
    let new_raw: &RawValue = serde_json::from_slice(&after[range.start..after.len() - tail])
        .expect("the rewritten payload is JSON");
    let old = RawObject::parse(raw).expect("the payload was an object");
    let new = RawObject::parse(new_raw).expect("the rewritten payload is an object");
    let on_keys: Vec<&str> = edit.members_on.iter().map(|(k, _)| *k).collect();
    let kept = |object: &RawObject<'_>, off: &[&str]| -> Vec<(String, String)> {
        object
            .entries()
            .filter(|(k, _)| *k != "_meta" && !off.contains(k) && !on_keys.contains(k))
            .map(|(k, v)| (k.to_owned(), v.get().to_owned()))
            .collect()
    };
    assert_eq!(
        kept(&old, edit.members_off),
        kept(&new, &[]),
        "a member the rewrite does not own changed"
    );
    for off in edit.members_off {
        assert!(new.get(off).is_none(), "{off} was left");
    }
    for (key, value) in edit.members_on {
        assert_eq!(
            new.get(key).map(RawValue::get),
            std::str::from_utf8(value).ok()
        );
    }
    let (old_meta, new_meta) = (meta_of(&old).unwrap_or_default(), meta_of(&new));
    if let Some(meta) = new.get("_meta") {
        assert!(
            new_meta.is_some(),
            "_meta became something else than an object: {meta}"
        );
    }
    let new_meta = new_meta.unwrap_or_default();
    let meta_on_keys: Vec<&str> = edit.meta_on.iter().map(|(k, _)| *k).collect();
    let kept_meta = |object: &RawObject<'_>, off: &[&str]| -> Vec<(String, String)> {
        object
            .entries()
            .filter(|(k, _)| !off.contains(k) && !meta_on_keys.contains(k))
            .map(|(k, v)| (k.to_owned(), v.get().to_owned()))
            .collect()
    };
    assert_eq!(
        kept_meta(&old_meta, edit.meta_off),
        kept_meta(&new_meta, &[]),
        "a _meta key the rewrite does not own changed"
    );
    for off in edit.meta_off {
        assert!(new_meta.get(off).is_none(), "_meta[{off:?}] was left");
    }
    for (key, value) in edit.meta_on {
        assert_eq!(
            new_meta.get(key).map(RawValue::get),
            std::str::from_utf8(value).ok(),
            "_meta[{key:?}] is not what was stamped"
        );
    }
}

/// `out` is `before` (a response) stamped as `stamp` says: with SEP-1364's top-level
/// `sessionId` first (replacing any the upstream sent), the session in `result._meta`.
fn check_stamped(before: &[u8], stamp: &Stamp, out: &[u8]) {
    let after = parse_same(before, out, "stamp_message");
    let (base, out) = if stamp.top_level.is_some() {
        assert_eq!(
            after.session_id.map(RawValue::get),
            Some(r#""mcps_fuzz""#),
            "the top-level sessionId is not the session's"
        );
        let inserted: &[u8] = br#""sessionId":"mcps_fuzz","#;
        let open = out.iter().position(|&b| b == b'{').expect("an object");
        assert!(
            out[open + 1..].starts_with(inserted),
            "the top-level sessionId is not the first member"
        );
        let mut rest = out[..=open].to_vec();
        rest.extend_from_slice(&out[open + 1 + inserted.len()..]);
        (
            strip_top_level_session(Bytes::copy_from_slice(before)),
            rest,
        )
    } else {
        (Bytes::copy_from_slice(before), out.to_vec())
    };
    let base_envelope = Envelope::parse(&base).expect("the message without sessionId is valid");
    match base_envelope.result {
        Some(result) if result.get().starts_with('{') => {
            let complete: &[(&str, &[u8])] = &[("resultType", br#""complete""#)];
            check_edit(
                &base,
                result,
                &out,
                &Edit {
                    members_on: if stamp.complete { complete } else { &[] },
                    meta_on: &[(meta::SESSION, SESSION_STAMP)],
                    ..Edit::default()
                },
            );
        }
        _ => assert_eq!(
            base[..],
            out[..],
            "an error or a result that is not an object was changed"
        ),
    }
}

/// `after` parses as JSON-RPC of the same kind, method and id (byte for byte) as
/// `before`.
fn parse_same<'a>(before: &[u8], after: &'a [u8], what: &str) -> Envelope<'a> {
    let old = Envelope::parse(before).expect("the input was valid");
    let new = Envelope::parse(after).unwrap_or_else(|e| {
        panic!(
            "{what} wrote invalid JSON-RPC ({e}): {}",
            String::from_utf8_lossy(after)
        )
    });
    assert_eq!(old.kind, new.kind, "{what} changed the kind");
    assert_eq!(old.method(), new.method(), "{what} changed the method");
    assert_eq!(
        old.id.map(RawValue::get),
        new.id.map(RawValue::get),
        "{what} changed the id"
    );
    new
}

/// Every object in `raw`, at every depth, has the members `RawObject` finds (in order, keys
/// decoded, values as written) that serde_json reads when it checks the text again.
fn read_as_serde_json_reads(raw: &RawValue) {
    struct Members(Vec<(String, String)>);
    impl<'de> serde::Deserialize<'de> for Members {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Members, A::Error> {
                    let mut members = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        let value: &RawValue = map.next_value()?;
                        members.push((key, value.get().to_owned()));
                    }
                    Ok(Members(members))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    // A walk with a stack of its own: an accepted message may nest as deep as its size
    // allows, deeper than a test thread's stack would recurse.
    let mut todo = vec![raw];
    while let Some(raw) = todo.pop() {
        let text = raw.get();
        if text.starts_with('[') {
            todo.extend(serde_json::from_str::<Vec<&RawValue>>(text).unwrap_or_default());
            continue;
        }
        if !text.starts_with('{') {
            continue;
        }
        let serde = serde_json::from_str::<Members>(text).ok().map(|m| m.0);
        let ours = RawObject::parse(raw);
        let read = ours.as_ref().map(|object| {
            object
                .entries()
                .map(|(k, v)| (k.to_owned(), v.get().to_owned()))
                .collect::<Vec<_>>()
        });
        assert_eq!(
            read, serde,
            "the object reader and serde_json read {text} differently"
        );
        for (_, value) in ours.iter().flat_map(|o| o.entries()) {
            assert!(
                range_in(text.as_bytes(), value).is_some(),
                "a member of {text} is not a slice of it"
            );
            todo.push(value);
        }
    }
}

/// The `_meta` object of a payload.
fn meta_of<'a>(object: &RawObject<'a>) -> Option<RawObject<'a>> {
    object.get("_meta").and_then(RawObject::parse)
}

fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<&RawValue>(bytes).is_ok()
}

fn assert_object(bytes: &[u8], what: &str) {
    let raw: &RawValue = serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "{what} wrote invalid JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    });
    assert!(
        RawObject::parse(raw).is_some(),
        "{what} wrote something else than an object"
    );
}

// === sse ===

/// The event-stream decoder and the stamped event body, cut every way. The first byte
/// sets the event size limit, the second where to cut in two; the rest is the stream.
pub fn sse(data: &[u8]) {
    let [size, cut, stream @ ..] = data else {
        return;
    };
    let limit = 16 + usize::from(*size) * 8;
    let at = usize::from(*cut) % (stream.len() + 1);
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    let whole = decode(&[stream], limit);
    assert_eq!(
        whole,
        decode(&bytewise, limit),
        "byte by byte decodes otherwise"
    );
    assert_eq!(
        whole,
        decode(&[&stream[..at], &stream[at..]], limit),
        "cut at {at}, the stream decodes otherwise"
    );
    let written = stamped_stream(&[stream], limit);
    assert_eq!(
        written,
        stamped_stream(&bytewise, limit),
        "byte by byte, the stamped stream is written otherwise"
    );
    // The client always gets the response to its request: stamped, or the proxy's error.
    let (items, too_large) = decode(&[&written], usize::MAX);
    assert!(!too_large);
    let answered = items.iter().any(|item| match item {
        Item::Event(event) => event.data.as_deref().is_some_and(|data| {
            Envelope::parse(data.as_bytes()).is_ok_and(|e| {
                e.kind == Kind::Response && e.id.is_some_and(|id| same_id(id.get(), "1"))
            })
        }),
        Item::Comment(_) => false,
    });
    assert!(
        answered,
        "the stream ended without the response to the request"
    );
}

/// Items decoded from `chunks`, and whether an event was refused as too large.
fn decode(chunks: &[&[u8]], limit: usize) -> (Vec<Item>, bool) {
    let mut decoder = Decoder::new(limit);
    let mut items = Vec::new();
    for chunk in chunks {
        if decoder.feed(chunk, &mut items).is_err() {
            return (items, true);
        }
    }
    decoder.finish();
    (items, false)
}

/// What the proxy writes to a session client for an upstream event stream arriving in
/// `chunks`, answering the request with id 1.
fn stamped_stream(chunks: &[&[u8]], limit: usize) -> Vec<u8> {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
    }
    RUNTIME.with(|runtime| {
        let _entered = runtime.enter();
        let source = Decoded::new(
            Chunks(chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect()),
            limit,
        );
        let rewrite = EventRewrite::Stamp {
            stamp: StampEvents::new(Stamp {
                request_id: Bytes::from_static(b"1"),
                session: Bytes::from_static(SESSION_STAMP),
                top_level: None,
                complete: false,
            }),
            upstream: Arc::from("http://upstream/mcp"),
            learn: None,
        };
        let mut body = std::pin::pin!(EventBody::new(source, rewrite, Duration::from_secs(3600)));
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        loop {
            match body.as_mut().poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        out.extend_from_slice(&data);
                    }
                }
                Poll::Ready(None) => break,
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Pending => panic!("a body whose source is always ready waited"),
            }
        }
        out
    })
}

/// An HTTP body of the given chunks, every one ready at once.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

// === sse_upstream ===

/// The URL an HTTP+SSE session's stream is opened at, in the `sse_upstream` target.
const SSE_URL: &str = "http://127.0.0.1:8000/sse";

/// An HTTP+SSE session's stream, cut every way. The first byte sets the event size
/// limit, the second where to cut in two; the rest is the stream.
pub fn sse_upstream(data: &[u8]) {
    let [size, cut, stream @ ..] = data else {
        return;
    };
    let limit = 16 + usize::from(*size) * 8;
    let at = usize::from(*cut) % (stream.len() + 1);
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    let whole = frames(&[stream], limit);
    assert_eq!(
        whole,
        frames(&bytewise, limit),
        "byte by byte, the session's stream reads otherwise"
    );
    assert_eq!(
        whole,
        frames(&[&stream[..at], &stream[at..]], limit),
        "cut at {at}, the session's stream reads otherwise"
    );
    // Each message is the data of a `message` event (or of an event of no type), as
    // the decoder gives it.
    let (items, _) = decode(&[stream], limit);
    let messages: Vec<String> = items
        .into_iter()
        .filter_map(|item| match item {
            Item::Event(event) if matches!(event.event.as_deref(), None | Some("message")) => {
                event.data.filter(|d| !d.trim().is_empty())
            }
            _ => None,
        })
        .collect();
    let framed: Vec<&String> = whole
        .0
        .iter()
        .filter_map(|frame| match frame {
            SseFrame::Message(data) => Some(data),
            SseFrame::Endpoint(_) => None,
        })
        .collect();
    assert_eq!(
        framed,
        messages.iter().collect::<Vec<_>>(),
        "messages lost or made up"
    );
    let base = SSE_URL.parse().expect("the base URL");
    for frame in &whole.0 {
        let SseFrame::Endpoint(named) = frame else {
            continue;
        };
        let Ok(target) = upstream::resolve_endpoint(&base, named) else {
            continue;
        };
        let target = target.as_str();
        assert!(
            target.starts_with('/') && !target.contains('#'),
            "not an origin-form target: {target:?}"
        );
        // Named with another scheme, or with a host name (the stream's host is an
        // address), it is elsewhere.
        if let Some((scheme, rest)) = named.trim().split_once("://")
            && is_scheme(scheme)
        {
            let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or_default();
            let host = authority.rsplit('@').next().unwrap_or_default();
            assert!(
                scheme.eq_ignore_ascii_case("http")
                    && !host.starts_with(|c: char| c.is_ascii_alphabetic()),
                "{named:?} was taken for an endpoint at the stream's origin"
            );
        }
    }
}

/// Whether `word` is a URI scheme (RFC 3986 §3.1).
fn is_scheme(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_alphabetic())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The frames of an HTTP+SSE session's stream arriving in `chunks`, read as the proxy
/// reads them, and how the stream ended.
fn frames(chunks: &[&[u8]], limit: usize) -> (Vec<SseFrame>, Option<String>) {
    let mut source = Decoded::new(
        Chunks(chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect()),
        limit,
    );
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match source.poll_item(&mut cx) {
            Poll::Ready(Some(Ok(item))) => out.extend(upstream::frame(item)),
            Poll::Ready(Some(Err(end))) => return (out, Some(format!("{end:?}"))),
            Poll::Ready(None) => return (out, None),
            Poll::Pending => panic!("a body whose chunks are all there waited"),
        }
    }
}

// === id_restore ===

/// Where the proxy's id goes in the upstream's answer of the `id_restore` target.
const OURS_MARK: &[u8] = b"@@";

/// A request with the client's id (the input up to its first NUL) renamed toward an
/// upstream, then the upstream's answer (the rest, `@@` standing for the proxy's id)
/// restored. The first byte chooses whether the answer is a whole body and whether the
/// request is in an upstream session.
pub fn id_restore(data: &[u8]) {
    let [flags, rest @ ..] = data else {
        return;
    };
    let (whole, in_session) = (flags & 1 == 1, flags & 2 == 2);
    let (client_id, answer) = match rest.iter().position(|b| *b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let mut request = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    request.extend_from_slice(client_id);
    request.extend_from_slice(br#","method":"tools/call","params":{"name":"x"}}"#);
    let table = Arc::new(RenamedRequests::default());
    let session = in_session.then_some("fuzz-session");
    let (sent, restore) = outgoing(Bytes::from(request.clone()).into(), session, &table);
    let Some(mut restore) = restore else {
        // Not a request the proxy can rename (no JSON, no id): it goes as it came.
        assert_eq!(&sent[..], &request[..], "an unrenamed message was changed");
        return;
    };
    // The renamed request: the client's id replaced by an integer, nothing else touched.
    let ours = restore.upstream_id().expect("in flight").to_vec();
    assert!(
        ours.iter().all(u8::is_ascii_digit),
        "not an integer id: {ours:?}"
    );
    let envelope = Envelope::parse(&sent).expect("the renamed request parses");
    assert_eq!(envelope.kind, Kind::Request);
    assert_eq!(envelope.id.map(|id| id.get().as_bytes()), Some(&ours[..]));
    let parsed = Envelope::parse(&request).expect("the request parsed");
    let id = parsed.id.expect("the request has an id");
    let client = id.get().as_bytes().to_vec();
    let range = range_in(&request, id).expect("the id in the request");
    let mut expected = request[..range.start].to_vec();
    expected.extend_from_slice(&ours);
    expected.extend_from_slice(&request[range.end..]);
    assert_eq!(
        &sent[..],
        &expected[..],
        "the renamed request differs beyond its id"
    );

    // Whatever the upstream answers.
    let answer = replace_all(answer, OURS_MARK, &ours);
    if let Some(restored) = restore.response(&answer, whole) {
        check_restored(&answer, &restored, &client);
        assert!(
            restore.upstream_id().is_none(),
            "answered, yet still in flight"
        );
        assert!(
            restore.response(&answer, whole).is_none(),
            "one request, two responses"
        );
    } else if let Ok(envelope) = Envelope::parse(&answer)
        && envelope.kind == Kind::Response
        && envelope.id.is_some_and(|id| same_id(id.get(), &ours))
    {
        panic!("the response to the request was not taken for it");
    }

    // A plain response naming the proxy's id always is.
    let (_, fresh) = outgoing(Bytes::from(request).into(), session, &table);
    let mut fresh = fresh.expect("renamed again");
    let ours = fresh.upstream_id().expect("in flight").to_vec();
    let mut plain = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    plain.extend_from_slice(&ours);
    plain.extend_from_slice(br#","result":{}}"#);
    let restored = fresh.response(&plain, whole).expect("its own response");
    check_restored(&plain, &restored, &client);
}

/// `restored` is `answer` with its id replaced by `client`, byte for byte.
fn check_restored(answer: &[u8], restored: &[u8], client: &[u8]) {
    let envelope = Envelope::parse(restored).expect("the restored response parses");
    assert_eq!(envelope.kind, Kind::Response);
    let id = envelope.id.expect("a response has an id");
    assert_eq!(id.get().as_bytes(), client, "not the client's id");
    let original = Envelope::parse(answer).expect("the answer parsed");
    let range = range_in(answer, original.id.expect("an id")).expect("the id in the answer");
    assert_eq!(&restored[..range.start], &answer[..range.start]);
    assert_eq!(
        &restored[range.start + client.len()..],
        &answer[range.end..],
        "the restored response differs beyond its id"
    );
}

/// `bytes` with every `mark` replaced by `with`.
fn replace_all(bytes: &[u8], mark: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = rest.windows(mark.len()).position(|w| w == mark) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + mark.len()..];
    }
    out.extend_from_slice(rest);
    out
}
