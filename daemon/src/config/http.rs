//! `[http]`: where the dashboard and HTTP API listen. Off unless `listen` is set (or
//! `agentd serve --http ADDR`). A port alone means loopback; only an address the user names is ever
//! off it, and a host name is refused, since what it resolves to could be.

use super::error::Invalid;
use super::raw::RawHttp;
use super::ConfigError;
use std::net::SocketAddr;

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

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use std::net::SocketAddr;

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
