//! Writing `text/event-stream` events and comments.

use super::decoder::{Event, Item};

/// Appends `event`, ending it with a blank line. Data with `\n` becomes several `data:`
/// lines, which the receiving decoder joins back with `\n`.
pub fn write_event(out: &mut Vec<u8>, event: &Event) {
    if let Some(name) = &event.event {
        field(out, "event", name);
    }
    if let Some(id) = &event.id {
        field(out, "id", id);
    }
    if let Some(retry) = event.retry {
        field(out, "retry", &retry.to_string());
    }
    if let Some(data) = &event.data {
        for line in data.split('\n') {
            field(out, "data", line);
        }
    }
    out.push(b'\n');
}

/// Appends one item as it was received.
pub fn write_item(out: &mut Vec<u8>, item: &Item) {
    match item {
        Item::Event(event) => write_event(out, event),
        Item::Comment(text) => {
            out.push(b':');
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
        }
    }
}

fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    // Values come from a decoder that split on CR and LF, or from JSON the proxy wrote;
    // a stray CR would end the line early for the receiver, so it is dropped.
    if value.contains('\r') {
        out.extend_from_slice(value.replace('\r', "").as_bytes());
    } else {
        out.extend_from_slice(value.as_bytes());
    }
    out.push(b'\n');
}
