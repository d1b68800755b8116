//! Hostile chart sources (docs/security.md "Hostile input"): a repository that
//! redirects, lies, drips or answers garbage; a HelmApp naming a denied
//! address or an endless timeout. Each is bounded and said plainly, with
//! no byte of the server's answer in status or Events.

use super::*;
use envtest::{Answer, HostileServer};
use std::time::Duration;

/// `helm package` of `examples/charts/<name>`.
fn packaged(f: &Fixture, name: &str) -> Vec<u8> {
    let out = f.cp.dir().join(format!("packaged-{name}"));
    std::fs::create_dir_all(&out).unwrap();
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/charts")
        .join(name);
    let status =
        f.cp.helm()
            .arg("package")
            .arg(&chart)
            .arg("--destination")
            .arg(&out)
            .status()
            .unwrap();
    assert!(status.success());
    let file = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read(file).unwrap()
}

/// An index listing chart `tiny` 0.1.0 at `url`.
fn index_of_tiny(url: &str) -> Vec<u8> {
    format!("apiVersion: v1\nentries:\n  tiny:\n    - version: 0.1.0\n      urls: [\"{url}\"]\n")
        .into_bytes()
}

/// The Ready condition's message of `name` once its reason is `reason`.
async fn refused_with(f: &Fixture, name: &str, reason: &str) -> String {
    let app = with_reason(f, name, reason).await;
    let status = app.status.unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    ready.map(|c| c.message.clone()).unwrap_or_default()
}

#[tokio::test]
async fn credentials_go_to_the_repository_host_only_and_redirects_stay_on_it() {
    const PASSWORD: &str = "pa55-for-repo-a-only";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (a, b) = (
        HostileServer::start().await.unwrap(),
        HostileServer::start().await.unwrap(),
    );
    // A's index sends the download to B (another port: another origin).
    a.answer(
        "/index.yaml",
        Answer::Bytes(200, index_of_tiny(&format!("{}/tiny-0.1.0.tgz", b.url()))),
    );
    b.answer("/tiny-0.1.0.tgz", Answer::Bytes(200, packaged(&f, "tiny")));
    // A redirect to B, and one that never ends.
    a.answer(
        "/away/index.yaml",
        Answer::Redirect(format!("{}/index.yaml", b.url())),
    );
    // A chain of redirects: 3 are followed, the 4th is not.
    a.answer("/loop/index.yaml", Answer::Redirect("/loop/1".into()));
    for i in 1..=4 {
        a.answer(
            &format!("/loop/{i}"),
            Answer::Redirect(format!("/loop/{}", i + 1)),
        );
    }
    f.secret(NS, "creds", &[("username", "u"), ("password", PASSWORD)])
        .await;
    let operator = f.start_delivery().await;
    let with_creds = |repo: String| json!({ "chart": { "repo": repo, "name": "tiny", "credentialsSecretRef": { "name": "creds" } } });
    apply(&f, "split", with_creds(a.url().to_string())).await;
    apply(&f, "away", with_creds(format!("{}/away", a.url()))).await;
    apply(&f, "loop", with_creds(format!("{}/loop", a.url()))).await;

    ready(&f, "split", "InstallSucceeded", 1).await;
    let to_a = a.seen();
    assert!(
        to_a.iter()
            .any(|s| s.path == "/index.yaml" && s.authorization.is_some()),
        "the repository gets its credentials: {to_a:?}"
    );
    let to_b = b.seen();
    assert!(to_b.iter().any(|s| s.path == "/tiny-0.1.0.tgz"), "{to_b:?}");
    assert!(
        to_b.iter().all(|s| s.authorization.is_none()),
        "credentials went to another host: {to_b:?}"
    );

    refused_with(&f, "away", "ChartUnavailable").await;
    assert!(
        !b.seen().iter().any(|s| s.path == "/index.yaml"),
        "a redirect to another host was followed"
    );
    refused_with(&f, "loop", "ChartUnavailable").await;
    let asked = |path: &str| a.seen().iter().any(|s| s.path == path);
    assert!(asked("/loop/3"), "three redirects are followed");
    assert!(!asked("/loop/4"), "a fourth redirect was followed");

    let status = serde_json::to_string(&get(&f, "split").await.unwrap().status).unwrap();
    assert!(!status.contains(PASSWORD));
    operator.stop().await;
}

