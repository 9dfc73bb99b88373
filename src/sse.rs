//! Server-sent events: an incremental decoder, an encoder, and a body that rewrites an
//! event stream one event at a time as it flows.

mod body;
mod channel;
mod decoder;
mod encoder;

pub use body::{End, Rewrite, RewriteBody};
pub use channel::{MessageStream, Unchanged};
pub use decoder::{Decoder, Event, Item, TooLarge};
pub use encoder::{write_event, write_item};

#[cfg(test)]
mod tests;
