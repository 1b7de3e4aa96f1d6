//! `vrambisect bisect`: the minimal set of flags that fixes a failing workflow (or the
//! user's own flag that causes it).
//!
//! - [`space`]: base flags, toggles, and the valid configurations they make;
//! - [`search`]: the strategies, against an [`search::Oracle`];
//! - [`hypotheses`]: the adaptive search's choice of the next run;
//! - [`scripted`]: an oracle from a rule, for tests and the benchmark.

pub(crate) mod command;
pub(crate) mod hypotheses;
pub(crate) mod result;
pub mod scripted;
pub mod search;
pub mod session;
pub mod space;

#[cfg(test)]
mod tests;
