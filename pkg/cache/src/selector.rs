//! Equality- and existence-based label selectors, as `kubectl -l` takes them.

use std::collections::BTreeMap;

/// One requirement of a [`Selector`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    DoesNotExist(String),
}

/// A label selector: `app=web,tier!=db,canary,!legacy`. The empty selector
/// matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

/// A selector that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    selector: String,
    reason: &'static str,
}

impl Selector {
    /// Matches every object.
    pub fn everything() -> Self {
        Selector(Vec::new())
    }

    /// Every label in `labels` must be present with that value.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Selector(
            labels
                .into_iter()
                .map(|(k, v)| Requirement::Equals(k.into(), v.into()))
                .collect(),
        )
    }

    /// Parses `k=v`, `k==v`, `k!=v`, `k` and `!k`, comma-separated.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let err = |reason| SelectorError {
            selector: s.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::DoesNotExist(k.trim().into())
            } else {
                Requirement::Exists(part.into())
            };
            let key = match &req {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k) => k,
            };
            if key.is_empty() || key.contains(|c: char| c.is_whitespace() || "=!(),".contains(c)) {
                return Err(err("a requirement needs a key without spaces or operators"));
            }
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches_each_operator() {
        let s = Selector::parse("app=web, tier!=db,canary,!legacy").unwrap();
        assert!(s.matches(Some(&labels(&[("app", "web"), ("canary", "")]))));
        assert!(
            !s.matches(Some(&labels(&[("app", "web")]))),
            "canary missing"
        );
        assert!(!s.matches(Some(&labels(&[
            ("app", "web"),
            ("canary", ""),
            ("tier", "db")
        ]))));
        assert!(!s.matches(Some(&labels(&[
            ("app", "web"),
            ("canary", ""),
            ("legacy", "1")
        ]))));
        assert!(!s.matches(None));
        assert!(
            Selector::parse("app==web")
                .unwrap()
                .matches(Some(&labels(&[("app", "web")])))
        );
        assert!(Selector::parse("").unwrap().matches(None));
        assert!(Selector::parse("a b=c").is_err());
        assert!(Selector::parse("=x").is_err());
    }
}
