//! When a `[[scheduler.jobs]]` job runs: its cron expression, read in the scheduler's time zone.
//!
//! Two forms are accepted, told apart by their number of fields:
//!
//! - **5 fields**, the usual crontab(5) form: `minute hour day-of-month month day-of-week`, with
//!   crontab's meaning — day of week `0`–`7` where both `0` and `7` are Sunday (or `SUN`–`SAT`),
//!   and when both day fields are restricted (neither starts with `*`) a day matching *either*
//!   fires, as cron has always done (`0 3 1 * MON`: the 1st of each month, and every Monday).
//! - **6 or 7 fields**, the `cron` crate's form: `second minute hour day-of-month month day-of-week
//!   [year]`, with its meaning — day of week `1`–`7` where `1` is Sunday (or `SUN`–`SAT`), and both
//!   day fields must match. `@daily`, `@weekly`, `@monthly`, `@yearly` and `@hourly` work too.
//!
//! A 5-field expression is rewritten into the 6-field form (seconds `0`, its day-of-week numbers
//! moved to the crate's numbering; both day fields restricted becomes two schedules, one per day
//! field, and the job runs at whichever comes first), so one parser decides what is valid.
//!
//! The zone ([`Zone`], `[scheduler] tz`) is `UTC` (the default), a fixed offset such as `+02:00`,
//! or `local`: the daemon's own zone as the C library would read it (`$TZ`, else `/etc/localtime`),
//! daylight saving included. Named zones are not built in (a zone database is a large dependency):
//! `tz = "local"` with `TZ=Europe/Paris` in the daemon's environment reads schedules in Paris time.

use agentd_engine::spending::{Calendar, Day};
use chrono::{DateTime, FixedOffset, Local, TimeZone, Timelike, Utc};
use std::str::FromStr;
use std::time::SystemTime;

/// The time zone cron expressions are read in: `[scheduler] tz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Zone {
    /// Coordinated Universal Time, the default.
    #[default]
    Utc,
    /// A fixed offset from UTC (`+02:00`, `-05:30`), with no daylight saving.
    Fixed(FixedOffset),
    /// The daemon's local zone (`$TZ`, else `/etc/localtime`), with its daylight-saving rules.
    Local,
}

impl Zone {
    /// Reads `UTC`, `local` (either in any case) or a fixed offset `+HH:MM` / `-HH:MM` (up to
    /// ±23:59). Anything else is an error that says what is accepted.
    pub fn parse(text: &str) -> Result<Zone, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("utc") {
            return Ok(Zone::Utc);
        }
        if t.eq_ignore_ascii_case("local") {
            return Ok(Zone::Local);
        }
        if let Some(offset) = parse_offset(t) {
            return Ok(Zone::Fixed(offset));
        }
        let hint = if t.contains('/') {
            format!(
                "; named zones are not built in: use tz = \"local\" with TZ={t} in the daemon's environment"
            )
        } else {
            String::new()
        };
        Err(format!(
            "unknown time zone {text:?}: expected \"UTC\", \"local\" or a fixed offset such as \"+02:00\"{hint}"
        ))
    }

    /// The zone as `daemon.status` states it: `UTC`, `+02:00`, or `local (TZ=Europe/Paris, +02:00
    /// now)` — a local zone with where it comes from and its offset at `now`.
    pub fn describe(&self, now: SystemTime) -> String {
        match self {
            Zone::Utc => "UTC".to_string(),
            Zone::Fixed(offset) => offset.to_string(),
            Zone::Local => {
                let from = match std::env::var("TZ") {
                    Ok(tz) if !tz.is_empty() => format!("TZ={tz}"),
                    _ => "/etc/localtime".to_string(),
                };
                let offset = DateTime::<Local>::from(now).offset().to_string();
                format!("local ({from}, {offset} now)")
            }
        }
    }
}

