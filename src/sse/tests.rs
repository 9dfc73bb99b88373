use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::*;

fn decode_chunks(chunks: &[&[u8]]) -> Vec<Item> {
    let mut decoder = Decoder::new(1 << 20);
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut out).unwrap();
    }
    decoder.finish();
    out
}

fn event(data: &str) -> Item {
    Item::Event(Event {
        data: Some(data.into()),
        ..Event::default()
    })
}

#[test]
fn fields_lines_and_line_ends() {
    let stream = b"event: message\r\nid: 7\rretry: 1500\ndata: {\"a\":1}\ndata:second\n\n";
    assert_eq!(
        decode_chunks(&[stream]),
        vec![Item::Event(Event {
            event: Some("message".into()),
            id: Some("7".into()),
            retry: Some(1500),
            data: Some("{\"a\":1}\nsecond".into()),
        })]
    );
}

#[test]
fn comments_are_kept_and_unknown_fields_ignored() {
    let items = decode_chunks(&[b": keep-alive\nfoo: bar\ndata: x\n\n"]);
    assert_eq!(items, vec![Item::Comment(" keep-alive".into()), event("x")]);
}

#[test]
fn a_priming_event_with_an_id_and_empty_data_survives() {
    let items = decode_chunks(&[b"id: abc\ndata: \n\n"]);
    assert_eq!(
        items,
        vec![Item::Event(Event {
            id: Some("abc".into()),
            data: Some(String::new()),
            ..Event::default()
        })]
    );
    let mut out = Vec::new();
    write_item(&mut out, &items[0]);
    assert_eq!(out, b"id: abc\ndata: \n\n");
}

#[test]
fn an_unterminated_event_is_dropped_at_the_end() {
    let mut decoder = Decoder::new(1024);
    let mut out = Vec::new();
    decoder
        .feed(b"data: complete\n\ndata: partial", &mut out)
        .unwrap();
    assert_eq!(out, vec![event("complete")]);
    assert!(decoder.finish());
}

#[test]
fn a_bom_at_the_start_is_skipped() {
    assert_eq!(
        decode_chunks(&[b"\xEF\xBB", b"\xBFdata: x\n\n"]),
        vec![event("x")]
    );
}

#[test]
fn invalid_retry_and_ids_with_nul_are_ignored() {
    let items = decode_chunks(&[b"retry: 12a\nid: a\0b\ndata: x\n\n"]);
    assert_eq!(items, vec![event("x")]);
}

#[test]
fn an_oversized_event_is_refused() {
    let mut decoder = Decoder::new(16);
    let mut out = Vec::new();
    assert!(decoder.feed(b"data: 0123456789", &mut out).is_ok());
    assert_eq!(
        decoder.feed(b"abcdef\n", &mut out),
        Err(TooLarge { limit: 16 })
    );
}

/// STYLE.md habit 5: split at every byte — inside UTF-8, between CR and LF — and expect
/// the one-shot result.
#[test]
fn decoding_does_not_depend_on_where_chunks_are_cut() {
    let stream = "\u{feff}: hi\r\nevent: message\r\nid: é1\r\ndata: {\"t\":\"héllo ✓\"}\r\n\r\ndata: a\rdata: b\r\rdata:c\n\n"
        .as_bytes();
    let whole = decode_chunks(&[stream]);
    assert_eq!(whole.len(), 4);
    for cut in 0..=stream.len() {
        assert_eq!(
            decode_chunks(&[&stream[..cut], &stream[cut..]]),
            whole,
            "cut at {cut}"
        );
    }
    for a in 0..stream.len() {
        for b in a..stream.len() {
            let parts = [&stream[..a], &stream[a..b], &stream[b..]];
            assert_eq!(decode_chunks(&parts), whole, "cuts at {a}, {b}");
        }
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(decode_chunks(&bytes), whole);
}

#[test]
fn encoding_then_decoding_gives_the_event_back() {
    let original = Event {
        event: Some("message".into()),
        id: Some("42".into()),
        retry: Some(10),
        data: Some("line one\nline two\n".into()),
    };
    let mut out = Vec::new();
    write_event(&mut out, &original);
    assert_eq!(decode_chunks(&[&out]), vec![Item::Event(original)]);
}

// === EventBody over a decoded body ===

struct ChannelBody(mpsc::Receiver<Result<Bytes, &'static str>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = &'static str;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

/// Upper-cases data and reports how the stream ended.
struct Upper;

impl Rewrite for Upper {
    fn event(&mut self, event: &mut Event) {
        if let Some(data) = &mut event.data {
            *data = data.to_uppercase();
        }
    }
    fn end(&mut self, how: End) -> Option<Event> {
        Some(Event {
            event: Some("end".into()),
            data: Some(format!("{how:?}")),
            ..Event::default()
        })
    }
}

async fn next_text<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<String>
where
    B::Error: std::fmt::Debug,
{
    let frame = body.frame().await?.unwrap();
    Some(String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap())
}

#[tokio::test]
async fn each_event_is_sent_on_as_soon_as_it_is_complete() {
    let (tx, rx) = mpsc::channel(4);
    let mut body = Box::pin(EventBody::new(
        Decoded::new(ChannelBody(rx), 1024),
        Upper,
        Duration::from_secs(60),
    ));
    tx.send(Ok(Bytes::from_static(b"data: one\n\ndata: tw")))
        .await
        .unwrap();
    // The first event comes out while the upstream has not finished the second.
    assert_eq!(next_text(&mut body).await.unwrap(), "data: ONE\n\n");
    tx.send(Ok(Bytes::from_static(b"o\n\n"))).await.unwrap();
    assert_eq!(next_text(&mut body).await.unwrap(), "data: TWO\n\n");
    drop(tx);
    assert_eq!(
        next_text(&mut body).await.unwrap(),
        "event: end\ndata: Complete\n\n"
    );
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn a_failed_upstream_ends_the_stream_cleanly() {
    let (tx, rx) = mpsc::channel(4);
    let mut body = Box::pin(EventBody::new(
        Decoded::new(ChannelBody(rx), 1024),
        Upper,
        Duration::from_secs(60),
    ));
    tx.send(Err("reset")).await.unwrap();
    let last = next_text(&mut body).await.unwrap();
    assert!(last.contains("Failed(\"reset\")"), "{last}");
    assert!(body.frame().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_silent_upstream_is_cut_after_the_idle_timeout() {
    let (tx, rx) = mpsc::channel::<Result<Bytes, &'static str>>(4);
    let mut body = Box::pin(EventBody::new(
        Decoded::new(ChannelBody(rx), 1024),
        Upper,
        Duration::from_secs(5),
    ));
    let last = next_text(&mut body).await.unwrap();
    assert!(last.contains("Idle(5s)"), "{last}");
    drop(tx);
}

#[tokio::test]
async fn an_oversized_event_ends_the_stream() {
    let (tx, rx) = mpsc::channel(4);
    let mut body = Box::pin(EventBody::new(
        Decoded::new(ChannelBody(rx), 8),
        Upper,
        Duration::from_secs(60),
    ));
    tx.send(Ok(Bytes::from_static(b"data: far too long\n\n")))
        .await
        .unwrap();
    let last = next_text(&mut body).await.unwrap();
    assert!(last.contains("TooLarge(8)"), "{last}");
    assert!(body.frame().await.is_none());
}
