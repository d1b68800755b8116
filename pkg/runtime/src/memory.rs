//! Keeping the resident set close to what the caches really hold.
//!
//! The initial LISTs decode large pages (Helm release Secrets carry a gzip'd
//! release, base64-encoded twice); glibc's malloc keeps the freed buffers in
//! per-thread arenas, so the RSS would stay at the start-up peak. Two arenas
//! are plenty for a 2-worker operator, and the heap is trimmed once the caches
//! have synced. (The scale benchmark, `hack/bench.sh`, measures the effect.)
//! Other C libraries (the static musl image) need neither.

/// Limits glibc to two malloc arenas. Call first thing in `main`.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Returns free heap pages to the kernel.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
