//! An incremental `text/event-stream` decoder (HTML Living Standard, "Server-sent events",
//! §9.2.6 "Interpreting an event stream").
//!
//! Bytes arrive in chunks cut anywhere: inside a UTF-8 sequence, between the CR and LF of
//! a line end. The decoder keeps the unfinished line as bytes and decodes only whole lines,
//! so the result does not depend on where the chunks were cut. The event being assembled
//! is capped: a stream that never ends an event cannot grow memory without bound.

use memchr::memchr2;

/// One dispatched event. Fields keep their original presence so a re-encoded event says
/// what the original said (a "priming" event with an id and no data stays one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub event: Option<String>,
    pub id: Option<String>,
    pub retry: Option<u64>,
    /// The data lines joined with `\n`; `None` when the event had no data line.
    pub data: Option<String>,
}

/// What the decoder yields: events, and comments (kept because proxies use them as
/// keep-alives, and the client behind us may rely on them to keep its connection open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Event(Event),
    /// The text after the `:` of a comment line.
    Comment(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream event exceeded {limit} bytes")]
pub struct TooLarge {
    pub limit: usize,
}

#[derive(Debug)]
pub struct Decoder {
    /// The current line so far, without its line end.
    line: Vec<u8>,
    /// The last chunk ended with CR: a LF starting the next chunk belongs to it.
    skip_lf: bool,
    /// Whether the first line (which may start with a BOM) has been completed.
    first_line_done: bool,
    event: Event,
    /// Bytes of lines that went into `event`.
    event_bytes: usize,
    limit: usize,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Decoder {
    /// A decoder that refuses events larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Decoder {
            line: Vec::new(),
            skip_lf: false,
            first_line_done: false,
            event: Event::default(),
            event_bytes: 0,
            limit,
        }
    }

    /// Feeds one chunk, appending every item it completes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Item>) -> Result<(), TooLarge> {
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(end) = memchr2(b'\r', b'\n', chunk) {
            self.push_line_bytes(&chunk[..end])?;
            self.end_line(out);
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
        }
        self.push_line_bytes(chunk)
    }

    /// The stream ended. An event not terminated by a blank line is dropped, as the
    /// standard says; returns whether that happened.
    pub fn finish(&mut self) -> bool {
        let pending = !self.line.is_empty() || self.event != Event::default();
        self.line.clear();
        self.event = Event::default();
        self.event_bytes = 0;
        pending
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        if self.event_bytes + self.line.len() + bytes.len() > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<Item>) {
        let mut line = std::mem::take(&mut self.line);
        let mut start = 0;
        if !self.first_line_done {
            self.first_line_done = true;
            if line.starts_with(BOM) {
                start = BOM.len();
            }
        }
        self.process(&line[start..], out);
        line.clear();
        self.line = line;
    }

    fn process(&mut self, line: &[u8], out: &mut Vec<Item>) {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            self.event_bytes = 0;
            if event != Event::default() {
                out.push(Item::Event(event));
            }
            return;
        }
        if let Some(comment) = line.strip_prefix(b":") {
            out.push(Item::Comment(String::from_utf8_lossy(comment).into_owned()));
            return;
        }
        self.event_bytes += line.len() + 1;
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => match &mut self.event.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.event.data = Some(value.into_owned()),
            },
            b"event" => self.event.event = Some(value.into_owned()),
            b"id" if !value.contains('\0') => self.event.id = Some(value.into_owned()),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.event.retry = value.parse().ok();
            }
            _ => {}
        }
    }
}
