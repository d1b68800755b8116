//! Change windows (docs/change-windows.md): when helm may change a release.
//! Pure given the time: [`Windows::compile`] reads `spec.changeWindows`
//! (cron schedules read by croner in an IANA zone of chrono-tz),
//! [`Windows::at`] says whether a time is inside and, if not, when the next
//! allowed time comes.
//!
//! A time is allowed when it is inside some `allow` window (or `allow` is
//! empty) and inside no `deny` window. A window is inside at `t` when an
//! opening `o` of its schedule has `o ≤ t < o + duration`.

use std::time::Duration;

use apis::helmapp::{ChangeWindow, ChangeWindows};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// The longest window.
const MAX_DURATION: Duration = Duration::from_secs(31 * 24 * 3600);
/// How far ahead the next allowed time is looked for.
const HORIZON: Duration = Duration::from_secs(366 * 24 * 3600);
/// Jumps over deny windows and to allow windows' openings, at most,
/// looking for it.
const MAX_JUMPS: usize = 256;

/// `spec.changeWindows`, compiled.
#[derive(Debug, Clone)]
pub struct Windows {
    zone: Tz,
    allow: Vec<Window>,
    deny: Vec<Window>,
    pub repair_anytime: bool,
}

#[derive(Debug, Clone)]
struct Window {
    schedule: Cron,
    duration: chrono::Duration,
}

/// Whether changes may run at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Open,
    /// Closed until `opens` (`None`: no allowed time within a year).
    Closed {
        opens: Option<DateTime<Utc>>,
    },
}

impl Windows {
    /// Reads `w`; `Err` names the field that is wrong and why.
    pub fn compile(w: &ChangeWindows) -> Result<Self, String> {
        let zone = match w.time_zone.as_str() {
            "" => Tz::UTC,
            name => name.parse::<Tz>().map_err(|_| {
                format!(
                    "changeWindows.timeZone {name:?} is not an IANA time zone (Europe/Berlin, UTC)"
                )
            })?,
        };
        let windows = |field: &str, list: &[ChangeWindow]| {
            list.iter()
                .enumerate()
                .map(|(i, w)| Window::compile(&format!("changeWindows.{field}[{i}]"), w))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Windows {
            zone,
            allow: windows("allow", &w.allow)?,
            deny: windows("deny", &w.deny)?,
            repair_anytime: w.repair_anytime,
        })
    }

    /// Whether `t` is allowed, and if not, when the next allowed time is —
    /// in at most [`MAX_JUMPS`] jumps, each over a whole deny window or to
    /// the next opening of an allow window: every time jumped over is
    /// inside a deny window or outside every allow window, so the first
    /// time reached that is neither is the answer. A few schedule lookups a
    /// jump, whatever the schedules' cadence (20 allow windows of every
    /// second beside 20 deny windows of 744h: two jumps).
    pub fn at(&self, t: DateTime<Utc>) -> Verdict {
        let horizon = t + chrono::Duration::from_std(HORIZON).unwrap_or_default();
        let mut at = t;
        for _ in 0..MAX_JUMPS {
            if at > horizon {
                break;
            }
            let local = at.with_timezone(&self.zone);
            if let Some(end) = self
                .deny
                .iter()
                .filter_map(|w| w.last_end_over(&local))
                .max()
            {
                at = end;
                continue;
            }
            let allowed = self.allow.is_empty()
                || self.allow.iter().any(|w| w.end_if_inside(&local).is_some());
            if !allowed {
                match self
                    .allow
                    .iter()
                    .filter_map(|w| w.next_opening(&local))
                    .min()
                {
                    Some(opens) => {
                        at = opens;
                        continue;
                    }
                    None => break,
                }
            }
            return match at == t {
                true => Verdict::Open,
                false => Verdict::Closed { opens: Some(at) },
            };
        }
        Verdict::Closed { opens: None }
    }
}

