//! What the wire formats' answers share beyond HTTP: a declared window, read the same way from any
//! server's probe answer.

use agentd_policies::Tokens;
use serde_json::Value;

/// A declared window: a positive integer, given as a number (an integral float counts) or a string
/// of digits. Every format's probe reads its numbers with this.
pub(crate) fn window_number(value: Option<&Value>) -> Option<Tokens> {
    let n = match value? {
        Value::Number(n) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f > 0.0).map(|f| f as u64))
        }
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    (n > 0).then_some(Tokens(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn window_numbers_as_numbers_or_digits() {
        assert_eq!(window_number(Some(&json!(32768))), Some(Tokens(32768)));
        assert_eq!(window_number(Some(&json!(" 4096 "))), Some(Tokens(4096)));
        assert_eq!(window_number(Some(&json!(8192.0))), Some(Tokens(8192)), "an integral float");
        assert_eq!(window_number(Some(&json!(8192.5))), None);
        assert_eq!(window_number(Some(&json!(0))), None);
        assert_eq!(window_number(Some(&json!("0"))), None);
        assert_eq!(window_number(Some(&json!(-1))), None);
        assert_eq!(window_number(Some(&json!("128k"))), None);
        assert_eq!(window_number(Some(&json!(null))), None);
        assert_eq!(window_number(Some(&json!({"n": 1}))), None);
        assert_eq!(window_number(None), None);
    }
}
