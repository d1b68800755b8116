//! What to do about each reason: one sentence each, read from the table
//! "What to do, by reason" of docs/delivery.md (compiled in), so the page
//! and the docs cannot say different things.

use std::collections::HashMap;
use std::sync::LazyLock;

const DOC: &str = include_str!("../../docs/delivery.md");
const SECTION: &str = "## What to do, by reason";

/// Reason → sentence, from the table's rows `` | `Reason` | sentence | ``.
static REMEDIES: LazyLock<HashMap<&'static str, &'static str>> = LazyLock::new(|| {
    let Some(start) = DOC.find(SECTION) else {
        return HashMap::new();
    };
    let section = &DOC[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    section
        .lines()
        .filter_map(|line| {
            let row = line.strip_prefix("| `")?;
            let (reason, rest) = row.split_once("` | ")?;
            Some((reason, rest.strip_suffix(" |")?.trim()))
        })
        .collect()
});

/// The sentence for `reason` (`None`: not a reason of ours).
pub fn remedy(reason: &str) -> Option<&'static str> {
    REMEDIES.get(reason).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::reason::Reason;

    #[test]
    fn every_reason_has_one_sentence_in_docs_delivery() {
        for reason in Reason::ALL {
            let sentence = remedy(reason.as_str()).unwrap_or_else(|| {
                panic!("docs/delivery.md's \"{SECTION}\" has no row for {reason}")
            });
            assert!(sentence.ends_with('.'), "{reason}: {sentence}");
        }
        assert_eq!(
            REMEDIES.len(),
            Reason::ALL.len(),
            "a row for a reason that is not one"
        );
        assert_eq!(remedy("NoSuchReason"), None);
    }
}
