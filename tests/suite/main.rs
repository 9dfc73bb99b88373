//! The integration tests, one binary: each module is one area of behaviour (tests/README.md,
//! "What each file covers"), and each test starts what it needs (the real binary, real
//! servers and clients) on loopback. One binary instead of one per file: the test build
//! links and writes one executable instead of 37 (each ~55 MB with the harness and the
//! proxy linked in), and clippy checks one crate. nextest still runs every test in a
//! process of its own; `.config/nextest.toml` names the modules that run alone.

mod affinity;
mod auth;
mod bad_input;
mod binary;
mod callers;
mod cancellation;
mod concurrency;
mod conformance;
mod eras;
mod eras_conformance;
mod fairness;
mod gateway;
mod ids;
mod inspector;
mod interop_everything;
mod interop_fastmcp;
mod interop_peers;
mod interop_sdk2;
mod interop_sse;
mod legacy_clients;
mod lifecycle;
mod limits;
mod listeners;
mod migration;
mod oauth;
mod operations;
mod overload;
mod param_headers;
mod redis_ha;
mod replicas;
mod sep1364;
mod stateless;
mod stdio;
mod streaming;
mod strict_server;
mod traces;
mod upgrade;