impl Window {
    fn compile(field: &str, w: &ChangeWindow) -> Result<Self, String> {
        let schedule = w.schedule.parse::<Cron>().map_err(|e| {
            format!(
                "{field}.schedule {:?} is not a cron expression: {e}",
                w.schedule
            )
        })?;
        // A schedule that never fires (`0 0 31 2 *`) would make each of the
        // verdict's lookups search to the calendar's end: refused here,
        // once. The Gregorian calendar repeats every 400 years, so one that
        // fires at all fires within them (a Monday 29 February: 28 years);
        // a year field (croner's seventh) could stop firing later, and the
        // docs promise five or six fields.
        if w.schedule.split_whitespace().count() > 6 {
            return Err(format!(
                "{field}.schedule {:?} has a year field: five or six fields (seconds first) are read",
                w.schedule
            ));
        }
        let reference = chrono::DateTime::<Utc>::from_timestamp(1_704_067_200, 0) // 2024-01-01
            .unwrap_or_default();
        let fires = schedule
            .find_next_occurrence(&reference, false)
            .is_ok_and(|next| next - reference <= chrono::Duration::days(400 * 366));
        if !fires {
            return Err(format!(
                "{field}.schedule {:?} never opens (no date matches it)",
                w.schedule
            ));
        }
        let duration =
            crate::duration::parse(&w.duration).map_err(|e| format!("{field}.duration: {e}"))?;
        if duration.is_zero() || duration > MAX_DURATION {
            return Err(format!(
                "{field}.duration {:?} must be more than 0 and at most 744h (31 days)",
                w.duration
            ));
        }
        Ok(Window {
            schedule,
            duration: chrono::Duration::from_std(duration).map_err(|e| e.to_string())?,
        })
    }

    /// When the window that `t` is inside closes (`None`: not inside).
    fn end_if_inside(&self, t: &DateTime<Tz>) -> Option<DateTime<Utc>> {
        // The first opening after t - duration: t is inside iff it is ≤ t.
        let from = *t - self.duration;
        let opening = self.schedule.find_next_occurrence(&from, false).ok()?;
        (opening <= *t).then(|| (opening + self.duration).with_timezone(&Utc))
    }

    /// When the window is over at the latest, if `t` is inside it: the
    /// end of its last opening at or before `t` (a later opening covering
    /// `t` ends later than an earlier one).
    fn last_end_over(&self, t: &DateTime<Tz>) -> Option<DateTime<Utc>> {
        let opening = self.schedule.find_previous_occurrence(t, true).ok()?;
        let end = opening + self.duration;
        (end > *t).then(|| end.with_timezone(&Utc))
    }

    fn next_opening(&self, t: &DateTime<Tz>) -> Option<DateTime<Utc>> {
        self.schedule
            .find_next_occurrence(t, false)
            .ok()
            .map(|o| o.with_timezone(&Utc))
    }
}

/// What `spec.changeWindows` say at a time: read by observe off the async
/// workers (the jumps are bounded, yet a schedule's search is CPU work a
/// tenant writes), then decided on by state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Seen {
    /// No `spec.changeWindows`.
    #[default]
    Unset,
    /// They do not compile: the field that is wrong and why.
    Invalid(String),
    Read {
        repair_anytime: bool,
        verdict: Verdict,
    },
}

impl Seen {
    /// Whether the windows are closed (none, or windows that do not
    /// compile: not closed — the change's state says why).
    pub fn closed(&self) -> bool {
        matches!(
            self,
            Seen::Read {
                verdict: Verdict::Closed { .. },
                ..
            }
        )
    }
}

