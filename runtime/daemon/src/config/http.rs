//! `[http]`: where the dashboard and HTTP API listen. Off unless `listen` is set (or
//! `agentd serve --http ADDR`). A port alone means loopback; only an address the user names is ever
//! off it, and a host name is refused, since what it resolves to could be. `keep_alive` is how
//! often an event stream with nothing to send writes a comment, so a client that went away is
//! noticed (the write fails) and its connection closed.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawHttp;
use std::net::SocketAddr;
use std::time::Duration;

/// `[http] keep_alive` when unset.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Reads an HTTP listen address: `PORT` (on 127.0.0.1), `IP:PORT` or `[IPv6]:PORT`. Only an address
/// the user names is ever off loopback; a host name is refused, since what it resolves to could be.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("expected PORT, IP:PORT or [IPv6]:PORT (such as \"127.0.0.1:7878\"), got {text:?}")
    })
}

/// `http.listen`, if set.
pub(super) fn http_listen(raw: &RawHttp, invalid: Invalid) -> Result<Option<SocketAddr>, ConfigError> {
    match &raw.listen {
        None => Ok(None),
        Some(text) => Ok(Some(parse_listen(text).map_err(|message| invalid("http.listen".into(), message))?)),
    }
}

/// `http.keep_alive`: a duration longer than 0s, [`DEFAULT_KEEP_ALIVE`] unset.
pub(super) fn http_keep_alive(raw: &RawHttp, invalid: Invalid) -> Result<Duration, ConfigError> {
    let Some(text) = &raw.keep_alive else { return Ok(DEFAULT_KEEP_ALIVE) };
    let key = "http.keep_alive";
    let d = humantime::parse_duration(text).map_err(|e| invalid(key.into(), format!("{e}: {text:?}")))?;
    if d.is_zero() {
        return Err(invalid(key.into(), "must be longer than 0s".into()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use super::DEFAULT_KEEP_ALIVE;
    use std::net::SocketAddr;
    use std::time::Duration;

    #[test]
    fn the_keep_alive_is_15s_unless_set_and_a_bad_one_is_named() {
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().http_keep_alive, DEFAULT_KEEP_ALIVE);
        assert_eq!(DEFAULT_KEEP_ALIVE, Duration::from_secs(15));
        let with = |v: &str| parse(&format!("{DEFAULT_CONFIG}\n[http]\nkeep_alive = \"{v}\"\n"));
        assert_eq!(with("2s").unwrap().http_keep_alive, Duration::from_secs(2));
        assert_eq!(with("500ms").unwrap().http_keep_alive, Duration::from_millis(500));
        for bad in ["0s", "often", ""] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("http.keep_alive") && e.contains("/h/agentd.toml"), "{bad}: {e}");
        }
    }

    #[test]
    fn http_is_off_by_default_and_a_port_alone_is_loopback() {
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().http_listen, None);
        let with = |listen: &str| parse(&format!("{DEFAULT_CONFIG}\n[http]\nlisten = \"{listen}\"\n"));
        assert_eq!(
            with("127.0.0.1:7878").unwrap().http_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 7878)))
        );
        assert_eq!(with("7878").unwrap().http_listen, Some(SocketAddr::from(([127, 0, 0, 1], 7878))));
        assert_eq!(with("[::1]:0").unwrap().http_listen.map(|a| a.ip().is_loopback()), Some(true));
        // Named explicitly, another address is the user's choice.
        assert_eq!(with("0.0.0.0:7878").unwrap().http_listen.map(|a| a.port()), Some(7878));
        for bad in ["localhost:7878", "7878x", ""] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("http.listen") && e.contains("/h/agentd.toml"), "{bad}: {e}");
        }
        let e = parse(&format!("{DEFAULT_CONFIG}\n[http]\nport = 1\n")).unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
    }
}
