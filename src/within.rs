//! A time limit that costs nothing when the work is done at once.
//!
//! `tokio::time::timeout` reads the clock to set its deadline when it is made, before
//! the work is polled. Most bodies the proxy reads have arrived whole with their head
//! (the client's request, an upstream's JSON answer): polled once first, they are read
//! without the clock, and only work that must wait gets a deadline.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::error::Elapsed;

/// `work`'s output, or `Elapsed` when it took longer than `limit` (counted from its
/// first wait).
pub async fn within<F: Future>(limit: Duration, work: F) -> Result<F::Output, Elapsed> {
    let mut work = pin!(work);
    let done_at_once = poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
    match done_at_once {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => tokio::time::timeout(limit, work).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ready_work_is_done_and_waiting_work_is_timed() {
        assert_eq!(within(Duration::from_secs(1), async { 7 }).await, Ok(7));
        // Work that waits less than the limit is done; longer, it is not.
        let short = within(Duration::from_secs(2), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            8
        });
        assert_eq!(short.await, Ok(8));
        let long = within(Duration::from_secs(1), async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            9
        });
        assert!(long.await.is_err());
    }
}
