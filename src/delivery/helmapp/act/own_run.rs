//! A revision our own helm may have made before its operator could record
//! it (the pod killed between helm's end and the status write): the new
//! operator cannot tell it from a planted one by its labels, which anyone
//! who writes Secrets may set. It is proven ours by a dry run of this
//! configuration rendering exactly what the revision holds — its manifest
//! and its hooks, what helm would act on — and then recorded as after any
//! run of ours; otherwise it is tampered with, as any unrecorded revision.
//! A revision that renders as ours can do nothing ours would not. The
//! same proof is asked of a revision a failed run of this process left
//! (helm printed nothing: someone may have put that number there first),
//! before its remedy reads it. A rollback's revision needs no render: it
//! is ours if it holds exactly the manifest and hooks of the recorded
//! revision it returned to, which `helm rollback` copies.
//!
//! When the configuration changed while the operator was stopped (or the
//! run was a rollback, or a template draws random values), the render
//! cannot match. Then a revision the run intent names is ours if it names
//! only objects of the recorded revision before it (and, after a rollback,
//! of the revision it returned to) or of this render, and
//! holds only hooks one of them holds field for field
//! (`crate::delivery::helm::manifest_bound`): helm, acting on it, can
//! touch nothing that is not ours anyway. The same holds for a revision
//! the run left `pending-*` or `failed` (its operator died while helm
//! ran): the intent names its number, never its content.

use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::dry_run;
use super::outcome::{DeliveryError, Outcome};
use crate::delivery::helm::{manifest_bound, manifest_diff};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::observed::{Observed, Rendering};
use crate::delivery::helmapp::observe::storage;
use crate::lean::helm::release_manifests;
use crate::lean::storage::content_digest;

/// Renders this configuration and compares it with `revision` as stored
/// now; records the finding, then asks for a new plan.
pub async fn render(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    revision: i64,
) -> Result<Outcome, DeliveryError> {
    // One read of the revision: every check below is of these bytes, and
    // only their content is recorded (a Secret flipped between two reads
    // proves nothing).
    let Some(payload) = stored_payload(ctx, o, revision).await? else {
        o.done.own_render = Some((revision, Rendering::Differs));
        return Ok(Outcome::Replan);
    };
    let (Ok(stored), Some(content)) = (release_manifests(&payload), content_digest(&payload))
    else {
        o.done.own_render = Some((revision, Rendering::Differs));
        return Ok(Outcome::Replan);
    };
    let found = if copies_its_rollback_target(ctx, o, revision, &payload).await? {
        Rendering::Same
    } else {
        match dry_run::next(ctx, app, o).await {
            Ok(next) if renders(&stored, &next.manifest, &next.hooks) => Rendering::Same,
            // Made from an earlier configuration (changed while the
            // operator was stopped): ours if it names nothing but what is
            // ours anyway — the recorded revisions before it and this
            // render.
            Ok(next) if declared(o, revision) => {
                bound(ctx, o, revision, &stored, (&next.manifest, &next.hooks)).await?
            }
            Ok(_) => Rendering::Differs,
            Err(message) => {
                log::info!(
                    "{}: revision {revision} cannot be rendered to be proven ours ({message}); only the recorded revisions it may name bound it",
                    o.target.key()
                );
                match declared(o, revision) {
                    true => bound(ctx, o, revision, &stored, ("", &[])).await?,
                    false => Rendering::Differs,
                }
            }
        }
    };
    // The content the proof read: what `record` accepts, and nothing read
    // after it (a Secret flipped back and forth while helm rendered).
    o.done.own_proven = (found == Rendering::Same).then_some((revision, content));
    o.done.own_render = Some((revision, found));
    Ok(Outcome::Replan)
}

