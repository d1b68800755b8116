//! Child processes that cannot outlive the test that started them.
//!
//! Two mechanisms, because a test binary can end in two ways:
//! - unwinding (a normal end or a panicking test): [`Supervised`]'s `Drop`
//!   kills and reaps the child;
//! - abrupt death (SIGKILL, abort, `exit`): every child is spawned with
//!   `PR_SET_PDEATHSIG = SIGKILL`. Linux sends that signal when the *thread*
//!   that forked the child exits, so children are forked from a dedicated
//!   [`Spawner`] thread that lives exactly as long as the control plane.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// A thread that forks children and then waits, so `PR_SET_PDEATHSIG` fires
/// only when the process dies or the spawner is dropped.
pub(crate) struct Spawner {
    requests: Option<mpsc::Sender<SpawnRequest>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Spawner {
    pub fn new() -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let thread = thread::Builder::new()
            .name("envtest-spawner".into())
            .spawn(move || {
                // Ends when the Spawner (the only sender) is dropped.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        Ok(Spawner {
            requests: Some(tx),
            thread: Some(thread),
        })
    }

    /// Starts `program` with `args`, stdout and stderr appended to `log`.
    pub fn spawn(
        &self,
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
    ) -> io::Result<Supervised> {
        self.spawn_with_env(name, program, args, &[], log)
    }

    /// [`Self::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        &self,
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> io::Result<Supervised> {
        let out = File::options().create(true).append(true).open(&log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may already be gone between fork and prctl.
                if libc::getppid() == 1 {
                    return Err(io::Error::other("parent exited during spawn"));
                }
                Ok(())
            });
        }
        let (reply_tx, reply_rx) = mpsc::channel();
        let requests = self
            .requests
            .as_ref()
            .ok_or_else(|| io::Error::other("spawner stopped"))?;
        requests
            .send((cmd, reply_tx))
            .map_err(|_| io::Error::other("spawner thread is gone"))?;
        let child = reply_rx
            .recv()
            .map_err(|_| io::Error::other("spawner thread is gone"))??;
        Ok(Supervised {
            name,
            child,
            log,
            exit: None,
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running child process; dropping it kills and reaps it.
pub(crate) struct Supervised {
    name: &'static str,
    child: Child,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl Supervised {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// The last `n` lines the process wrote to stdout/stderr.
    pub fn output_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// Kills (SIGKILL) and reaps the process; idempotent.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a file, reading at most its last 64 KiB.
fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        })
    }

    #[test]
    fn drop_kills_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let spawner = Spawner::new().unwrap();
        let child = spawner
            .spawn(
                "sleep",
                Path::new("/bin/sleep"),
                &["600".into()],
                dir.path().join("sleep.log"),
            )
            .unwrap();
        let pid = child.pid();
        assert!(alive(pid));
        drop(child);
        assert!(!alive(pid), "child {pid} survived its Supervised handle");
    }

    #[test]
    fn output_tail_returns_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let spawner = Spawner::new().unwrap();
        let mut child = spawner
            .spawn(
                "sh",
                Path::new("/bin/sh"),
                &[
                    "-c".into(),
                    "for i in 1 2 3 4 5; do echo line$i >&2; done; exit 3".into(),
                ],
                dir.path().join("sh.log"),
            )
            .unwrap();
        while child.exited().is_none() {
            thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(child.exited().and_then(|s| s.code()), Some(3));
        assert_eq!(child.output_tail(2), "line4\nline5");
    }
}
