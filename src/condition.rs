//! Status conditions as the API conventions want them, for every
//! controller: one entry per type; `lastTransitionTime` moves only when the
//! value does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

fn value_of(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// Whether condition `type_` has this value and reason.
pub fn has(conditions: &[Condition], type_: &str, value: bool, reason: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == value_of(value) && c.reason == reason)
}

/// The status (`True`, `False`, `Unknown`) of condition `type_`, if set.
pub fn status<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Whether condition `type_` is `True`, whatever its reason.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Sets condition `type_`.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let message = &record::cut_message(message);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let value = value_of(value);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now;
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now,
            observed_generation: generation,
        }),
    }
}
