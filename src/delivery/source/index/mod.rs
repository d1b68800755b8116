//! A chart repository's `index.yaml`, read for one chart.
//!
//! Public indexes hold thousands of charts (tens of MB); a HelmApp wants
//! one. The index is read as it arrives — never whole in memory — in one
//! of two ways:
//! - [`carve_entries`] (first): by lines, keeping only the wanted chart's
//!   lines of a block-style index and parsing just those (`carve.rs`);
//! - [`read_entries`] (when the index is not in that shape): walked as a
//!   stream of YAML events, each counted by the YAML budget
//!   ([`crate::cached::yaml::Budget`]); only the wanted chart's versions
//!   are built, the rest is skipped without a value being made.
//!
//! Errors say what was expected and where, never a byte of the index: it
//! comes from a server anyone may run.

mod carve;

pub use carve::carve_entries;

use std::cell::RefCell;
use std::io::{BufReader, Bytes, Read};
use std::rc::Rc;

use yaml_rust2::parser::{Event, Parser};

use crate::cached::yaml::Budget;

/// One version of a chart in an index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexEntry {
    pub version: String,
    pub urls: Vec<String>,
    /// SHA-256 of the archive, hex (empty: the index gives none).
    pub digest: String,
}

/// Nodes an index may expand to. The stream is never built whole (only
/// the wanted chart's entries are), so the bound is against alias
/// expansion, not honest size: Bitnami's 26 MB index is about 1.4 M nodes
/// (30,000 entries), and one at `--max-index-size` (64 MiB) without
/// aliases stays under this. The 100,000 of other documents refused it.
pub const INDEX_MAX_NODES: u64 = 8_000_000;

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

/// [`entries_of`] an index read from `index` as it arrives. An error of
/// the reader (a bound passed) is the error.
pub fn read_entries(index: impl Read, name: &str) -> Result<Vec<IndexEntry>, String> {
    let failed = Rc::new(RefCell::new(None));
    let chars = Utf8Chars {
        bytes: BufReader::with_capacity(64 * 1024, index).bytes(),
        offset: 0,
        failed: failed.clone(),
    };
    let mut events = Events {
        parser: Parser::new(chars),
        budget: Budget::with_max_nodes(INDEX_MAX_NODES),
        failed,
    };
    let mut found = Vec::new();
    loop {
        match events.next()? {
            (Event::StreamEnd, _) => return Ok(found),
            (Event::MappingStart(..), _) => {
                // The document's top mapping: find `entries`.
                while let Some(key) = events.key()? {
                    if key == "entries" {
                        found.extend(events.chart_map(name)?);
                    } else {
                        events.skip_value()?;
                    }
                }
            }
            (Event::SequenceStart(..), line) | (Event::Scalar(..), line) => {
                return Err(format!(
                    "index.yaml is not a chart repository index: line {line} holds no mapping"
                ));
            }
            _ => {}
        }
    }
}

/// The characters of a UTF-8 byte stream; the first error (of the reader,
/// or a byte sequence that is not UTF-8) ends it and is kept in `failed`.
struct Utf8Chars<R: Read> {
    bytes: Bytes<BufReader<R>>,
    offset: u64,
    failed: Rc<RefCell<Option<String>>>,
}

impl<R: Read> Utf8Chars<R> {
    fn fail(&mut self, why: String) -> Option<char> {
        self.failed.borrow_mut().get_or_insert(why);
        None
    }
}

impl<R: Read> Iterator for Utf8Chars<R> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let mut buf = [0u8; 4];
        let first = match self.bytes.next()? {
            Ok(b) => b,
            Err(e) => return self.fail(e.to_string()),
        };
        let len = match first {
            0x00..=0x7f => return Some(first as char).inspect(|_| self.offset += 1),
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 0,
        };
        buf[0] = first;
        for slot in buf.iter_mut().take(len).skip(1) {
            match self.bytes.next() {
                Some(Ok(b)) => *slot = b,
                Some(Err(e)) => return self.fail(e.to_string()),
                None => break,
            }
        }
        match std::str::from_utf8(&buf[..len.max(1)])
            .ok()
            .and_then(|s| s.chars().next())
        {
            Some(c) if len > 0 => {
                self.offset += len as u64;
                Some(c)
            }
            _ => {
                let at = self.offset;
                self.fail(format!("index.yaml is not UTF-8 text (byte {at})"))
            }
        }
    }
}

