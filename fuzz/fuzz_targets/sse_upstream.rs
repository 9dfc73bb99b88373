//! The `sse_upstream` target: see `mcp_session_proxy_fuzz::sse_upstream` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_session_proxy_fuzz::sse_upstream(data));
