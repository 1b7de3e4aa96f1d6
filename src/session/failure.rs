//! A run's failure as both searches, a bisect's and a regress's, say it: where it struck,
//! the sentence for it, and a flaky failure's rate.

use crate::outcome::Outcome;
use serde::{Deserialize, Serialize};

/// Where a run failed: which prompt of its iterations, in which node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedAt {
    pub iteration: u32,
    pub node: Option<String>,
}

/// A failure rate's interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FailureRate {
    pub low: f64,
    pub high: f64,
}

/// A failure in words: "failed with oom in node 3 on prompt 2" (a bisect's run, a regress's
/// commit).
pub(crate) fn failed_with(outcome: Outcome, at: Option<&FailedAt>) -> String {
    let mut out = format!("failed with {outcome}");
    if let Some(at) = at {
        if let Some(node) = &at.node {
            out.push_str(&format!(" in node {node}"));
        }
        if at.iteration > 1 {
            out.push_str(&format!(" on prompt {}", at.iteration));
        }
    }
    out
}
