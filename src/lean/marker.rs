//! The `hossted_helm: true` marker of a release's rendered manifest
//! (docs/inventory.md): a mapping key `hossted_helm` whose value is true — `true`,
//! `True`, `TRUE` or the string `"true"`, not `yes`/`on` — at any depth of
//! any document, in any YAML style (block or flow mappings, quoted or plain
//! keys). Decided by a YAML parser, so comments and strings that merely
//! mention it do not count.
//!
//! Fast where it matters: a manifest (tens of KB) without the substring
//! `hossted_helm` — nearly all of them — is never parsed, and of one that
//! has it only the documents holding it are.

use yaml_rust2::{Yaml, YamlLoader};

const KEY: &str = "hossted_helm";

/// Whether `manifest` carries the marker (see the module docs). A document
/// that does not parse, or is refused by [`super::yaml::check`] (an alias
/// bomb), carries none.
pub fn has_hossted_marker(manifest: &str) -> bool {
    if !manifest.contains(KEY) {
        return false;
    }
    documents(manifest)
        .filter(|doc| doc.contains(KEY))
        // A document past the YAML budget is refused unread: not marked.
        .filter(|doc| crate::lean::yaml::check(doc).is_ok())
        .any(|doc| {
            YamlLoader::load_from_str(doc)
                .map(|docs| docs.iter().any(marked))
                .unwrap_or(false)
        })
}

