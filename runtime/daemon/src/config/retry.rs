//! `[retry]`: how often and how patiently a failed model request is retried, one schedule per kind
//! of failure (`rate_limit`, `stream_anomaly`, `server_error`, `overloaded`). A table sets only the
//! keys it names; the rest keep [`RetryPolicy::default`]'s values.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawRetry;
use agentd_policies::retry::RetryPolicy;

/// The retry policy `[retry]` describes; a bad delay is named `retry.KIND.delay`.
pub(super) fn retry_policy(raw: RawRetry, invalid: Invalid) -> Result<RetryPolicy, ConfigError> {
    let mut retry = RetryPolicy::default();
    for (name, raw, slot) in [
        ("rate_limit", raw.rate_limit, &mut retry.rate_limit),
        ("stream_anomaly", raw.stream_anomaly, &mut retry.stream_anomaly),
        ("server_error", raw.server_error, &mut retry.server_error),
        ("overloaded", raw.overloaded, &mut retry.overloaded),
    ] {
        let Some(raw) = raw else { continue };
        if let Some(a) = raw.attempts {
            slot.attempts = a;
        }
        if let Some(d) = raw.delay {
            let delay = humantime::parse_duration(&d)
                .map_err(|e| invalid(format!("retry.{name}.delay"), format!("{e}: {d:?}")))?;
            slot.delay_ms = delay.as_millis() as u64;
        }
    }
    Ok(retry)
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;

    #[test]
    fn retry_tables_parse_and_bad_delays_are_named() {
        let text = format!("{DEFAULT_CONFIG}\n[retry]\nrate_limit = {{ attempts = 3, delay = \"100ms\" }}\n");
        let c = parse(&text).unwrap();
        assert_eq!(c.team.retry.rate_limit.attempts, 3);
        assert_eq!(c.team.retry.rate_limit.delay_ms, 100);
        let bad = format!("{DEFAULT_CONFIG}\n[retry]\nstream_anomaly = {{ delay = \"often\" }}\n");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("retry.stream_anomaly.delay"), "{e}");
    }
}
