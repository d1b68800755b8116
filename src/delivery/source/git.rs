//! Charts and values files from Git (`chart.git`, `valuesSource.git`;
//! docs/sources.md).
//!
//! A fetch is one shallow fetch (depth 1) of one ref into a bare
//! repository of its own, by gitoxide's pack protocol over our own HTTP
//! client ([`GitHttp`]) or an SSH channel ([`git_ssh`], the host key
//! checked before any credential): the address policy, same-origin redirects,
//! credentials to the source's host only, one deadline for the whole fetch
//! and a bound on the bytes received hold as for every chart source. The
//! checkout ([`Checkout`]) is shared by every HelmApp that names the same
//! URL, ref and credentials; each reads its own chart directory and values
//! files out of it ([`read_chart`], [`read_file`]) — bounded in files,
//! bytes and depth, with no symlink leaving the repository.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use apis::helmapp::{GitRef, GitSource};
use gix::protocol::transport::client::blocking_io::http as githttp;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::git_ssh;
use super::http::{Http, HttpError, without_credentials};
use super::{Credentials, SourceError, SourceLimits};
use crate::lean::hex::hex;

/// Bytes of one object of a fetched pack, inflated, at most (and of any one
/// allocation indexing the pack makes): what the server declares is
/// refused before it is allocated.
pub const MAX_OBJECT_BYTES: u64 = 2 * MAX_CHART_BYTES;
/// Bytes of packs received for one fetch, at most.
pub const MAX_PACK_BYTES: u64 = 256 * 1024 * 1024;
/// Files of a chart directory, at most.
pub const MAX_FILES: usize = 10_000;
/// Bytes of a chart directory's files together, at most.
pub const MAX_CHART_BYTES: u64 = 16 * 1024 * 1024;
/// Directory levels under a chart's path, at most.
pub const MAX_DEPTH: usize = 32;
/// Bytes of one values file, at most.
pub const MAX_VALUES_FILE: u64 = 4 * 1024 * 1024;
/// Bytes of a request body sent (wants and haves), at most.
const MAX_REQUEST: usize = 1024 * 1024;
/// Tree entries one read may visit — files, directories and symlinks
/// together, each time it is reached: a tree naming another twice per
/// level fans out to 2^depth paths in a few hundred bytes of pack, so
/// files alone are no bound.
pub const MAX_VISITS: usize = 100_000;
/// Bytes of one tree object, at most (read from its header, before it is
/// inflated).
pub const MAX_TREE_BYTES: u64 = 8 * 1024 * 1024;
/// Wall-clock time one read of a chart or values files may take.
pub const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
/// Bytes of one tree entry's name, at most (as most file systems).
pub const MAX_NAME: usize = 255;
/// Refs one listing may name (a semver range lists the tags).
pub const MAX_LISTED_REFS: usize = 10_000;

/// A fetched commit: a bare repository holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub repo: PathBuf,
    /// The commit id (40 hex).
    pub commit: String,
}

/// What tells one fetch from another: the URL, the ref and whose
/// credentials.
pub fn key(source: &GitSource, scope: &str) -> String {
    let r = &source.reference;
    format!(
        "git\n{}\n{}\n{}\n{}\n{}\n{scope}",
        source.url.trim_end_matches('/'),
        r.branch,
        r.tag,
        r.semver,
        r.commit
    )
}

/// Whether a [`key`] names a fetch of `url` (compared without a trailing
/// `/` or `.git`).
pub fn from_source(key: &str, url: &str) -> bool {
    let norm = |u: &str| u.trim_end_matches('/').trim_end_matches(".git").to_string();
    let mut fields = key.split('\n');
    fields.next() == Some("git") && fields.next().is_some_and(|u| norm(u) == norm(url))
}

/// Git checkouts remembered for their `interval`, and the charts read out
/// of them, both bounded (the oldest go first).
#[derive(Debug, Default)]
pub struct GitCache {
    inner: Mutex<Remembered>,
    /// One lock per (repository directory, path) being read: apps of one
    /// chart woken together read it once, and a slow or refused read of one
    /// chart never holds another's. An entry lives while its read runs.
    reading: Mutex<HashMap<ChartId, Arc<Mutex<()>>>>,
}

/// A chart read out of a checkout: (repository directory, path).
type ChartId = (PathBuf, String);

#[derive(Debug, Default)]
struct Remembered {
    /// By [`key`]: when fetched, and what.
    checkouts: HashMap<String, (Instant, Checkout)>,
    /// By (repository directory, path): the chart read out of it.
    charts: HashMap<(PathBuf, String), (Instant, ReadChart)>,
}

/// A chart directory read out of a checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChart {
    pub dir: PathBuf,
    /// SHA-256 over its files ([`read_chart`]).
    pub digest: String,
}

impl GitCache {
    /// Checkouts remembered at most.
    pub const MAX_CHECKOUTS: usize = 1024;
    /// Chart directories kept at most (each at most [`MAX_CHART_BYTES`]).
    pub const MAX_CHARTS: usize = 256;

    /// The checkout of `key` fetched less than `interval` ago, if its
    /// repository is still there.
    pub fn fresh(&self, key: &str, interval: std::time::Duration) -> Option<Checkout> {
        let inner = self.inner.lock();
        inner
            .checkouts
            .get(key)
            .filter(|(at, c)| at.elapsed() < interval && c.repo.exists())
            .map(|(_, c)| c.clone())
    }

    pub fn remember(&self, key: &str, checkout: Checkout) {
        let mut inner = self.inner.lock();
        inner
            .checkouts
            .insert(key.to_string(), (Instant::now(), checkout));
        while inner.checkouts.len() > Self::MAX_CHECKOUTS {
            let Some(oldest) = oldest(&inner.checkouts) else {
                break;
            };
            inner.checkouts.remove(&oldest);
        }
    }

    /// Drops the checkouts of `url`; returns how many.
    pub fn forget(&self, url: &str) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.checkouts.len();
        inner.checkouts.retain(|key, _| !from_source(key, url));
        before - inner.checkouts.len()
    }

    /// The chart at `path` of `checkout`, read into a directory under
    /// `root` once per commit and path.
    pub fn chart(
        &self,
        checkout: &Checkout,
        path: &str,
        root: &Path,
    ) -> Result<ReadChart, ReadError> {
        let id = (checkout.repo.clone(), path.to_string());
        let remembered = || {
            self.inner
                .lock()
                .charts
                .get(&id)
                .filter(|(_, read)| read.dir.exists())
                .map(|(_, read)| read.clone())
        };
        if let Some(read) = remembered() {
            return Ok(read);
        }
        // One read of this chart at a time: the apps of one chart woken
        // together read it once, and never into a directory helm is reading.
        let lock = self.reading.lock().entry(id.clone()).or_default().clone();
        let read = {
            let _reading = lock.lock();
            match remembered() {
                Some(read) => Ok(read),
                None => self.read_into_place(checkout, path, root, &id),
            }
        };
        let mut reading = self.reading.lock();
        if reading.get(&id).is_some_and(|l| Arc::strong_count(l) <= 2) {
            reading.remove(&id);
        }
        read
    }

    /// Reads the chart at `path` of `checkout` into its directory under
    /// `root` and remembers it (the caller holds the chart's lock).
    fn read_into_place(
        &self,
        checkout: &Checkout,
        path: &str,
        root: &Path,
        id: &ChartId,
    ) -> Result<ReadChart, ReadError> {
        let name = format!("{}\n{}\n{path}", checkout.repo.display(), checkout.commit);
        let dir = root.join(&hex(&Sha256::digest(name.as_bytes()))[..32]);
        // Written aside and renamed into place whole: a directory under
        // its final name is always complete.
        let scratch = root.join(format!("reading-{}", uuid::Uuid::new_v4()));
        let digest = read_chart(checkout, path, &scratch).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&scratch);
        })?;
        if dir.exists() {
            let _ = std::fs::remove_dir_all(&scratch);
        } else {
            std::fs::rename(&scratch, &dir)
                .map_err(|e| ReadError::Failed(format!("keeping the chart: {e}")))?;
        }
        let read = ReadChart { dir, digest };
        let mut inner = self.inner.lock();
        inner
            .charts
            .insert(id.clone(), (Instant::now(), read.clone()));
        while inner.charts.len() > Self::MAX_CHARTS {
            let Some(oldest) = oldest(&inner.charts) else {
                break;
            };
            if let Some((_, gone)) = inner.charts.remove(&oldest) {
                let _ = std::fs::remove_dir_all(gone.dir);
            }
        }
        Ok(read)
    }
}

