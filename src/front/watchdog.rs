//! Closes client connections that hold a place without using it (slowloris): a request
//! head that is slow to arrive, a kept-alive connection left idle.
//!
//! The rules, HTTP/1.1 and HTTP/2 alike:
//! - a new connection must deliver its first request head within
//!   `limits.header_read_timeout` of being accepted (this also bounds the HTTP/2 preface
//!   and the protocol detection before it); one on which nothing has arrived yet is idle
//!   as well, so the idle limit ends it when that is shorter (a draining listener's
//!   [`DRAIN_IDLE`](super::DRAIN_IDLE): a client's pool may hold connections it never
//!   used);
//! - once no request is in flight (every response sent to its end, event streams
//!   included), the connection may idle for `limits.idle_timeout`; when its next bytes
//!   arrive, the head they start must be complete within `limits.header_read_timeout`.
//!
//! A request is in flight from its head to the end of its response body, so a long
//! event stream or a slow request body (bounded by `limits.request_body_timeout`
//! elsewhere) never counts as idle. The clock is kept lazily: the transport notes the
//! first byte after an idle spell, requests note when the last one ends, and the
//! watchdog reads those notes when its timer fires — at its deadline, or sooner: no
//! deadline can fall earlier than the shorter of the two limits after the watchdog last
//! looked (a head or an idle spell that begins later ends later), so it looks again by
//! then. A request costs the watchdog nothing: no wake-up and no timer per request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::metrics::Closed;
use crate::telemetry::server::Answered;

/// "Not since the connection went idle".
const NEVER: u64 = u64::MAX;
/// "Nothing read yet on a new connection": its head counts from the accept, and it is
/// idle too (a client's pool may hold it unused).
const FRESH: u64 = u64::MAX - 1;

/// What one connection is doing, shared by its transport, its requests and its watchdog.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the last request in flight ended.
    idle_since: AtomicU64,
    /// Milliseconds after `opened` of the first byte read while no request was in flight;
    /// [`NEVER`] if none yet; [`FRESH`] on a new connection before its first byte (its
    /// head counts from the accept).
    head_started: AtomicU64,
    /// Whether it speaks HTTP/2 (a request said so).
    http2: AtomicBool,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(FRESH),
            http2: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(NEVER - 1)
    }

    /// A request head arrived: the request is in flight until the returned guard (held
    /// with its answer until the answer is sent: [`Sending`]) drops.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// A request came over HTTP/2.
    pub fn http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
    }

    /// Whether a request came over HTTP/2.
    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    /// Whether a request is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Bytes arrived from the client.
    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) != 0 {
            return;
        }
        let was = self.head_started.load(Ordering::Acquire);
        let started = match was {
            NEVER => self.now(),
            // The first bytes of a new connection: its head counts from the accept.
            FRESH => 0,
            _ => return,
        };
        // Lost to a concurrent note: that one counts.
        let _ =
            self.head_started
                .compare_exchange(was, started, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Resolves when the connection has held its place too long without using it, with
    /// the reason; never while a request is in flight.
    pub async fn expired(&self, header_read: Duration, idle: Duration) -> Closed {
        let header_read = u64::try_from(header_read.as_millis()).unwrap_or(NEVER / 2);
        let idle = u64::try_from(idle.as_millis()).unwrap_or(NEVER / 2);
        // The soonest a deadline that is not known yet can fall after a look (at least a
        // millisecond: the clock's grain).
        let horizon = header_read.min(idle).max(1);
        loop {
            let now = self.now();
            let (deadline, reason) = if self.in_flight.load(Ordering::Acquire) > 0 {
                (None, Closed::Idle)
            } else {
                match self.head_started.load(Ordering::Acquire) {
                    NEVER => (
                        Some(self.idle_since.load(Ordering::Acquire).saturating_add(idle)),
                        Closed::Idle,
                    ),
                    // Nothing sent yet: whichever limit ends first.
                    FRESH if idle < header_read => (Some(idle), Closed::Idle),
                    FRESH => (Some(header_read), Closed::HeaderTimeout),
                    started => (
                        Some(started.saturating_add(header_read)),
                        Closed::HeaderTimeout,
                    ),
                }
            };
            if let Some(deadline) = deadline
                && now >= deadline
            {
                return reason;
            }
            let look = now.saturating_add(horizon);
            let next = deadline.map_or(look, |deadline| deadline.min(look));
            tokio::time::sleep_until(self.opened + Duration::from_millis(next)).await;
        }
    }
}

