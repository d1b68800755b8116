//! Small helpers of the control plane's start: process checks, ports,
//! names, randomness.

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use crate::Error;
use crate::process::Supervised;

/// Lines of a failed process's output carried in [`Error::StartFailed`].
pub(crate) const OUTPUT_TAIL_LINES: usize = 25;

pub(crate) fn check_alive(process: &mut Supervised) -> Result<(), Error> {
    match process.exited() {
        None => Ok(()),
        Some(status) => Err(not_started(process, format!("exited with {status}"))),
    }
}

pub(crate) fn not_started(process: &Supervised, reason: String) -> Error {
    Error::StartFailed {
        process: process.name(),
        reason,
        output: process.output_tail(OUTPUT_TAIL_LINES),
    }
}

pub(crate) fn ignore_conflict<T>(r: Result<T, kube::Error>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A free TCP port on 127.0.0.1 (free when asked; see [`PORT_ATTEMPTS`]).
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn port_clash(e: &Error) -> bool {
    matches!(e, Error::StartFailed { output, .. } if output.contains("address already in use"))
}

/// `n` random bytes from the kernel, hex-encoded.
pub(crate) fn random_hex(n: usize) -> io::Result<String> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Waits until `process` accepts TCP connections on `port`.
pub(crate) async fn wait_listening(
    process: &mut Supervised,
    port: u16,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        check_alive(process)?;
        if Instant::now() > deadline {
            return Err(not_started(
                process,
                format!("not listening on port {port} after {timeout:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the apiserver's `/readyz` passes and the `default` namespace
/// exists (the apiserver creates it shortly after becoming ready).
pub(crate) async fn wait_ready(
    apiserver: &mut Supervised,
    etcd: &mut Supervised,
    client: &kube::Client,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    loop {
        let ready = match http::Request::get("/readyz").body(Vec::new()) {
            Ok(req) => client
                .request_text(req)
                .await
                .is_ok_and(|body| body.trim() == "ok"),
            Err(_) => false,
        };
        if ready && matches!(namespaces.get_opt("default").await, Ok(Some(_))) {
            return Ok(());
        }
        check_alive(etcd)?;
        check_alive(apiserver)?;
        if Instant::now() > deadline {
            return Err(not_started(
                apiserver,
                format!("/readyz did not pass within {timeout:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
