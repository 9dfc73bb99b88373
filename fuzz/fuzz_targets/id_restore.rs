//! The `id_restore` target: see `mcp_session_proxy_fuzz::id_restore` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_session_proxy_fuzz::id_restore(data));
