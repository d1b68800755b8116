//! The quick reading of an `index.yaml`: lines, not YAML events.
//!
//! Every index helm, chart-releaser or a registry writes is block style:
//! the `entries` mapping's keys (chart names) on lines of one
//! indentation, everything of a chart on the lines after its key that are
//! indented further (or at the key's indentation, starting with `- `: a
//! sequence written flush with its key). YAML requires a value's
//! continuation lines — block scalars, quoted or flow scalars spanning
//! lines, flow collections — to be indented past the key they belong to,
//! so such a line never starts a chart. Carving by indentation therefore
//! finds exactly the lines of the wanted chart without parsing the others;
//! only those lines go through the YAML parser and its budget (26 MB of
//! Bitnami's shape: ~20 ms of lines against ~0.9 s of YAML events).
//!
//! Whatever does not fit that shape — a tab in an indentation, a flow
//! style `entries`, a quoted or complex key, a second document, an alias
//! to an anchor outside the wanted chart, a wanted chart that does not
//! parse — is `Ok(None)`: the caller reads the index again with the full
//! parser, whose answer (or error, with its line) stands.
//!
//! Lines of other charts are looked at only for their indentation: an
//! index that is invalid YAML only inside charts nobody asked for is read,
//! where the full parser would refuse it.

use std::io::{BufRead, BufReader, Read};

use super::events::{IndexEntry, read_entries};

/// The versions of chart `name` in `index`, read by indentation (module
/// docs); `Ok(None)`: `index` is not in the shape this reads. An error of
/// the reader (a bound passed) is the error.
pub fn carve_entries(index: impl Read, name: &str) -> Result<Option<Vec<IndexEntry>>, String> {
    let Some(document) = wanted_lines(index, name)? else {
        return Ok(None);
    };
    if document.len() == DOCUMENT_START.len() {
        return Ok(Some(Vec::new()));
    }
    Ok(read_entries(document.as_slice(), name).ok())
}

/// What the kept lines are put under: a document of the wanted chart alone.
const DOCUMENT_START: &[u8] = b"entries:\n";

/// Bytes of the wanted chart's lines kept at most (Bitnami's largest chart
/// has ~1 MB); past that the full parser, which keeps only the versions,
/// reads the index.
const MAX_KEPT: usize = 8 << 20;

/// Where the line reader is in the document.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Before the first top-level key.
    Start,
    /// Top-level keys other than `entries` (and their values).
    Top,
    /// Right after `entries:`; its keys' indentation is not known yet.
    EntriesStart,
    /// Inside `entries`, whose keys are indented `indent` spaces; `keep`:
    /// the current chart is the wanted one.
    Entries { indent: usize, keep: bool },
}

/// The lines of every `name:` key of `entries` and its value, verbatim,
/// after [`DOCUMENT_START`]; `None`: a line does not fit the shape, or
/// they pass [`MAX_KEPT`].
fn wanted_lines(index: impl Read, name: &str) -> Result<Option<Vec<u8>>, String> {
    let mut reader = BufReader::with_capacity(64 * 1024, index);
    let (mut line, mut kept) = (Vec::new(), DOCUMENT_START.to_vec());
    let mut place = Place::Start;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line);
        if read.map_err(|e| e.to_string())? == 0 {
            return Ok(Some(kept));
        }
        if kept.len() > MAX_KEPT {
            return Ok(None);
        }
        let text = trim_line_end(&line);
        let indent = text.iter().take_while(|&&b| b == b' ').count();
        let rest = &text[indent..];
        let blank = rest.is_empty() || rest[0] == b'#';
        // What belongs to the key before: deeper lines, blank lines and
        // comments, and a sequence written flush with its key.
        let within = |key_indent: usize| {
            indent > key_indent || blank || (indent == key_indent && is_sequence_item(rest))
        };
        place = match place {
            Place::Entries { indent: k, keep } if within(k) => {
                if keep {
                    kept.extend_from_slice(&line);
                }
                continue;
            }
            Place::Top if within(0) => continue,
            _ if blank => continue,
            _ if rest[0] == b'\t' => return Ok(None),
            Place::Start if text == b"---" => continue,
            Place::Start | Place::Top if indent == 0 => Place::Top,
            Place::EntriesStart if indent > 0 => Place::Entries {
                indent,
                keep: false,
            },
            Place::Entries { .. } if indent == 0 => Place::Top,
            Place::Entries { indent: k, .. } if indent == k => place,
            // A top-level value indented, `entries:` with no keys under it,
            // keys of `entries` at two indentations: the full parser says
            // what that is.
            _ => return Ok(None),
        };
        let Some((key, value)) = plain_key(rest) else {
            return Ok(None);
        };
        place = match place {
            Place::Top if key != b"entries" => Place::Top,
            Place::Top if value.is_empty() => Place::EntriesStart,
            // What helm writes for a repository without charts.
            Place::Top if value == b"{}" => Place::Top,
            // `entries: {…}`: flow style.
            Place::Top => return Ok(None),
            Place::Entries { indent, .. } => {
                let keep = key == name.as_bytes();
                if keep {
                    kept.extend_from_slice(&line);
                }
                Place::Entries { indent, keep }
            }
            Place::Start | Place::EntriesStart => return Ok(None),
        };
    }
}

/// The line without its line break (`\n` or `\r\n`).
fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `- …` or a lone `-`: an item of a sequence.
fn is_sequence_item(rest: &[u8]) -> bool {
    rest.first() == Some(&b'-') && matches!(rest.get(1), None | Some(b' '))
}