/// The event stream, counted by the YAML budget, with what the index's
/// shape needs.
struct Events<R: Read> {
    parser: Parser<Utf8Chars<R>>,
    budget: Budget,
    failed: Rc<RefCell<Option<String>>>,
}

impl<R: Read> Events<R> {
    fn next(&mut self) -> Result<(Event, usize), String> {
        let next = self.parser.next_token();
        // A cut-off or undecodable stream ends the characters early: say
        // why, not what the parser made of the end.
        if let Some(why) = self.failed.borrow_mut().take() {
            return Err(why);
        }
        let (event, mark) = next.map_err(|e| match self.budget.scan_error(&e) {
            refused @ crate::cached::yaml::Refused::TooDeep { .. } => {
                format!("index.yaml is refused: {refused}")
            }
            _ => format!(
                "index.yaml is not valid YAML at line {}, column {}",
                e.marker().line(),
                e.marker().col() + 1
            ),
        })?;
        self.budget
            .see(&event, mark.line())
            .map_err(|e| format!("index.yaml is refused: {e}"))?;
        Ok((event, mark.line()))
    }

    /// The next key of the mapping being read (`None`: its end). A key
    /// that is not a scalar is skipped with its value, read as "" .
    fn key(&mut self) -> Result<Option<String>, String> {
        loop {
            match self.next()? {
                (Event::MappingEnd, _) => return Ok(None),
                (Event::Scalar(k, ..), _) => return Ok(Some(k)),
                (first, _) => {
                    self.skip(first)?;
                    self.skip_value()?;
                }
            }
        }
    }

    fn skip_value(&mut self) -> Result<(), String> {
        let (first, _) = self.next()?;
        self.skip(first)
    }

    /// Consumes the rest of the node that starts with `first`.
    fn skip(&mut self, first: Event) -> Result<(), String> {
        let mut depth = match first {
            Event::SequenceStart(..) | Event::MappingStart(..) => 1usize,
            _ => 0,
        };
        while depth > 0 {
            match self.next()?.0 {
                Event::SequenceStart(..) | Event::MappingStart(..) => depth += 1,
                Event::SequenceEnd | Event::MappingEnd => depth -= 1,
                Event::StreamEnd => return Err("index.yaml ends inside a node".into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// `entries`: chart name → list of versions; only `name`'s are built.
    fn chart_map(&mut self, name: &str) -> Result<Vec<IndexEntry>, String> {
        let (first, line) = self.next()?;
        if !matches!(first, Event::MappingStart(..)) {
            self.skip(first)?;
            return Err(format!(
                "index.yaml is not a chart repository index: `entries` (line {line}) is not a mapping"
            ));
        }
        let mut found = Vec::new();
        while let Some(chart) = self.key()? {
            if chart == name {
                found.extend(self.versions()?);
            } else {
                self.skip_value()?;
            }
        }
        Ok(found)
    }

    /// A chart's list of versions.
    fn versions(&mut self) -> Result<Vec<IndexEntry>, String> {
        let (first, line) = self.next()?;
        if !matches!(first, Event::SequenceStart(..)) {
            self.skip(first)?;
            return Err(format!(
                "index.yaml is not a chart repository index: the chart's entry (line {line}) is not a list"
            ));
        }
        let mut versions = Vec::new();
        loop {
            match self.next()? {
                (Event::SequenceEnd, _) => return Ok(versions),
                (Event::MappingStart(..), _) => versions.push(self.entry()?),
                (other, _) => self.skip(other)?,
            }
        }
    }

    /// One version's mapping (after its start): `version`, `urls`, `digest`.
    fn entry(&mut self) -> Result<IndexEntry, String> {
        let mut entry = IndexEntry::default();
        while let Some(key) = self.key()? {
            match (key.as_str(), self.next()?) {
                ("version", (Event::Scalar(v, ..), _)) => entry.version = v,
                ("digest", (Event::Scalar(v, ..), _)) => entry.digest = v,
                ("urls", (Event::SequenceStart(..), _)) => loop {
                    match self.next()?.0 {
                        Event::SequenceEnd => break,
                        Event::Scalar(u, ..) => entry.urls.push(u),
                        other => self.skip(other)?,
                    }
                },
                (_, (other, _)) => self.skip(other)?,
            }
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
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
