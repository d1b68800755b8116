//! The operator's integration tests, one binary (it links the operator
//! once): a real kube-apiserver + etcd, real helm releases, a local receiver
//! standing in for the Hossted API.

mod appset;
mod chart;
mod cli;
mod delivery;
mod failures;
mod hardening;
mod helm_release;
mod hostile;
mod leader;
mod migration;
mod monitoring;
mod payload;
mod plugin;
mod poster;
mod project;
mod rbac;
mod reporting;
mod restart;
mod support;
mod ui;
