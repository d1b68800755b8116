//! The hossted-operator: keeps an inventory of every Helm release in a
//! cluster and reports it to the Hossted API. `main.rs` is the CLI; the
//! pieces live here so they can be tested on their own.
//!
//! - [`inventory`]: the Hosstedproject controller (job 1).
//! - [`delivery`]: the HelmApp controller (job 2).
//! - [`cached`]: the lean cached types and Helm release decoding.
//! - [`cli`]: flags and environment, validated into settings.
//! - [`plugin`]: `kubectl hossted`, the binary as a kubectl plugin.

pub mod cli;
pub mod condition;
pub mod convert;
pub mod delivery;
pub mod duration;
pub mod inventory;
pub mod kubectl;
pub mod lean;
pub mod plugin;
pub mod tls;
pub mod ui;