#[tokio::test]
async fn a_servers_answer_is_never_echoed_and_a_bad_archive_or_address_is_refused() {
    const SECRET: &str = "SECRET-BODY-of-the-server";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let s = HostileServer::start().await.unwrap();
    s.answer("/err/index.yaml", Answer::Bytes(500, SECRET.into()));
    s.answer(
        "/garbage/index.yaml",
        Answer::Bytes(200, format!("{SECRET}: [unclosed\n").into_bytes()),
    );
    s.answer("/string/index.yaml", Answer::Bytes(200, SECRET.into()));
    // A chart archive holding a link out of the chart.
    let link = {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "tiny/values.yaml", "/etc/passwd")
            .unwrap();
        builder.into_inner().unwrap().finish().unwrap()
    };
    s.answer(
        "/link/index.yaml",
        Answer::Bytes(200, index_of_tiny("tiny-0.1.0.tgz")),
    );
    s.answer("/link/tiny-0.1.0.tgz", Answer::Bytes(200, link));
    let operator = f.start_delivery().await;
    for name in ["err", "garbage", "string", "link"] {
        apply(
            &f,
            name,
            json!({ "chart": { "repo": format!("{}/{name}", s.url()), "name": "tiny" } }),
        )
        .await;
    }
    // The cloud metadata address: refused before any connection.
    apply(
        &f,
        "metadata",
        json!({ "chart": { "repo": "http://169.254.169.254/charts", "name": "tiny" } }),
    )
    .await;
    for name in ["err", "garbage", "string"] {
        refused_with(&f, name, "ChartUnavailable").await;
    }
    let message = refused_with(&f, "link", "ChartInvalid").await;
    assert!(message.contains("is a link"), "{message}");
    let message = refused_with(&f, "metadata", "ChartSourceRefused").await;
    assert!(message.contains("--deny-chart-source-cidrs"), "{message}");

    for name in ["err", "garbage", "string", "link", "metadata"] {
        let status = serde_json::to_string(&get(&f, name).await.unwrap().status).unwrap();
        assert!(!status.contains(SECRET), "{name}: {status}");
    }
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    assert!(!events.contains(SECRET), "an Event quotes the server");
    operator.stop().await;
}

#[tokio::test]
async fn slow_and_endless_sources_are_cut_off_without_holding_other_namespaces() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.namespace("other").await;
    let s = HostileServer::start().await.unwrap();
    // 2 KB a byte every 100 ms: far past the fetch deadline; one
    // repository per app (one fetch each).
    for i in 1..=10 {
        s.answer(
            &format!("/drip-{i}/index.yaml"),
            Answer::Drip {
                body: index_of_tiny("tiny-0.1.0.tgz").repeat(30),
                chunk: 1,
                every: Duration::from_millis(100),
            },
        );
    }
    s.answer("/endless/index.yaml", Answer::Endless);
    s.answer(
        "/lie/index.yaml",
        Answer::Lie {
            declared: 10,
            body: index_of_tiny("tiny-0.1.0.tgz"),
        },
    );
    s.answer(
        "/good/index.yaml",
        Answer::Bytes(200, index_of_tiny("tiny-0.1.0.tgz")),
    );
    s.answer(
        "/good/tiny-0.1.0.tgz",
        Answer::Bytes(200, packaged(&f, "tiny")),
    );
    let operator = f
        .start_delivery_with(|s| {
            s.sources.fetch_timeout = Duration::from_secs(20);
            s.sources.max_index_size = 1024 * 1024;
        })
        .await;
    // Ten slow fetches in one namespace, more than the operator's workers
    // (8): two run, the others wait for them — in the background, holding
    // no worker.
    let drips: Vec<String> = (1..=10).map(|i| format!("drip-{i}")).collect();
    for name in &drips {
        apply(
            &f,
            name,
            json!({ "chart": { "repo": format!("{}/{name}", s.url()), "name": "tiny" } }),
        )
        .await;
    }
    apply_helmapp(
        &f,
        "other",
        "good",
        json!({ "chart": { "repo": format!("{}/good", s.url()), "name": "tiny" } }),
    )
    .await;
    helmapp_ready(&f, "other", "good", "InstallSucceeded", 1).await;
    for name in &drips {
        let app = get(&f, name).await.unwrap();
        let decided = app
            .status
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready"));
        assert!(
            !decided,
            "{name} is still fetching while the other namespace is served"
        );
    }
    let message = refused_with(&f, "drip-1", "ChartUnavailable").await;
    assert!(message.contains("--chart-fetch-timeout"), "{message}");

    // In the other namespace: this one's fetch slots are the drips'.
    for name in ["endless", "lie"] {
        apply_helmapp(
            &f,
            "other",
            name,
            json!({ "chart": { "repo": format!("{}/{name}", s.url()), "name": "tiny" } }),
        )
        .await;
    }
    // Endless: cut at --max-index-size. A lying length: only the 10 bytes
    // it declared are read, which are no index.
    for (name, said) in [
        ("endless", "larger than 1048576 bytes"),
        ("lie", "not a chart repository index"),
    ] {
        let app = helmapp_with_reason(&f, "other", name, "ChartUnavailable").await;
        let message = app.status.unwrap().conditions[0].message.clone();
        assert!(message.contains(said), "{name}: {message}");
    }
    // Retries of the drips would outlast the operator's drain.
    s.hang_up();
    operator.stop().await;
}

