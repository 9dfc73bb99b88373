//! The proxy's own credentials toward an HTTP upstream (`upstream.credentials`): headers
//! added to every request it sends there — an API key, a bearer token — in place of any
//! the client sent under the same names, so a client can neither see nor choose them.
//! A value read from a file is read again when the file changes (a token rotated by a
//! secrets manager), checked every [`POLL`]; one from an environment variable is read
//! when the upstream is built (at start-up, or by a reload that changes it). Values are
//! marked sensitive, so no HTTP/2 table or log keeps them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;

use crate::config::{Credential, CredentialSource};

/// How often credential files are looked at.
pub const POLL: Duration = Duration::from_secs(1);
/// The largest credential file read.
const MAX_FILE: u64 = 16 * 1024;

/// One upstream's credential headers, kept current.
#[derive(Debug, Default)]
pub struct Credentials {
    headers: Vec<Header>,
}

#[derive(Debug)]
struct Header {
    name: HeaderName,
    prefix: String,
    source: CredentialSource,
    /// `None` until a value could be read (then the header is not sent at all).
    value: ArcSwapOption<HeaderValue>,
    /// The file's text when last read (compared whole: a token of the same length
    /// written within one tick of the clock is still a new token).
    seen: Mutex<Option<String>>,
    /// Its file could not be read last time (said once).
    failing: std::sync::atomic::AtomicBool,
}

impl Credentials {
    /// Reads every credential now; those from files are watched while the value lives.
    pub fn start(credentials: &[Credential]) -> Arc<Credentials> {
        let headers = credentials
            .iter()
            .map(|c| Header {
                name: c.header.clone(),
                prefix: c.prefix.clone(),
                source: c.source.clone(),
                value: ArcSwapOption::empty(),
                seen: Mutex::new(None),
                failing: std::sync::atomic::AtomicBool::new(false),
            })
            .collect();
        let credentials = Arc::new(Credentials { headers });
        for header in &credentials.headers {
            header.read();
        }
        let watched = credentials
            .headers
            .iter()
            .any(|h| matches!(h.source, CredentialSource::File(_)));
        if watched && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(watch(Arc::downgrade(&credentials)));
        }
        credentials
    }

    /// Takes the headers of the credentials' names off a request's `headers` (the
    /// client's never pass, whether or not the proxy has a value to send instead).
    pub fn strip(&self, headers: &mut HeaderMap) {
        for header in &self.headers {
            headers.remove(&header.name);
        }
    }

    /// Whether `name` is one of the credentials' (a client's field of that name never
    /// passes: [`Self::strip`]).
    pub fn strips(&self, name: &HeaderName) -> bool {
        self.headers.iter().any(|header| header.name == name)
    }

    /// Sets every header that has a value on a request's `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for header in &self.headers {
            if let Some(value) = header.value.load_full() {
                headers.insert(header.name.clone(), (*value).clone());
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }
}

impl Header {
    /// Reads the value again if its source changed (a file: its time or length).
    fn read(&self) {
        let text = match &self.source {
            CredentialSource::Env(name) => {
                if self.value.load().is_some() {
                    return;
                }
                match std::env::var(name) {
                    Ok(text) => text,
                    Err(_) => {
                        tracing::warn!(header = %self.name, variable = %name, "an upstream credential's variable is not set; the header is not sent");
                        return;
                    }
                }
            }
            CredentialSource::File(path) => {
                let read = match std::fs::metadata(path) {
                    Ok(m) if m.len() > MAX_FILE => {
                        Err(format!("it is larger than {} KiB", MAX_FILE / 1024))
                    }
                    _ => std::fs::read_to_string(path).map_err(|e| e.to_string()),
                };
                let text = match read {
                    Ok(text) => text,
                    Err(why) => {
                        // Said once, when it starts failing.
                        if self.failing.swap(true, std::sync::atomic::Ordering::AcqRel) {
                            return;
                        }
                        *self.seen.lock() = None;
                        tracing::warn!(header = %self.name, file = %path.display(), %why, "an upstream credential's file cannot be read; the last value read is kept");
                        return;
                    }
                };
                self.failing
                    .store(false, std::sync::atomic::Ordering::Release);
                let mut seen = self.seen.lock();
                if seen.as_deref() == Some(text.as_str()) {
                    return;
                }
                *seen = Some(text.clone());
                text
            }
        };
        if text.trim().is_empty() {
            tracing::warn!(header = %self.name, "an upstream credential is empty; the last value read is kept");
            return;
        }
        let text = format!("{}{}", self.prefix, text.trim());
        match HeaderValue::from_str(&text) {
            Ok(mut value) => {
                value.set_sensitive(true);
                let changed = self.value.load().as_deref() != Some(&value);
                self.value.store(Some(Arc::new(value)));
                if changed {
                    tracing::info!(header = %self.name, "an upstream credential was read");
                }
            }
            // Never the value itself in the log.
            Err(_) => {
                tracing::warn!(header = %self.name, "an upstream credential is not a valid header value (visible ASCII); the last value read is kept")
            }
        }
    }
}

/// Reads changed credential files every [`POLL`] until the credentials are dropped.
async fn watch(credentials: Weak<Credentials>) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(held) = credentials.upgrade() else {
            return;
        };
        if held.is_empty() {
            return;
        }
        for header in &held.headers {
            if matches!(header.source, CredentialSource::File(_)) {
                header.read();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_credential_is_read_with_its_prefix_and_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("mcp-credentials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let credentials = Credentials::start(&[Credential {
            header: http::header::AUTHORIZATION,
            prefix: "Bearer ".into(),
            source: CredentialSource::File(path.clone()),
        }]);
        let mut headers = HeaderMap::new();
        credentials.apply(&mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer first");
        assert!(headers[http::header::AUTHORIZATION].is_sensitive());
        let mut client = HeaderMap::new();
        client.insert(
            http::header::AUTHORIZATION,
            "Bearer client's".parse().unwrap(),
        );
        client.insert(http::header::COOKIE, "a=1".parse().unwrap());
        credentials.strip(&mut client);
        assert!(!client.contains_key(http::header::AUTHORIZATION));
        assert_eq!(client[http::header::COOKIE], "a=1");

        // Another token of the same length: read again at the next look.
        std::fs::write(&path, "other\n").unwrap();
        credentials.headers[0].read();
        credentials.apply(&mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer other");
        // An empty file keeps the last value.
        std::fs::write(&path, "\n").unwrap();
        credentials.headers[0].read();
        credentials.apply(&mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer other");
        std::fs::write(&path, "second-token").unwrap();
        credentials.headers[0].read();
        credentials.apply(&mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer second-token");
        // A value that cannot be a header keeps the last one.
        std::fs::write(&path, "bad\u{7f}value-of-other-length").unwrap();
        credentials.headers[0].read();
        credentials.apply(&mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer second-token");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
