//! Server-sent events: an incremental decoder, an encoder, and the body that writes a
//! stream of events one at a time as they arrive, rewriting each on its way.

mod body;
mod decoder;
mod encoder;
mod source;

pub use body::{EventBody, Rewrite, Unchanged};
pub use decoder::{Decoder, Event, Item, TooLarge};
pub use encoder::{write_event, write_item};
pub use source::{Decoded, End, ItemSource};

#[cfg(test)]
mod tests;
