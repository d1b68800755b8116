//! What the operator caches of the cluster, in lean types shared by both
//! jobs: the objects' fields that are read (`objects`, `workloads`,
//! `trivy`), Helm's release storage decoded (`helm`, `storage`), and
//! Kubernetes quantities (`quantity`).

pub mod digests;
pub mod drift_kinds;
pub mod fingerprint;
pub mod go_keys;
pub mod helm;
pub mod hex;
pub mod kinds;
pub mod manifest;
pub mod marker;
pub mod members;
pub mod objects;
pub mod quantity;
pub mod recent;
pub mod storage;
pub mod trivy;
pub mod workloads;
pub mod yaml;
