//! The guides cannot rot: README.md and the book in `docs/` (mdBook) are checked against the
//! code and the built binary. Each module checks one thing:
//!
//! - `links`: every relative link and anchor in README.md and the book resolves;
//! - `examples`: every shell example that talks to the proxy runs, and prints what the
//!   page shows;
//! - `config_reference`: the configuration reference names every key the code reads, and
//!   only those;
//! - `dashboard`: every metric the Grafana dashboard and the metrics reference name is one
//!   the proxy exports.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod pages;

mod config_reference;
mod dashboard;
mod examples;
mod links;
