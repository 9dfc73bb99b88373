//! A body read whole, as the proxy reads a client's message and an upstream's JSON answer:
//! its data frames joined, at most a limit, without the frame list `http_body_util`'s
//! `collect` keeps (a body of one frame — the usual one — is that frame, as it came).

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

/// Why a body was not read whole.
#[derive(Debug)]
pub enum Unread<E> {
    /// It held more than the limit.
    TooLarge,
    /// The body failed (its connection broke, or its framing did).
    Failed(E),
}

/// The data of `body`, joined, if it holds at most `limit` bytes (trailers are not data:
/// they are let go). A body of one data frame is that frame, not copied.
pub async fn whole<B>(body: B, limit: usize) -> Result<Bytes, Unread<B::Error>>
where
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Unread::Failed)?.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        len = len
            .checked_add(data.len())
            .filter(|&n| n <= limit)
            .ok_or(Unread::TooLarge)?;
        match (&mut joined, &first) {
            (Some(joined), _) => joined.extend_from_slice(&data),
            (None, Some(seen)) => {
                let mut both = BytesMut::with_capacity(len);
                both.extend_from_slice(seen);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
            (None, None) => first = Some(data),
        }
    }
    Ok(match joined {
        Some(joined) => joined.freeze(),
        None => first.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;

    type Frames = Vec<Result<Frame<Bytes>, &'static str>>;

    fn frames(
        parts: Frames,
    ) -> StreamBody<futures_util::stream::Iter<<Frames as IntoIterator>::IntoIter>> {
        StreamBody::new(futures_util::stream::iter(parts))
    }

    fn data(s: &'static str) -> Result<Frame<Bytes>, &'static str> {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    #[tokio::test]
    async fn one_frame_is_that_frame_and_several_are_joined() {
        let one = Bytes::from_static(b"{\"a\":1}");
        let read = whole(Full::new(one.clone()), 64).await;
        let read: Result<Bytes, Unread<Infallible>> = read;
        let read = read.expect("whole");
        assert_eq!(read, one);
        assert_eq!(read.as_ptr(), one.as_ptr(), "not copied");

        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        let body = frames(vec![
            data("{\"a\""),
            data(":"),
            Ok(Frame::trailers(trailers)),
            data("1}"),
        ]);
        assert_eq!(whole(body, 7).await.expect("whole"), "{\"a\":1}");
        assert_eq!(
            whole(Full::new(Bytes::new()), 0).await.expect("empty"),
            Bytes::new()
        );
    }

    #[tokio::test]
    async fn more_than_the_limit_or_a_failure_is_not_read() {
        let body = frames(vec![data("1234"), data("5")]);
        assert!(matches!(whole(body, 4).await, Err(Unread::TooLarge)));
        let body = Full::new(Bytes::from_static(b"12345"));
        let read: Result<Bytes, Unread<Infallible>> = whole(body, 4).await;
        assert!(matches!(read, Err(Unread::TooLarge)));
        let body = frames(vec![data("12"), Err("reset")]);
        match whole(body, 64).await {
            Err(Unread::Failed(e)) => assert_eq!(e, "reset"),
            other => panic!("{other:?}"),
        }
    }
}