/// The key of the entry stored longest ago.
fn oldest<K: Clone, V>(map: &HashMap<K, (Instant, V)>) -> Option<K> {
    map.iter()
        .min_by_key(|(_, (at, _))| *at)
        .map(|(k, _)| k.clone())
}

/// The ref asked for, as the remote names it (`refs/heads/main`), or a
/// commit id; `Err` when more than one is set.
fn wanted(r: &GitRef) -> Result<Wanted, String> {
    let set = [&r.branch, &r.tag, &r.semver, &r.commit]
        .iter()
        .filter(|s| !s.is_empty())
        .count();
    if set > 1 {
        return Err("set at most one of ref.branch, ref.tag, ref.semver, ref.commit".into());
    }
    Ok(if !r.tag.is_empty() {
        Wanted::Ref(format!("refs/tags/{}", r.tag))
    } else if !r.semver.is_empty() {
        Wanted::Semver(r.semver.clone())
    } else if !r.commit.is_empty() {
        Wanted::Commit(r.commit.clone())
    } else if !r.branch.is_empty() {
        Wanted::Ref(format!("refs/heads/{}", r.branch))
    } else {
        Wanted::Ref("refs/heads/main".into())
    })
}

enum Wanted {
    Ref(String),
    Semver(String),
    Commit(String),
}

/// Fetches `source`'s ref into a repository under `dir` (see the module
/// docs). A commit fetched before is not fetched again.
pub fn fetch(
    source: &GitSource,
    credentials: &Credentials,
    limits: &SourceLimits,
    dir: &Path,
) -> Result<Checkout, SourceError> {
    let shown = without_credentials(&source.url);
    let failed = |message: String| SourceError::Git {
        url: shown.clone(),
        message,
    };
    let wanted = wanted(&source.reference).map_err(failed)?;
    let link = Link::of(source, credentials, limits).map_err(failed)?;
    let budget = Budget {
        deadline: Instant::now() + limits.fetch_timeout,
        left: Arc::new(AtomicU64::new(MAX_PACK_BYTES)),
    };
    let refname = match wanted {
        Wanted::Ref(r) => r,
        Wanted::Commit(c) => c,
        Wanted::Semver(range) => highest_tag(source, &link, &budget, &range, dir)?,
    };
    // Whose fetch: a commit on disk is reused only with the credentials
    // that fetched it — a pinned commit of a private repository is never
    // served to an app without them, which must fetch (and be refused) on
    // its own.
    let base = dir.join("git").join(
        &hex(&Sha256::digest(
            key(source, &credentials.digest()).as_bytes(),
        ))[..32],
    );
    // The ref still at a commit fetched before: no pack is asked for.
    let known = if refname.len() == 40 {
        Some(refname.clone())
    } else if has_checkouts(&base) {
        remote_commit(source, &link, &budget, &refname, dir).map_err(failed)?
    } else {
        None
    };
    if let Some(commit) = known
        && base.join(&commit).join("HEAD").exists()
    {
        used(&base);
        return Ok(Checkout {
            repo: base.join(&commit),
            commit,
        });
    }
    let scratch = base.join(format!("fetching-{}", uuid::Uuid::new_v4()));
    {
        // Seen by eviction as a fetch under way, and used now.
        let _disk = DISK.lock();
        std::fs::create_dir_all(&scratch)
            .map_err(|e| failed(format!("a directory to fetch into: {e}")))?;
        used(&base);
    }
    let result = fetch_into(source, &link, &budget, &refname, &scratch);
    let commit = match result {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(failed(e));
        }
    };
    let repo = base.join(&commit);
    if repo.exists() {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        std::fs::rename(&scratch, &repo).map_err(|e| failed(format!("keeping the fetch: {e}")))?;
    }
    // Older commits of this source go: one checkout per source is kept.
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let name = e.file_name();
            if name != commit.as_str()
                && name != USED
                && !name.to_string_lossy().starts_with("fetching-")
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    used(&base);
    {
        let _disk = DISK.lock();
        evict(
            &dir.join("git"),
            limits.git_checkouts_size,
            MAX_UNUSED,
            &base,
        );
    }
    Ok(Checkout { repo, commit })
}

/// The file of a checkout naming the ref it was fetched by (`refs/tags/v1`,
/// `refs/heads/main`, or a commit id).
pub const FETCHED_NAME: &str = "hossted-fetched-ref";

/// The file of a source's directory whose time says when it was last used.
const USED: &str = ".used";
/// A source's checkouts unused this long are evicted.
pub const MAX_UNUSED: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Held while eviction looks at the checkouts, and while a fetch makes its
/// scratch directory: eviction never takes a source a fetch has begun in.
static DISK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Marks the source directory `base` used now.
fn used(base: &Path) {
    let _ = std::fs::write(base.join(USED), b"");
}

/// Evicts whole source directories of `root` (their checkouts) unused for
/// `max_unused`, then the least recently used while all of them hold more
/// than `budget` bytes — never `keep` (the one just used), never one with a
/// fetch under way. Returns how many went.
pub fn evict(root: &Path, budget: u64, max_unused: std::time::Duration, keep: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    // Only source directories (32 hex digits: the ref listings' scratch
    // repositories beside them are not), and only those whose use is
    // recorded (one without is being made).
    let is_source = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut sources: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p != keep && is_source(p) && p.is_dir() && !fetching(p))
        .filter_map(|p| {
            let at = std::fs::metadata(p.join(USED))
                .and_then(|m| m.modified())
                .ok()?;
            Some((at, bytes_under(&p), p))
        })
        .collect();
    let mut total: u64 = bytes_under(keep) + sources.iter().map(|s| s.1).sum::<u64>();
    sources.sort_by_key(|s| s.0);
    let now = std::time::SystemTime::now();
    let mut gone = 0;
    for (at, size, path) in sources {
        let stale = now.duration_since(at).is_ok_and(|age| age > max_unused);
        if (stale || total > budget) && std::fs::remove_dir_all(&path).is_ok() {
            total = total.saturating_sub(size);
            gone += 1;
        }
    }
    gone
}

/// Whether a fetch into source directory `base` is under way.
fn fetching(base: &Path) -> bool {
    std::fs::read_dir(base).is_ok_and(|mut entries| {
        entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("fetching-")))
    })
}

/// The bytes of the files under `dir` (links not followed).
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// Whether `base` holds a checkout of an earlier fetch.
fn has_checkouts(base: &Path) -> bool {
    std::fs::read_dir(base)
        .is_ok_and(|mut entries| entries.any(|e| e.is_ok_and(|e| e.file_name().len() == 40)))
}

