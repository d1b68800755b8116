//! Git repositories served over smart HTTP on loopback: Git's own
//! `git http-backend` (the CGI program every Git host's HTTP side speaks
//! like) behind a small HTTP/1.1 front, one process per request.
//!
//! The repositories are made with the `git` command line ([`GitRepo`]):
//! what a user pushes, byte for byte. Every request is recorded
//! ([`GitServer::requests`]), so a test counts the fetches an operator made.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request the server answered: method, path and query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    pub method: String,
    pub path: String,
    pub query: String,
}

/// How a fetch's pack is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackAnswer {
    /// By `git http-backend`.
    #[default]
    Honest,
    /// A pack that never ends: one blob declaring a terabyte, whose
    /// compressed zeros flow until the client goes away.
    Endless,
}

/// The server (see the module docs); stops when dropped.
pub struct GitServer {
    url: String,
    root: PathBuf,
    requests: Arc<Mutex<Vec<GitRequest>>>,
    packs: Arc<Mutex<PackAnswer>>,
    /// `Authorization: Basic …` every request must carry (`None`: open).
    auth: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
}

/// The largest request body read (a fetch's wants and haves).
const MAX_BODY: usize = 16 * 1024 * 1024;

impl GitServer {
    /// Serves every repository under `root` (`<url>/<name>.git`).
    pub async fn start(root: &Path) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let requests: Arc<Mutex<Vec<GitRequest>>> = Arc::default();
        let packs: Arc<Mutex<PackAnswer>> = Arc::default();
        let auth: Arc<Mutex<Option<String>>> = Arc::default();
        let task = tokio::spawn({
            let (root, requests, packs, auth) = (
                root.to_path_buf(),
                requests.clone(),
                packs.clone(),
                auth.clone(),
            );
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let packs = *packs.lock();
                    let auth = auth.lock().clone();
                    tokio::spawn(serve(stream, root.clone(), requests.clone(), packs, auth));
                }
            }
        });
        Ok(GitServer {
            url,
            root: root.to_path_buf(),
            requests,
            packs,
            auth,
            task,
        })
    }

    /// From now on every request must carry HTTP basic credentials
    /// `user:password` (401 with a challenge otherwise, as Git hosts do).
    pub fn require_basic_auth(&self, user: &str, password: &str) {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        *self.auth.lock() = Some(format!("Basic {token}"));
    }

    /// How fetches are answered from now on.
    pub fn answer_packs(&self, answer: PackAnswer) {
        *self.packs.lock() = answer;
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory the repositories are in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<GitRequest> {
        self.requests.lock().clone()
    }

    /// How many pack fetches (`POST …/git-upload-pack` with a `fetch`
    /// or `want` in it) were answered: the ref listings before them are
    /// not counted.
    pub fn fetches(&self) -> usize {
        self.requests
            .lock()
            .iter()
            .filter(|r| r.method == "FETCH")
            .count()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut stream: TcpStream,
    root: PathBuf,
    requests: Arc<Mutex<Vec<GitRequest>>>,
    packs: PackAnswer,
    auth: Option<String>,
) {
    let answer = match read_request(&mut stream).await {
        Ok(request)
            if auth.as_deref().is_some_and(|want| {
                !request
                    .headers
                    .iter()
                    .any(|(k, v)| k.eq_ignore_ascii_case("authorization") && v == want)
            }) =>
        {
            requests.lock().push(GitRequest {
                method: "UNAUTHORIZED".into(),
                path: request.path.clone(),
                query: request.query.clone(),
            });
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
        Ok(request) => {
            let fetch = request.method == "POST"
                && request.path.ends_with("/git-upload-pack")
                && is_fetch(&request.body);
            if fetch && packs == PackAnswer::Endless {
                requests.lock().push(GitRequest {
                    method: "FETCH".into(),
                    path: request.path.clone(),
                    query: request.query.clone(),
                });
                endless_pack(&mut stream).await;
                return;
            }
            requests.lock().push(GitRequest {
                method: if fetch {
                    "FETCH".into()
                } else {
                    request.method.clone()
                },
                path: request.path.clone(),
                query: request.query.clone(),
            });
            tokio::task::spawn_blocking(move || backend(&root, &request))
                .await
                .unwrap_or_else(|e| plain(500, &e.to_string()))
        }
        Err(e) => plain(400, &e),
    };
    let _ = stream.write_all(&answer).await;
    let _ = stream.shutdown().await;
}

/// See [`PackAnswer::Endless`]: written until the client goes away.
async fn endless_pack(stream: &mut TcpStream) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-result\r\nConnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let line = |band: Option<u8>, data: &[u8]| {
        let extra = usize::from(band.is_some());
        let mut out = format!("{:04x}", data.len() + 4 + extra).into_bytes();
        out.extend(band);
        out.extend_from_slice(data);
        out
    };
    if stream.write_all(&line(None, b"packfile\n")).await.is_err() {
        return;
    }
    // PACK, version 2, one object: a blob (type 3) of 2^40 bytes.
    let mut start = b"PACK\0\0\0\x02\0\0\0\x01".to_vec();
    let mut size: u64 = 1 << 40;
    let mut byte = (3 << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size > 0 {
        start.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    start.push(byte);
    // zlib: zeros compressed about 1,000:1, never finished — the
    // declared terabyte arrives in a gigabyte or so.
    let mut zlib = flate2::Compress::new(flate2::Compression::best(), true);
    let zeros = vec![0u8; 1 << 20];
    let mut out = Vec::with_capacity(1 << 16);
    let mut pending = start;
    loop {
        out.clear();
        let _ = zlib.compress_vec(&zeros, &mut out, flate2::FlushCompress::Sync);
        pending.extend_from_slice(&out);
        for chunk in pending.chunks(65515) {
            if stream.write_all(&line(Some(1), chunk)).await.is_err() {
                return;
            }
        }
        pending.clear();
        // The tests' runtime is shared with the operator under test: an
        // endless answer must not starve it.
        tokio::task::yield_now().await;
    }
}

/// Whether an upload-pack request body asks for objects (protocol v2's
/// `command=fetch`, or v1's `want` lines) rather than listing refs.
fn is_fetch(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    text.contains("command=fetch") || (text.contains("want ") && !text.contains("command=ls-refs"))
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> Result<Request, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before the request's head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = buf[head_end + 4..].to_vec();
    if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        body = read_chunked(stream, body).await?;
    } else {
        let length: usize = header("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        if length > MAX_BODY {
            return Err("the request body is too large".into());
        }
        while body.len() < length {
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed inside the body".into());
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
    }
    Ok(Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body,
    })
}

/// A chunked body, `have` being its first bytes already read.
async fn read_chunked(stream: &mut TcpStream, mut have: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Some(line_end) = have.windows(2).position(|w| w == b"\r\n") else {
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed inside a chunk".into());
            }
            have.extend_from_slice(&chunk[..n]);
            continue;
        };
        let size_text = String::from_utf8_lossy(&have[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        while have.len() < line_end + 2 + size + 2 {
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed inside a chunk".into());
            }
            have.extend_from_slice(&chunk[..n]);
        }
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&have[line_end + 2..line_end + 2 + size]);
        if body.len() > MAX_BODY {
            return Err("the request body is too large".into());
        }
        have.drain(..line_end + 2 + size + 2);
    }
}

