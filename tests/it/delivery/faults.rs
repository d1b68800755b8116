//! Faults (issue 43): while the API server is down no helm process starts —
//! a helm then would only fail to connect, and every retry used to spawn
//! another — and once it is back every HelmApp converges.

use super::*;

/// Seconds since the epoch, as the wrapper's `date +%s.%N` writes them.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The start times of the `upgrade` runs the wrapper logged.
fn upgrade_starts(log: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let at: f64 = words.next()?.parse().ok()?;
            (words.next()? == "upgrade").then_some(at)
        })
        .collect()
}

#[tokio::test]
async fn no_helm_starts_while_the_api_server_is_down_and_every_app_converges_after() {
    let mut f = Fixture::new().await;
    f.namespace(NS).await;
    let helm = f.cp.helm_binary();
    let log = f.cp.dir().join("helm-starts.log");
    let gate = f.cp.dir().join("helm-gate");
    let wrapper = f.cp.dir().join("gated-helm.sh");
    // Logs each start, then waits while the gate file exists.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo \"$(date +%s.%N) $*\" >> '{log}'\nwhile [ -e '{gate}' ]; do sleep 0.05; done\nexec '{helm}' \"$@\"\n",
            version = version_passes_through(&helm),
            log = log.display(),
            gate = gate.display(),
            helm = helm.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let names = ["down-a", "down-b", "down-c"];
    for name in names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    for name in names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }

    // Three upgrades start and wait at the gate; the API server goes down;
    // the gate opens: each fails to connect.
    std::fs::write(&gate, "").unwrap();
    for name in names {
        patch(
            &f,
            name,
            json!({ "spec": { "values": { "greeting": "two" } } }),
        )
        .await;
    }
    let installs = names.len();
    eventually("three upgrades at the gate", 60, || async {
        (upgrade_starts(&log).len() == installs + names.len()).then_some(())
    })
    .await;
    f.cp.stop_apiserver();
    let down_at = now();
    std::fs::remove_file(&gate).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let up_at = now();
    let during: Vec<f64> = upgrade_starts(&log)
        .into_iter()
        .filter(|t| *t > down_at && *t < up_at)
        .collect();
    assert_eq!(
        during,
        Vec::<f64>::new(),
        "helm started while the API was down"
    );
    f.cp.start_apiserver().await.unwrap();

    for name in names {
        let app = ready(&f, name, "UpgradeSucceeded", 2).await;
        assert_eq!(
            app.status.unwrap().failures,
            0,
            "{name}: the outage spent no retry"
        );
    }
    // One more upgrade each, after the outage: none failed for it.
    assert_eq!(upgrade_starts(&log).len(), installs + 2 * names.len());
    assert_eq!(
        sample(&operator.scrape(), "hossted_api_reachable"),
        Some(1.0),
        "reachable again"
    );
    operator.stop().await;
}
