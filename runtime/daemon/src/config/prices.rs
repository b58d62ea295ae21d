//! `[prices."MODEL"]`: what a model's tokens cost, in USD per million (`input`, `cached_input`,
//! `cache_write`, `output`), keyed by the model's name as roles name it. A model with prices gets a
//! cost on each of its responses and compactions; one without is counted in tokens only.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawPrice;
use agentd_policies::cost::Price;
use std::collections::BTreeMap;

/// Checks every model's prices: each a finite number, zero or more; `input` and `output` required.
pub(super) fn prices(
    raw: BTreeMap<String, RawPrice>,
    invalid: Invalid,
) -> Result<BTreeMap<String, Price>, ConfigError> {
    let mut prices = BTreeMap::new();
    for (model, p) in raw {
        let key = |k: &str| format!("prices.\"{model}\".{k}");
        let check = |k: &str, v: Option<f64>| -> Result<Option<f64>, ConfigError> {
            match v {
                Some(v) if !v.is_finite() || v < 0.0 => Err(invalid(
                    key(k),
                    format!("must be a price in USD per million tokens, 0 or more; got {v}"),
                )),
                other => Ok(other),
            }
        };
        let required = |k: &str, v: Option<f64>| -> Result<f64, ConfigError> {
            check(k, v)?.ok_or_else(|| invalid(key(k), "is required (USD per million tokens)".into()))
        };
        let price = Price {
            input: required("input", p.input)?,
            cached_input: check("cached_input", p.cached_input)?,
            cache_write: check("cache_write", p.cache_write)?,
            output: required("output", p.output)?,
        };
        prices.insert(model, price);
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use agentd_policies::cost::Price;

    #[test]
    fn prices_parse_per_model_and_bad_ones_are_named() {
        let text = format!(
            "{DEFAULT_CONFIG}\n[prices.\"claude-sonnet-4-5\"]\ninput = 3.0\ncached_input = 0.3\ncache_write = 3.75\noutput = 15\n\
             [prices.\"qwen3\"]\ninput = 0\noutput = 0\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(
            c.team.prices["claude-sonnet-4-5"],
            Price { input: 3.0, cached_input: Some(0.3), cache_write: Some(3.75), output: 15.0 }
        );
        assert_eq!(c.team.prices["qwen3"].cached_input, None);
        assert!(parse(DEFAULT_CONFIG).unwrap().team.prices.is_empty());
        for (table, key, says) in [
            ("[prices.m]\ninput = 1\n", "prices.\"m\".output", "required"),
            ("[prices.m]\ninput = -1\noutput = 1\n", "prices.\"m\".input", "0 or more"),
            ("[prices.m]\ninput = 1\noutput = 1\ncached_input = nan\n", "prices.\"m\".cached_input", "NaN"),
            ("[prices.m]\ninput = 1\noutput = 1\ncolour = 1\n", "colour", "colour"),
        ] {
            let e = parse(&format!("{DEFAULT_CONFIG}\n{table}")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says) && e.contains("/h/agentd.toml"), "{table}: {e}");
        }
    }
}
