//! The parsers hostile input reaches (docs/security.md "Hostile input"): property
//! tests over generated YAML — anchors, aliases, nesting, sizes — that the
//! YAML budget counts exactly and that no parser behind it builds more than
//! the budget allows (the parse work stays linear in the input); and fuzz
//! loops of every parser outside bytes reach — the release decoder, the
//! marker, the `--set` parser, the index parser, Git trees, SOPS documents,
//! `.prov` files, cosign documents, `known_hosts`, CEL, change windows,
//! `convert`'s input and a stored manifest's bound (against helm's own
//! splitting) — run for `FUZZ_SECONDS` each by `hack/fuzz.sh`, and
//! for a fixed `FUZZ_INPUTS` by `hack/test.sh`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use hossted_operator::delivery::source::index::entries_of;
use hossted_operator::delivery::values::{apply_set, parse_document};
use hossted_operator::lean::helm::{decode_release, encode_release};
use hossted_operator::lean::marker::has_hossted_marker;
use hossted_operator::lean::yaml::{self, MAX_NODES, Refused};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// A document of anchored levels (`lN: &lN [...]`), with the number of
/// nodes it expands to and its deepest nesting, computed by construction.
#[derive(Debug, Clone)]
struct Generated {
    text: String,
    expanded: u64,
    depth: usize,
}

fn generated() -> impl Strategy<Value = Generated> {
    let level = (
        prop::collection::vec(prop::option::weighted(0.8, 0usize..64), 1..14),
        0usize..4,
    );
    (prop::collection::vec(level, 1..12), 0usize..300).prop_map(|(levels, deep)| {
        let mut text = String::new();
        let mut sizes: Vec<u64> = Vec::new();
        // The top mapping.
        let mut expanded: u64 = 1;
        for (i, (items, depth)) in levels.into_iter().enumerate() {
            // Each item a plain scalar or an alias to an earlier level.
            let items: Vec<Option<usize>> = items
                .into_iter()
                // Mostly to one of the last three levels: the bombs.
                .map(|a| a.filter(|_| i > 0).map(|a| i - 1 - a % i.min(3)))
                .collect();
            let mut inner: Vec<String> = Vec::new();
            let mut size: u64 = 0;
            for item in &items {
                match item {
                    Some(j) => {
                        inner.push(format!("*l{j}"));
                        size = size.saturating_add(sizes[*j]);
                    }
                    None => {
                        inner.push("x".into());
                        size += 1;
                    }
                }
            }
            let mut node = format!("[{}]", inner.join(", "));
            size += 1;
            for _ in 0..depth {
                node = format!("[{node}]");
                size += 1;
            }
            sizes.push(size);
            text.push_str(&format!("l{i}: &l{i} {node}\n"));
            // The key, and the value.
            expanded = expanded.saturating_add(1).saturating_add(size);
        }
        // One more key holding `deep` nested block sequences (the levels
        // above nest at most 1 + 1 + 4 deep).
        if deep > 0 {
            text.push_str("deep:\n");
            for d in 0..deep {
                text.push_str(&format!("{}-\n", "  ".repeat(d + 1)));
            }
            // The key, the sequences, the null at the bottom.
            expanded = expanded.saturating_add(1 + deep as u64 + 1);
        }
        Generated {
            text,
            expanded,
            depth: (1 + deep).max(6),
        }
    })
}