#[tokio::test]
async fn a_timeout_longer_than_the_operators_bound_is_clamped_with_a_warning() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            s.max_helm_timeout = Duration::from_secs(120);
            s.helm.binary = wrapper.clone();
        })
        .await;
    apply(
        &f,
        "long",
        json!({ "timeout": "10h", "chart": { "path": "tiny" } }),
    )
    .await;
    ready(&f, "long", "InstallSucceeded", 1).await;
    an_event(&f, NS, "long", "TimeoutClamped").await;
    // helm was given the bound, not the 10 hours asked for.
    let timeouts: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let args: Vec<&str> = l.split_whitespace().collect();
            let at = args.iter().position(|a| *a == "--timeout")?;
            Some(args.get(at + 1)?.to_string())
        })
        .collect();
    assert_eq!(timeouts, ["120s"], "the install's --timeout");
    operator.stop().await;
}

/// A fake registry's manifest of one chart layer of `size` and `digest`.
fn manifest(digest: &str, size: usize) -> Vec<u8> {
    json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.cncf.helm.config.v1+json",
                    "digest": format!("sha256:{}", "00".repeat(32)), "size": 2 },
        "layers": [{ "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                     "digest": format!("sha256:{digest}"), "size": size }]
    })
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn a_registry_is_bounded_and_its_token_service_on_another_host_gets_no_credentials() {
    use sha2::Digest;
    const PASSWORD: &str = "registry-pa55-only-for-the-registry";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (registry, auth) = (
        HostileServer::start().await.unwrap(),
        HostileServer::start().await.unwrap(),
    );
    let host = registry.url().trim_start_matches("http://").to_string();
    let chart = packaged(&f, "tiny");
    let digest = hossted_operator::lean::hex::hex(&sha2::Sha256::digest(&chart));
    // Bearer: the token comes from another host, which must not get the
    // registry's credentials.
    let challenge = format!(
        "Bearer realm=\"{}/token\",service=\"fake\",scope=\"repository:charts/tiny:pull\"",
        auth.url()
    );
    auth.answer(
        "/token?service=fake&scope=repository%3Acharts%2Ftiny%3Apull",
        Answer::Bytes(200, br#"{"token":"t0k3n"}"#.to_vec()),
    );
    let guarded = |then: Answer| Answer::Guarded {
        expect: "Bearer t0k3n".into(),
        challenge: challenge.clone(),
        then: Box::new(then),
    };
    registry.answer(
        "/v2/charts/tiny/manifests/0.1.0",
        guarded(Answer::Bytes(200, manifest(&digest, chart.len()))),
    );
    registry.answer(
        &format!("/v2/charts/tiny/blobs/sha256:{digest}"),
        guarded(Answer::Bytes(200, chart.clone())),
    );
    // A layer that goes on past the size its manifest declares (sent
    // without a length, until the client hangs up); a manifest without end.
    let lie = "cd".repeat(32);
    registry.answer(
        "/v2/charts/lie/manifests/0.1.0",
        Answer::Bytes(200, manifest(&lie, 100)),
    );
    registry.answer(
        &format!("/v2/charts/lie/blobs/sha256:{lie}"),
        Answer::Endless,
    );
    registry.answer("/v2/charts/endless/manifests/0.1.0", Answer::Endless);
    f.secret(NS, "creds", &[("username", "u"), ("password", PASSWORD)])
        .await;
    let operator = f.start_delivery().await;
    for name in ["tiny", "lie", "endless"] {
        apply(
            &f,
            name,
            json!({ "chart": { "oci": format!("oci://{host}/charts/{name}"), "version": "0.1.0",
                               "insecure": true, "credentialsSecretRef": { "name": "creds" } } }),
        )
        .await;
    }
    ready(&f, "tiny", "InstallSucceeded", 1).await;
    let to_auth = auth.seen();
    assert!(!to_auth.is_empty(), "the token service was asked");
    assert!(
        to_auth.iter().all(|s| s.authorization.is_none()),
        "the registry's credentials went to another host: {to_auth:?}"
    );
    let message = refused_with(&f, "lie", "ChartUnavailable").await;
    assert!(message.contains("larger than 100 bytes"), "{message}");
    let message = refused_with(&f, "endless", "ChartUnavailable").await;
    assert!(message.contains("larger than 4194304 bytes"), "{message}");
    registry.hang_up();
    operator.stop().await;
}

/// Issue 57: a `releaseName` that would be a helm flag, stored under a CRD
/// without the name pattern and kept by CRD ratcheting when the real CRD
/// returns: refused in code (`InvalidName`), and no helm process on it.
#[tokio::test]
async fn a_release_name_stored_before_the_crd_checked_it_never_reaches_helm() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // The CRD as it was before the pattern: releaseName any string.
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(apis::crd_manifest_path("helmapps.hossted.com"));
    let mut crd: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    for version in crd["spec"]["versions"].as_array_mut().unwrap() {
        let name = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["releaseName"];
        let name = name.as_object_mut().expect("releaseName in the schema");
        assert!(name.remove("pattern").is_some(), "the CRD has the pattern");
        name.remove("maxLength");
    }
    let old = f.cp.dir().join("helmapps-without-the-pattern.json");
    std::fs::write(&old, crd.to_string()).unwrap();
    output_ok(f.cp.kubectl().args(["apply", "-f"]).arg(&old));
    let hostile = "--kube-apiserver=https://127.0.0.1:1";
    let created = eventually("the HelmApp stored under the old CRD", 30, || async {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "flag", "namespace": NS },
            "spec": { "chart": { "path": "tiny" }, "releaseName": hostile }
        }))
        .unwrap();
        Api::<HelmApp>::namespaced(f.cp.client(), NS)
            .create(&PostParams::default(), &app)
            .await
            .ok()
    })
    .await;
    assert_eq!(created.spec.release_name, hostile);

    // The real CRD again: the stored value stays (ratcheting).
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(&f, "calm", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "calm", "InstallSucceeded", 1).await;
    let message = refused_with(&f, "flag", "InvalidName").await;
    assert!(message.contains("no helm command is built"), "{message}");
    an_event(&f, NS, "flag", "InvalidName").await;
    let calls = helm_calls(&log);
    assert!(
        calls.iter().all(|c| c.on("calm")),
        "helm ran for nothing but the calm app: {calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c.words.iter().any(|w| w == hostile)),
        "the name never on a command line"
    );
    // Deleting it runs no helm either, and does not hang on the finalizer.
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("flag", &Default::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "flag").await.is_none().then_some(())
    })
    .await;
    assert!(helm_calls(&log).iter().all(|c| c.on("calm")));
    operator.stop().await;
}