/// `+HH:MM` or `-HH:MM`.
fn parse_offset(t: &str) -> Option<FixedOffset> {
    let (sign, rest) = match t.as_bytes().first()? {
        b'+' => (1, &t[1..]),
        b'-' => (-1, &t[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 23 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// A job's schedule: its expression, read in a zone. See the module documentation for the forms.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    zone: Zone,
    /// One schedule, or two for a 5-field expression whose day fields are both restricted (it runs
    /// when either does).
    any_of: Vec<cron::Schedule>,
}

impl Schedule {
    /// Parses a 5-, 6- or 7-field expression (or an `@daily`-style shorthand) to be read in `zone`.
    /// The error says what was wrong, in words a user can act on.
    pub fn parse(expr: &str, zone: Zone) -> Result<Schedule, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let crate_forms = match fields.as_slice() {
            [min, hour, dom, month, dow] => {
                let dow_crate = crate_days_of_week(dow)?;
                let restricted = |f: &str| !f.starts_with('*');
                if restricted(dom) && restricted(dow) {
                    vec![
                        format!("0 {min} {hour} {dom} {month} *"),
                        format!("0 {min} {hour} * {month} {dow_crate}"),
                    ]
                } else {
                    vec![format!("0 {min} {hour} {dom} {month} {dow_crate}")]
                }
            }
            [_] | [_, _, _, _, _, _] | [_, _, _, _, _, _, _] => vec![expr.trim().to_string()],
            _ => {
                return Err(format!(
                    "{} fields; expected 5 (minute hour day month weekday) or 6 (second minute hour \
                     day month weekday)",
                    fields.len()
                ))
            }
        };
        let any_of = crate_forms
            .iter()
            .map(|form| cron::Schedule::from_str(form).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Schedule { zone, any_of })
    }

    /// The zone the expression is read in.
    pub fn zone(&self) -> Zone {
        self.zone
    }

    /// The first time after `now` the schedule fires, or `None` if it never does again.
    pub fn next_after(&self, now: SystemTime) -> Option<SystemTime> {
        self.any_of
            .iter()
            .filter_map(|s| match self.zone {
                Zone::Utc => next_in(s, &Utc, now),
                Zone::Fixed(offset) => next_in(s, &offset, now),
                Zone::Local => next_in(s, &Local, now),
            })
            .min()
    }
}

fn next_in<Z: TimeZone>(schedule: &cron::Schedule, zone: &Z, now: SystemTime) -> Option<SystemTime> {
    let now = DateTime::<Utc>::from(now).with_timezone(zone);
    schedule.after(&now).next().map(SystemTime::from)
}

/// A crontab day-of-week field (`0`–`7`, `0` and `7` Sunday, or `SUN`–`SAT`; lists, ranges and
/// steps) in the `cron` crate's numbering (`1`–`7`, `1` Sunday), as an explicit list; `*` stays `*`.
fn crate_days_of_week(field: &str) -> Result<String, String> {
    if field == "*" {
        return Ok("*".to_string());
    }
    let day = |s: &str| -> Result<u32, String> {
        const NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        if let Some(i) = NAMES.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32);
        }
        match s.parse::<u32>() {
            Ok(n) if n <= 7 => Ok(n),
            _ => Err(format!(
                "day of week {s:?} is not 0-7 (0 and 7 are Sunday) or SUN-SAT in the 5-field form"
            )),
        }
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => match step.parse::<u32>() {
                Ok(step) if step > 0 => (base, step),
                _ => return Err(format!("bad step {step:?} in the day of week {item:?}")),
            },
            None => (item, 1),
        };
        let (from, to) = match base.split_once('-') {
            _ if base == "*" => (0, 7),
            Some((a, b)) => (day(a)?, day(b)?),
            // `N/step` runs from N to the end of the week, as in crontab.
            None if step > 1 => (day(base)?, 7),
            None => {
                let d = day(base)?;
                (d, d)
            }
        };
        if from > to {
            return Err(format!("the day-of-week range {base:?} runs backwards"));
        }
        for d in (from..=to).step_by(step as usize) {
            days[(d % 7) as usize] = true;
        }
    }
    let list: Vec<String> = (0..7).filter(|&d| days[d]).map(|d| (d + 1).to_string()).collect();
    Ok(list.join(","))
}

/// The budgets' days are the scheduler's: a day budget turns at midnight in `[scheduler] tz`.
impl Calendar for Zone {
    fn day(&self, at: SystemTime) -> Day {
        match self {
            Zone::Utc => day_in(&Utc, at),
            Zone::Fixed(offset) => day_in(offset, at),
            Zone::Local => day_in(&Local, at),
        }
    }
}

