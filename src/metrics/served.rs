//! The series every request adds to — `mcp_proxy_requests_total` and
//! `mcp_server_operation_duration` by method and outcome — kept by place once made.
//!
//! A family finds a series by hashing its labels (SipHash) under a read lock: two lookups
//! per request, some 700 instructions of a session call's ~70,000 (benches/README.md,
//! "SipHash where a peer chooses the keys only"). The label values are a bounded set — a
//! known MCP method's name or one of [`OTHER_LABELS`], and an [`Outcome`] — so each
//! (method, outcome) has a place of its own here, filled with the family's series the
//! first time it is used (the exposition shows a series from its first request, as
//! before) and read after that without a lookup. A label outside the set (none the front
//! gives) goes to the families.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::{OperationLabels, Outcome, RequestLabels, labels};
use crate::mcp::Method;

/// The method labels that are not a known method's name.
const OTHER_LABELS: [&str; 4] = [labels::RESPONSE, labels::OTHER, labels::GET, labels::DELETE];
const METHOD_LABELS: usize = Method::ALL.len() + OTHER_LABELS.len();
const OUTCOMES: usize = Outcome::ALL.len();

/// The two families a request adds to.
type Families<'a> = (
    &'a Family<RequestLabels, Counter>,
    &'a Family<OperationLabels, Histogram>,
);

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Served {
    places: Box<[OnceLock<(Counter, Histogram)>]>,
}

impl Served {
    pub(super) fn new() -> Served {
        Served {
            places: (0..METHOD_LABELS * OUTCOMES)
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// Counts a request of `method` that ended with `outcome`, and observes how long it
    /// took (`seconds`).
    pub(super) fn record(
        &self,
        (requests, operations): Families<'_>,
        (method, outcome): (&'static str, Outcome),
        seconds: f64,
    ) {
        let labels = || {
            (
                RequestLabels { method, outcome },
                OperationLabels {
                    mcp_method_name: method,
                    outcome,
                },
            )
        };
        match place(method, outcome).and_then(|at| self.places.get(at)) {
            Some(kept) => {
                let (count, duration) = kept.get_or_init(|| {
                    let (request, operation) = labels();
                    (
                        requests.get_or_create(&request).clone(),
                        operations.get_or_create(&operation).clone(),
                    )
                });
                count.inc();
                duration.observe(seconds);
            }
            None => {
                let (request, operation) = labels();
                requests.get_or_create(&request).inc();
                operations.get_or_create(&operation).observe(seconds);
            }
        }
    }
}

/// The place of (`method`, `outcome`); `None` for a label outside the set.
fn place(method: &str, outcome: Outcome) -> Option<usize> {
    let label = match Method::parse(method) {
        Some(known) => known as usize,
        None => Method::ALL.len() + OTHER_LABELS.iter().position(|&other| other == method)?,
    };
    Some(label * OUTCOMES + outcome as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_and_outcome_has_a_place_of_its_own() {
        for (i, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i, "{outcome:?} is not at its index");
        }
        for (i, method) in Method::ALL.iter().enumerate() {
            assert_eq!(*method as usize, i, "{method:?} is not at its index");
        }
        let labels = Method::ALL.iter().map(|m| m.as_str()).chain(OTHER_LABELS);
        let mut seen = std::collections::HashSet::new();
        for label in labels {
            for outcome in Outcome::ALL {
                let at = place(label, outcome).expect("a place");
                assert!(at < METHOD_LABELS * OUTCOMES, "{label} {outcome:?}");
                assert!(seen.insert(at), "{label} {outcome:?} shares a place");
            }
        }
        assert_eq!(place("x/made-up", Outcome::Ok), None);
    }

    #[test]
    fn a_kept_series_is_the_familys_own() {
        let served = Served::new();
        let requests = Family::<RequestLabels, Counter>::default();
        let operations =
            Family::<OperationLabels, Histogram>::new_with_constructor(|| Histogram::new([1.0]));
        for _ in 0..3 {
            served.record((&requests, &operations), ("tools/call", Outcome::Ok), 0.5);
        }
        // Outside the set: counted all the same.
        served.record((&requests, &operations), ("made-up", Outcome::Ok), 0.5);
        let count = |method| {
            requests
                .get_or_create(&RequestLabels {
                    method,
                    outcome: Outcome::Ok,
                })
                .get()
        };
        assert_eq!(count("tools/call"), 3);
        assert_eq!(count("made-up"), 1);
        // The histograms' side shows in the exposition (`metrics::tests`).
    }
}