/// Nodes of a JSON value (keys are not counted: YAML counts more).
fn json_nodes(v: &serde_json::Value) -> u64 {
    let mut stack = vec![v];
    let mut n = 0;
    while let Some(v) = stack.pop() {
        n += 1;
        match v {
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The budget refuses a document exactly when its expansion passes
    /// [`MAX_NODES`] (or its nesting 256), and counts without expanding.
    #[test]
    fn the_budget_counts_what_aliases_expand_to(g in generated()) {
        match yaml::check(&g.text) {
            Ok(()) => prop_assert!(
                g.expanded <= MAX_NODES && g.depth <= yaml::MAX_DEPTH,
                "{} nodes, depth {} passed", g.expanded, g.depth
            ),
            Err(Refused::TooManyNodes { .. }) => prop_assert!(g.expanded > MAX_NODES),
            Err(Refused::TooDeep { .. }) => prop_assert!(g.depth > yaml::MAX_DEPTH),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Whatever the budget lets through, no parser behind it builds more
    /// than the budget: values (serde_yaml_ng) and the marker's loader
    /// (yaml-rust2) alike — their work is bounded by the input's length
    /// plus [`MAX_NODES`].
    #[test]
    fn no_parser_builds_more_than_the_budget_allows(g in generated()) {
        if let Ok(v) = parse_document(&g.text) {
            prop_assert!(json_nodes(&v) <= MAX_NODES, "values built {} nodes", json_nodes(&v));
        }
        if yaml::check(&g.text).is_ok() {
            let docs = yaml_rust2::YamlLoader::load_from_str(&g.text).unwrap_or_default();
            let mut stack: Vec<&yaml_rust2::Yaml> = docs.iter().collect();
            let mut n = 0u64;
            while let Some(y) = stack.pop() {
                n += 1;
                match y {
                    yaml_rust2::Yaml::Array(a) => stack.extend(a),
                    yaml_rust2::Yaml::Hash(h) => stack.extend(h.iter().flat_map(|(k, v)| [k, v])),
                    _ => {}
                }
            }
            prop_assert!(n <= MAX_NODES + 1, "the loader built {n} nodes");
        }
        // The marker and the index parser answer, whatever the document.
        let marked = format!("hossted_helm: true\n{}", g.text);
        let _ = has_hossted_marker(&marked);
        let _ = entries_of(g.text.as_bytes(), "l0");
    }
}

/// The generator reaches every outcome the properties above tell apart:
/// passed, too many nodes, too deep (else they could not fail).
#[test]
fn generated_documents_cover_every_outcome() {
    let mut runner = TestRunner::deterministic();
    let (mut ok, mut many, mut deep) = (0, 0, 0);
    for _ in 0..400 {
        let g = generated().new_tree(&mut runner).unwrap().current();
        match yaml::check(&g.text) {
            Ok(()) => ok += 1,
            Err(Refused::TooManyNodes { .. }) => many += 1,
            Err(Refused::TooDeep { .. }) => deep += 1,
            Err(e) => panic!("{e}: {}", g.text),
        }
    }
    assert!(
        ok > 20 && many > 20 && deep > 5,
        "ok {ok}, too many {many}, too deep {deep}"
    );
}

/// Runs `check` on values of `strategy` for `FUZZ_SECONDS` (default 5),
/// and says how many ran; a panic names the input. `FUZZ_INPUTS=N` runs N
/// inputs instead, the same N every time (a deterministic seed): CI's
/// short budget (hack/test.sh), which a regression on one of them fails
/// on every submission.
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(&S::Value))
where
    S::Value: std::fmt::Debug,
{
    fuzz_capped(name, u64::MAX, strategy, check)
}

/// [`fuzz`], with at most `cap` inputs when `FUZZ_INPUTS` asks for more (a
/// target whose every input touches the disk).
fn fuzz_capped<S: Strategy>(name: &str, cap: u64, strategy: S, check: impl Fn(&S::Value))
where
    S::Value: std::fmt::Debug,
{
    let env = |key: &str| std::env::var(key).ok().and_then(|s| s.parse::<u64>().ok());
    let inputs = env("FUZZ_INPUTS").map(|n| n.min(cap));
    let seconds = env("FUZZ_SECONDS").unwrap_or(5);
    let mut runner = match inputs {
        Some(_) => TestRunner::deterministic(),
        None => TestRunner::default(),
    };
    let start = Instant::now();
    let mut runs: u64 = 0;
    let more = |runs: u64| match inputs {
        Some(n) => runs < n,
        None => start.elapsed() < Duration::from_secs(seconds),
    };
    while more(runs) {
        let Ok(tree) = strategy.new_tree(&mut runner) else {
            continue;
        };
        let value = tree.current();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&value))) {
            panic!("fuzz {name}: panicked on {value:?}: {panic:?}");
        }
        runs += 1;
    }
    println!(
        "fuzz {name}: {runs} inputs in {:.1} s, no failure",
        start.elapsed().as_secs_f64()
    );
}