/// The day `at` falls in, in `tz`: from its midnight to the next (the first instant of each, when
/// daylight saving skips or repeats midnight).
fn day_in<Tz: TimeZone>(tz: &Tz, at: SystemTime) -> Day {
    let local = DateTime::<Utc>::from(at).with_timezone(tz);
    let date = local.date_naive();
    let midnight = |d: chrono::NaiveDate| {
        d.and_hms_opt(0, 0, 0)
            .and_then(|m| tz.from_local_datetime(&m).earliest())
            .map(|m| SystemTime::from(m.with_timezone(&Utc)))
    };
    let since_midnight = std::time::Duration::from_secs(u64::from(local.time().num_seconds_from_midnight()));
    let starts = midnight(date).unwrap_or(at - since_midnight);
    let next = date.succ_opt().and_then(midnight).unwrap_or(starts + std::time::Duration::from_secs(86_400));
    Day { key: date.format("%Y-%m-%d").to_string(), starts, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// 2024-01-01T00:00:00Z, a Monday.
    const MONDAY: u64 = 1_704_067_200;

    #[test]
    fn budget_days_turn_at_midnight_in_the_zone() {
        let at = UNIX_EPOCH + Duration::from_secs(MONDAY + 23 * 3600);
        let utc = Zone::Utc.day(at);
        assert_eq!(utc.key, "2024-01-01");
        assert_eq!(utc.next, UNIX_EPOCH + Duration::from_secs(MONDAY + 86_400));
        // 23:00 UTC is already Tuesday in +02:00, whose day began at 22:00 UTC.
        let paris = Zone::parse("+02:00").unwrap().day(at);
        assert_eq!(paris.key, "2024-01-02");
        assert_eq!(paris.starts, UNIX_EPOCH + Duration::from_secs(MONDAY + 22 * 3600));
        assert_eq!(paris.next, UNIX_EPOCH + Duration::from_secs(MONDAY + 46 * 3600));
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn next(expr: &str, zone: Zone, from: u64) -> u64 {
        let s = Schedule::parse(expr, zone).unwrap();
        s.next_after(at(from)).unwrap().duration_since(UNIX_EPOCH).unwrap().as_secs()
    }

    #[test]
    fn the_five_field_form_means_what_crontab_means() {
        // 03:30 every day.
        assert_eq!(next("30 3 * * *", Zone::Utc, MONDAY), MONDAY + 3 * 3600 + 1800);
        // The same expression in 6 fields.
        assert_eq!(next("0 30 3 * * *", Zone::Utc, MONDAY), MONDAY + 3 * 3600 + 1800);
        // Day of week 1 is Monday in crontab (Sunday in the 6-field form).
        assert_eq!(next("0 9 * * 1", Zone::Utc, MONDAY + 10 * 3600), MONDAY + 7 * 86_400 + 9 * 3600);
        assert_eq!(next("0 0 9 * * 2", Zone::Utc, MONDAY + 10 * 3600), MONDAY + 7 * 86_400 + 9 * 3600);
        // 0 and 7 are both Sunday; names work; ranges and steps too.
        let sunday = MONDAY + 6 * 86_400;
        for dow in ["0", "7", "SUN", "sun", "0/7"] {
            assert_eq!(next(&format!("0 0 * * {dow}"), Zone::Utc, MONDAY + 1), sunday, "{dow}");
        }
        assert_eq!(crate_days_of_week("1-5").unwrap(), "2,3,4,5,6");
        assert_eq!(crate_days_of_week("6-7").unwrap(), "1,7");
        assert_eq!(crate_days_of_week("*/2").unwrap(), "1,3,5,7");
        assert_eq!(crate_days_of_week("MON-FRI,SUN").unwrap(), "1,2,3,4,5,6");
    }

    #[test]
    fn both_day_fields_restricted_fire_on_either() {
        // The 15th of the month or a Friday, whichever comes first: Friday the 5th of January 2024.
        let friday = MONDAY + 4 * 86_400;
        assert_eq!(next("0 0 15 * 5", Zone::Utc, MONDAY), friday);
        // After that Friday: the next Friday (the 12th), then the 15th.
        assert_eq!(next("0 0 15 * 5", Zone::Utc, friday), friday + 7 * 86_400);
        assert_eq!(next("0 0 15 * 5", Zone::Utc, friday + 7 * 86_400), MONDAY + 14 * 86_400);
    }

    #[test]
    fn a_fixed_offset_moves_the_schedule() {
        let plus2 = Zone::parse("+02:00").unwrap();
        // 03:30 at +02:00 is 01:30 UTC.
        assert_eq!(next("30 3 * * *", plus2, MONDAY), MONDAY + 3600 + 1800);
        let minus530 = Zone::parse("-05:30").unwrap();
        assert_eq!(next("0 0 * * *", minus530, MONDAY), MONDAY + 5 * 3600 + 1800);
        assert_eq!(plus2.describe(at(MONDAY)), "+02:00");
        assert_eq!(Zone::Utc.describe(at(MONDAY)), "UTC");
        assert!(Zone::Local.describe(at(MONDAY)).starts_with("local ("), "{}", Zone::Local.describe(at(0)));
    }

    #[test]
    fn zones_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(Zone::parse("utc").unwrap(), Zone::Utc);
        assert_eq!(Zone::parse("Local").unwrap(), Zone::Local);
        for bad in ["+2", "+24:00", "+02:60", "CEST", "02:00", ""] {
            let e = Zone::parse(bad).unwrap_err();
            assert!(e.contains("fixed offset such as \"+02:00\""), "{bad}: {e}");
        }
        let e = Zone::parse("Europe/Paris").unwrap_err();
        assert!(e.contains("TZ=Europe/Paris"), "{e}");
    }

    #[test]
    fn bad_expressions_are_errors_that_say_why() {
        let e = Schedule::parse("* * *", Zone::Utc).unwrap_err();
        assert!(e.contains("3 fields") && e.contains("expected 5"), "{e}");
        let e = Schedule::parse("0 3 * * 8", Zone::Utc).unwrap_err();
        assert!(e.contains("\"8\"") && e.contains("0-7"), "{e}");
        let e = Schedule::parse("0 3 * * 5-1", Zone::Utc).unwrap_err();
        assert!(e.contains("backwards"), "{e}");
        assert!(Schedule::parse("61 3 * * *", Zone::Utc).is_err());
        assert!(Schedule::parse("@daily", Zone::Utc).is_ok());
        assert!(Schedule::parse("0 0 3 * * * 2099", Zone::Utc).is_ok());
    }
}
