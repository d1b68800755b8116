//! Helpers shared by the control-plane tests (not every file uses each).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use envtest::ControlPlane;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ObjectMeta;

pub async fn start() -> ControlPlane {
    ControlPlane::start().await.expect("control plane starts")
}

/// Whether `pid` is a live process (a zombie awaiting its reaper is dead).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => false,
    }
}

pub fn run_ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/charts")
        .join(name)
}

pub fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}