/// Whether `copy` — `revision` as read for its proof, which a rollback of
/// ours was declared to write — is, field for field, what `helm rollback` copies of the recorded
/// revision it returned to, read with the content recorded
/// ([`rollback_copy`]): no render needed, so a configuration that no
/// longer renders (the failure the rollback remedied) or a deleted
/// HelmApp's proves it.
async fn copies_its_rollback_target(
    ctx: &Context,
    o: &Observed,
    revision: i64,
    copy: &[u8],
) -> Result<bool, DeliveryError> {
    let Some(target) = rollback_target(o, revision) else {
        return Ok(false);
    };
    let Some(recorded) = o
        .status
        .storage_digests
        .iter()
        .find(|d| d.revision == target && !d.content.is_empty())
    else {
        return Ok(false);
    };
    let Some(original) = stored_payload(ctx, o, target).await? else {
        return Ok(false);
    };
    if content_digest(&original).as_deref() != Some(recorded.content.as_str()) {
        return Ok(false);
    }
    Ok(rollback_copy(copy).is_some_and(|c| Some(c) == rollback_copy(&original)))
}

/// What `helm rollback` copies of the revision it returns to: the whole
/// release but its `info`, its number, how it was applied
/// (`apply_method`: the rollback's own) and its hooks' last runs. `None`:
/// no release helm reads as this reader does (a key Go's JSON folds onto a
/// field, `crate::lean::go_keys`).
fn rollback_copy(payload: &[u8]) -> Option<serde_json::Value> {
    let json = crate::lean::helm::release_json(payload).ok()?;
    crate::lean::go_keys::check(&json).ok()?;
    let mut release: serde_json::Value = serde_json::from_slice(&json).ok()?;
    let fields = release.as_object_mut()?;
    for field in ["info", "version", "apply_method"] {
        fields.remove(field);
    }
    for hook in fields
        .get_mut("hooks")
        .and_then(serde_json::Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(hook) = hook.as_object_mut() {
            hook.remove("last_run");
        }
    }
    Some(release)
}

/// Whether `stored`, which a run intent names, names only objects and
/// hooks of the recorded revisions it may name ([`known_revisions`]) and
/// of `render` (empty when none could be made).
async fn bound(
    ctx: &Context,
    o: &Observed,
    revision: i64,
    stored: &[String],
    render: (&str, &[String]),
) -> Result<Rendering, DeliveryError> {
    let before = recorded_manifests(ctx, o, &known_revisions(o, revision)).await?;
    let (known, known_hooks) = known(&before, render.0, render.1);
    let (manifest, hooks) = stored
        .split_first()
        .map_or(("", &[][..]), |(m, h)| (m.as_str(), h));
    if !manifest_bound::within(manifest, hooks, &known, &known_hooks) {
        return Ok(Rendering::Differs);
    }
    log::info!(
        "{}: revision {revision} names only objects and hooks of the revision before it and of this configuration",
        o.target.key()
    );
    Ok(Rendering::Same)
}

/// Records the storage as after a run of ours, if `revision` is still the
/// content that was rendered (read again: nothing swapped in between),
/// then asks for a new plan.
pub async fn record(
    ctx: &Context,
    o: &mut Observed,
    revision: i64,
) -> Result<Outcome, DeliveryError> {
    let Some(content) = o
        .done
        .own_proven
        .take()
        .and_then(|(of, content)| (of == revision).then_some(content))
    else {
        o.done.own_render = Some((revision, Rendering::Differs));
        return Ok(Outcome::Replan);
    };
    // One read: the revision must still hold the content the proof read,
    // and whatever else is there is checked again before anything runs.
    let entries = storage::read(&ctx.on(o).client, &o.target).await?;
    let same = entries
        .iter()
        .any(|e| e.version() == revision && e.content.as_deref() == Some(content.as_str()));
    if !same {
        o.done.own_render = Some((revision, Rendering::Differs));
        return Ok(Outcome::Replan);
    }
    storage::record_proven(o, &entries, revision, &content);
    log::info!(
        "{}: revision {revision}, which a helm of ours made without printing it (it failed, or its operator stopped before recording it), renders as this configuration does: recorded",
        o.target.key()
    );
    o.own_unrecorded = None;
    o.tampered = storage::first_untrusted(&entries, &o.status.storage_digests)
        .map(|u| u.message(&o.target.key()));
    // After a failed run: the storage is checked again, now with its
    // revision recorded, before the remedy reads it.
    o.storage_recheck = None;
    Ok(Outcome::Replan)
}