/// A server on `ip` that answers every request with a small schema and
/// records its request line. `ip` is a loopback address other than the
/// chart repositories' 127.0.0.1, so that the operator's address policy
/// can deny it alone.
fn recorder_on(ip: &str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = std::io::BufReader::new(&stream).read_line(&mut line);
            record.lock().unwrap().push(line.trim_end().to_string());
            let body = r#"{"type":"string"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

/// Issue 56, test 5: a chart whose `values.schema.json` names a document on
/// a server (`$ref: http://…`) is refused before helm sees it
/// (`ChartInvalid`, naming the file and the reference) and the server is
/// never asked — a `$ref` under a property *named* `default` too (a
/// schema helm compiles, not the `default` keyword's data); the same chart
/// whose `$ref` stays in the document installs. The server listens on an
/// address the operator's `--deny-chart-source-cidrs` lists: the schema
/// check is what keeps helm from reaching where the operator may not.
#[tokio::test]
async fn a_schema_naming_a_remote_document_is_refused_and_that_server_never_asked() {
    use hossted_operator::delivery::source::address::{AddressPolicy, DEFAULT_DENIED};
    const DENIED: &str = "127.0.0.2";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (recorder, seen) = recorder_on(DENIED);
    let remote = format!("{recorder}/definitions.json");
    let under_default = format!("{recorder}/x");
    let chart = |name: &str, schema: serde_json::Value| {
        let dir = f.cp.dir().join(format!("schema-charts/{name}"));
        std::fs::create_dir_all(dir.join("templates")).unwrap();
        std::fs::write(
            dir.join("Chart.yaml"),
            format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("values.yaml"), "greeting: hello\n").unwrap();
        std::fs::write(dir.join("values.schema.json"), schema.to_string()).unwrap();
        std::fs::write(
            dir.join("templates/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
        )
        .unwrap();
        dir
    };
    let greeting = |reference: &str| {
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": { "greeting": { "type": "string" } },
            "properties": { "greeting": { "$ref": reference } }
        })
    };
    let (remote_chart, local_chart, default_chart) = (
        chart("remote-ref", greeting(&remote)),
        chart("local-ref", greeting("#/definitions/greeting")),
        chart(
            "default-ref",
            json!({ "properties": { "default": { "$ref": under_default } } }),
        ),
    );
    let repo =
        envtest::ChartRepo::start(&f.cp, &[&remote_chart, &local_chart, &default_chart], None)
            .await
            .unwrap();
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            s.helm.binary = wrapper.clone();
            // As `--deny-chart-source-cidrs`: the default list and the
            // recorder's address (the repository, on 127.0.0.1, is allowed).
            s.sources.policy =
                AddressPolicy::parse(&format!("{DEFAULT_DENIED},{DENIED}/32")).unwrap();
        })
        .await;
    apply(
        &f,
        "remote",
        json!({ "chart": { "repo": repo.url(), "name": "remote-ref" } }),
    )
    .await;
    apply(
        &f,
        "named-default",
        json!({ "chart": { "repo": repo.url(), "name": "default-ref" } }),
    )
    .await;
    apply(
        &f,
        "local",
        json!({ "chart": { "repo": repo.url(), "name": "local-ref" } }),
    )
    .await;
    // The operator itself goes nowhere near the recorder.
    apply(
        &f,
        "denied",
        json!({ "chart": { "repo": recorder, "name": "tiny" } }),
    )
    .await;
    ready(&f, "local", "InstallSucceeded", 1).await;
    let message = refused_with(&f, "denied", "ChartSourceRefused").await;
    assert!(message.contains("--deny-chart-source-cidrs"), "{message}");
    for (name, reference) in [("remote", &remote), ("named-default", &under_default)] {
        let message = refused_with(&f, name, "ChartInvalid").await;
        assert!(
            message.contains("values.schema.json"),
            "{name}: names the file: {message}"
        );
        assert!(
            message.contains(reference.as_str()),
            "{name}: names the reference: {message}"
        );
        an_event(&f, NS, name, "ChartInvalid").await;
        assert!(
            !helm_calls(&log).iter().any(|c| c.on(name)),
            "{name}: helm never saw the chart"
        );
    }
    let asked = seen.lock().unwrap().clone();
    assert!(
        asked.is_empty(),
        "the schema's server was never asked: {asked:?}"
    );
    operator.stop().await;
}

