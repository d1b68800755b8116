//! The budget every YAML document passes before a parser builds it.
//!
//! YAML aliases (`*a`) repeat an anchored node (`&a`) wherever they
//! appear, so a few KB of nested aliases ("billion laughs") stand for
//! billions of nodes, and parsers that build values copy every one of them
//! (yaml-rust2's loader clones the anchored node at each alias;
//! serde_yaml_ng's limit counts alias jumps, not what they expand to). The
//! operator parses YAML that anyone who can write a Secret, a HelmApp or a
//! chart repository can send; [`check`] reads the document's *event*
//! stream once — linear in its text, nothing expanded — and computes how
//! many nodes it would become. Only a document within [`MAX_NODES`] and
//! [`MAX_DEPTH`] is handed to a parser, whose work is then bounded too.
//!
//! Its error says what was exceeded and where, never a byte of the input:
//! the document may be someone else's (a repository's index, a release's
//! manifest).
//!
//! ```
//! use hossted_operator::lean::yaml::{check, Refused};
//! assert!(check("a: &x [1, 2]\nb: *x\n").is_ok());
//! let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n\
//!             b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
//!             c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
//!             d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
//!             e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
//! assert!(matches!(check(bomb), Err(Refused::TooManyNodes { .. })));
//! ```

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};

/// Nodes one document may expand to (aliases counted as what they repeat).
pub const MAX_NODES: u64 = 100_000;
/// Collections one inside another, at most.
pub const MAX_DEPTH: usize = 256;

/// Why a YAML text is refused. Never carries any of the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "document {document} expands to more than {max} nodes, aliases counted as what they repeat (line {line})"
    )]
    TooManyNodes {
        document: usize,
        line: usize,
        max: u64,
    },
    #[error("document {document} nests collections deeper than {MAX_DEPTH} (line {line})")]
    TooDeep { document: usize, line: usize },
    #[error("not valid YAML at line {line}, column {column}")]
    Syntax { line: usize, column: usize },
}

/// Whether every document of `text` stays within [`MAX_NODES`] and
/// [`MAX_DEPTH`] (see the module docs). Work and memory are linear in
/// `text`: one pass over its events, one number kept per anchor.
pub fn check(text: &str) -> Result<(), Refused> {
    let mut parser = Parser::new_from_str(text);
    let mut budget = Budget::default();
    loop {
        let (event, mark) = parser.next_token().map_err(|e| budget.scan_error(&e))?;
        if event == Event::StreamEnd {
            return Ok(());
        }
        budget.see(&event, mark.line())?;
    }
}

/// The count [`check`] keeps, for a caller that walks the events itself
/// (the index parser reads them as they arrive): [`Budget::see`] every
/// event, in order.
#[derive(Debug)]
pub struct Budget {
    /// Nodes one document may expand to ([`MAX_NODES`] by default).
    max_nodes: u64,
    /// Expanded size of each complete anchored node of this document.
    anchored: HashMap<usize, u64>,
    /// Open collections: (anchor id, nodes so far including itself).
    open: Vec<(usize, u64)>,
    document: usize,
    nodes: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::with_max_nodes(MAX_NODES)
    }
}

impl Budget {
    /// A budget of `max_nodes` per document: for a reader that builds only
    /// a part of a large document (the index parser keeps one chart's
    /// entries), so that the bound is on expansion, not on honest size.
    pub fn with_max_nodes(max_nodes: u64) -> Self {
        Budget {
            max_nodes,
            anchored: HashMap::new(),
            open: Vec::new(),
            document: 0,
            nodes: 0,
        }
    }