/// Runs `git http-backend` for `request`: its CGI answer as HTTP/1.1.
fn backend(root: &Path, request: &Request) -> Vec<u8> {
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut command = Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &request.method)
        .env("PATH_INFO", &request.path)
        .env("QUERY_STRING", &request.query)
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", request.body.len().to_string())
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("HTTP_GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return plain(500, &format!("git http-backend: {e}")),
    };
    let mut stdin = child.stdin.take();
    let body = request.body.clone();
    let writer = std::thread::spawn(move || {
        if let Some(stdin) = stdin.as_mut() {
            use std::io::Write;
            let _ = stdin.write_all(&body);
        }
    });
    let output = match child.wait_with_output() {
        Ok(o) => o,
        Err(e) => return plain(500, &format!("git http-backend: {e}")),
    };
    let _ = writer.join();
    cgi_to_http(&output.stdout)
}

/// A CGI answer (headers, a blank line, the body) as an HTTP/1.1 answer.
fn cgi_to_http(cgi: &[u8]) -> Vec<u8> {
    let (head, body) = match cgi.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&cgi[..i], &cgi[i + 4..]),
        None => match cgi.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&cgi[..i], &cgi[i + 2..]),
            None => return plain(500, "git http-backend gave no headers"),
        },
    };
    let head = String::from_utf8_lossy(head);
    let mut status = "200 OK".to_string();
    let mut out = String::new();
    for line in head.lines() {
        match line.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
            Some(_) => {
                out.push_str(line.trim_end());
                out.push_str("\r\n");
            }
            None => {}
        }
    }
    let mut answer = format!(
        "HTTP/1.1 {status}\r\n{out}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    answer
}