/// Bytes of YAML's and JSON's punctuation, with words the parsers look for.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "hossted_helm",
        ": ",
        "true",
        "&a ",
        "*a",
        "[",
        "]",
        "{",
        "}",
        ",",
        "- ",
        "\n",
        "  ",
        "---\n",
        "\"",
        "'",
        "#",
        "entries",
        "version",
        "urls",
        "tiny",
        "!!str ",
        "<<: ",
        "? ",
        "|\n",
        "x",
        "\t",
        "\u{feff}",
        "SECRETTOKEN",
    ]);
    prop::collection::vec(token, 0..200).prop_map(|t| t.concat())
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_release_decoder() {
    let payload =
        (any::<Vec<u8>>(), yamlish(), 0u8..3).prop_map(|(bytes, text, kind)| match kind {
            0 => bytes,
            1 => encode_release(text.as_bytes()),
            _ => encode_release(
                format!(
                    "{{\"name\":\"r\",\"namespace\":\"n\",\"version\":1,\"manifest\":{}}}",
                    serde_json::Value::String(text)
                )
                .as_bytes(),
            ),
        });
    fuzz("release decoder", payload, |p| {
        let _ = decode_release(p);
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_marker() {
    fuzz("marker", yamlish(), |text| {
        let _ = has_hossted_marker(text);
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_set_parser() {
    let set = prop::collection::vec(
        prop::sample::select(vec![
            "a",
            ".",
            "[",
            "]",
            "0",
            "=",
            ",",
            "{",
            "}",
            "\\",
            "null",
            "true",
            "99999999999",
            "-1",
            " ",
            "b",
        ]),
        0..60,
    )
    .prop_map(|t| t.concat());
    fuzz("--set parser", set, |line| {
        let mut into = serde_json::json!({});
        let _ = apply_set(line, &mut into);
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_index_parser() {
    fuzz("index parser", yamlish(), |text| {
        if let Err(e) = entries_of(text.as_bytes(), "tiny") {
            assert!(!e.contains("SECRETTOKEN"), "an error quotes the index: {e}");
        }
    });
}

/// A tree of a hostile server: entries with names from git's forbidden
/// set and plain ones, files, links and directories, nested.
#[derive(Debug, Clone)]
enum Node {
    File(Vec<u8>),
    Link(String),
    Dir(Vec<(Vec<u8>, Node)>),
}

fn hostile_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "..",
            ".",
            ".git",
            ".GIT",
            "",
            "a/b",
            "../../outside/x",
            "/tmp/x",
            "a\\b",
            "a\0b",
            "values.yaml",
            "Chart.yaml",
            "templates",
            "x",
            "outside",
            "..x",
            ".gitx",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..16).prop_map(Node::File),
        prop::sample::select(vec![
            "../../outside/x",
            "x",
            "../x",
            "/etc/passwd",
            "a/../../b"
        ])
        .prop_map(|t| Node::Link(t.into())),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop::collection::vec((hostile_name(), inner), 0..5).prop_map(Node::Dir)
    })
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_git_tree() {
    use hossted_operator::delivery::source::git::{Checkout, read_chart};
    let root = std::env::temp_dir().join(format!("fuzz-git-tree-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let repo = gix::init_bare(root.join("repo.git")).unwrap();
    fn write(repo: &gix::Repository, node: &Node) -> (&'static str, gix::ObjectId) {
        use gix::objs::Write;
        match node {
            Node::File(content) => (
                "100644",
                repo.objects
                    .write_buf(gix::object::Kind::Blob, content)
                    .unwrap(),
            ),
            Node::Link(target) => (
                "120000",
                repo.objects
                    .write_buf(gix::object::Kind::Blob, target.as_bytes())
                    .unwrap(),
            ),
            Node::Dir(entries) => {
                let mut raw = Vec::new();
                for (name, child) in entries {
                    let (mode, id) = write(repo, child);
                    raw.extend_from_slice(mode.as_bytes());
                    raw.push(b' ');
                    raw.extend_from_slice(name);
                    raw.push(0);
                    raw.extend_from_slice(id.as_bytes());
                }
                (
                    "40000",
                    repo.objects
                        .write_buf(gix::object::Kind::Tree, &raw)
                        .unwrap(),
                )
            }
        }
    }
    let into = root.join("chart").join("here");
    std::fs::create_dir_all(root.join("chart")).unwrap();
    fuzz_capped("git tree", 1_000, node(), |tree| {
        let top = match tree {
            Node::Dir(_) => tree.clone(),
            other => Node::Dir(vec![(b"f".to_vec(), other.clone())]),
        };
        let (_, id) = write(&repo, &top);
        let who = gix::actor::Signature {
            name: "fuzz".into(),
            email: "fuzz@example.com".into(),
            time: gix::date::Time::new(0, 0),
        };
        let commit = repo
            .write_object(gix::objs::Commit {
                tree: id,
                parents: Default::default(),
                author: who.clone(),
                committer: who,
                encoding: None,
                message: "fuzz".into(),
                extra_headers: Vec::new(),
            })
            .unwrap()
            .detach();
        let checkout = Checkout {
            repo: root.join("repo.git"),
            commit: commit.to_string(),
        };
        let _ = read_chart(&checkout, "", &into);
        // Whatever the tree, nothing is ever written outside the chart's
        // directory, and nothing in it is a link.
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written outside"
        );
        for sibling in std::fs::read_dir(root.join("chart")).unwrap() {
            assert_eq!(sibling.unwrap().path(), into, "written beside the chart");
        }
        let mut todo = vec![into.clone()];
        while let Some(d) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let kind = e.file_type().unwrap();
                assert!(!kind.is_symlink(), "a link written: {:?}", e.path());
                if kind.is_dir() {
                    todo.push(e.path());
                }
            }
        }
    });
    let _ = std::fs::remove_dir_all(&root);
}

/// Text of the words a parser looks for, in random order: the YAML
/// tokens of [`yamlish`] with `extra`.
fn words(extra: &'static [&'static str]) -> impl Strategy<Value = String> {
    let token = prop::sample::select(extra.to_vec());
    prop::collection::vec(prop_oneof![token.prop_map(String::from), yamlish()], 0..40)
        .prop_map(|t| t.concat())
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_sops() {
    use hossted_operator::delivery::helmapp::observe::sops::{
        Keys, Unauthenticated, decrypt, is_encrypted,
    };
    let identity = age::x25519::Identity::generate();
    let keys = Keys::parse([age::secrecy::ExposeSecret::expose_secret(
        &identity.to_string(),
    )])
    .unwrap();
    let doc = words(&[
        "sops:\n",
        "  mac: ",
        "ENC[AES256_GCM,data:AAAA,iv:AAAAAAAAAAAAAAAAAAAAAA==,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]",
        "  age:\n",
        "    - recipient: age1x\n",
        "      enc: |\n",
        "-----BEGIN AGE ENCRYPTED FILE-----\n",
        "-----END AGE ENCRYPTED FILE-----\n",
        "  mac_only_encrypted: true\n",
        "  unencrypted_suffix: _unencrypted\n",
        "  encrypted_regex: ^(data|stringData)$\n",
        "  lastmodified: \"2026-01-01T00:00:00Z\"\n",
        "  version: 3.9.0\n",
        "password: ",
        "null",
        "SECRETTOKEN",
    ]);
    fuzz_capped("sops", 5_000, doc, |text| {
        for policy in [Unauthenticated::Refused, Unauthenticated::Accepted] {
            if let Err(e) = decrypt(text, &keys, policy) {
                assert!(
                    !e.to_string().contains("SECRETTOKEN"),
                    "an error quotes the file: {e}"
                );
            }
        }
        let _ = is_encrypted(text);
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_provenance() {
    use hossted_operator::delivery::source::verify::{Trust, provenance};
    let armored = words(&[
        "-----BEGIN PGP SIGNED MESSAGE-----\n",
        "Hash: SHA512\n\n",
        "-----BEGIN PGP SIGNATURE-----\n",
        "-----END PGP SIGNATURE-----\n",
        "files:\n  tiny-0.1.0.tgz: sha256:",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "wsBcBAEBCgAQBQJ",
        "=AAAA\n",
    ]);
    let input = (armored, any::<Vec<u8>>(), any::<Vec<u8>>());
    fuzz("provenance", input, |(prov, archive, keyring)| {
        let trust = Trust {
            provider: apis::helmapp::VerifyProvider::Helm,
            signers: None,
            keyrings: vec![("keys/pubring.gpg".into(), keyring.clone())],
            fingerprint: String::new(),
        };
        assert!(provenance::verify(prov.as_bytes(), archive, &trust).is_err());
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_cosign_documents() {
    use hossted_operator::delivery::source::verify::cosign;
    let json = words(&[
        "{\"schemaVersion\":2,\"layers\":[",
        "{\"mediaType\":\"application/vnd.dev.cosign.simplesigning.v1+json\",",
        "\"digest\":\"sha256:",
        "\"size\":",
        "67108864",
        "\"annotations\":{\"dev.cosignproject.cosign/signature\":\"",
        "\"dev.sigstore.cosign/bundle\":\"",
        "\"dev.sigstore.cosign/certificate\":\"-----BEGIN CERTIFICATE-----",
        "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\",",
        "\"verificationMaterial\":{",
        "\"messageSignature\":{",
        "\"dsseEnvelope\":{",
        "}",
        "]",
        "\"",
        ",",
    ]);
    fuzz(
        "cosign documents",
        (json, any::<Vec<u8>>()),
        |(text, bytes)| {
            if let Ok(declared) = cosign::declared(text.as_bytes()) {
                for d in &declared {
                    let _ = cosign::from_layer(d, bytes);
                    let _ = cosign::from_layer(d, text.as_bytes());
                }
            }
            let _ = cosign::declared(bytes);
            let _ = cosign::from_bundle(text.as_bytes());
            let _ = cosign::from_bundle(bytes);
        },
    );
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_known_hosts() {
    use hossted_operator::delivery::source::git_ssh::known_keys;
    let text = words(&[
        "git.example.com ",
        "[git.example.com]:2222 ",
        "|1|c2FsdA==|aGFzaA== ",
        "@cert-authority ",
        "@revoked ",
        "ssh-ed25519 ",
        "ssh-rsa ",
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        "AAAA",
        ",",
        "*",
        "!",
        "\n",
    ]);
    fuzz("known_hosts", text, |t| {
        for host in ["git.example.com", "[git.example.com]:2222", ""] {
            let _ = known_keys(t, host);
        }
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_cel() {
    use hossted_operator::delivery::helmapp::observe::expressions::{compile, evaluate};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = prop::sample::select(vec![
        "dep",
        ".",
        "spec",
        "status",
        "values",
        "a",
        "items",
        "phase",
        "conditions",
        "all(",
        "exists(",
        "map(",
        "filter(",
        "x",
        ", ",
        ")",
        " in ",
        " == ",
        " && ",
        " || ",
        "!",
        "[",
        "]",
        "0",
        "1",
        "-1",
        "'Running'",
        "\"",
        "size(",
        "has(",
        "matches(",
        "'a*'",
        "+",
        "*",
        "string(",
        "int(",
        "?",
        ":",
        "{",
        "}",
        "x.all(y, ",
        "9223372036854775807",
    ]);
    let source = prop::collection::vec(token, 0..30).prop_map(|t| t.concat());
    let items: Vec<i64> = (0..2_000).collect();
    let dep = serde_json::json!({
        "spec": { "values": { "a": items }, "items": [1, 2, 3] },
        "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] }
    });
    fuzz_capped("CEL", 3_000, source, |s| {
        if compile("readyExpr", s).is_err() {
            return;
        }
        let started = Instant::now();
        let _ = runtime.block_on(evaluate("readyExpr", s, vec![("dep", dep.clone())]));
        // The deadline is 500 ms; a run past it by far is work that went on.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{s:?} ran {:?}",
            started.elapsed()
        );
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_change_windows() {
    use apis::helmapp::{ChangeWindow, ChangeWindows};
    use hossted_operator::delivery::helmapp::decide::windows::Windows;
    let field = prop::sample::select(vec![
        "*", "*/1", "0", "59", "1-5", "1,2,3", "L", "W", "#", "?", "MON", "JAN", "2026", "61",
        "-1", "*/0", "0-59/7", "",
    ]);
    let schedule = prop::collection::vec(field, 0..8).prop_map(|f| f.join(" "));
    let duration = prop::sample::select(vec!["1s", "1h", "744h", "745h", "0s", "-1h", "1x", ""]);
    let window = (schedule, duration).prop_map(|(schedule, duration)| ChangeWindow {
        schedule,
        duration: duration.into(),
    });
    let zone = prop::sample::select(vec![
        "UTC",
        "Europe/Berlin",
        "America/St_Johns",
        "Nowhere/X",
        "",
    ]);
    let windows = (
        zone,
        prop::collection::vec(window.clone(), 0..20),
        prop::collection::vec(window, 0..20),
    )
        .prop_map(|(zone, allow, deny)| ChangeWindows {
            time_zone: zone.into(),
            allow,
            deny,
            repair_anytime: false,
        });
    let now = chrono::Utc::now();
    fuzz_capped("change windows", 3_000, windows, |w| {
        if let Ok(compiled) = Windows::compile(w) {
            let started = Instant::now();
            let _ = compiled.at(now);
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "a verdict took {:?}",
                started.elapsed()
            );
        }
    });
}

#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_convert() {
    use hossted_operator::convert::{convert, read_documents};
    let text = words(&[
        "apiVersion: helm.toolkit.fluxcd.io/v2\n",
        "kind: HelmRelease\n",
        "kind: HelmRepository\n",
        "metadata:\n  name: web\n  namespace: apps\n",
        "spec:\n",
        "  chart:\n    spec:\n      chart: web\n      sourceRef:\n        kind: HelmRepository\n        name: web\n",
        "  values:\n",
        "  valuesFrom:\n",
        "  dependsOn:\n",
        "  postRenderers:\n",
        "  driftDetection:\n",
        "---\n",
    ]);
    fuzz("convert", text, |t| {
        if let Ok(docs) = read_documents(t) {
            let _ = convert(&docs);
        }
    });
}

/// The documents helm reads from a manifest, as helm cuts it: its release
/// splitter (`(?:^|\s*\n)---\s*`), then the API machinery's line reader
/// (a line that starts with `---` and holds nothing else but a comment).
fn helm_documents(manifest: &str) -> Vec<String> {
    let splitter = regex::Regex::new(r"(?:^|\s*\n)---\s*").unwrap();
    let mut out = Vec::new();
    for piece in splitter.split(manifest) {
        let mut doc = String::new();
        for line in piece.split_inclusive('\n') {
            let rest = line.strip_prefix("---").map(str::trim);
            if rest.is_some_and(|r| r.is_empty() || r.starts_with('#')) {
                out.push(std::mem::take(&mut doc));
            } else {
                doc.push_str(line);
            }
        }
        out.push(doc);
    }
    out
}

/// `v` with YAML merge keys applied as Go's YAML applies them: the keys of
/// a `<<` mapping fill in what the mapping does not set itself.
fn go_merged(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.iter().filter(|(k, _)| *k != "<<") {
                out.insert(k.clone(), go_merged(v));
            }
            if let Some(Value::Object(merged)) = m.get("<<") {
                for (k, v) in merged {
                    out.entry(k.clone()).or_insert_with(|| go_merged(v));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(go_merged).collect()),
        other => other.clone(),
    }
}

/// `group/Kind namespace/name` of every object `v` is to helm (a list's
/// items flattened, merge keys applied), where it has both a kind and a
/// name.
fn helm_identities(v: &serde_json::Value, out: &mut Vec<String>) {
    let v = &go_merged(v);
    if let Some(items) = v.get("items").and_then(|i| i.as_array()) {
        items.iter().for_each(|i| helm_identities(i, out));
    }
    let text = |p: &str| v.pointer(p).and_then(|s| s.as_str()).unwrap_or_default();
    let (kind, name) = (text("/kind"), text("/metadata/name"));
    if !kind.is_empty() && !name.is_empty() {
        let group = text("/apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
        out.push(format!(
            "{group}/{kind} {}/{name}",
            text("/metadata/namespace")
        ));
    }
}

/// A stored revision's manifest is tenant-writable bytes: whenever
/// `manifest_bound::within` lets a candidate pass against our manifest,
/// every object helm would read from it — cut helm's two ways, lists
/// flattened — is one our manifest names. A hunting differential: hidden
/// separators, block scalars, lists, merge keys, duplicate keys, comments.
#[test]
#[ignore = "a long run: hack/fuzz.sh"]
fn fuzz_manifest_bound() {
    use hossted_operator::delivery::helm::manifest_bound::within;
    const OURS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  greeting: hello\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n";
    let known: Vec<String> = {
        let mut out = Vec::new();
        for d in helm_documents(OURS) {
            if let Ok(v) = serde_yaml_ng::from_str::<serde_json::Value>(&d) {
                helm_identities(&v, &mut out);
            }
        }
        out
    };
    // Documents of a head (one of ours, mostly) and a few hostile lines,
    // joined by separators of every spelling.
    let head = prop::sample::select(vec![
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n  namespace: kube-system\n",
        "apiVersion: evil.example/v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n",
        "",
    ]);
    let tail = prop::sample::select(vec![
        "  name: coredns\n",
        "  namespace: kube-system\n",
        "  <<: {name: coredns, namespace: kube-system}\n",
        "<<: {metadata: {name: coredns, namespace: kube-system}}\n",
        "data:\n  note: |\n",
        "data:\n  greeting: hello\n",
        "items:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: coredns, namespace: kube-system}\n",
        "kind: ConfigMapList\n",
        "metadata:\n  name: coredns\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n",
        "---apiVersion: v1\n",
        " ---\n",
        "...\n",
        "# c\n",
        "\n",
        "  \n",
    ]);
    let separator = prop::sample::select(vec!["---\n", "--- \n", "--- # c\n", "\n---\n", ""]);
    let document = (head, prop::collection::vec(tail, 0..3), separator)
        .prop_map(|(h, t, s)| format!("{h}{}{s}", t.concat()));
    let manifest = prop::collection::vec(document, 0..5).prop_map(|d| d.concat());
    fuzz("manifest bound", manifest, |candidate| {
        if !within(candidate, &[], &[OURS], &[]) {
            return;
        }
        for doc in helm_documents(candidate) {
            let Ok(v) = serde_yaml_ng::from_str::<serde_json::Value>(&doc) else {
                continue;
            };
            let mut seen = Vec::new();
            helm_identities(&v, &mut seen);
            for id in seen {
                assert!(
                    known.contains(&id),
                    "passed, yet helm reads {id} from {doc:?}"
                );
            }
        }
    });
}