/// Issue 56, test 6: a repository that serves other bytes for the same
/// chart version to a second HelmApp. The first app pinned (and so
/// verified) its bytes; its next run uses those bytes, or refuses — never
/// the second app's.
#[tokio::test]
async fn other_bytes_served_for_a_version_never_reach_the_app_that_verified_the_first() {
    use sha2::Digest;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let server = HostileServer::start().await.unwrap();
    let archive = |greeting: &str| {
        let dir = f.cp.dir().join(format!("swapped-{greeting}/swapped"));
        std::fs::create_dir_all(dir.join("templates")).unwrap();
        std::fs::write(
            dir.join("Chart.yaml"),
            "apiVersion: v2\nname: swapped\nversion: 0.1.0\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("templates/cm.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}-cm\ndata:\n  bytes: {greeting}\n  run: {{{{ .Values.run | default \"0\" | quote }}}}\n"),
        )
        .unwrap();
        let out = f.cp.dir().join(format!("swapped-{greeting}/out"));
        std::fs::create_dir_all(&out).unwrap();
        assert!(
            f.cp.helm()
                .arg("package")
                .arg(&dir)
                .arg("--destination")
                .arg(&out)
                .status()
                .unwrap()
                .success()
        );
        std::fs::read(out.join("swapped-0.1.0.tgz")).unwrap()
    };
    let (first, second) = (archive("first"), archive("second"));
    let index = format!(
        "apiVersion: v1\nentries:\n  swapped:\n    - version: 0.1.0\n      urls: [\"{}/swapped-0.1.0.tgz\"]\n",
        server.url()
    );
    server.answer("/index.yaml", Answer::Bytes(200, index.into_bytes()));
    server.answer("/swapped-0.1.0.tgz", Answer::Bytes(200, first.clone()));
    let pin = format!(
        "sha256:{}",
        hossted_operator::lean::hex::hex(&sha2::Sha256::digest(&first))
    );
    let operator = f.start_delivery().await;
    // The other app asks for a range that resolves to the same version: a
    // resolution of its own, so the repository is asked again.
    let spec = |pinned: bool, run: u32| {
        let mut chart = json!({ "repo": server.url(), "name": "swapped", "version": "0.x" });
        if pinned {
            chart["version"] = json!("0.1.0");
            chart["digest"] = json!(pin);
        }
        json!({ "chart": chart, "values": { "run": run.to_string() }, "interval": "1h" })
    };
    apply(&f, "verified", spec(true, 1)).await;
    ready(&f, "verified", "InstallSucceeded", 1).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let bytes_of = |name: &'static str| {
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .get(&format!("{name}-cm"))
                .await
                .unwrap()
                .data
                .unwrap()["bytes"]
                .clone()
        }
    };
    assert_eq!(bytes_of("verified").await, "first");

    // The repository now serves other bytes for 0.1.0; another app takes them.
    server.answer("/swapped-0.1.0.tgz", Answer::Bytes(200, second));
    apply(&f, "other", spec(false, 1)).await;
    ready(&f, "other", "InstallSucceeded", 1).await;
    assert_eq!(bytes_of("other").await, "second");

    // The first app's next run: its own verified bytes, or a refusal.
    patch(&f, "verified", json!({ "spec": spec(true, 2) })).await;
    let app = eventually("the verified app's next run", 60, || async {
        let app = get(&f, "verified").await?;
        let status = app.status.as_ref()?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        let upgraded = ready.reason == "UpgradeSucceeded" && status.revision == 2;
        (upgraded || ready.reason == "VerificationFailed").then_some(app)
    })
    .await;
    assert_eq!(
        bytes_of("verified").await,
        "first",
        "never the bytes served to the other app ({:?})",
        app.status.unwrap().conditions
    );
    operator.stop().await;
}