/// The commit `refname` names on the remote now (a ref listing, no pack);
/// `None` when it names none — the fetch then says so.
fn remote_commit(
    source: &GitSource,
    link: &Link,
    budget: &Budget,
    refname: &str,
    dir: &Path,
) -> Result<Option<String>, String> {
    let listed = list_refs(
        source,
        link,
        budget,
        &format!("+{refname}:refs/listed"),
        dir,
    )?;
    Ok(listed.into_iter().find_map(|(_, commit)| commit))
}

/// One shallow fetch of `refname` (a full ref name or a commit id) into a
/// new bare repository at `at`; the commit it names.
fn fetch_into(
    source: &GitSource,
    link: &Link,
    budget: &Budget,
    refname: &str,
    at: &Path,
) -> Result<String, String> {
    std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
    let mut repo = gix::init_bare(at).map_err(|e| format!("a repository to fetch into: {e}"))?;
    // Indexing the pack inflates each object whole: an object's size comes
    // from the server (a gibibyte of zeros is a megabyte of pack), so every
    // allocation it asks for is bounded before it is made.
    let mut config = repo.config_snapshot_mut();
    config
        .set_value(
            &gix::config::tree::gitoxide::Objects::ALLOC_LIMIT,
            MAX_OBJECT_BYTES.to_string().as_str(),
        )
        .map_err(|e| format!("a repository to fetch into: {e}"))?;
    config
        .commit()
        .map_err(|e| format!("a repository to fetch into: {e}"))?;
    let spec = if refname.len() == 40 && refname.bytes().all(|b| b.is_ascii_hexdigit()) {
        refname.to_string()
    } else {
        format!("+{refname}:refs/fetched")
    };
    let remote = repo
        .remote_at(source.url.as_str())
        .map_err(|e| e.to_string())?
        .with_refspecs(Some(spec.as_str()), gix::remote::Direction::Fetch)
        .map_err(|e| e.to_string())?;
    let transport = transport(source, link, budget)?;
    let depth = std::num::NonZeroU32::new(1).expect("1 is not 0");
    let interrupt = AtomicBool::new(false);
    let ended = AtomicBool::new(false);
    // The pack's deltas are resolved after its last byte arrived, where the
    // reader's deadline no longer looks: gitoxide is interrupted at it.
    let outcome = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !ended.load(Ordering::Relaxed) {
                if Instant::now() >= budget.deadline {
                    interrupt.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        // Set however the fetch ends (a panic too): the watchdog stops.
        struct Ended<'a>(&'a AtomicBool);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _ended = Ended(&ended);
        remote
            .to_connection_with_transport(transport)
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| said(e, budget))
            .and_then(|prepared| {
                prepared
                    .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
                    .receive(gix::progress::Discard, &interrupt)
                    .map_err(|e| said(e, budget))
            })
    })?;
    let mapping = outcome
        .ref_map
        .mappings
        .first()
        .ok_or_else(|| format!("the repository has no {refname}"))?;
    let id = mapping
        .remote
        .as_id()
        .ok_or_else(|| format!("{refname} names nothing"))?
        .to_owned();
    let commit = repo
        .find_object(id)
        .map_err(|e| format!("{refname}: {e}"))?
        .peel_to_commit()
        .map_err(|e| format!("{refname} is not a commit: {e}"))?;
    // Which ref it was: a tag's signature counts only for the tag asked
    // for (super::git_verify).
    std::fs::write(at.join(FETCHED_NAME), refname).map_err(|e| e.to_string())?;
    Ok(commit.id.to_string())
}

/// The highest tag matching `range` (tags that are not versions are
/// The highest tag matching `range` (tags that are not versions are
/// passed over).
fn highest_tag(
    source: &GitSource,
    link: &Link,
    budget: &Budget,
    range: &str,
    dir: &Path,
) -> Result<String, SourceError> {
    let failed = |message: String| SourceError::Git {
        url: without_credentials(&source.url),
        message,
    };
    let listed =
        list_refs(source, link, budget, "+refs/tags/*:refs/tags/*", dir).map_err(failed)?;
    let tags: Vec<String> = listed
        .into_iter()
        .filter_map(|(name, _)| name.strip_prefix("refs/tags/").map(String::from))
        .collect();
    let tag = super::choose_version(&tags, "the repository's tags", range).map_err(failed)?;
    Ok(format!("refs/tags/{tag}"))
}

