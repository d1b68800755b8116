//! Shards (docs/shards.md): which HelmApps and HelmAppSets this process
//! reconciles, decided by one label and Kubernetes' own label selectors.
//!
//! An unsharded process takes every object *without* [`SHARD_LABEL`]; a
//! process started with `--shard a` takes only those labelled `a`. The
//! selector is the informers' own, so a shard never lists, watches or
//! holds another shard's objects — and two processes of different shards
//! can never both reconcile one object: no object matches two selectors.
//! Each shard elects its own leader on a Lease named after it.

use std::fmt;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use cache::InformerOptions;

/// The label that puts a HelmApp or HelmAppSet into a shard. Flux's
/// `sharding.fluxcd.io/key` is carried over by `convert`
/// (docs/migrating-from-flux.md).
pub const SHARD_LABEL: &str = "sharding.hossted.com/key";

/// Which objects this process reconciles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Shard {
    /// Every object without [`SHARD_LABEL`] (no `--shard`).
    #[default]
    Unsharded,
    /// Only objects with `SHARD_LABEL=<name>`.
    Named(ShardName),
}

/// A shard's name: a DNS label (it is a label value and part of the
/// Lease's name), checked once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardName(String);

impl ShardName {
    /// `name` if it is 1–32 characters of `a-z`, `0-9` and `-`, starting
    /// and ending with a letter or digit (32: the chart's longest name
    /// made of it, `hossted-operator-metrics-shard-<name>`, fits a
    /// Service's 63).
    pub fn parse(name: &str) -> Result<ShardName, String> {
        let bytes = name.as_bytes();
        let fits = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let ok = (1..=32).contains(&bytes.len())
            && bytes.iter().all(|b| fits(b) || *b == b'-')
            && bytes.first().is_some_and(fits)
            && bytes.last().is_some_and(fits);
        if ok {
            Ok(ShardName(name.to_string()))
        } else {
            Err(format!(
                "--shard: {name:?} is not a shard name: 1-32 lowercase letters, digits and '-', starting and ending with a letter or digit"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ShardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Shard {
    /// The label selector of this shard's HelmApp and HelmAppSet informers.
    pub fn selector(&self) -> String {
        match self {
            Shard::Unsharded => format!("!{SHARD_LABEL}"),
            Shard::Named(name) => format!("{SHARD_LABEL}={name}"),
        }
    }

    /// The HelmApp informer's options: every controller asks with these,
    /// so the factory gives them one informer.
    pub fn helmapps(&self) -> InformerOptions<HelmApp> {
        InformerOptions::default().labels(&self.selector())
    }

    /// The HelmAppSet informer's options (as [`Shard::helmapps`]).
    pub fn helmappsets(&self) -> InformerOptions<HelmAppSet> {
        InformerOptions::default().labels(&self.selector())
    }

    /// The Lease this shard's replicas elect a leader on: `base` alone
    /// unsharded, `base-<name>` for a shard.
    pub fn lease_name(&self, base: &str) -> String {
        match self {
            Shard::Unsharded => base.to_string(),
            Shard::Named(name) => format!("{base}-{name}"),
        }
    }

    /// Whether this is the unsharded process: the one that also runs the
    /// inventory and a Hosstedproject's `spec.helm` (whose HelmApps carry
    /// no shard label).
    pub fn is_unsharded(&self) -> bool {
        *self == Shard::Unsharded
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shard::Unsharded => f.write_str("unsharded"),
            Shard::Named(name) => write!(f, "shard {name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(value: Option<&str>) -> std::collections::BTreeMap<String, String> {
        value
            .map(|v| [(SHARD_LABEL.to_string(), v.to_string())].into())
            .unwrap_or_default()
    }

    #[test]
    fn a_name_is_a_dns_label_short_enough_for_the_lease() {
        for good in ["a", "shard-1", "0", &"x".repeat(32)] {
            assert!(ShardName::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "A",
            "-a",
            "a-",
            "a_b",
            "a.b",
            "a=b",
            "a,b",
            &"x".repeat(41),
        ] {
            assert!(ShardName::parse(bad).is_err(), "{bad}");
        }
    }

    /// By the selectors as the informers send them (parsed by the
    /// cache's own selector, which matches as the apiserver does): no
    /// label value is taken by two processes.
    #[test]
    fn no_object_is_taken_by_two_processes() {
        let shards = [
            Shard::Unsharded,
            Shard::Named(ShardName::parse("a").unwrap()),
            Shard::Named(ShardName::parse("b").unwrap()),
        ];
        let selectors: Vec<cache::Selector> = shards
            .iter()
            .map(|s| cache::Selector::parse(&s.selector()).unwrap())
            .collect();
        for value in [None, Some("a"), Some("b"), Some("c"), Some("")] {
            let l = labels(value);
            let takers: Vec<&Shard> = shards
                .iter()
                .zip(&selectors)
                .filter(|(_, sel)| sel.matches(Some(&l)))
                .map(|(s, _)| s)
                .collect();
            assert!(takers.len() <= 1, "{value:?} is taken by {takers:?}");
        }
        assert!(selectors[0].matches(Some(&labels(None))));
        assert!(selectors[1].matches(Some(&labels(Some("a")))));
        assert!(!selectors[1].matches(Some(&labels(None))));
    }

    #[test]
    fn the_selector_and_the_lease_name_say_the_shard() {
        let a = Shard::Named(ShardName::parse("a").unwrap());
        assert_eq!(a.selector(), "sharding.hossted.com/key=a");
        assert_eq!(Shard::Unsharded.selector(), "!sharding.hossted.com/key");
        assert_eq!(a.lease_name("hossted-operator"), "hossted-operator-a");
        assert_eq!(
            Shard::Unsharded.lease_name("hossted-operator"),
            "hossted-operator"
        );
    }
}