/// The recorded revisions a revision of ours may name objects of: the one
/// before it, and — when its run was a rollback — the revision that
/// rollback returned to (the last that succeeded). Not every recorded
/// revision: an object a chart dropped long ago, made again by someone
/// since, must not be named.
fn known_revisions(o: &Observed, revision: i64) -> Vec<i64> {
    let mut known = vec![revision - 1];
    known.extend(rollback_target(o, revision).filter(|t| *t != revision - 1));
    known
}

/// The revision a rollback declared to write `revision` returned to: the
/// status's revision — the last that succeeded, which a rollback's record
/// does not move.
fn rollback_target(o: &Observed, revision: i64) -> Option<i64> {
    let rollback = o
        .status
        .run_intent
        .as_ref()
        .is_some_and(|i| i.revision == revision && i.action == "rollback");
    (rollback && o.status.revision > 0).then_some(o.status.revision)
}

/// Whether the run intent in the status names `revision`: a run of ours
/// was declared to write it.
fn declared(o: &Observed, revision: i64) -> bool {
    o.status
        .run_intent
        .as_ref()
        .is_some_and(|i| i.revision == revision)
}

/// The manifests (rendered, then hooks) of each of `revisions` that is
/// recorded and stored with the content recorded of it.
async fn recorded_manifests(
    ctx: &Context,
    o: &Observed,
    revisions: &[i64],
) -> Result<Vec<Vec<String>>, DeliveryError> {
    let mut out = Vec::new();
    for recorded in o
        .status
        .storage_digests
        .iter()
        .filter(|d| revisions.contains(&d.revision) && !d.content.is_empty())
    {
        if let Some((manifests, content)) = stored_manifests(ctx, o, recorded.revision).await?
            && content == recorded.content
        {
            out.push(manifests);
        }
    }
    Ok(out)
}

/// The manifests and hooks known to be ours: `before`'s (each rendered,
/// then hooks) and this render's.
fn known<'a>(
    before: &'a [Vec<String>],
    manifest: &'a str,
    hooks: &'a [String],
) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut known = vec![manifest];
    let mut known_hooks: Vec<&str> = hooks.iter().map(String::as_str).collect();
    for (m, h) in before.iter().filter_map(|b| b.split_first()) {
        known.push(m);
        known_hooks.extend(h.iter().map(String::as_str));
    }
    (known, known_hooks)
}

/// Whether `stored` (the manifest, then each hook's) is what `manifest`
/// and `hooks` render: the same objects, named the same — read strictly
/// (`manifest_bound::same_names`: a document a lenient reader would skip,
/// a name twice or another API group is a difference) — and field for
/// field the same.
fn renders(stored: &[String], manifest: &str, hooks: &[String]) -> bool {
    let Some((stored_manifest, stored_hooks)) = stored.split_first() else {
        return false;
    };
    let (stored_hooks, hooks) = (stored_hooks.join("\n---\n"), hooks.join("\n---\n"));
    manifest_bound::same_names(stored_manifest, manifest)
        && manifest_bound::same_names(&stored_hooks, &hooks)
        && manifest_diff::same_objects(stored_manifest, manifest, &[])
        && manifest_diff::same_objects(&stored_hooks, &hooks, &[])
}

/// The manifests (rendered, then hooks) and the content digest of
/// `revision` as its Secret holds it now; `None` when it is gone or no
/// release.
async fn stored_manifests(
    ctx: &Context,
    o: &Observed,
    revision: i64,
) -> Result<Option<(Vec<String>, String)>, DeliveryError> {
    let Some(payload) = stored_payload(ctx, o, revision).await? else {
        return Ok(None);
    };
    let (Ok(manifests), Some(content)) = (release_manifests(&payload), content_digest(&payload))
    else {
        return Ok(None);
    };
    Ok(Some((manifests, content)))
}