/// The remote's refs that `refspec` matches, with the commit each names
/// (peeled): a ref listing, no pack.
fn list_refs(
    source: &GitSource,
    link: &Link,
    budget: &Budget,
    refspec: &str,
    dir: &Path,
) -> Result<Vec<(String, Option<String>)>, String> {
    let scratch = dir
        .join("git")
        .join(format!("listing-{}", uuid::Uuid::new_v4()));
    let listed = (|| {
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let repo = gix::init_bare(&scratch).map_err(|e| e.to_string())?;
        let remote = repo
            .remote_at(source.url.as_str())
            .map_err(|e| e.to_string())?
            .with_refspecs(Some(refspec), gix::remote::Direction::Fetch)
            .map_err(|e| e.to_string())?;
        let transport = transport(source, link, budget)?;
        let (map, _) = remote
            .to_connection_with_transport(transport)
            .ref_map(gix::progress::Discard, Default::default())
            .map_err(|e| said(e, budget))?;
        if map.mappings.len() > MAX_LISTED_REFS {
            return Err(format!(
                "the repository lists more than {MAX_LISTED_REFS} refs for {refspec}"
            ));
        }
        Ok(map
            .mappings
            .iter()
            .filter_map(|m| {
                let name = m.remote.as_name()?.to_string();
                Some((name, m.remote.peeled_id().map(|id| id.to_string())))
            })
            .collect())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    listed
}

/// How a repository is reached: HTTPS through [`GitHttp`], or SSH
/// ([`git_ssh`]).
enum Link {
    Http(Arc<Http>),
    Ssh {
        target: git_ssh::Target,
        secrets: git_ssh::SshSecrets,
        policy: super::address::AddressPolicy,
        runtime: tokio::runtime::Handle,
    },
}

impl Link {
    fn of(
        source: &GitSource,
        credentials: &Credentials,
        limits: &SourceLimits,
    ) -> Result<Link, String> {
        let url = gix::url::parse(gix::bstr::BStr::new(source.url.as_bytes()))
            .map_err(|e| format!("not a Git URL: {e}"))?;
        match url.scheme {
            gix::url::Scheme::Https | gix::url::Scheme::Http => {
                let http = Http::new(
                    &source.url,
                    credentials,
                    &limits.policy,
                    limits.fetch_timeout,
                )?;
                Ok(Link::Http(Arc::new(http)))
            }
            gix::url::Scheme::Ssh => Ok(Link::Ssh {
                target: git_ssh::Target::of(&url)?,
                secrets: git_ssh::SshSecrets::new(
                    credentials.ssh_identity.as_deref(),
                    credentials.known_hosts.as_deref(),
                )?,
                policy: limits.policy.clone(),
                runtime: tokio::runtime::Handle::try_current()
                    .map_err(|_| "SSH needs the operator's runtime".to_string())?,
            }),
            _ => Err("the URL must be https:// or ssh:// (or git@host:path)".into()),
        }
    }
}

/// A gitoxide transport to `source` over `link`, within `budget`.
fn transport(
    source: &GitSource,
    link: &Link,
    budget: &Budget,
) -> Result<Box<dyn gix::protocol::transport::client::blocking_io::Transport>, String> {
    match link {
        Link::Http(http) => {
            let url = gix::url::parse(gix::bstr::BStr::new(source.url.as_bytes()))
                .map_err(|e| e.to_string())?;
            let client = GitHttp {
                http: http.clone(),
                budget: budget.clone(),
            };
            Ok(Box::new(githttp::connect_http(
                client,
                url,
                gix::protocol::transport::Protocol::V2,
                false,
            )))
        }
        Link::Ssh {
            target,
            secrets,
            policy,
            runtime,
        } => {
            let pipes = git_ssh::open(runtime, target, secrets, policy, budget.deadline)?;
            let read = Budgeted {
                inner: pipes.read,
                budget: budget.clone(),
            };
            use gix::protocol::transport::client::git;
            Ok(Box::new(git::blocking_io::Connection::new(
                read,
                pipes.write,
                gix::protocol::transport::Protocol::V2,
                target.path.as_str(),
                None::<(String, Option<u16>)>,
                git::ConnectMode::Process,
                false,
            )))
        }
    }
}

/// A gitoxide error, said with the bound that caused it when one did, else
/// with its causes (gitoxide's messages quote no received content).
fn said(e: impl std::error::Error, budget: &Budget) -> String {
    if budget.left.load(Ordering::Relaxed) == 0 {
        return format!("the repository sent more than {MAX_PACK_BYTES} bytes");
    }
    if Instant::now() >= budget.deadline {
        return "no complete fetch within the fetch deadline (--chart-fetch-timeout)".into();
    }
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        cause = c.source();
    }
    // gitoxide's words for an allocation over MAX_OBJECT_BYTES: one
    // object, or the table of the pack's objects (64 bytes each).
    if message.contains("delta tree is too large") {
        message = format!(
            "{message} (the commit holds more than {} objects: fetch a smaller repository)",
            MAX_OBJECT_BYTES / 64
        );
    } else if message.contains("too large to fit in memory") {
        message = format!(
            "{message} (an object of the repository is over {MAX_OBJECT_BYTES} bytes inflated: keep large files out of a chart's repository)"
        );
    }
    message
}

/// What one fetch may still receive, and until when.
#[derive(Clone)]
struct Budget {
    deadline: Instant,
    left: Arc<AtomicU64>,
}

/// The HTTP side of gitoxide's transport (`Http`): each request through
/// [`Http::git_exchange`]. A POST's body is gathered first and sent when
/// its answer is first read.
struct GitHttp {
    http: Arc<Http>,
    budget: Budget,
}

/// One request and, once sent, its answer.
struct Exchange {
    http: Arc<Http>,
    budget: Budget,
    url: String,
    headers: Vec<(String, String)>,
    /// `Some`: a POST's body, written so far.
    body: Option<Vec<u8>>,
    answer: Option<Result<Answer, String>>,
}

struct Answer {
    headers: Option<Vec<u8>>,
    body: Option<Box<dyn Read + Send>>,
}

impl Exchange {
    fn send(&mut self) -> std::io::Result<&mut Answer> {
        if self.answer.is_none() {
            let sent = self
                .http
                .git_exchange(&self.url, &self.headers, self.body.take())
                .map(|(resp, _)| {
                    let mut headers = Vec::new();
                    for (k, v) in resp.headers() {
                        headers.extend_from_slice(k.as_str().as_bytes());
                        headers.extend_from_slice(b": ");
                        headers.extend_from_slice(v.as_bytes());
                        headers.extend_from_slice(b"\r\n");
                    }
                    let reader = resp.into_body().into_reader();
                    Answer {
                        headers: Some(headers),
                        body: Some(Box::new(Budgeted {
                            inner: reader,
                            budget: self.budget.clone(),
                        })),
                    }
                })
                .map_err(|e| match e {
                    HttpError::Refused(m) | HttpError::NotFound(m) | HttpError::Failed(m) => m,
                });
            self.answer = Some(sent);
        }
        match self.answer.as_mut().expect("set above") {
            Ok(answer) => Ok(answer),
            Err(message) => Err(std::io::Error::other(message.clone())),
        }
    }
}

/// A response body read within the fetch's [`Budget`].
struct Budgeted<R> {
    inner: R,
    budget: Budget,
}

impl<R: Read> Read for Budgeted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() >= self.budget.deadline {
            return Err(std::io::Error::other(
                "no complete fetch within the fetch deadline (--chart-fetch-timeout)",
            ));
        }
        let n = self.inner.read(buf)?;
        let left = self.budget.left.load(Ordering::Relaxed);
        if n as u64 > left {
            self.budget.left.store(0, Ordering::Relaxed);
            return Err(std::io::Error::other(format!(
                "the repository sent more than {MAX_PACK_BYTES} bytes"
            )));
        }
        self.budget.left.fetch_sub(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The headers of an answer, read once it is sent.
pub struct Headers {
    exchange: Arc<Mutex<Exchange>>,
    text: Option<std::io::Cursor<Vec<u8>>>,
}

impl Headers {
    fn text(&mut self) -> std::io::Result<&mut std::io::Cursor<Vec<u8>>> {
        if self.text.is_none() {
            let mut exchange = self.exchange.lock();
            let answer = exchange.send()?;
            self.text = Some(std::io::Cursor::new(
                answer.headers.take().unwrap_or_default(),
            ));
        }
        Ok(self.text.as_mut().expect("set above"))
    }
}

impl Read for Headers {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.text()?.read(buf)
    }
}

impl BufRead for Headers {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.text()?.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        if let Some(t) = self.text.as_mut() {
            t.consume(amt)
        }
    }
}

/// The body of an answer, read once it is sent.
pub struct Body {
    exchange: Arc<Mutex<Exchange>>,
    reader: Option<BufReader<Box<dyn Read + Send>>>,
}

impl Body {
    fn reader(&mut self) -> std::io::Result<&mut BufReader<Box<dyn Read + Send>>> {
        if self.reader.is_none() {
            let mut exchange = self.exchange.lock();
            let answer = exchange.send()?;
            let body = answer
                .body
                .take()
                .unwrap_or_else(|| Box::new(std::io::empty()));
            self.reader = Some(BufReader::with_capacity(64 * 1024, body));
        }
        Ok(self.reader.as_mut().expect("set above"))
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reader()?.read(buf)
    }
}

impl BufRead for Body {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.reader()?.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        if let Some(r) = self.reader.as_mut() {
            r.consume(amt)
        }
    }
}

/// A POST's body, gathered until its answer is read.
pub struct PostBody {
    exchange: Arc<Mutex<Exchange>>,
}

impl Write for PostBody {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut exchange = self.exchange.lock();
        let body = exchange.body.get_or_insert_with(Vec::new);
        if body.len() + buf.len() > MAX_REQUEST {
            return Err(std::io::Error::other("the fetch request grew too large"));
        }
        body.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl GitHttp {
    fn exchange(
        &self,
        url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        post: bool,
    ) -> Arc<Mutex<Exchange>> {
        let headers = headers
            .into_iter()
            .filter_map(|h| {
                let (k, v) = h.as_ref().split_once(':')?;
                // Ours are added by the client: never a header gitoxide
                // made of credentials it found.
                (!k.trim().eq_ignore_ascii_case("authorization"))
                    .then(|| (k.trim().to_string(), v.trim().to_string()))
            })
            .collect();
        Arc::new(Mutex::new(Exchange {
            http: self.http.clone(),
            budget: self.budget.clone(),
            url: url.to_string(),
            headers,
            body: post.then(Vec::new),
            answer: None,
        }))
    }
}

impl githttp::Http for GitHttp {
    type Headers = Headers;
    type ResponseBody = Body;
    type PostBody = PostBody;

