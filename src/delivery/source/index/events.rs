//! The full reading of an `index.yaml`: a stream of YAML events, each
//! counted by the YAML budget, only the wanted chart's versions built —
//! for an index of any shape.

use std::cell::RefCell;
use std::io::{BufReader, Bytes, Read};
use std::rc::Rc;

use yaml_rust2::parser::{Event, Parser};

use crate::lean::yaml::Budget;

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

/// The versions of chart `name` in `index`, walked as YAML events as it
/// arrives (none: the chart is not there). An error of the reader (a
/// bound passed) is the error.
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
            refused @ crate::lean::yaml::Refused::TooDeep { .. } => {
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
