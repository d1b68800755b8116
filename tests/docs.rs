//! The documentation stands on its own: every relative link of the README
//! and `docs/` leads to a file of the repository and, with an anchor, to a
//! heading of it; nothing in the repository points at a file outside it;
//! the README stays short enough to read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README and every Markdown file under `docs/`.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    let mut dirs = vec![Path::new(ROOT).join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// GitHub's anchor of a heading: lower case, punctuation dropped but `-`
/// and `_`, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// `line` without its code spans (a pattern there is no link).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of `[text](target)` links in `text`'s prose.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_of_the_repository() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = match path {
                "" => doc.clone(),
                p => doc.parent().unwrap().join(p),
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", doc.display()));
                continue;
            }
            let is_markdown = target.extension().is_some_and(|e| e == "md");
            if !fragment.is_empty() && is_markdown {
                let headings = anchors(&std::fs::read_to_string(&target).unwrap());
                if !headings.contains(fragment) {
                    broken.push(format!("{}: {link} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn nothing_points_at_a_file_outside_the_repository() {
    // Spelled in pieces, so that this file does not find itself.
    let outside = [
        concat!("DELIVERY", ".md"),
        concat!("../", "shared"),
        concat!("API", ".md"),
    ];
    let mut found = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "src",
        "pkg",
        "tests",
        "examples",
        "hack",
        "manifests",
        "charts",
        "docs",
    ]
    .iter()
    .map(|d| Path::new(ROOT).join(d))
    .collect();
    let mut files = vec![Path::new(ROOT).join("README.md")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if outside.iter().any(|o| line.contains(o)) {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "references to files outside the repository:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_readme_is_short_and_links_every_document() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines (at most 200: the detail belongs in docs/)"
    );
    let linked: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|l| l.split('#').next().unwrap().to_string())
        .collect();
    for doc in documents()
        .iter()
        .filter(|d| d.parent().is_some_and(|p| p.ends_with("docs")))
    {
        let name = format!("docs/{}", doc.file_name().unwrap().to_string_lossy());
        assert!(linked.contains(&name), "README.md does not link {name}");
    }
}
