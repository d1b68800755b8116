//! Running helm: [`runner`] is the one place a helm process is spawned;
//! [`values`] merges and redacts the values it is given on stdin.

pub mod runner;
pub mod values;

pub use runner::{Helm, HelmConfig, HelmError, Released, Upgrade};