    fn get(
        &mut self,
        url: &str,
        _base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> gix::Result<githttp::GetResponse<Headers, Body>> {
        let exchange = self.exchange(url, headers, false);
        // Sent now: a GET has nothing more to write.
        exchange.lock().send().map_err(gix::Error::from_error)?;
        Ok(githttp::GetResponse {
            headers: Headers {
                exchange: exchange.clone(),
                text: None,
            },
            body: Body {
                exchange,
                reader: None,
            },
        })
    }

    fn post(
        &mut self,
        url: &str,
        _base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        _body: githttp::PostBodyDataKind,
    ) -> gix::Result<githttp::PostResponse<Headers, Body, PostBody>> {
        let exchange = self.exchange(url, headers, true);
        Ok(githttp::PostResponse {
            post_body: PostBody {
                exchange: exchange.clone(),
            },
            headers: Headers {
                exchange: exchange.clone(),
                text: None,
            },
            body: Body {
                exchange,
                reader: None,
            },
        })
    }

    fn configure(&mut self, _config: &dyn std::any::Any) -> gix::Result {
        Ok(())
    }
}

/// Why a chart could not be read out of a checkout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The tree breaks a rule or a bound (a name git fsck refuses, too
    /// many entries, too large, too deep, too slow): `ChartInvalid`. The
    /// commit does not change by retrying.
    #[error("{0}")]
    Invalid(String),
    /// The repository or the disk failed.
    #[error("{0}")]
    Failed(String),
}

/// Reads the tree at `path` of `checkout` into `into` (made afresh) and
/// returns the SHA-256 over its files (relative path, then content), the
/// bounds of the module docs applied. Nothing is written before the whole
/// tree has been walked and found within its rules, and then only files
/// named by checked components, each created new (never through a link).
pub fn read_chart(checkout: &Checkout, path: &str, into: &Path) -> Result<String, ReadError> {
    let failed = ReadError::Failed;
    let repo =
        gix::open(&checkout.repo).map_err(|e| failed(format!("the fetched repository: {e}")))?;
    let root = tree_of(&repo, &checkout.commit).map_err(failed)?;
    let path = clean(path).map_err(ReadError::Invalid)?;
    let entry_tree = if path.is_empty() {
        root.clone()
    } else {
        let entry = root
            .lookup_entry_by_path(&path)
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| {
                failed(format!(
                    "the repository has no {path} at {}",
                    short(checkout)
                ))
            })?;
        if !entry.mode().is_tree() {
            return Err(ReadError::Invalid(format!("{path} is not a directory")));
        }
        entry
            .object()
            .map_err(|e| failed(e.to_string()))?
            .into_tree()
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut walk = Walk {
        repo: &repo,
        root: &root,
        files: &mut files,
        bytes: 0,
        visits: 0,
        deadline: Instant::now() + READ_DEADLINE,
    };
    walk.dir(entry_tree, &path, "", 0)?;
    files.sort();
    // What helm would load itself: no schema reference leaves its file,
    // and a subchart archive passes the archive checks.
    for (rel, content) in &files {
        if super::schema::is_schema(rel) {
            super::schema::check(rel, content).map_err(ReadError::Invalid)?;
        } else if rel.ends_with(".tgz") && (rel.starts_with("charts/") || rel.contains("/charts/"))
        {
            super::archive::check(content)
                .map_err(|e| ReadError::Invalid(format!("subchart {rel}: {e}")))?;
        }
    }
    let mut hasher = Sha256::new();
    for (rel, content) in &files {
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update(content);
    }
    write_files(into, &files).map_err(|e| failed(format!("writing the chart: {e}")))?;
    Ok(hex(&hasher.finalize()))
}

/// Writes `files` (relative paths of checked components, [`entry_name`])
/// under `into`, made afresh: directories created one level at a time,
/// each file created new — an existing name, a link among them, is an
/// error, never followed.
fn write_files(into: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(into)?;
    for (rel, content) in files {
        let mut at = into.to_path_buf();
        let mut parts = rel.split('/').peekable();
        while let Some(part) = parts.next() {
            at.push(part);
            if parts.peek().is_none() {
                break;
            }
            match std::fs::create_dir(&at) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if !std::fs::symlink_metadata(&at)?.is_dir() {
                        return Err(std::io::Error::other(format!("{rel}: not a directory")));
                    }
                }
                other => other?,
            }
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&at)?
            .write_all(content)?;
    }
    Ok(())
}

/// A tree entry's name as git fsck accepts it (and one component of a
/// path, never more): not empty, `.`, `..` or `.git` (any case), without
/// `/`, `\\` or NUL, UTF-8. A hostile server sends names git itself would
/// never write; such a tree refuses the chart.
pub fn entry_name(name: &[u8]) -> Result<&str, String> {
    let shown = || String::from_utf8_lossy(name).escape_debug().to_string();
    let name = std::str::from_utf8(name)
        .map_err(|_| format!("a tree entry named {:?} is refused (not UTF-8)", shown()))?;
    if name.len() > MAX_NAME {
        return Err(format!(
            "a tree entry's name is {} bytes, more than {MAX_NAME}",
            name.len()
        ));
    }
    let refused = name.is_empty()
        || name == "."
        || name == ".."
        || name.eq_ignore_ascii_case(".git")
        || name.contains(['/', '\\', '\0']);
    if refused {
        return Err(format!(
            "a tree entry named {:?} is refused (git fsck refuses it)",
            shown()
        ));
    }
    Ok(name)
}
/// The content of the file at each of `paths` of `checkout` (`None`: not
/// there), each at most [`MAX_VALUES_FILE`] bytes; the repository opened
/// once for all.
pub fn read_files(checkout: &Checkout, paths: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
    let repo = gix::open(&checkout.repo).map_err(|e| format!("the fetched repository: {e}"))?;
    let root = tree_of(&repo, &checkout.commit)?;
    paths.iter().map(|p| file_in(&repo, &root, p)).collect()
}

/// The blob at `path` of `root` (`None`: not there); the error names the
/// path.
fn file_in(
    repo: &gix::Repository,
    root: &gix::Tree<'_>,
    path: &str,
) -> Result<Option<Vec<u8>>, String> {
    let path = clean(path)?;
    let Some(entry) = root
        .lookup_entry_by_path(&path)
        .map_err(|e| format!("{path}: {e}"))?
    else {
        return Ok(None);
    };
    if entry.mode().is_link() {
        return Err(format!("{path} is a symlink: values files must be files"));
    }
    if !entry.mode().is_blob() {
        return Err(format!("{path} is not a file"));
    }
    // The size from the header, before a byte is inflated.
    let header = repo
        .find_header(entry.object_id())
        .map_err(|e| format!("{path}: {e}"))?;
    if header.size() > MAX_VALUES_FILE {
        return Err(format!("{path} is larger than {MAX_VALUES_FILE} bytes"));
    }
    let object = entry.object().map_err(|e| format!("{path}: {e}"))?;
    Ok(Some(object.data.clone()))
}

fn short(checkout: &Checkout) -> &str {
    &checkout.commit[..checkout.commit.len().min(12)]
}

fn tree_of<'r>(repo: &'r gix::Repository, commit: &str) -> Result<gix::Tree<'r>, String> {
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(|e| e.to_string())?;
    repo.find_object(id)
        .map_err(|e| e.to_string())?
        .peel_to_commit()
        .map_err(|e| e.to_string())?
        .tree()
        .map_err(|e| e.to_string())
}