    /// Counts `event` (at `line`); `Err` once the document is past a bound.
    pub fn see(&mut self, event: &Event, line: usize) -> Result<(), Refused> {
        // Nodes this event adds where it stands.
        let added = match event {
            Event::DocumentStart => {
                self.document += 1;
                self.nodes = 0;
                self.anchored.clear();
                0
            }
            Event::Scalar(_, _, anchor, _) => {
                if *anchor > 0 {
                    self.anchored.insert(*anchor, 1);
                }
                1
            }
            // An alias of a node still open (a cycle) or unknown expands to
            // one node here; the parser that builds it refuses it.
            Event::Alias(anchor) => self.anchored.get(anchor).copied().unwrap_or(1),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                self.open.push((*anchor, 1));
                if self.open.len() > MAX_DEPTH {
                    return Err(self.too_deep(line));
                }
                return self.add(1, line);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some((anchor, size)) = self.open.pop() else {
                    return Ok(());
                };
                if anchor > 0 {
                    self.anchored.insert(anchor, size);
                }
                // Already counted in `nodes`; only the parent grows.
                if let Some(parent) = self.open.last_mut() {
                    parent.1 = parent.1.saturating_add(size);
                }
                return Ok(());
            }
            _ => 0,
        };
        if let Some(parent) = self.open.last_mut() {
            parent.1 = parent.1.saturating_add(added);
        }
        self.add(added, line)
    }

    fn add(&mut self, nodes: u64, line: usize) -> Result<(), Refused> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > self.max_nodes {
            return Err(Refused::TooManyNodes {
                document: self.document,
                line,
                max: self.max_nodes,
            });
        }
        Ok(())
    }

    fn too_deep(&self, line: usize) -> Refused {
        Refused::TooDeep {
            document: self.document.max(1),
            line,
        }
    }

    /// A scanner error as a refusal (the scanner stops flow collections
    /// at 255 levels itself: that is "too deep").
    pub fn scan_error(&self, e: &yaml_rust2::ScanError) -> Refused {
        if e.info() == "recursion limit exceeded" {
            self.too_deep(e.marker().line())
        } else {
            Refused::Syntax {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `levels` levels of `width` aliases each to the level below.
    fn laughs(levels: usize, width: usize) -> String {
        let mut text = format!("l0: &l0 [{}]\n", vec!["x"; width].join(", "));
        for i in 1..levels {
            let refs = vec![format!("*l{}", i - 1); width].join(", ");
            text.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn ordinary_documents_pass_with_their_aliases() {
        assert_eq!(check(""), Ok(()));
        assert_eq!(check("a: 1\n---\nb: [1, 2, {c: d}]\n"), Ok(()));
        assert_eq!(check("base: &b {x: 1}\none: *b\ntwo: *b\n"), Ok(()));
        // 10^4 expanded leaves: well within the budget.
        assert_eq!(check(&laughs(4, 10)), Ok(()));
    }

    #[test]
    fn aliases_that_expand_past_the_budget_are_refused_whatever_the_text_size() {
        // 10^6 leaves from a few hundred bytes.
        let bomb = laughs(6, 10);
        assert!(bomb.len() < 600, "{}", bomb.len());
        assert!(matches!(
            check(&bomb),
            Err(Refused::TooManyNodes { document: 1, .. })
        ));
        // 9 levels of 9: 387 million leaves; refused as fast as the above.
        assert!(matches!(
            check(&laughs(9, 9)),
            Err(Refused::TooManyNodes { .. })
        ));
    }

    #[test]
    fn the_budget_is_per_document() {
        let half = laughs(4, 10); // 11,111 nodes or so
        let many: String = (0..20).map(|_| format!("---\n{half}")).collect();
        assert_eq!(check(&many), Ok(()), "20 documents of ~11k nodes each");
    }

    #[test]
    fn deep_nesting_is_refused_without_recursion() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(
            matches!(check(&deep), Err(Refused::TooDeep { .. })),
            "{:?}",
            check(&deep)
        );
        let block: String = (0..300).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert!(matches!(check(&block), Err(Refused::TooDeep { .. })));
        let ok = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(check(&ok), Ok(()));
    }

    #[test]
    fn errors_never_carry_the_text() {
        let secret = "password: hunter2-very-secret\n  bad: [";
        let e = check(secret).unwrap_err();
        assert!(matches!(e, Refused::Syntax { .. }), "{e:?}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
