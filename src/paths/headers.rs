//! Which headers cross the proxy, in each direction.
//!
//! RFC 9110 §7.6.1: hop-by-hop headers (and any header named in `Connection`) belong to
//! one connection and are never forwarded. On the session path the proxy also owns the
//! MCP transport headers and the body encoding (it rewrites bodies, so it asks the
//! upstream for identity encoding by not forwarding `Accept-Encoding`).

use http::HeaderMap;
use http::header::{self, HeaderName};

use super::cluster::FORWARDED;
use crate::mcp::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::upstream::Passed;
use crate::wire::hop_by_hop::{Listed, is_hop_by_hop};

fn copy_except(headers: &HeaderMap, also_drop: &[&HeaderName]) -> HeaderMap {
    copy_unless(headers, |name| also_drop.contains(&name))
}

fn copy_unless(headers: &HeaderMap, drop: impl Fn(&HeaderName) -> bool) -> HeaderMap {
    let listed = Listed::of(headers);
    // Made with the first field kept: a session's request often has none to keep (the
    // fields the upstream's transport writes itself — `Host`, the session's, the
    // message's — are not put in its map: `upstream::connections::OwnFields`), and an
    // empty map costs no allocation. Then with room for the rest and two more (a trace
    // context's fields; what else goes in grows it).
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if is_hop_by_hop(name) || drop(name) || listed.lists(name) {
            continue;
        }
        if out.capacity() == 0 {
            out.reserve(headers.len() + 2);
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// What the proxy sets itself on the session path (and the replicas' signature, which
/// the upstream never sees).
const OWN_IN_SESSION: [&HeaderName; 10] = [
    &header::HOST,
    &header::CONTENT_LENGTH,
    &header::CONTENT_TYPE,
    &header::ACCEPT,
    &header::ACCEPT_ENCODING,
    &header::ORIGIN,
    &MCP_SESSION_ID,
    &MCP_PROTOCOL_VERSION,
    &LAST_EVENT_ID,
    &FORWARDED,
];

/// Client headers to pass upstream on the session path: end-to-end headers such as
/// `Authorization` and `User-Agent`, without what the proxy sets itself.
pub fn to_upstream_in_session(headers: &HeaderMap) -> HeaderMap {
    copy_except(headers, &OWN_IN_SESSION)
}

/// [`to_upstream_in_session`] for a legacy server the proxy speaks 2026-07-28 for: also
/// without the client's `Mcp-Param-*` (SEP-2243; the proxy checked them, and a legacy
/// server has no use for them).
pub fn to_legacy_for_stateless(headers: &HeaderMap) -> HeaderMap {
    copy_unless(headers, |name| {
        OWN_IN_SESSION.contains(&name) || crate::mcp::headers::is_param_header(name)
    })
}

/// What a request passed through leaves out besides the hop-by-hop headers and the
/// fields the sender writes itself (`Host`, its length): `Origin` (already checked by the
/// proxy) and the replicas' own signature (checked by the front; never the upstream's
/// business).
const CHECKED_HERE: [&HeaderName; 2] = [&header::ORIGIN, &FORWARDED];

/// Client headers for another replica of the proxy (a request forwarded to the replica
/// that holds what it needs): all end-to-end headers but [`CHECKED_HERE`]'s, `Host`
/// (the replica's request has its own authority) and the body's length.
pub fn to_replica_passthrough(headers: &HeaderMap) -> HeaderMap {
    copy_unless(headers, |name| {
        name == header::HOST || name == header::CONTENT_LENGTH || CHECKED_HERE.contains(&name)
    })
}

/// Client headers to pass upstream unchanged (legacy pass-through): all but the
/// hop-by-hop fields (a `Connection: keep-alive`, which most clients' HTTP libraries
/// send), those a `Connection` field lists, and [`CHECKED_HERE`]'s. Not copied: the
/// upstream's connection writes them from the client's own map ([`Passed`]), in its
/// order, and leaves out what it writes itself — the upstream's `Host` (its
/// own authority, which DNS-rebinding protections check) in place of the client's, and
/// the body's length.
pub fn to_upstream_passthrough(headers: &HeaderMap) -> Passed<'_> {
    Passed::new(headers, &CHECKED_HERE)
}

/// Upstream headers to pass to the client on the session path, taken off where they
/// lie: not the upstream's session id (the client has its own), not a length the
/// rewrite made stale, nothing hop-by-hop.
pub fn to_client_in_session(headers: &mut HeaderMap) {
    to_client_passthrough(headers);
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(&MCP_SESSION_ID);
}

/// Upstream headers to pass to the client unchanged (legacy pass-through): the hop-by-hop
/// ones and those a `Connection` field lists taken off where they lie; a map with none
/// of them (most: a JSON answer with a length; a chunked one has its
/// `Transfer-Encoding`) is only looked over once, and left untouched.
/// Fields of one name keep their order; a field of another name may take the place of
/// one taken off (`HeaderMap::remove` fills the gap with its last entry) — the order of
/// fields with different names means nothing (RFC 9110 §5.3).
pub fn to_client_passthrough(headers: &mut HeaderMap) {
    // Without a hop-by-hop field there is no `Connection` either, so nothing it lists.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let listed = Listed::of(headers);
    // Each name once, however many fields have it.
    let found: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name) || listed.lists(name))
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::hop_by_hop::HOP_BY_HOP;
    use http::HeaderValue;

    fn map(fields: &[(&str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in fields {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            h.append(name, HeaderValue::from_static(value));
        }
        h
    }

    /// `h` holds this one field and nothing else.
    fn only(h: &HeaderMap, name: HeaderName, value: &str) {
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[name], value);
    }

    /// The fields `passed` lets through, as a map, in the client map's order.
    fn through(passed: &Passed<'_>) -> HeaderMap {
        let mut out = HeaderMap::new();
        for (name, value) in passed.iter() {
            out.append(name.clone(), value.clone());
        }
        out
    }

    /// `h`'s fields in order, as `name: value`.
    fn fields(h: &HeaderMap) -> Vec<String> {
        h.iter()
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap()))
            .collect()
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_are_dropped() {
        let h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("authorization", "Bearer t"),
            ("host", "proxy:8080"),
        ]);
        let out = through(&to_upstream_passthrough(&h));
        // `Host` stays: the upstream's connection leaves it out and writes its own.
        let mut left = fields(&out);
        left.sort();
        assert_eq!(left, ["authorization: Bearer t", "host: proxy:8080"]);
        // Another replica's request (a copy) has no `Host`.
        only(
            &to_replica_passthrough(&h),
            header::AUTHORIZATION,
            "Bearer t",
        );

        // A listed name in any case, among spaces and empty tokens, in either of two
        // `Connection` fields: each direction and path takes it off.
        let h = map(&[
            ("connection", "Keep-Alive"),
            ("x-secret", "1"),
            ("user-agent", "t/1"),
            ("connection", " ,X-Secret , "),
        ]);
        only(
            &through(&to_upstream_passthrough(&h)),
            header::USER_AGENT,
            "t/1",
        );
        only(&to_upstream_in_session(&h), header::USER_AGENT, "t/1");
        let mut answer = h.clone();
        to_client_passthrough(&mut answer);
        only(&answer, header::USER_AGENT, "t/1");
    }

    #[test]
    fn a_request_with_nothing_else_to_leave_out_goes_upstream_as_it_is() {
        let h = map(&[
            ("host", "proxy:8080"),
            ("content-type", "application/json"),
            ("x-b", "2"),
            ("content-length", "7"),
            ("x-a", "1"),
            ("x-b", "3"),
        ]);
        // The client's map itself, in its order: the upstream's connection leaves its
        // `Host` and its length out and writes its own.
        let out = through(&to_upstream_passthrough(&h));
        assert_eq!(out, h);
        assert_eq!(fields(&out), fields(&h));
        // Another replica's request gets neither.
        let copied = to_replica_passthrough(&h);
        assert!(!copied.contains_key(header::HOST) && !copied.contains_key(header::CONTENT_LENGTH));
        assert_eq!(copied.len(), 4);
    }

    #[test]
    fn what_a_request_leaves_out_is_taken_off_and_the_rest_goes_as_it_came() {
        let hop_by_hop = HOP_BY_HOP;
        let leave_out = hop_by_hop
            .iter()
            .chain([&header::UPGRADE])
            .chain(CHECKED_HERE)
            .map(HeaderName::as_str);
        for name in leave_out {
            let h = map(&[
                ("host", "proxy:8080"),
                (name, "x"),
                ("authorization", "Bearer t"),
            ]);
            let out = through(&to_upstream_passthrough(&h));
            let mut left = fields(&out);
            left.sort();
            assert_eq!(
                left,
                ["authorization: Bearer t", "host: proxy:8080"],
                "{name}"
            );
        }
        // A fetch client's fields (`Connection: keep-alive` among them): each other field
        // kept, `Host` where the client put it, fields of one name in their order.
        let h = map(&[
            ("host", "proxy:8080"),
            ("connection", "keep-alive"),
            ("content-type", "application/json"),
            ("x-b", "2"),
            ("accept", "application/json, text/event-stream"),
            ("x-b", "3"),
            ("user-agent", "node"),
            ("content-length", "7"),
        ]);
        let out = through(&to_upstream_passthrough(&h));
        let left = fields(&out);
        assert_eq!(left[0], "host: proxy:8080");
        assert_eq!(left.len(), 7, "{left:?}");
        let mut expected: Vec<String> = fields(&h)
            .into_iter()
            .filter(|f| !f.starts_with("connection:"))
            .collect();
        let mut sorted = left.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected);
        let b: Vec<&String> = left.iter().filter(|f| f.starts_with("x-b:")).collect();
        assert_eq!(b, ["x-b: 2", "x-b: 3"]);

        // The field left out first: the others in the order they came, fields of one
        // name in theirs.
        let h = map(&[
            ("connection", "keep-alive"),
            ("x-a", "1"),
            ("x-b", "2"),
            ("x-b", "3"),
        ]);
        let out = through(&to_upstream_passthrough(&h));
        assert_eq!(fields(&out), ["x-a: 1", "x-b: 2", "x-b: 3"]);
    }

    #[test]
    fn an_answer_passed_through_loses_its_hop_by_hop_headers_in_place() {
        let mut h = map(&[("content-type", "text/event-stream"), ("x-trace", "1")]);
        let untouched = h.clone();
        to_client_passthrough(&mut h);
        assert_eq!(h, untouched, "nothing hop-by-hop: nothing changes");

        h.extend(map(&[
            ("connection", "keep-alive, x-trace"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
        ]));
        to_client_passthrough(&mut h);
        only(&h, header::CONTENT_TYPE, "text/event-stream");
    }

    #[test]
    fn the_session_path_answers_with_its_own_session_id_and_length() {
        let mut h = map(&[
            ("mcp-session-id", "upstream-1"),
            ("content-length", "42"),
            ("connection", "x-hop"),
            ("x-hop", "1"),
            ("cache-control", "no-store"),
        ]);
        to_client_in_session(&mut h);
        only(&h, header::CACHE_CONTROL, "no-store");
    }

    #[test]
    fn an_upstream_session_id_is_taken_off_with_no_hop_by_hop_field_beside_it() {
        let mut h = map(&[
            ("content-type", "application/json"),
            ("mcp-session-id", "upstream-1"),
            ("content-length", "42"),
            ("mcp-session-id", "upstream-2"),
        ]);
        to_client_in_session(&mut h);
        only(&h, header::CONTENT_TYPE, "application/json");
        // Without one there is nothing to take off but the length.
        let mut h = map(&[
            ("content-type", "application/json"),
            ("content-length", "7"),
        ]);
        to_client_in_session(&mut h);
        only(&h, header::CONTENT_TYPE, "application/json");
    }

    #[test]
    fn the_session_path_owns_the_mcp_headers() {
        let h = map(&[
            ("mcp-session-id", "mcps_x"),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept-encoding", "gzip"),
            ("user-agent", "t/1"),
        ]);
        let out = to_upstream_in_session(&h);
        only(&out, header::USER_AGENT, "t/1");
    }

    #[test]
    fn a_legacy_server_gets_no_mcp_param_headers() {
        let h = map(&[
            ("mcp-param-region", "south"),
            ("mcp-session-id", "mcps_x"),
            ("user-agent", "t/1"),
        ]);
        let out = to_legacy_for_stateless(&h);
        only(&out, header::USER_AGENT, "t/1");
        assert_eq!(
            to_upstream_in_session(&h).len(),
            2,
            "a modern server gets them"
        );
    }
}