fn plain(status: u16, message: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
        message.len()
    )
    .into_bytes()
}

/// A bare repository under a [`GitServer`]'s root, written through a
/// work tree beside it with the `git` command line.
pub struct GitRepo {
    bare: PathBuf,
    work: PathBuf,
}

impl GitRepo {
    /// Creates `<root>/<name>.git` (branch `main`) and its work tree.
    pub fn create(root: &Path, name: &str) -> Self {
        let bare = root.join(format!("{name}.git"));
        let work = root.join(format!("{name}.work"));
        std::fs::create_dir_all(&work).expect("the work tree");
        git(
            root,
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        GitRepo { bare, work }
    }

    /// The work tree (write files here, then [`GitRepo::commit`]).
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The bare repository's directory name under the server's root
    /// (`<name>.git`).
    pub fn served_name(&self) -> String {
        self.bare
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// Writes `content` to `path` of the work tree (directories made).
    pub fn write(&self, path: &str, content: &str) {
        let file = self.work.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).expect("the file's directory");
        std::fs::write(file, content).expect("the file");
    }

    /// Copies directory `from` (recursively) to `to` of the work tree.
    pub fn copy_dir(&self, from: &Path, to: &str) {
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).expect("a directory of the work tree");
            for e in std::fs::read_dir(from)
                .expect("the directory copied")
                .flatten()
            {
                let target = to.join(e.file_name());
                if e.path().is_dir() {
                    copy(&e.path(), &target);
                } else {
                    std::fs::copy(e.path(), target).expect("a file copied");
                }
            }
        }
        copy(from, &self.work.join(to));
    }

    /// Makes `path` of the work tree a symlink to `target`.
    pub fn symlink(&self, path: &str, target: &str) {
        let link = self.work.join(path);
        std::fs::create_dir_all(link.parent().unwrap()).expect("the link's directory");
        std::os::unix::fs::symlink(target, link).expect("the symlink");
    }

    /// The bare repository's directory.
    pub fn bare(&self) -> &Path {
        &self.bare
    }

    /// Removes `path` (a file) from the work tree.
    pub fn remove(&self, path: &str) {
        std::fs::remove_file(self.work.join(path)).expect("the file removed");
    }

    /// Commits everything and pushes `main`; returns the commit's id.
    pub fn commit(&self, message: &str) -> String {
        git(&self.work, &["add", "-A"]);
        git(
            &self.work,
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(&self.work, &["push", "-q", "origin", "main"]);
        self.head()
    }

    /// [`GitRepo::commit`], signed with the OpenPGP key of `gnupg` (a gpg
    /// home) whose user id holds `signer`.
    pub fn commit_signed(&self, message: &str, gnupg: &Path, signer: &str) -> String {
        let env = [("GNUPGHOME", gnupg.as_os_str())];
        git(&self.work, &["add", "-A"]);
        git_with(
            &self.work,
            &[
                "-c",
                &format!("user.signingkey={signer}"),
                "commit",
                "-q",
                "-S",
                "--allow-empty",
                "-m",
                message,
            ],
            &env,
        );
        git(&self.work, &["push", "-q", "origin", "main"]);
        self.head()
    }

    /// An annotated tag `tag` of the last commit, signed as
    /// [`GitRepo::commit_signed`] signs, pushed.
    pub fn tag_signed(&self, tag: &str, gnupg: &Path, signer: &str) {
        let env = [("GNUPGHOME", gnupg.as_os_str())];
        git_with(
            &self.work,
            &[
                "-c",
                &format!("user.signingkey={signer}"),
                "tag",
                "-s",
                "-m",
                tag,
                tag,
            ],
            &env,
        );
        git(&self.work, &["push", "-q", "origin", tag]);
    }

    /// Tags the last commit `tag` and pushes the tag.
    pub fn tag(&self, tag: &str) {
        git(&self.work, &["tag", tag]);
        git(&self.work, &["push", "-q", "origin", tag]);
    }

    /// The last commit's id.
    pub fn head(&self) -> String {
        git(&self.work, &["rev-parse", "HEAD"])
    }
}

/// Runs `git args` in `dir` with a fixed identity; panics with its
/// output when it fails. Returns stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, args, &[])
}

/// [`git`] with `env` added.
fn git_with(dir: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> String {
    let out = Command::new("git")
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git (apt-get install git) runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
