//! The post-renderer's pure part: patches, images, metadata, in order.

use super::*;
use serde_json::json;

const RENDERED: &str = "---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  template:
    spec:
      initContainers:
        - {name: init, image: 'busybox:1.36'}
      containers:
        - {name: web, image: 'nginx:1.25'}
        - {name: side, image: 'registry.local:5000/side'}
---
# Source: web/templates/empty.yaml
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
data: {a: '1'}
";

fn config(value: serde_json::Value) -> Config {
    serde_json::from_value(value).expect("a post-render config")
}

fn objects(out: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(out)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn a_json_6902_patch_reaches_only_its_target() {
    let c = config(json!({ "postRenderers": [{ "kustomize": { "patches": [{
        "target": { "kind": "Deployment", "name": "web" },
        "patch": r#"[{"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "high"}]"#
    }]}}]}));
    let out = objects(&render(&c, RENDERED).unwrap());
    assert_eq!(out.len(), 2, "the empty document is dropped");
    assert_eq!(
        out[0]["spec"]["template"]["spec"]["priorityClassName"],
        "high"
    );
    assert!(
        out[1].pointer("/spec").is_none(),
        "the ConfigMap is not a target"
    );
}

#[test]
fn a_merge_patch_in_yaml_names_its_object_itself() {
    let c = config(json!({ "postRenderers": [{ "kustomize": { "patches": [{
        "patch": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {b: '2', a: null}\n"
    }]}}]}));
    let out = objects(&render(&c, RENDERED).unwrap());
    assert_eq!(out[1]["data"], json!({ "b": "2" }), "merged, null deletes");
    assert!(
        out[0].pointer("/data").is_none(),
        "the Deployment untouched"
    );
}

#[test]
fn images_are_replaced_by_name_in_every_container_list() {
    let c = config(json!({ "postRenderers": [{ "kustomize": { "images": [
        { "name": "nginx", "newName": "registry.local/nginx", "newTag": "1.27" },
        { "name": "busybox", "digest": "sha256:abc" },
        { "name": "registry.local:5000/side", "newTag": "2" },
        { "name": "absent", "newTag": "9" }
    ]}}]}));
    let out = objects(&render(&c, RENDERED).unwrap());
    let spec = &out[0]["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["image"], "registry.local/nginx:1.27");
    assert_eq!(
        spec["containers"][1]["image"], "registry.local:5000/side:2",
        "a port is not a tag"
    );
    assert_eq!(spec["initContainers"][0]["image"], "busybox@sha256:abc");
}

#[test]
fn common_metadata_comes_last_and_overrides() {
    let c = config(json!({
        "postRenderers": [{ "kustomize": { "patches": [{
            "patch": r#"[{"op": "add", "path": "/metadata/labels/team", "value": "from-patch"}]"#,
            "target": { "kind": "Deployment" }
        }]}}],
        "commonMetadata": { "labels": { "team": "platform" }, "annotations": { "owner": "ops" } }
    }));
    let out = objects(&render(&c, RENDERED).unwrap());
    for o in &out {
        assert_eq!(o["metadata"]["labels"]["team"], "platform", "{o}");
        assert_eq!(o["metadata"]["annotations"]["owner"], "ops");
    }
    assert_eq!(
        out[0]["metadata"]["labels"]["app"], "web",
        "the chart's labels stay"
    );
    assert!(
        out[0].pointer("/spec/template/metadata").is_none(),
        "templates are not touched"
    );
}

#[test]
fn a_bad_patch_is_named_by_its_place_and_a_list_replacing_merge_is_flagged() {
    let bad = config(json!({ "postRenderers": [{ "kustomize": { "patches": [
        { "patch": "{}" }, { "patch": "[{\"op\": \"explode\"}]" }
    ]}}]}));
    let e = bad.check().unwrap_err();
    assert!(
        e.starts_with("postRenderers[0].kustomize.patches[1]: "),
        "{e}"
    );
    let failing = config(json!({ "postRenderers": [{ "kustomize": { "patches": [
        { "patch": r#"[{"op": "remove", "path": "/spec/nothing"}]"#, "target": { "kind": "Deployment" } }
    ]}}]}));
    let e = render(&failing, RENDERED).unwrap_err();
    assert!(e.contains("on Deployment web"), "{e}");
    let lists = config(json!({ "postRenderers": [{ "kustomize": { "patches": [
        { "patch": "{\"metadata\": {\"labels\": {\"a\": \"b\"}}}" },
        { "patch": "{\"spec\": {\"template\": {\"spec\": {\"containers\": [{\"name\": \"x\"}]}}}}" }
    ]}}]}));
    assert_eq!(
        lists.lists_replaced(),
        ["postRenderers[0].kustomize.patches[1]"]
    );
}

#[test]
fn what_yaml_1_1_would_misread_stays_a_string() {
    let c = config(json!({ "postRenderers": [{ "kustomize": { "patches": [{
        "target": { "kind": "ConfigMap" },
        "patch": r#"[{"op": "add", "path": "/data/b", "value": "yes"}, {"op": "add", "path": "/data/c", "value": "on"}]"#
    }]}}]}));
    let out = render(&c, RENDERED).unwrap();
    assert!(
        out.contains("\"b\": \"yes\"") && out.contains("\"c\": \"on\""),
        "{out}"
    );
    assert!(
        out.lines()
            .filter(|l| l.starts_with("---"))
            .all(|l| l == "---"),
        "only separators start with ---"
    );
    assert_eq!(objects(&out).len(), 2);
}

#[test]
fn an_alias_bomb_from_helm_is_refused_not_expanded() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n\
                b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
    assert!(
        render(&Config::default(), bomb)
            .unwrap_err()
            .contains("refused")
    );
}

#[test]
fn the_settings_file_is_private_and_gone_after_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("post-render-{}", uuid::Uuid::new_v4()));
    let c = config(json!({ "commonMetadata": { "labels": { "a": "b" } } }));
    let path = {
        let file = ConfigFile::write(&dir, &c).unwrap();
        let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read: Config = serde_json::from_slice(&std::fs::read(file.path()).unwrap()).unwrap();
        assert_eq!(read, c);
        file.path().to_path_buf()
    };
    assert!(!path.exists(), "removed when dropped");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn hooks_are_changed_unless_the_strategy_is_nohooks_and_keep_their_place() {
    let with_hook = format!(
        "{RENDERED}---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-hooked
  annotations: {{helm.sh/hook: post-install}}
data: {{b: '2'}}
---
apiVersion: v1
kind: Secret
metadata:
  name: web-last
"
    );
    let rendered = |strategy: &str| {
        let c = config(json!({
            "postRenderers": [{ "kustomize": { "patches": [{
                "target": { "kind": "ConfigMap" },
                "patch": r#"[{"op": "add", "path": "/data/patched", "value": "yes"}]"#
            }]}}],
            "commonMetadata": { "labels": { "team": "platform" } },
            "strategy": strategy
        }));
        objects(&render(&c, &with_hook).unwrap())
    };
    let names = |out: &[Value]| -> Vec<String> {
        out.iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    for strategy in ["combined", "separate"] {
        let out = rendered(strategy);
        assert_eq!(out[2]["data"]["patched"], "yes", "{strategy}");
        assert_eq!(
            out[2]["metadata"]["labels"]["team"], "platform",
            "{strategy}"
        );
    }
    let out = rendered("nohooks");
    assert_eq!(names(&out), ["web", "web", "web-hooked", "web-last"]);
    assert_eq!(
        out[2]["data"],
        json!({ "b": "2" }),
        "the hook as the chart has it"
    );
    assert!(out[2]["metadata"].get("labels").is_none());
    assert_eq!(
        out[1]["data"]["patched"], "yes",
        "the other templates change"
    );
    assert_eq!(out[3]["metadata"]["labels"]["team"], "platform");
}

#[test]
fn a_target_selects_by_pattern_and_by_labels_as_kustomize_does() {
    let patched = |target: serde_json::Value| {
        let c = config(json!({ "postRenderers": [{ "kustomize": { "patches": [{
            "target": target,
            "patch": r#"[{"op": "add", "path": "/metadata/annotations", "value": {"hit": "yes"}}]"#
        }]}}]}));
        c.check().unwrap();
        objects(&render(&c, RENDERED).unwrap())
            .iter()
            .map(|o| o.pointer("/metadata/annotations/hit").is_some())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        patched(json!({ "labelSelector": "app=web" })),
        [true, false]
    );
    assert_eq!(patched(json!({ "labelSelector": "!app" })), [false, true]);
    assert_eq!(patched(json!({ "kind": "Deploy.*" })), [true, false]);
    assert_eq!(
        patched(json!({ "kind": "Deploy" })),
        [false, false],
        "anchored"
    );
    assert_eq!(
        patched(json!({ "group": "apps", "version": "v1" })),
        [true, false]
    );
    let bad = config(json!({ "postRenderers": [{ "kustomize": { "patches": [{
        "target": { "name": "web-(" }, "patch": "{}" }]}}]}));
    let e = bad.check().unwrap_err();
    assert!(
        e.starts_with("postRenderers[0].kustomize.patches[0].target.name: "),
        "{e}"
    );
}