/// `path` relative to the repository's root, without `.` steps; `..` is
/// refused.
fn clean(path: &str) -> Result<String, String> {
    let mut parts = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => return Err(format!("{path:?}: `..` is not allowed")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// A walk of a chart's tree, in bounds: every entry visited counts
/// ([`MAX_VISITS`]), every object's size is read from its header before it
/// is inflated, and the walk ends at its deadline.
struct Walk<'a, 'r> {
    repo: &'r gix::Repository,
    /// The commit's root tree (symlinks are resolved in it).
    root: &'a gix::Tree<'r>,
    files: &'a mut Vec<(String, Vec<u8>)>,
    /// Bytes of `files`; at most [`MAX_CHART_BYTES`].
    bytes: u64,
    /// Entries reached so far; at most [`MAX_VISITS`].
    visits: usize,
    deadline: Instant,
}

impl<'r> Walk<'_, 'r> {
    /// Adds the files of `tree` (at `base` in the repository, `rel` in the
    /// chart).
    fn dir(
        &mut self,
        tree: gix::Tree<'_>,
        base: &str,
        rel: &str,
        depth: usize,
    ) -> Result<(), ReadError> {
        let invalid = ReadError::Invalid;
        if depth > MAX_DEPTH {
            return Err(invalid(format!(
                "the chart is deeper than {MAX_DEPTH} directories"
            )));
        }
        let decoded = tree.decode().map_err(|e| {
            invalid(format!(
                "{base}/: a tree that does not parse is refused ({e})"
            ))
        })?;
        for entry in &decoded.entries {
            self.visit()?;
            let name = entry_name(entry.filename).map_err(|e| invalid(format!("{base}/: {e}")))?;
            let here = join(rel, name);
            let in_repo = join(base, name);
            if entry.mode.is_tree() {
                self.within(entry.oid.to_owned(), MAX_TREE_BYTES, &in_repo)?;
                let sub = self.object(entry.oid.to_owned(), &in_repo)?;
                let sub = sub
                    .try_into_tree()
                    .map_err(|_| invalid(format!("{in_repo} is not a tree")))?;
                self.dir(sub, &in_repo, &here, depth + 1)?;
            } else if entry.mode.is_link() {
                self.within(entry.oid.to_owned(), 4096, &in_repo)?;
                let target =
                    String::from_utf8_lossy(&self.object(entry.oid.to_owned(), &in_repo)?.data)
                        .into_owned();
                let content = self.link(&in_repo, &target)?;
                self.add(here, content)?;
            } else if entry.mode.is_blob() {
                self.within(entry.oid.to_owned(), MAX_CHART_BYTES - self.bytes, &in_repo)?;
                let blob = self.object(entry.oid.to_owned(), &in_repo)?;
                self.add(here, blob.data.clone())?;
            }
            // Submodules (commits) are not followed.
        }
        Ok(())
    }

    /// Counts one entry reached; past [`MAX_VISITS`] or the deadline the
    /// walk ends.
    fn visit(&mut self) -> Result<(), ReadError> {
        self.visits += 1;
        if self.visits > MAX_VISITS {
            return Err(ReadError::Invalid(format!(
                "the chart's tree has more than {MAX_VISITS} entries (counted each time a directory is reached)"
            )));
        }
        if Instant::now() > self.deadline {
            return Err(ReadError::Invalid(format!(
                "the chart's tree was not read within {}s",
                READ_DEADLINE.as_secs()
            )));
        }
        Ok(())
    }

    /// Refuses the object `id` (at `at`) if its header says it is larger
    /// than `max` bytes — before a byte of it is inflated.
    fn within(&self, id: gix::ObjectId, max: u64, at: &str) -> Result<(), ReadError> {
        let header = self
            .repo
            .find_header(id)
            .map_err(|e| ReadError::Failed(format!("{at}: {e}")))?;
        if header.size() > max {
            return Err(ReadError::Invalid(format!(
                "{at} is {} bytes: over the chart's bounds ({MAX_CHART_BYTES} bytes in all)",
                header.size()
            )));
        }
        Ok(())
    }

    fn object(&self, id: gix::ObjectId, at: &str) -> Result<gix::Object<'r>, ReadError> {
        self.repo
            .find_object(id)
            .map_err(|e| ReadError::Failed(format!("{at}: {e}")))
    }

    /// The content a symlink at `at` to `target` leads to: a file of the
    /// same commit, never outside the repository.
    fn link(&mut self, at: &str, target: &str) -> Result<Vec<u8>, ReadError> {
        // A link that leads nowhere inside is `SourceUnavailable`, as it
        // always was (docs/sources.md); names and bounds are `ChartInvalid`.
        let invalid = ReadError::Failed;
        let outside = || {
            invalid(format!(
                "{at} is a symlink leaving the repository ({target})"
            ))
        };
        if target.starts_with('/') {
            return Err(outside());
        }
        let mut parts: Vec<&str> = at.split('/').collect();
        parts.pop();
        for p in target.split('/') {
            match p {
                "" | "." => {}
                ".." => {
                    parts.pop().ok_or_else(outside)?;
                }
                p => parts.push(p),
            }
        }
        // A lookup walks one tree per component: each counts.
        for _ in &parts {
            self.visit()?;
        }
        let resolved = parts.join("/");
        let entry = self
            .root
            .lookup_entry_by_path(&resolved)
            .map_err(|e| ReadError::Failed(e.to_string()))?
            .ok_or_else(|| invalid(format!("{at} is a symlink to {target}, which is not there")))?;
        if !entry.mode().is_blob() {
            return Err(invalid(format!(
                "{at} is a symlink to {target}, which is not a file"
            )));
        }
        self.within(entry.object_id(), MAX_CHART_BYTES - self.bytes, at)?;
        Ok(self.object(entry.object_id(), at)?.data.clone())
    }

    fn add(&mut self, rel: String, content: Vec<u8>) -> Result<(), ReadError> {
        if self.files.len() >= MAX_FILES {
            return Err(ReadError::Invalid(format!(
                "the chart has more than {MAX_FILES} files"
            )));
        }
        self.bytes += content.len() as u64;
        if self.bytes > MAX_CHART_BYTES {
            return Err(ReadError::Invalid(format!(
                "the chart is larger than {MAX_CHART_BYTES} bytes"
            )));
        }
        self.files.push((rel, content));
        Ok(())
    }
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ref_at_most_and_main_by_default() {
        let r = |branch: &str, tag: &str| GitRef {
            branch: branch.into(),
            tag: tag.into(),
            ..Default::default()
        };
        assert!(matches!(wanted(&r("", "")), Ok(Wanted::Ref(m)) if m == "refs/heads/main"));
        assert!(matches!(wanted(&r("dev", "")), Ok(Wanted::Ref(m)) if m == "refs/heads/dev"));
        assert!(matches!(wanted(&r("", "v1")), Ok(Wanted::Ref(m)) if m == "refs/tags/v1"));
        assert!(wanted(&r("dev", "v1")).is_err());
    }

    #[test]
    fn paths_never_climb_out() {
        assert_eq!(clean("./charts//web/").unwrap(), "charts/web");
        assert!(clean("charts/../../etc").is_err());
    }

    fn source(server: &envtest::GitServer, repo: &envtest::GitRepo, r: GitRef) -> GitSource {
        GitSource {
            url: format!("{}/{}", server.url(), repo.served_name()),
            reference: r,
            path: "charts/web".into(),
            secret_ref: None,
        }
    }

    #[test]
    fn checkouts_go_when_unused_for_a_day_or_past_the_byte_budget_oldest_first() {
        let root = std::env::temp_dir().join(format!("evict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let hour = std::time::Duration::from_secs(3600);
        let now = std::time::SystemTime::now();
        // (name, bytes, last used hours ago, a fetch under way)
        let hexed = |name: &str| hex(&Sha256::digest(name.as_bytes()))[..32].to_string();
        // A ref listing's scratch repository, with no use recorded.
        std::fs::create_dir_all(root.join("listing-x")).unwrap();
        let sources = [
            ("kept", 10_000, 0, false),
            ("fresh", 10_000, 1, false),
            ("older", 10_000, 2, false),
            ("stale", 10, 25, false),
            ("busy", 10_000, 30, true),
        ];
        for (name, bytes, ago, busy) in sources {
            let name = &hexed(name);
            let commit = root.join(name).join("a".repeat(40));
            std::fs::create_dir_all(&commit).unwrap();
            std::fs::write(commit.join("pack"), vec![0u8; bytes]).unwrap();
            if busy {
                std::fs::create_dir_all(root.join(name).join("fetching-x")).unwrap();
            }
            let used = std::fs::File::create(root.join(name).join(USED)).unwrap();
            used.set_modified(now - hour * ago).unwrap();
        }
        // 40,010 bytes, 25,000 allowed: the stale one goes for its age, the
        // oldest of the rest for the budget; the one just used and the one
        // being fetched into stay whatever their age.
        let gone = evict(&root, 25_000, MAX_UNUSED, &root.join(hexed("kept")));
        let left: Vec<String> = {
            let mut v: Vec<String> = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let mut want: Vec<String> = ["busy", "fresh", "kept"].iter().map(|n| hexed(n)).collect();
        want.push("listing-x".into());
        want.sort();
        assert_eq!(left, want);
        assert_eq!(gone, 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn loopback() -> SourceLimits {
        SourceLimits {
            policy: super::super::address::AddressPolicy::parse("").unwrap(),
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_branch_a_tag_and_a_semver_range_fetch_the_commit_they_name() {
        let dir = tempfile_dir("git-fetch");
        let server = envtest::GitServer::start(&dir.join("served"))
            .await
            .unwrap();
        let repo = envtest::GitRepo::create(server.root(), "charts");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.0.0\n",
        );
        repo.write("charts/web/templates/cm.yaml", "kind: ConfigMap\n");
        repo.write("README.md", "elsewhere\n");
        let first = repo.commit("first");
        repo.tag("v1.0.0");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.1.0\n",
        );
        let second = repo.commit("second");
        repo.tag("v1.1.0");
        repo.tag("not-a-version");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 2.0.0\n",
        );
        let third = repo.commit("third");
        repo.tag("v2.0.0");
        let work = dir.join("work");
        let fetch_at = |r: GitRef| {
            let (src, work) = (source(&server, &repo, r), work.clone());
            tokio::task::spawn_blocking(move || {
                fetch(&src, &Credentials::default(), &loopback(), &work)
            })
        };
        let main = fetch_at(GitRef::default()).await.unwrap().unwrap();
        assert_eq!(main.commit, third);
        let packs = server.fetches();
        let again = fetch_at(GitRef::default()).await.unwrap().unwrap();
        assert_eq!(again, main);
        assert_eq!(
            server.fetches(),
            packs,
            "the same commit: no pack asked for"
        );
        let tag = fetch_at(GitRef {
            tag: "v1.0.0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(tag.commit, first);
        let range = GitRef {
            semver: ">=1.0.0, <2".into(),
            ..Default::default()
        };
        let ranged = fetch_at(range).await.unwrap().unwrap();
        assert_eq!(ranged.commit, second, "the highest tag in range");

        let into = dir.join("chart");
        let digest = read_chart(&ranged, "charts/web", &into).unwrap();
        assert!(
            std::fs::read_to_string(into.join("Chart.yaml"))
                .unwrap()
                .contains("1.1.0")
        );
        assert!(into.join("templates/cm.yaml").is_file());
        assert!(!into.join("README.md").exists(), "only the chart's path");
        assert_eq!(
            read_chart(&ranged, "charts/web", &into).unwrap(),
            digest,
            "stable"
        );
        assert_ne!(read_chart(&main, "charts/web", &into).unwrap(), digest);
        assert_eq!(
            read_files(&main, &["README.md".into()]).unwrap()[0]
                .clone()
                .unwrap(),
            b"elsewhere\n"
        );
        assert_eq!(read_files(&main, &["missing.yaml".into()]).unwrap(), [None]);
        let missing = fetch_at(GitRef {
            branch: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        assert!(
            matches!(missing, Err(SourceError::Git { .. })),
            "{missing:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("served")).unwrap();
        dir
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_endless_pack_ends_at_the_deadline_or_the_byte_bound() {
        let dir = tempfile_dir("git-endless");
        let server = envtest::GitServer::start(&dir.join("served"))
            .await
            .unwrap();
        let repo = envtest::GitRepo::create(server.root(), "charts");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.0.0\n",
        );
        repo.commit("first");
        server.answer_packs(envtest::PackAnswer::Endless);
        let limits = SourceLimits {
            fetch_timeout: std::time::Duration::from_secs(5),
            ..loopback()
        };
        let (src, work) = (source(&server, &repo, GitRef::default()), dir.join("work"));
        let started = Instant::now();
        let got = tokio::task::spawn_blocking(move || {
            fetch(&src, &Credentials::default(), &limits, &work)
        })
        .await
        .unwrap();
        let Err(SourceError::Git { message, .. }) = got else {
            panic!("{got:?}");
        };
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert!(message.contains("--chart-fetch-timeout"), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_symlink_may_stay_inside_the_repository_but_never_leave_it() {
        let dir = tempfile_dir("git-links");
        let server = envtest::GitServer::start(&dir.join("served"))
            .await
            .unwrap();
        let repo = envtest::GitRepo::create(server.root(), "charts");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.0.0\n",
        );
        repo.write("common/values.yaml", "common: true\n");
        repo.symlink("charts/web/values.yaml", "../../common/values.yaml");
        repo.symlink("charts/evil/passwd", "/etc/passwd");
        repo.write(
            "charts/evil/Chart.yaml",
            "apiVersion: v2\nname: evil\nversion: 1.0.0\n",
        );
        repo.symlink("charts/climb/up", "../../../../../etc/passwd");
        repo.commit("links");
        let (src, work) = (source(&server, &repo, GitRef::default()), dir.join("work"));
        let checkout = tokio::task::spawn_blocking(move || {
            fetch(&src, &Credentials::default(), &loopback(), &work)
        })
        .await
        .unwrap()
        .unwrap();
        let into = dir.join("chart");
        read_chart(&checkout, "charts/web", &into).unwrap();
        assert_eq!(
            std::fs::read_to_string(into.join("values.yaml")).unwrap(),
            "common: true\n"
        );
        assert!(!into.join("values.yaml").is_symlink(), "written as a file");
        for (path, link) in [
            ("charts/evil", "charts/evil/passwd"),
            ("charts/climb", "charts/climb/up"),
        ] {
            let refused = read_chart(&checkout, path, &dir.join("refused"))
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains(link) && refused.contains("leaving the repository"),
                "{refused}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A tree object of `entries` (mode, name, id) written as raw bytes —
    /// any name, in any order: what a hostile server can send.
    fn raw_tree(repo: &gix::Repository, entries: &[(&str, &[u8], gix::ObjectId)]) -> gix::ObjectId {
        let mut raw = Vec::new();
        for (mode, name, id) in entries {
            raw.extend_from_slice(mode.as_bytes());
            raw.push(b' ');
            raw.extend_from_slice(name);
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        gix::objs::Write::write_buf(&repo.objects, gix::object::Kind::Tree, &raw).unwrap()
    }

    /// A commit of `tree` in `repo`.
    fn commit_of(repo: &gix::Repository, tree: gix::ObjectId) -> String {
        let who = gix::actor::Signature {
            name: "test".into(),
            email: "test@example.com".into(),
            time: gix::date::Time::new(0, 0),
        };
        repo.write_object(gix::objs::Commit {
            tree,
            parents: Default::default(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: "hostile".into(),
            extra_headers: Vec::new(),
        })
        .unwrap()
        .detach()
        .to_string()
    }

    /// Every file and directory under `dir`, relative.
    fn listing(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
                if e.file_type().unwrap().is_dir() {
                    todo.push(p);
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_tree_entry_git_fsck_refuses_refuses_the_chart_and_writes_nothing() {
        let dir = tempfile_dir("git-names");
        let outside = dir.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let repo = gix::init_bare(dir.join("hostile.git")).unwrap();
        let blob = repo.write_blob(b"planted\n").unwrap().detach();
        let chart = repo
            .write_blob(b"name: web\nversion: 1.0.0\n")
            .unwrap()
            .detach();
        let empty = raw_tree(&repo, &[]);
        let climbing = format!("../../{}/x", outside.display());
        let absolute = format!("{}/abs", outside.display());
        let names: Vec<Vec<u8>> = vec![
            climbing.into_bytes(),
            absolute.into_bytes(),
            b"..".to_vec(),
            b".".to_vec(),
            b".git".to_vec(),
            b".GiT".to_vec(),
            b"".to_vec(),
            b"a/b".to_vec(),
            b"a\0b".to_vec(),
            b"a\\b".to_vec(),
            vec![0xff, 0xfe],
        ];
        for name in &names {
            for (mode, id) in [("100644", blob), ("40000", empty)] {
                let root = raw_tree(&repo, &[("100644", b"Chart.yaml", chart), (mode, name, id)]);
                let checkout = Checkout {
                    repo: dir.join("hostile.git"),
                    commit: commit_of(&repo, root),
                };
                let into = dir.join("chart");
                let got = read_chart(&checkout, "", &into);
                let Err(ReadError::Invalid(message)) = got else {
                    panic!("{name:?} as {mode}: {got:?}");
                };
                assert!(message.contains("is refused"), "{message}");
                assert_eq!(listing(&outside), Vec::<String>::new(), "{name:?}");
                assert_eq!(listing(&into), Vec::<String>::new(), "{name:?}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tree_that_fans_out_is_refused_at_the_visit_budget() {
        let dir = tempfile_dir("git-fanout");
        let repo = gix::init_bare(dir.join("fan.git")).unwrap();
        // 30 trees, each naming the next one twice: 2^30 paths, no file.
        let mut tree = raw_tree(&repo, &[]);
        for _ in 0..30 {
            tree = raw_tree(&repo, &[("40000", b"a", tree), ("40000", b"b", tree)]);
        }
        let checkout = Checkout {
            repo: dir.join("fan.git"),
            commit: commit_of(&repo, tree),
        };
        // Below the depth bound: the visits are what stops it.
        const { assert!(30 <= MAX_DEPTH) };
        let got = read_chart(&checkout, "", &dir.join("chart"));
        let Err(ReadError::Invalid(message)) = got else {
            panic!("{got:?}");
        };
        assert!(
            message.contains(&format!("more than {MAX_VISITS} entries")),
            "{message}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_blob_over_the_bound_is_refused_from_its_header() {
        let dir = tempfile_dir("git-big");
        let repo = gix::init_bare(dir.join("big.git")).unwrap();
        let big = repo
            .write_blob(vec![0u8; MAX_CHART_BYTES as usize + 1])
            .unwrap()
            .detach();
        let root = raw_tree(&repo, &[("100644", b"values.yaml", big)]);
        let checkout = Checkout {
            repo: dir.join("big.git"),
            commit: commit_of(&repo, root),
        };
        let got = read_chart(&checkout, "", &dir.join("chart"));
        let Err(ReadError::Invalid(message)) = got else {
            panic!("{got:?}");
        };
        assert!(message.contains("values.yaml is"), "{message}");
        let files = read_files(&checkout, &["values.yaml".into()]).unwrap_err();
        assert!(files.contains("larger than"), "{files}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tree_100000_deep_is_refused_at_the_depth_bound_without_walking_it() {
        let dir = tempfile_dir("git-deep");
        let repo = gix::init_bare(dir.join("deep.git")).unwrap();
        let blob = repo.write_blob(b"x: 1\n").unwrap().detach();
        let mut tree = repo
            .write_object(gix::objs::Tree {
                entries: vec![gix::objs::tree::Entry {
                    mode: gix::objs::tree::EntryKind::Blob.into(),
                    filename: "values.yaml".into(),
                    oid: blob,
                }],
            })
            .unwrap()
            .detach();
        for _ in 0..100_000 {
            tree = repo
                .write_object(gix::objs::Tree {
                    entries: vec![gix::objs::tree::Entry {
                        mode: gix::objs::tree::EntryKind::Tree.into(),
                        filename: "d".into(),
                        oid: tree,
                    }],
                })
                .unwrap()
                .detach();
        }
        let who = gix::actor::Signature {
            name: "test".into(),
            email: "test@example.com".into(),
            time: gix::date::Time::new(0, 0),
        };
        let commit = repo
            .write_object(gix::objs::Commit {
                tree,
                parents: Default::default(),
                author: who.clone(),
                committer: who,
                encoding: None,
                message: "deep".into(),
                extra_headers: Vec::new(),
            })
            .unwrap()
            .detach();
        let checkout = Checkout {
            repo: dir.join("deep.git"),
            commit: commit.to_string(),
        };
        let started = Instant::now();
        let refused = read_chart(&checkout, "", &dir.join("chart"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!("deeper than {MAX_DEPTH}")),
            "{refused}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn ssh_checks_the_host_key_before_any_credential_and_then_fetches() {
        let dir = tempfile_dir("git-ssh");
        let root = dir.join("served");
        let repo = envtest::GitRepo::create(&root, "charts");
        repo.write(
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.0.0\n",
        );
        let head = repo.commit("first");
        let client = envtest::SshKey::generate();
        let server = envtest::SshGitServer::start(&root, &client).await.unwrap();
        let source = GitSource {
            url: server.url(&repo.served_name()),
            path: "charts/web".into(),
            ..Default::default()
        };
        let fetch_with = |identity: String, known_hosts: String| {
            let (src, work) = (source.clone(), dir.join("work"));
            let credentials = Credentials {
                ssh_identity: Some(identity),
                known_hosts: Some(known_hosts),
                ..Default::default()
            };
            tokio::task::spawn_blocking(move || fetch(&src, &credentials, &loopback(), &work))
        };
        // Another host's key: refused in the key exchange, no credential sent.
        let stranger = envtest::SshKey::generate();
        let port = source
            .url
            .rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let wrong = format!("[127.0.0.1]:{port} {}\n", stranger.public_openssh());
        let refused = fetch_with(client.openssh(), wrong)
            .await
            .unwrap()
            .unwrap_err();
        let SourceError::Git { message, .. } = refused else {
            panic!("{refused:?}")
        };
        assert!(
            message.contains("not in secretRef's known_hosts"),
            "{message}"
        );
        assert_eq!(server.auth_attempts(), 0, "no credential was offered");
        // No known_hosts at all: no connection.
        let (src, work) = (source.clone(), dir.join("work"));
        let none = Credentials {
            ssh_identity: Some(client.openssh()),
            ..Default::default()
        };
        let refused = tokio::task::spawn_blocking(move || fetch(&src, &none, &loopback(), &work))
            .await
            .unwrap()
            .unwrap_err();
        assert!(refused.to_string().contains("no known_hosts"), "{refused}");
        assert_eq!(server.auth_attempts(), 0);
        // The server's key, but an identity it does not accept.
        let refused = fetch_with(stranger.openssh(), server.known_hosts())
            .await
            .unwrap();
        assert!(refused.is_err(), "{refused:?}");
        assert!(server.auth_attempts() > 0);
        // Both right: the commit, and the chart read out of it.
        let checkout = fetch_with(client.openssh(), server.known_hosts())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(checkout.commit, head);
        let into = dir.join("chart");
        read_chart(&checkout, "charts/web", &into).unwrap();
        assert!(into.join("Chart.yaml").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