/// The payload (`data.release`) of `revision`'s Secret as it is now;
/// `None` when it is gone.
pub(super) async fn stored_payload(
    ctx: &Context,
    o: &Observed,
    revision: i64,
) -> Result<Option<Vec<u8>>, DeliveryError> {
    let name = format!("sh.helm.release.v1.{}.v{revision}", o.target.release);
    let secret = Api::<Secret>::namespaced(ctx.on(o).client.clone(), &o.target.namespace)
        .get_opt(&name)
        .await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove("release"))
        .map(|p| p.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OURS: &str =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  greeting: hello\n";
    const HOOK: &str = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: web-migrate\n  annotations:\n    helm.sh/hook: pre-upgrade\n";
    /// A kube-system object behind a tag a lenient YAML reader skips.
    const TAGGED: &str = "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: precious\n  namespace: kube-system\ndata:\n  keep: !foo me\n";

    fn payload(release: &serde_json::Value) -> Vec<u8> {
        crate::lean::helm::encode_release(&serde_json::to_vec(release).unwrap())
    }

    fn release(version: i64, manifest: &str) -> serde_json::Value {
        json!({
            "name": "web", "namespace": "apps", "version": version,
            "info": { "status": "deployed", "description": "Install complete" },
            "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
            "config": { "greeting": "hello" },
            "manifest": manifest,
            "hooks": [{ "name": "web-migrate", "kind": "Job", "manifest": HOOK,
                        "events": ["pre-upgrade"], "last_run": { "phase": "Succeeded" } }],
            "apply_method": "ssa"
        })
    }

    #[test]
    fn a_rollback_copies_all_of_its_target_but_its_number_info_method_and_hook_runs() {
        let target = release(3, OURS);
        let mut copy = release(6, OURS);
        copy["info"] = json!({ "status": "deployed", "description": "Rollback to 3" });
        copy["apply_method"] = json!("csa");
        copy["hooks"][0]["last_run"] = json!({ "phase": "Running" });
        let original = rollback_copy(&payload(&target));
        assert!(original.is_some());
        assert_eq!(rollback_copy(&payload(&copy)), original);
        // What a Secret's writer changes, helm never copies so.
        let mut forged: Vec<(&str, serde_json::Value)> = Vec::new();
        forged.push(("a tagged document", release(6, &format!("{OURS}{TAGGED}"))));
        let mut events = copy.clone();
        events["hooks"][0]["events"] = json!(["pre-delete"]);
        forged.push(("a hook's events", events));
        let mut values = copy.clone();
        values["config"] = json!({ "greeting": "planted" });
        forged.push(("the values", values));
        let mut hooks = copy.clone();
        hooks["hooks"] = json!([]);
        forged.push(("a hook gone", hooks));
        for (what, f) in forged {
            assert_ne!(rollback_copy(&payload(&f)), original, "{what}");
        }
        // A key Go's JSON folds onto a field: not read as helm reads it.
        let mut folded = copy;
        folded["Manifest"] = json!("kind: Namespace\nmetadata:\n  name: kube-system\n");
        assert_eq!(rollback_copy(&payload(&folded)), None);
    }

    #[test]
    fn a_render_matches_only_what_a_strict_reader_finds_the_same() {
        let hooks = [HOOK.to_string()];
        let stored = |manifest: &str| vec![manifest.to_string(), HOOK.to_string()];
        assert!(renders(&stored(OURS), OURS, &hooks));
        // A lenient reader drops the tagged document, or keys objects
        // without their API group, or lets a second of one name replace
        // the first: each is a difference here.
        let other_group = "\n---\napiVersion: evil.io/v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  greeting: hello\n";
        for forged in [
            format!("{OURS}{TAGGED}"),
            format!("{OURS}{other_group}"),
            format!("{OURS}---\n{OURS}"),
            format!("{OURS}---\na: [b\n"),
        ] {
            assert!(!renders(&stored(&forged), OURS, &hooks), "{forged}");
        }
        assert!(!renders(
            &[OURS.to_string(), format!("{HOOK}{TAGGED}")],
            OURS,
            &hooks
        ));
    }
}
