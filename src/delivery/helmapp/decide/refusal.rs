//! A helm run refused by RBAC is tried again when what it was decided from
//! changes, or when its wait is over — never sooner, whatever else wakes
//! the HelmApp (docs/tenancy.md). The wait itself is
//! `plan::refused_again_after`; this says whether it still holds, and
//! `plan::next` keeps it: a release's own objects, a Secret it reads, a
//! dependency — any watched event re-queues the HelmApp, and without the
//! gate each would start helm again, to be refused again.

use apis::helmapp::HelmApp;
use sha2::{Digest, Sha256};

use crate::delivery::helmapp::decide::observed::{Inputs, Observed, Refused};
use crate::lean::hex::hex;

/// What a helm run is decided from, as far as a refusal goes: the
/// HelmApp's generation (any change of its spec, `serviceAccountName` and
/// `kubeConfig` among them), the identity helm runs as (a label can change
/// it), whether it is being deleted, the hash of its
/// chart and values (a `valuesFrom` Secret edited), the remote cluster's
/// credentials, and the annotations that ask for a run (`reconcile-at`,
/// `force-at`, an approval) — hashed: the annotations are the tenant's,
/// and this is kept in memory per refused HelmApp.
pub fn inputs(o: &Observed, app: &HelmApp) -> String {
    let hash = match &o.inputs {
        Some(Inputs::Ready { hash, .. }) => hash.as_str(),
        _ => "",
    };
    let generation = app.metadata.generation.unwrap_or_default().to_string();
    let identity = format!("{:?}", o.identity);
    let mut hasher = Sha256::new();
    for part in [
        generation.as_str(),
        &identity,
        if app.metadata.deletion_timestamp.is_some() {
            "deleting"
        } else {
            "live"
        },
        hash,
        o.cluster_id.as_deref().unwrap_or_default(),
        &o.reconcile_at,
        &o.force_at,
        &o.approve,
    ] {
        // Length-prefixed: no two lists of parts hash alike.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex(&hasher.finalize())[..32].to_string()
}

/// The refusal a helm run decided now waits out (`plan::next` says it
/// again instead of running): one of the same inputs whose wait is not
/// over. `None`: nothing refused, the wait over, or the inputs changed.
pub fn waiting<'o>(o: &'o Observed, app: &HelmApp) -> Option<&'o Refused> {
    let refused = o.refused.as_ref()?;
    (!refused.again_in.is_zero() && refused.inputs == inputs(o, app)).then_some(refused)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::delivery::helmapp::decide::state::tests::{deleted, observed};
    use crate::delivery::source::LocalChart;

    pub(crate) fn app() -> HelmApp {
        let mut app = HelmApp::new("a", Default::default());
        app.metadata.namespace = Some("ns".into());
        app.metadata.generation = Some(3);
        app
    }

    pub(crate) fn with_hash(hash: &str) -> Observed {
        let mut o = observed();
        o.inputs = Some(Inputs::Ready {
            chart: LocalChart::default(),
            hash: hash.into(),
        });
        o
    }

    /// `o` after a refusal of a run of `o` itself, `again_in` from now.
    pub(crate) fn refused(mut o: Observed, app: &HelmApp, again_in: Duration) -> Observed {
        o.refused = Some(Refused {
            lasted: Duration::from_secs(4),
            message: "no".into(),
            inputs: inputs(&o, app),
            again_in,
        });
        o
    }

    /// The same inputs wait out the refusal's wait, and no longer;
    /// nothing refused, nothing waits.
    #[test]
    fn the_same_inputs_wait_until_the_refusals_wait_is_over() {
        let app = app();
        let o = refused(with_hash("h1"), &app, Duration::from_secs(7));
        assert_eq!(
            waiting(&o, &app).map(|r| r.again_in),
            Some(Duration::from_secs(7))
        );
        let due = refused(with_hash("h1"), &app, Duration::ZERO);
        assert_eq!(waiting(&due, &app), None);
        assert_eq!(waiting(&with_hash("h1"), &app), None);
    }

    /// Each input a fix may change ends the wait: the spec (its
    /// generation), a Secret of its values (the hash), the remote
    /// cluster's credentials, an annotation asking for a run, a deletion.
    #[test]
    fn any_changed_input_ends_the_wait() {
        let app = app();
        let before = || refused(with_hash("h1"), &app, Duration::from_secs(60));
        assert!(waiting(&before(), &app).is_some());
        let mut newer = app.clone();
        newer.metadata.generation = Some(4);
        assert_eq!(waiting(&before(), &newer), None, "the spec");
        let mut values = before();
        values.inputs = with_hash("h2").inputs;
        assert_eq!(waiting(&values, &app), None, "the values");
        let mut cluster = before();
        cluster.cluster_id = Some("0123abcd".into());
        assert_eq!(waiting(&cluster, &app), None, "the kubeconfig");
        for edit in [
            |o: &mut Observed| o.reconcile_at = "1".into(),
            |o: &mut Observed| o.force_at = "1".into(),
            |o: &mut Observed| o.approve = "h1".into(),
        ] {
            let mut asked = before();
            edit(&mut asked);
            assert_eq!(waiting(&asked, &app), None, "an annotation");
        }
        let mut identity = before();
        identity.identity = crate::delivery::Identity::ServiceAccount {
            namespace: "ns".into(),
            name: "deployer".into(),
        };
        assert_eq!(waiting(&identity, &app), None, "the identity");
        let mut deleting = app.clone();
        deleting.metadata.deletion_timestamp = Some(deleted());
        assert_eq!(waiting(&before(), &deleting), None, "a deletion");
    }

    /// Parts never run into each other: a value moved from one annotation
    /// to the next is another input.
    #[test]
    fn the_inputs_are_told_apart_part_by_part() {
        let app = app();
        let mut a = observed();
        a.reconcile_at = "12".into();
        a.force_at = "3".into();
        let mut b = observed();
        b.reconcile_at = "1".into();
        b.force_at = "23".into();
        assert_ne!(inputs(&a, &app), inputs(&b, &app));
    }
}
