//! An event stream held to a deadline (a tool's `timeout`): what the stream sends before
//! it goes out as it comes; at the deadline the stream ends with the proxy's last event
//! (the error answering the call), and the rest of it — the upstream's answer, still
//! open — is handed to whoever cancels the call upstream, who lets it go once the
//! cancellation is sent (an upstream session names a request in flight only while its
//! answer is held).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::oneshot;
use tokio::time::Sleep;

/// Where the rest of a stream goes at its deadline.
pub type Expired<B> = oneshot::Sender<Pin<Box<B>>>;

/// An event stream that ends at a deadline.
#[derive(Debug)]
pub struct Timed<B> {
    /// The stream, until it ends or the deadline takes it.
    inner: Option<Pin<Box<B>>>,
    deadline: Pin<Box<Sleep>>,
    /// Sent at the deadline, when the stream is between events.
    last: Option<Bytes>,
    expired: Option<Expired<B>>,
    /// The last bytes sent (at most 4: enough to see a blank line), and how many.
    tail: ([u8; 4], usize),
}

impl<B> Timed<B> {
    pub fn new(inner: B, deadline: Pin<Box<Sleep>>, last: Bytes, expired: Expired<B>) -> Self {
        Timed {
            inner: Some(Box::pin(inner)),
            deadline,
            last: Some(last),
            expired: Some(expired),
            tail: ([0; 4], 0),
        }
    }

    fn sent(&mut self, data: &[u8]) {
        let (tail, len) = &mut self.tail;
        for &byte in data.iter().rev().take(4).rev() {
            if *len == 4 {
                tail.rotate_left(1);
                tail[3] = byte;
            } else {
                tail[*len] = byte;
                *len += 1;
            }
        }
    }

    /// Whether what was sent so far ends with a whole event (a blank line), or nothing
    /// was sent.
    fn between_events(&self) -> bool {
        let (tail, len) = &self.tail;
        *len == 0 || ends_an_event(&tail[..*len])
    }
}

/// Whether a stream that sent `data` last is between events (it ended with a blank line).
fn ends_an_event(data: &[u8]) -> bool {
    data.ends_with(b"\n\n") || data.ends_with(b"\r\n\r\n") || data.ends_with(b"\r\r")
}

impl<B: Body<Data = Bytes, Error = std::io::Error>> Body for Timed<B> {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            // Past the deadline: the last event, then the end.
            return Poll::Ready(this.last.take().map(|last| Ok(Frame::data(last))));
        };
        // The deadline first: a stream always ready would otherwise outrun it.
        if this.deadline.as_mut().poll(cx).is_pending() {
            match inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        this.sent(data);
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(ended) => {
                    // Answered (or failed) in time: nothing to cancel.
                    this.inner = None;
                    this.last = None;
                    this.expired = None;
                    return Poll::Ready(ended);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        if let (Some(expired), Some(inner)) = (this.expired.take(), this.inner.take()) {
            // The canceller gone, the stream simply ends here.
            drop(expired.send(inner));
        }
        if !this.between_events() {
            // Half an event sent: an event after it would be read as its rest.
            this.last = None;
        }
        Poll::Ready(this.last.take().map(|last| Ok(Frame::data(last))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none() && self.last.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt;

    use super::*;

    /// A body that sends its bytes and then nothing, ever (or ends, when `ends`).
    struct Stalled {
        first: Option<Bytes>,
        ends: bool,
    }

    impl Body for Stalled {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            match self.first.take() {
                Some(first) => Poll::Ready(Some(Ok(Frame::data(first)))),
                None if self.ends => Poll::Ready(None),
                None => Poll::Pending,
            }
        }
    }

    fn stalled(first: &'static [u8]) -> Stalled {
        Stalled {
            first: Some(Bytes::from_static(first)),
            ends: false,
        }
    }

    async fn collect(body: Timed<Stalled>) -> Vec<u8> {
        body.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_past_its_deadline_ends_with_the_last_event_and_hands_over_the_rest() {
        let (tx, rx) = oneshot::channel();
        let deadline = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
        let body = Timed::new(
            stalled(b"data: 1\n\n"),
            deadline,
            Bytes::from_static(b"data: late\n\n"),
            tx,
        );
        assert_eq!(collect(body).await, b"data: 1\n\ndata: late\n\n");
        assert!(rx.await.is_ok(), "the rest went to the canceller");
    }

    #[tokio::test]
    async fn an_event_ending_across_frames_is_seen_to_end() {
        let (tx, _rx) = oneshot::channel();
        let deadline = Box::pin(tokio::time::sleep(Duration::ZERO));
        let mut body = Timed::new(stalled(b""), deadline, Bytes::new(), tx);
        assert!(body.between_events(), "nothing sent");
        body.sent(b"data: {}\n");
        assert!(!body.between_events());
        body.sent(b"\n");
        assert!(
            body.between_events(),
            "the blank line came in a frame of its own"
        );
        body.sent(b"data: {\"a\":1}\r\n\r");
        body.sent(b"\n");
        assert!(body.between_events());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_always_ready_still_ends_at_its_deadline() {
        /// Sends an event whenever asked, forever.
        struct Endless;
        impl Body for Endless {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"data: x\n\n")))))
            }
        }
        let (tx, rx) = oneshot::channel();
        let deadline = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
        let mut body = Box::pin(Timed::new(
            Endless,
            deadline,
            Bytes::from_static(b"data: late\n\n"),
            tx,
        ));
        let mut frames = 0;
        tokio::time::advance(Duration::from_secs(6)).await;
        while let Some(frame) = body.frame().await {
            frames += 1;
            assert!(frames < 3, "the deadline passed");
            assert_eq!(
                frame.unwrap().into_data().unwrap(),
                Bytes::from_static(b"data: late\n\n")
            );
        }
        assert!(rx.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn half_an_event_gets_no_last_event() {
        let (tx, rx) = oneshot::channel();
        let deadline = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
        let body = Timed::new(
            stalled(b"data: {\"par"),
            deadline,
            Bytes::from_static(b"data: late\n\n"),
            tx,
        );
        assert_eq!(collect(body).await, b"data: {\"par");
        assert!(rx.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_ends_in_time_is_left_alone() {
        let (tx, rx) = oneshot::channel();
        let deadline = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
        let done = Stalled {
            first: Some(Bytes::from_static(b"data: done\n\n")),
            ends: true,
        };
        let body = Timed::new(done, deadline, Bytes::from_static(b"data: late\n\n"), tx);
        assert_eq!(collect(body).await, b"data: done\n\n");
        assert!(rx.await.is_err(), "nothing to cancel");
    }
}
