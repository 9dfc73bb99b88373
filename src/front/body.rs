//! A client's request as the front reads it: its body one the proxy's own HTTP/1.1
//! loop read whole with its head (`super::http1`), or hyper's (HTTP/2, and what that
//! loop hands to hyper); the request boxed where it is made, and its answer boxed as it
//! comes from its path.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::response::ProxyBody;

/// A client's request as the front hands it on, boxed where it is made: the levels it
/// passes through (the connection's loop, the exchange, the endpoint) then move a
/// pointer, not its 264 bytes, each into its own future (benches/README.md, "Requests
/// moved as a pointer").
pub type ClientRequest = Box<Request<ClientBody>>;

/// The answer to a client's request as the front hands it back, boxed as it comes from
/// its path (or where the front makes it): the levels it returns through (the endpoint,
/// the exchange, the connection's loop) then move a pointer, not its 280 bytes, each
/// into its own future and out again (benches/README.md, "Answers moved as a pointer").
pub type ClientResponse = Box<Response<ProxyBody>>;

/// A request's body: read whole with its head by the proxy's own loop, or as hyper
/// reads it.
#[derive(Debug)]
pub enum ClientBody {
    /// Read whole already (`None` once taken, or when there was none).
    Whole(Option<Bytes>),
    /// As hyper reads it.
    Hyper(Incoming),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ClientBody::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ClientBody::Hyper(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Whole(bytes) => bytes.is_none(),
            ClientBody::Hyper(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ClientBody::Hyper(body) => body.size_hint(),
        }
    }
}
