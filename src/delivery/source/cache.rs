//! Fetched chart archives on disk, bounded and least-recently-used first
//! out.
//!
//! A file's name is the SHA-256 of (source, chart, and the archive's own
//! content digest) — never a name from a spec, which could hold `../` and
//! overwrite another repository's chart that another tenant installs next,
//! and never a version alone, which a repository could serve other bytes
//! for. A file is trusted only when its content still has that digest. The directory
//! lives on a memory volume: its total stays under `--chart-cache-size`
//! by evicting the files read longest ago (a read touches the file's
//! modification time).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::lean::hex::hex;

/// The archive cache of one work directory.
#[derive(Debug)]
pub struct ChartCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Serialises store-and-evict: two fetches finishing together must not
    /// both count the directory before either evicts.
    evicting: Mutex<()>,
}

impl ChartCache {
    /// A cache in `work_dir/charts` of at most `max_bytes`.
    pub fn new(work_dir: &Path, max_bytes: u64) -> Self {
        ChartCache {
            dir: work_dir.join("charts"),
            max_bytes,
            evicting: Mutex::new(()),
        }
    }

    /// Where the archive of `chart` from `source` whose content digest is
    /// `content` is kept.
    pub fn path(&self, source: &str, chart: &str, content: &str) -> PathBuf {
        let key = Sha256::digest(format!("{source}\0{chart}\0{content}").as_bytes());
        self.dir.join(format!("{}.tgz", hex(&key)))
    }

    /// The archive at `path` if its SHA-256 is `digest` (empty: any), and
    /// marks it used.
    pub fn read(&self, path: &Path, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(path).ok()?;
        if !digest.is_empty() && hex(&Sha256::digest(&bytes)) != digest {
            return None;
        }
        touch(path);
        Some(bytes)
    }

    /// Writes `bytes` at `path` (whole or not at all), then evicts the least
    /// recently used other archives until the total fits.
    pub fn store(&self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        let _one = self.evicting.lock();
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, bytes)
            .and_then(|_| std::fs::rename(&partial, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                format!("cannot cache the chart in {}: {e}", self.dir.display())
            })?;
        self.evict(path);
        Ok(())
    }

    /// Removes the oldest-used archives but `keep` while the total exceeds
    /// the bound.
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_file().then(|| {
                    let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    (used, meta.len(), e.path())
                })
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, size, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                log::debug!("chart cache: evicted {}", path.display());
                total -= size;
            }
        }
    }

    /// The bytes the cache holds now.
    pub fn size(&self) -> u64 {
        std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }
}

/// Sets `path`'s modification time to now: it was just used.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn work_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("chart-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn names_come_from_a_hash_never_from_the_spec() {
        let cache = ChartCache::new(&work_dir("names"), 1 << 20);
        let evil = cache.path("https://a.example", "../../other/alloy", "1.0.0");
        assert_eq!(evil.parent(), Some(cache.dir.as_path()));
        let name = evil.file_name().unwrap().to_str().unwrap();
        assert!(name.len() == 68 && name.ends_with(".tgz"), "{name}");
        assert_ne!(
            cache.path("https://a.example", "web", "1.0.0"),
            cache.path("https://b.example", "web", "1.0.0"),
            "one repository's chart is never another's"
        );
    }

    #[test]
    fn other_bytes_for_the_same_version_never_replace_the_verified_file() {
        // Issue 56, test 6: a repository serving a second app other bytes
        // under the same version writes them to a file of their own.
        let cache = ChartCache::new(&work_dir("content"), 1 << 20);
        let (first, second) = (b"verified".as_slice(), b"swapped".as_slice());
        let digest = |b: &[u8]| hex(&Sha256::digest(b));
        let a = cache.path("https://repo", "web", &digest(first));
        cache.store(&a, first).unwrap();
        let b = cache.path("https://repo", "web", &digest(second));
        cache.store(&b, second).unwrap();
        assert_ne!(a, b);
        assert_eq!(cache.read(&a, &digest(first)).as_deref(), Some(first));
    }

    #[test]
    fn a_file_is_served_only_with_its_digest() {
        let cache = ChartCache::new(&work_dir("digest"), 1 << 20);
        let path = cache.path("s", "c", "1");
        cache.store(&path, b"chart").unwrap();
        let digest = hex(&Sha256::digest(b"chart"));
        assert_eq!(cache.read(&path, &digest).as_deref(), Some(&b"chart"[..]));
        assert_eq!(cache.read(&path, &"0".repeat(64)), None);
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(cache.read(&path, &digest), None);
    }

    #[test]
    fn the_total_stays_under_the_bound_evicting_the_least_recently_used() {
        let cache = ChartCache::new(&work_dir("lru"), 250);
        let (a, b, c) = (
            cache.path("s", "a", "1"),
            cache.path("s", "b", "1"),
            cache.path("s", "c", "1"),
        );
        cache.store(&a, &[1; 100]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        cache.store(&b, &[2; 100]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // `a` is read: `b` is now the least recently used.
        assert!(cache.read(&a, "").is_some());
        std::thread::sleep(Duration::from_millis(20));
        cache.store(&c, &[3; 100]).unwrap();
        assert!(cache.size() <= 250, "{}", cache.size());
        assert!(a.exists() && c.exists() && !b.exists());
        // One archive larger than the bound is still kept: it is in use.
        let big = cache.path("s", "big", "1");
        cache.store(&big, &[4; 400]).unwrap();
        assert!(big.exists() && !a.exists() && !c.exists());
    }
}
