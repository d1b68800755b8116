//! A chart repository's `index.yaml`, read for one chart.
//!
//! Public indexes hold thousands of charts (tens of MB); a HelmApp wants
//! one. The index is read as it arrives — never whole in memory — in one
//! of two ways:
//! - [`carve_entries`] (first): by lines, keeping only the wanted chart's
//!   lines of a block-style index and parsing just those (`carve.rs`);
//! - [`read_entries`] (when the index is not in that shape): walked as a
//!   stream of YAML events (`events.rs`), each counted by the YAML budget
//!   ([`crate::lean::yaml::Budget`]); only the wanted chart's versions
//!   are built, the rest is skipped without a value being made.
//!
//! Errors say what was expected and where, never a byte of the index: it
//! comes from a server anyone may run.

mod carve;
mod events;

pub use carve::carve_entries;
pub use events::{INDEX_MAX_NODES, IndexEntry, read_entries};

/// The versions of chart `name` in `index` (none: the chart is not there).
///
/// ```
/// use hossted_operator::delivery::source::index::entries_of;
/// let index = b"apiVersion: v1\nentries:\n  web:\n    - {version: 1.0.0, urls: [web-1.0.0.tgz]}\n  api:\n    - {version: 2.0.0}\n";
/// let web = entries_of(index, "web").unwrap();
/// assert_eq!((web.len(), web[0].urls[0].as_str()), (1, "web-1.0.0.tgz"));
/// assert!(entries_of(index, "db").unwrap().is_empty());
/// ```
pub fn entries_of(index: &[u8], name: &str) -> Result<Vec<IndexEntry>, String> {
    match carve_entries(index, name)? {
        Some(found) => Ok(found),
        None => read_entries(index, name),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn only_the_wanted_chart_is_read_in_any_style() {
        let index = br#"
apiVersion: v1
generated: "2026-01-01T00:00:00Z"
entries:
  other: [{version: 9.9.9, urls: [o.tgz]}]
  "web":
    - version: "1.10"
      urls:
        - https://example.com/web-1.10.tgz
      digest: abc
      annotations: {a: [1, 2, {b: c}]}
    - {version: 1.9.2, urls: [web-1.9.2.tgz], created: 2024-01-01}
  api: []
"#;
        let web = entries_of(index, "web").unwrap();
        assert_eq!(
            web,
            vec![
                IndexEntry {
                    version: "1.10".into(),
                    urls: vec!["https://example.com/web-1.10.tgz".into()],
                    digest: "abc".into()
                },
                IndexEntry {
                    version: "1.9.2".into(),
                    urls: vec!["web-1.9.2.tgz".into()],
                    digest: String::new()
                },
            ]
        );
        assert_eq!(entries_of(index, "api").unwrap(), vec![]);
    }

    #[test]
    fn what_is_not_an_index_is_said_without_echoing_it() {
        for bad in [
            &b"- just a list with secret-token-123\n"[..],
            b"entries: secret-token-123\n",
            b"entries:\n  web: secret-token-123\n",
            b"entries: {web: [\n",
            b"\xff\xfesecret-token-123",
        ] {
            let e = entries_of(bad, "web").unwrap_err();
            assert!(e.starts_with("index.yaml"), "{e}");
            assert!(!e.contains("secret-token"), "{e}");
        }
    }

    #[test]
    fn the_index_is_decoded_as_it_arrives_and_a_reader_error_is_the_error() {
        let text = "entries:\n  wéb-ü: [{version: 1.0.0, urls: [\"ü.tgz\"]}]\n";
        let got = entries_of(text.as_bytes(), "wéb-ü").unwrap();
        assert_eq!(got[0].urls, vec!["ü.tgz".to_string()]);
        // A reader that fails midway (a bound passed): its error, not a
        // YAML error about the cut.
        struct Cut(usize);
        impl Read for Cut {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("the answer is larger than its bound"));
                }
                let n = buf.len().min(self.0);
                buf[..n].fill(b'#');
                self.0 -= n;
                Ok(n)
            }
        }
        let e = read_entries(Cut(100_000), "web").unwrap_err();
        assert!(e.contains("larger than its bound"), "{e}");
    }

    #[test]
    fn an_index_the_size_of_bitnamis_is_read_not_refused() {
        // 30,000 entries of ~10 nodes: far past the 100,000 nodes other
        // documents may have (a 26 MB index was refused by it).
        let mut text = String::from("apiVersion: v1\nentries:\n");
        for c in 0..300 {
            text.push_str(&format!("  chart-{c}:\n"));
            for v in 0..100 {
                text.push_str(&format!(
                    "  - {{name: chart-{c}, version: {v}.0.0, digest: d, urls: [c-{v}.tgz], keywords: [a, b]}}\n"
                ));
            }
        }
        text.push_str("  web:\n  - {version: 1.0.0, urls: [web-1.0.0.tgz]}\n");
        let web = entries_of(text.as_bytes(), "web").expect("a large honest index");
        assert_eq!(web.len(), 1);
    }

    #[test]
    fn an_alias_bomb_index_is_refused() {
        let mut text = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            text.push_str(&format!(
                "l{i}: &l{i} [{}]\n",
                vec![format!("*l{}", i - 1); 10].join(", ")
            ));
        }
        text.push_str("entries: {web: [*l6]}\n");
        let e = entries_of(text.as_bytes(), "web").unwrap_err();
        assert!(
            e.contains(&format!("more than {INDEX_MAX_NODES} nodes")),
            "{e}"
        );
    }
}