/// What `windows` say at `t`.
pub fn look(windows: Option<&ChangeWindows>, t: DateTime<Utc>) -> Seen {
    match windows.map(Windows::compile) {
        None => Seen::Unset,
        Some(Err(message)) => Seen::Invalid(message),
        Some(Ok(w)) => Seen::Read {
            repair_anytime: w.repair_anytime,
            verdict: w.at(t),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(zone: &str, allow: &[(&str, &str)], deny: &[(&str, &str)]) -> Windows {
        let list = |l: &[(&str, &str)]| {
            l.iter()
                .map(|(s, d)| ChangeWindow {
                    schedule: s.to_string(),
                    duration: d.to_string(),
                })
                .collect()
        };
        Windows::compile(&ChangeWindows {
            time_zone: zone.into(),
            allow: list(allow),
            deny: list(deny),
            repair_anytime: false,
        })
        .unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn weekday_evenings_in_berlin() {
        // 22:00 Berlin on weekdays, 2 hours. 2026-12-01 is a Tuesday; Berlin
        // is UTC+1 in winter.
        let w = windows("Europe/Berlin", &[("0 22 * * 1-5", "2h")], &[]);
        assert_eq!(w.at(utc("2026-12-01T21:30:00Z")), Verdict::Open);
        assert_eq!(w.at(utc("2026-12-01T22:59:59Z")), Verdict::Open);
        assert_eq!(
            w.at(utc("2026-12-01T23:00:00Z")),
            Verdict::Closed {
                opens: Some(utc("2026-12-02T21:00:00Z"))
            }
        );
        // Saturday: the next is Monday evening.
        assert_eq!(
            w.at(utc("2026-12-05T12:00:00Z")),
            Verdict::Closed {
                opens: Some(utc("2026-12-07T21:00:00Z"))
            }
        );
    }

    #[test]
    fn a_deny_window_inside_an_allow_window_wins() {
        // Allowed all December; denied from Christmas Eve for 48 hours.
        let w = windows("UTC", &[("0 0 1 12 *", "744h")], &[("0 0 24 12 *", "48h")]);
        assert_eq!(w.at(utc("2026-12-23T12:00:00Z")), Verdict::Open);
        assert_eq!(
            w.at(utc("2026-12-24T12:00:00Z")),
            Verdict::Closed {
                opens: Some(utc("2026-12-26T00:00:00Z"))
            }
        );
        // Only deny: open except inside it.
        let w = windows("UTC", &[], &[("0 0 24 12 *", "48h")]);
        assert_eq!(w.at(utc("2026-07-01T00:00:00Z")), Verdict::Open);
    }

    #[test]
    fn seconds_may_be_given_and_a_window_never_allowed_says_so() {
        let w = windows("UTC", &[("30 0 12 * * *", "10s")], &[]);
        assert_eq!(w.at(utc("2026-12-01T12:00:35Z")), Verdict::Open);
        assert_eq!(
            w.at(utc("2026-12-01T12:00:41Z")),
            Verdict::Closed {
                opens: Some(utc("2026-12-02T12:00:30Z"))
            }
        );
        let never = windows("UTC", &[("0 0 1 1 *", "1h")], &[("0 0 1 1 *", "2h")]);
        assert_eq!(
            never.at(utc("2026-12-01T00:00:00Z")),
            Verdict::Closed { opens: None }
        );
    }

    #[test]
    fn every_second_allowed_beside_month_long_denials_is_decided_in_a_few_jumps() {
        // Issue 57: 20 allow windows of every second beside 20 deny windows
        // of 744h, opening on the 1st of each month: stepping second by
        // second never got past the first deny window.
        let allow: Vec<(&str, &str)> = (0..20).map(|_| ("* * * * * *", "1s")).collect();
        let deny: Vec<(&str, &str)> = (0..20).map(|_| ("0 0 0 1 * *", "744h")).collect();
        let w = windows("UTC", &allow, &deny);
        let started = std::time::Instant::now();
        // Inside December's denial: 744h from Dec 1st, Jan 1st's opens at
        // its end — then Feb 1st's, and so on: denied all year.
        assert_eq!(
            w.at(utc("2026-12-10T00:00:00Z")),
            Verdict::Closed { opens: None }
        );
        // A denial that leaves room: two weeks each month.
        let two_weeks: Vec<(&str, &str)> = (0..20).map(|_| ("0 0 0 1 * *", "336h")).collect();
        let w = windows("UTC", &allow, &two_weeks);
        assert_eq!(
            w.at(utc("2026-12-10T00:00:00Z")),
            Verdict::Closed {
                opens: Some(utc("2026-12-15T00:00:00Z"))
            }
        );
        assert_eq!(w.at(utc("2026-12-20T00:00:00Z")), Verdict::Open);
        // Shown, not asserted (no timed assertion): a few jumps.
        eprintln!("three verdicts in {:?}", started.elapsed());
    }

    #[test]
    fn wrong_fields_are_named() {
        let bad = |zone: &str, schedule: &str, duration: &str| {
            Windows::compile(&ChangeWindows {
                time_zone: zone.into(),
                allow: vec![ChangeWindow {
                    schedule: schedule.into(),
                    duration: duration.into(),
                }],
                ..Default::default()
            })
            .unwrap_err()
        };
        assert!(bad("Mars/Olympus", "0 22 * * *", "1h").starts_with("changeWindows.timeZone"));
        assert!(bad("", "0 25 * * *", "1h").starts_with("changeWindows.allow[0].schedule"));
        assert!(bad("", "0 22 * * *", "745h").starts_with("changeWindows.allow[0].duration"));
        assert!(bad("", "0 22 * * *", "soon").starts_with("changeWindows.allow[0].duration"));
        // A schedule no date matches: refused once, never searched for at
        // each verdict.
        for never in ["0 0 31 2 *", "0 0 31 4 *", "0 0 30 2 *"] {
            assert!(
                bad("", never, "1h").starts_with("changeWindows.allow[0].schedule"),
                "{never}"
            );
        }
        // 29 February fires every four years, a Monday 29 February every
        // 28: windows.
        for rare in ["0 0 29 2 *", "0 0 29 2 +1"] {
            assert!(
                Windows::compile(&ChangeWindows {
                    allow: vec![ChangeWindow {
                        schedule: rare.into(),
                        duration: "1h".into(),
                    }],
                    ..Default::default()
                })
                .is_ok(),
                "{rare}"
            );
        }
        assert!(bad("", "0 0 0 1 1 * 2030", "1h").starts_with("changeWindows.allow[0].schedule"));
    }
}
