//! Decide: what a HelmApp's release is and what to do next, from an
//! [`observed::Observed`] alone — pure: no file here awaits, holds a
//! client, touches the file system or starts a process
//! (`hack/import-layers.sh` keeps it so).
//!
//! Read in this order: [`observed`] (what was seen), [`state`] (what the
//! release is, by docs/delivery.md's rules, in [`release_state`]'s words),
//! [`plan`] (the next step). The rest are the pure parts they use.

pub mod conditions;
pub mod dependencies;
pub mod desired;
pub mod failure;
pub mod kstatus;
pub mod observed;
pub mod plan;
pub mod ready;
pub mod refusal;
pub mod release_state;
pub mod run_flags;
pub mod state;
pub mod target;
pub mod windows;