/// One request in flight; dropped when its response has been sent to its end (or
/// abandoned).
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.idle_since.store(activity.now(), Ordering::Release);
            activity.head_started.store(NEVER, Ordering::Release);
        }
    }
}

pin_project! {
    /// A client's transport, noting when bytes arrive.
    #[derive(Debug)]
    pub struct Watched<T> {
        #[pin]
        io: T,
        activity: Arc<Activity>,
    }
}

impl<T> Watched<T> {
    pub fn new(io: T, activity: Arc<Activity>) -> Self {
        Watched { io, activity }
    }
}

impl<T: AsyncRead> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// What an answer keeps until it has been sent (or abandoned): its request in flight,
/// and its span open when it is traced. The proxy's loop holds it beside the answer it
/// writes; hyper's gets it in the body ([`Tracked`]).
#[derive(Debug)]
pub struct Sending {
    // Held for what their drops do.
    _in_flight: InFlight,
    _span: Option<Answered>,
}

impl Sending {
    pub fn new(in_flight: InFlight, span: Option<Answered>) -> Self {
        Sending {
            _in_flight: in_flight,
            _span: span,
        }
    }
}

pin_project! {
    /// A response body that keeps what its answer keeps ([`Sending`]) until it has been
    /// sent.
    pub struct Tracked<B> {
        #[pin]
        body: B,
        sending: Sending,
    }
}

impl<B> Tracked<B> {
    pub fn new(body: B, sending: Sending) -> Self {
        Tracked { body, sending }
    }
}

impl<B: Body<Data = Bytes>> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_millis(100);
    const IDLE: Duration = Duration::from_millis(300);

    async fn expiry(activity: &Arc<Activity>) -> (Closed, Duration) {
        let started = Instant::now();
        let reason = activity.expired(HEADER, IDLE).await;
        (reason, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_must_send_its_head_within_the_header_timeout() {
        let activity = Activity::new();
        let (reason, after) = expiry(&activity).await;
        assert_eq!(reason, Closed::HeaderTimeout);
        assert_eq!(after, HEADER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_is_never_cut_and_idle_counts_from_its_end() {
        let activity = Activity::new();
        let request = activity.request();
        let watching = tokio::spawn({
            let activity = activity.clone();
            async move { expiry(&activity).await }
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!watching.is_finished(), "a long response was cut");
        drop(request);
        let (reason, after) = watching.await.unwrap();
        assert_eq!(reason, Closed::Idle);
        assert_eq!(after, Duration::from_secs(3600) + IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_started_after_an_idle_spell_has_the_header_timeout() {
        let activity = Activity::new();
        drop(activity.request());
        let watching = tokio::spawn({
            let activity = activity.clone();
            async move { expiry(&activity).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The first byte of the next head; the rest never comes.
        activity.read();
        let (reason, after) = watching.await.unwrap();
        assert_eq!(reason, Closed::HeaderTimeout);
        assert_eq!(after, Duration::from_millis(50) + HEADER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_that_sent_nothing_is_idle_too() {
        // A shorter idle limit (a draining listener's) ends it...
        let activity = Activity::new();
        let short = HEADER / 4;
        let started = Instant::now();
        assert_eq!(activity.expired(HEADER, short).await, Closed::Idle);
        assert_eq!(started.elapsed(), short);
        // ... unless its head has started: then it has the header timeout, from the accept.
        let activity = Activity::new();
        let watching = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(HEADER, short).await }
        });
        tokio::time::sleep(short / 2).await;
        activity.read();
        assert_eq!(watching.await.unwrap(), Closed::HeaderTimeout);
        assert_eq!(started.elapsed(), short + HEADER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_wakes_no_watchdog() {
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let activity = Activity::new();
        let mut watching = std::pin::pin!(activity.expired(HEADER, IDLE));
        assert!(watching.as_mut().poll(&mut cx).is_pending());
        for _ in 0..3 {
            activity.read();
            let request = activity.request();
            activity.read();
            drop(request);
        }
        assert!(watching.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            0,
            "a request woke the watchdog"
        );
        // Its timer still ends the connection, an idle limit after the last request.
        let started = Instant::now();
        assert_eq!(watching.await, Closed::Idle);
        assert_eq!(started.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_of_a_request_in_flight_do_not_start_a_head() {
        let activity = Activity::new();
        let request = activity.request();
        activity.read();
        drop(request);
        let (reason, after) = expiry(&activity).await;
        assert_eq!(reason, Closed::Idle);
        assert_eq!(after, IDLE);
    }
}
