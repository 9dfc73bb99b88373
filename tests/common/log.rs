//! The proxy's own log, captured in memory.
//!
//! [`proxy_log`] installs the test process's one global tracing subscriber the first time
//! it is called; every proxy the binary starts logs into the same buffer, so a test
//! looks for lines it made unique (a marker, a session id).

use std::io::Write;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// Everything the proxy logs (at info and above) from the moment a test asks for it.
pub fn proxy_log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || LogWriter(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        buffer
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `session=` value of a log line.
pub fn session_field(line: &str) -> Option<&str> {
    let start = line.find("session=")? + "session=".len();
    line[start..].split_whitespace().next()
}