/// The documents of a multi-document stream, split at `---` lines.
pub(crate) fn documents(manifest: &str) -> impl Iterator<Item = &str> {
    let mut starts = vec![0];
    let mut offset = 0;
    for line in manifest.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if offset > 0 && (bare == "---" || bare.starts_with("--- ")) {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(manifest.len());
    starts
        .windows(2)
        .map(move |w| &manifest[w[0]..w[1]])
        .collect::<Vec<_>>()
        .into_iter()
}

/// Whether any mapping in `doc` has the marker, walked without recursion
/// (a hostile, deeply nested document cannot overflow the stack).
fn marked(doc: &Yaml) -> bool {
    let mut stack = vec![doc];
    while let Some(node) = stack.pop() {
        match node {
            Yaml::Hash(map) => {
                for (k, v) in map {
                    if k.as_str() == Some(KEY)
                        && matches!(v, Yaml::Boolean(true)) | (v.as_str() == Some("true"))
                    {
                        return true;
                    }
                    stack.push(k);
                    stack.push(v);
                }
            }
            Yaml::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_bomb_carries_no_marker_and_is_not_expanded() {
        // 10^12 nodes once expanded; the loader would clone every one.
        let mut doc = String::from("hossted_helm: true\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            doc.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        assert!(!has_hossted_marker(&doc));
        // The same document with few aliases is read and marked.
        assert!(has_hossted_marker("hossted_helm: true\na: &a [1]\nb: *a\n"));
    }

    #[test]
    fn the_marker_is_a_key_with_value_true_in_any_style() {
        for yes in [
            "labels:\n  hossted_helm: true",
            "labels:\n  hossted_helm: \"true\"",
            "labels:\n  hossted_helm: 'true'   # set by hossted",
            "labels:\n  \"hossted_helm\": True",
            "items:\n- hossted_helm: TRUE",
            "hossted_helm  :  true",
            "labels: {app: x, hossted_helm: \"true\", tier: web}",
            "spec: {template: {metadata: {labels: {'hossted_helm': true}}}}",
            "list: [a, {hossted_helm: true}]",
        ] {
            let m = format!("---\nkind: A\n---\nkind: B\n{yes}\nc: d\n");
            assert!(has_hossted_marker(&m), "{yes:?}");
        }
        for no in [
            "hossted_helm: false",
            "hossted_helm: \"false\"",
            "hossted_helm: \"True\"",
            "hossted_helm_extra: true",
            "not_hossted_helm: true",
            "# hossted_helm: true",
            "description: set hossted_helm: true to enable",
            "description: \"hossted_helm: true\"",
            "hossted_helm: truthy",
            "hossted_helm: yes",
            "hossted_helm: on",
            "hossted_helm: 1",
            "hossted_helm:",
            "script: |\n  hossted_helm: true",
            "labels: {hossted_helm: true",
        ] {
            let m = format!("---\nkind: A\n{no}\n");
            assert!(!has_hossted_marker(&m), "{no:?}");
        }
    }

    /// A tiny deterministic generator (xorshift), so failures replay.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    /// A generated YAML tree: scalars and keys are raw YAML text.
    enum Node {
        Map(Vec<(String, Node)>),
        List(Vec<Node>),
        Scalar(String),
    }

    const TRUE_VALUES: [&str; 5] = ["true", "True", "TRUE", "\"true\"", "'true'"];
    const OTHER_VALUES: [&str; 10] = [
        "false",
        "yes",
        "on",
        "\"yes\"",
        "'True'",
        "1",
        "web",
        "\"hossted_helm: true\"",
        "'set hossted_helm: true'",
        "null",
    ];
    const KEYS: [&str; 3] = ["hossted_helm", "\"hossted_helm\"", "'hossted_helm'"];
    const DECOY_KEYS: [&str; 3] = ["hossted_helm_x", "x_hossted_helm", "\"hossted helm\""];

    /// A random tree; `planted` becomes true when a real marker is placed.
    fn tree(rng: &mut Rng, depth: usize, planted: &mut bool) -> Node {
        match (depth, rng.below(4)) {
            (0, _) | (_, 0) => Node::Scalar(rng.pick(&OTHER_VALUES).to_string()),
            (_, 1) => Node::List(
                (0..1 + rng.below(3))
                    .map(|_| tree(rng, depth - 1, planted))
                    .collect(),
            ),
            _ => {
                let mut entries = Vec::new();
                for i in 0..1 + rng.below(4) {
                    let roll = rng.below(10);
                    let mut marker = false;
                    let (key, value) = if roll == 0 {
                        marker = rng.below(2) == 0;
                        let v = if marker {
                            rng.pick(&TRUE_VALUES)
                        } else {
                            rng.pick(&OTHER_VALUES)
                        };
                        (rng.pick(&KEYS).to_string(), Node::Scalar(v.to_string()))
                    } else if roll == 1 {
                        (
                            rng.pick(&DECOY_KEYS).to_string(),
                            Node::Scalar(rng.pick(&TRUE_VALUES).to_string()),
                        )
                    } else {
                        // A subtree's markers count only if it is kept (keys
                        // kN_i are unique, so it is).
                        (format!("k{depth}_{i}"), tree(rng, depth - 1, planted))
                    };
                    // One key once (YAML forbids duplicates), quoted or not.
                    let bare = |k: &str| k.trim_matches(['"', '\'']).to_string();
                    if !entries
                        .iter()
                        .any(|(k, _): &(String, Node)| bare(k) == bare(&key))
                    {
                        entries.push((key, value));
                        *planted |= marker;
                    }
                }
                Node::Map(entries)
            }
        }
    }

    fn flow(node: &Node) -> String {
        match node {
            Node::Scalar(s) => s.clone(),
            Node::List(items) => format!(
                "[{}]",
                items.iter().map(flow).collect::<Vec<_>>().join(", ")
            ),
            Node::Map(entries) => format!(
                "{{{}}}",
                entries
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", flow(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Block style, with flow collections mixed in and comments that
    /// mention the marker.
    fn block(rng: &mut Rng, node: &Node, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match node {
            Node::Map(entries) => {
                for (k, v) in entries {
                    match v {
                        Node::Scalar(s) => {
                            let comment = if rng.below(5) == 0 {
                                "  # hossted_helm: true"
                            } else {
                                ""
                            };
                            out.push_str(&format!("{pad}{k}: {s}{comment}\n"));
                        }
                        _ if rng.below(3) == 0 => out.push_str(&format!("{pad}{k}: {}\n", flow(v))),
                        _ => {
                            out.push_str(&format!("{pad}{k}:\n"));
                            block(rng, v, indent + 2, out);
                        }
                    }
                }
                if entries.is_empty() {
                    out.push_str(&format!("{pad}empty: {{}}\n"));
                }
            }
            Node::List(items) => {
                for item in items {
                    match item {
                        Node::Scalar(s) => out.push_str(&format!("{pad}- {s}\n")),
                        _ => out.push_str(&format!("{pad}- {}\n", flow(item))),
                    }
                }
            }
            Node::Scalar(s) => out.push_str(&format!("{pad}value: {s}\n")),
        }
    }

    #[test]
    fn the_detector_agrees_with_what_the_generator_planted() {
        let (mut marked_seen, mut unmarked_seen) = (0, 0);
        for seed in 1..=3000u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut planted = false;
            let mut manifest = String::from("# a comment: hossted_helm: true\n");
            for _ in 0..1 + rng.below(3) {
                let doc = Node::Map(vec![
                    ("kind".into(), Node::Scalar("ConfigMap".into())),
                    ("metadata".into(), tree(&mut rng, 4, &mut planted)),
                ]);
                manifest.push_str("---\n# Source: chart/templates/x.yaml\n");
                if rng.below(4) == 0 {
                    manifest.push_str(&flow(&doc));
                    manifest.push('\n');
                } else {
                    block(&mut rng, &doc, 0, &mut manifest);
                }
            }
            assert_eq!(
                has_hossted_marker(&manifest),
                planted,
                "seed {seed}:\n{manifest}"
            );
            if planted {
                marked_seen += 1
            } else {
                unmarked_seen += 1
            }
        }
        assert!(
            marked_seen > 300 && unmarked_seen > 300,
            "{marked_seen} / {unmarked_seen}"
        );
    }
}
