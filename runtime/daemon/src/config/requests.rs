//! `[requests]`: the deadlines of one model request. `timeout` bounds the whole request, from
//! sending to the last event; `idle_timeout` cuts a stream that goes that long without any part of
//! an event (keep-alives are none), so it may not be longer than `timeout`.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawRequests;
use agentd_providers::Deadlines;

/// The deadlines `[requests]` sets over [`Deadlines::default`]; each must be longer than 0s.
pub(super) fn deadlines(raw: &RawRequests, invalid: Invalid) -> Result<Deadlines, ConfigError> {
    let mut deadlines = Deadlines::default();
    for (key, value, slot) in [
        ("requests.idle_timeout", &raw.idle_timeout, &mut deadlines.idle),
        ("requests.timeout", &raw.timeout, &mut deadlines.total),
    ] {
        if let Some(v) = value {
            let d = humantime::parse_duration(v).map_err(|e| invalid(key.into(), format!("{e}: {v:?}")))?;
            if d.is_zero() {
                return Err(invalid(key.into(), "must be longer than 0s".into()));
            }
            *slot = d;
        }
    }
    if deadlines.idle > deadlines.total {
        return Err(invalid(
            "requests.idle_timeout".into(),
            format!("{:?} is longer than requests.timeout ({:?})", deadlines.idle, deadlines.total),
        ));
    }
    Ok(deadlines)
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use agentd_providers::Deadlines;
    use std::time::Duration;

    #[test]
    fn request_deadlines_parse_and_bad_ones_are_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.deadlines, Deadlines::default());
        assert_eq!(c.deadlines.idle, Duration::from_secs(60));
        assert_eq!(c.deadlines.total, Duration::from_secs(600));
        let text = format!("{DEFAULT_CONFIG}\n[requests]\nidle_timeout = \"5s\"\ntimeout = \"1m\"\n");
        let c = parse(&text).unwrap();
        assert_eq!((c.deadlines.idle, c.deadlines.total), (Duration::from_secs(5), Duration::from_secs(60)));
        for (bad, key) in [
            ("idle_timeout = \"soon\"", "requests.idle_timeout"),
            ("timeout = \"0s\"", "requests.timeout"),
            ("idle_timeout = \"20m\"", "requests.idle_timeout"),
            ("deadline = \"1s\"", "deadline"),
        ] {
            let text = format!("{DEFAULT_CONFIG}\n[requests]\n{bad}\n");
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        let text = format!("{DEFAULT_CONFIG}\n[retry]\noverloaded = {{ attempts = 2, delay = \"1s\" }}\n");
        let c = parse(&text).unwrap();
        assert_eq!((c.team.retry.overloaded.attempts, c.team.retry.overloaded.delay_ms), (2, 1000));
    }
}