/// A line that is `key:` or `key: value` with a plain key that cannot be
/// anything else (no quote, flow, anchor, tag or complex-key indicator):
/// the key (trailing spaces trimmed) and what follows its `:` (a comment
/// counts as nothing).
fn plain_key(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    if !rest[0].is_ascii_alphanumeric() && !matches!(rest[0], b'_' | b'.' | b'/') {
        return None;
    }
    let colon = (0..rest.len())
        .find(|&i| rest[i] == b':' && matches!(rest.get(i + 1), None | Some(b' ')))?;
    let key = rest[..colon].trim_ascii_end();
    if key.iter().any(|b| b"#{}[],&*!|>'\"%@`\t".contains(b)) {
        return None;
    }
    let value = rest[colon + 1..].trim_ascii();
    let value = if value.first() == Some(&b'#') {
        &[][..]
    } else {
        value
    };
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick reading of `index`, which must be taken (not handed to
    /// the full parser) and agree with it.
    fn carved_as_parsed(index: &str, name: &str) -> Vec<IndexEntry> {
        let carved = carve_entries(index.as_bytes(), name)
            .expect("no reader error")
            .unwrap_or_else(|| panic!("not carved:\n{index}"));
        let parsed = read_entries(index.as_bytes(), name).expect("a valid index");
        assert_eq!(carved, parsed, "{index}");
        carved
    }

    #[test]
    fn block_style_indexes_are_carved_with_the_full_parsers_answer() {
        let web = "  web:\n  - version: 1.0.0\n    digest: d1\n    urls:\n    - web-1.0.0.tgz\n";
        let deep = "  web:\n    - version: 2.0.0\n      urls: [\"web-2.0.0.tgz\"]\n    - {version: 1.0.0, urls: [a.tgz]}\n";
        // Lines of another chart that look like keys of `entries`, but
        // indented as its values must be.
        let tricky = "  other:\n  - description: |\n      web:\n      - version: 6.6.6\n\n      entries:\n    name: \"multi\n      web: line\"\n    version: 0.1.0\n";
        for (index, versions) in [
            (
                format!("apiVersion: v1\nentries:\n{web}generated: now\n"),
                1,
            ),
            (
                format!("---\napiVersion: v1\nentries:\n{tricky}{web}  api:\n  - version: 3.0.0\n"),
                1,
            ),
            (
                format!("entries: # charts\n{deep}  zz: []\nserverInfo:\n  contextPath: /x\n"),
                2,
            ),
            (format!("entries:\n{web}{tricky}{web}"), 2),
            (format!("entries:\n{}", web.replace('\n', "\r\n")), 1),
            (format!("entries:\n\n  # a comment\n{web}\n# end\n"), 1),
            (format!("keywords:\n- a\nentries:\n{tricky}"), 0),
            (
                "entries:\n      web:\n      - version: 1.0.0\n".to_string(),
                1,
            ),
            (
                "apiVersion: v1\nentries: {}\ngenerated: now\n".to_string(),
                0,
            ),
        ] {
            assert_eq!(carved_as_parsed(&index, "web").len(), versions, "{index}");
        }
    }

    #[test]
    fn other_shapes_go_to_the_full_parser_which_answers() {
        for index in [
            "entries: {web: [{version: 1.0.0}]}\n",
            "entries:\n  \"web\":\n  - version: 1.0.0\n",
            "entries:\n\tweb:\n\t- version: 1.0.0\n",
            "other: &v 1.0.0\nentries:\n  web:\n  - version: *v\n",
            "\u{feff}entries:\n  web:\n  - version: 1.0.0\n",
            "entries:\n    api: []\n  web:\n  - version: 1.0.0\n",
            "entries:\n  web:\n  - version: 1.0.0\n---\nentries: {}\n",
            "- entries\n",
            "entries:\ngenerated: now\n",
        ] {
            assert_eq!(
                carve_entries(index.as_bytes(), "web").expect("no reader error"),
                None,
                "{index:?}"
            );
        }
        let anchored = "other: &v 1.0.0\nentries:\n  web:\n  - version: *v\n";
        assert_eq!(
            super::super::entries_of(anchored.as_bytes(), "web"),
            read_entries(anchored.as_bytes(), "web")
        );
    }

    #[test]
    fn a_chart_past_the_bound_of_kept_lines_goes_to_the_full_parser() {
        let mut index = String::from("entries:\n  web:\n");
        while index.len() <= MAX_KEPT + 1024 {
            index.push_str("  - {version: 1.0.0, description: a chart of very many versions}\n");
        }
        assert_eq!(carve_entries(index.as_bytes(), "web").unwrap(), None);
        assert_eq!(
            carve_entries(index.as_bytes(), "api").unwrap(),
            Some(vec![])
        );
    }

    #[test]
    fn a_bomb_in_a_chart_not_asked_for_costs_nothing_and_one_asked_for_is_refused() {
        let mut bomb = String::from("  bomb:\n  - l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            bomb.push_str(&format!(
                "    l{i}: &l{i} [{}]\n",
                vec![format!("*l{}", i - 1); 10].join(", ")
            ));
        }
        let index = format!("entries:\n{bomb}  web:\n  - version: 1.0.0\n");
        let carved = carve_entries(index.as_bytes(), "web").expect("no reader error");
        assert_eq!(carved.expect("carved").len(), 1);
        // The full parser walks every chart, and refuses the index.
        assert!(read_entries(index.as_bytes(), "web").is_err());
        let e = super::super::entries_of(index.as_bytes(), "bomb").unwrap_err();
        assert!(e.contains("nodes"), "{e}");
    }
}
