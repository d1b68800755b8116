//! `docs/getting-started.md`, followed as a newcomer would: the example it
//! applies (`examples/getting-started.yaml`, its chart repository swapped
//! for one on loopback serving the same chart), with the operator's
//! shipped tenancy — helm runs as the namespace's `hossted-deployer`, so
//! the example's Role must be enough. Installed, a value changed, a
//! deleted Service put back, the HelmApp deleted and the release gone.

use std::collections::BTreeSet;

use super::*;
use hossted_operator::delivery::{Privileged, Tenancy};
use k8s_openapi::api::core::v1::Service;

const DEMO: &str = "demo";
const UPSTREAM: &str = "https://stefanprodan.github.io/podinfo";

#[tokio::test]
async fn the_getting_started_guide_works_as_written() {
    let f = Fixture::new().await;
    f.helmapp_crd().await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("podinfo")], None)
        .await
        .unwrap();
    let operator = f
        .start_delivery_with(|s| {
            s.tenancy = Tenancy {
                privileged: Privileged::Namespaces(BTreeSet::from(["hossted-operator".into()])),
                ..Tenancy::single_tenant("hossted-operator")
            }
        })
        .await;

    // 3. A first HelmApp.
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/getting-started.yaml"),
    )
    .unwrap();
    assert!(example.contains(UPSTREAM), "the guide's chart repository");
    let local = f.cp.dir().join("getting-started.yaml");
    std::fs::write(&local, example.replace(UPSTREAM, repo.url())).unwrap();
    f.kubectl(&["apply", "-f", local.to_str().unwrap()]);
    helmapp_ready(&f, DEMO, "podinfo", "InstallSucceeded", 1).await;

    // 4. Change a value: one upgrade.
    patch_helmapp(
        &f,
        DEMO,
        "podinfo",
        json!({ "spec": { "values": { "logLevel": "debug" } } }),
    )
    .await;
    helmapp_ready(&f, DEMO, "podinfo", "UpgradeSucceeded", 2).await;

    // 5. Delete an object of the release: put back.
    let services: Api<Service> = Api::namespaced(f.cp.client(), DEMO);
    let before = services.get("podinfo").await.unwrap().metadata.uid;
    services
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service put back", 60, || async {
        let uid = services.get_opt("podinfo").await.ok()??.metadata.uid;
        (uid != before).then_some(())
    })
    .await;
    an_event(&f, DEMO, "podinfo", "DriftRepaired").await;

    // 6. Delete the HelmApp: uninstalled, then gone.
    Api::<HelmApp>::namespaced(f.cp.client(), DEMO)
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get_helmapp(&f, DEMO, "podinfo")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        storage_revisions(&f, DEMO, "podinfo").await.is_empty(),
        "helm uninstall ran"
    );
    assert!(services.get_opt("podinfo").await.unwrap().is_none());
    operator.stop().await;
}
