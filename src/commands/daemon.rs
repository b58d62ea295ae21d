//! The daemon's own commands: `init` (its config), `serve` (the daemon itself, in the foreground),
//! `daemon` (its status) and `dashboard` (the URL that logs a browser into its HTTP side).
//!
//! `serve` is the one command that is not a client of the socket: it is the daemon, and its log
//! goes to stderr in the format asked.

use super::connect::connect;
use crate::cli::LogFormat;
use crate::exit::{self, fail, Failure};
use crate::print::{pretty, print_daemon};
use crate::print::{raw, say};
use agentd_daemon::config::{parse_listen, Config, ConfigError, DEFAULT_CONFIG};
use agentd_daemon::daemon::{serve as run_daemon, DaemonError, Home, ServeOptions};
use agentd_daemon::telemetry::{self, Telemetry};
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{DaemonStatus, NoParams, ReloadResult};
use std::io::Write;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// What the traces carry: the engine's spans and the daemon's task spans, whatever `RUST_LOG` says.
fn span_targets() -> Targets {
    Targets::new()
        .with_target("agentd_engine::spans", Level::INFO)
        .with_target("agentd_daemon::telemetry", Level::INFO)
}

/// `agentd init`: writes the default config, never over one that exists (then it says so and
/// succeeds).
pub fn init(home: &Home, json: bool) -> Result<u8, Failure> {
    home.ensure().map_err(|e| fail(exit::USAGE, format!("cannot create {}: {e}", home.dir.display())))?;
    let path = home.config();
    let report = |written: bool| {
        if json {
            raw!("{}", pretty(&serde_json::json!({"config": path, "written": written})));
        } else if written {
            say!("wrote {}", path.display());
        } else {
            say!("{} already exists; left unchanged", path.display());
        }
    };
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(mut f) => {
            f.write_all(DEFAULT_CONFIG.as_bytes())
                .map_err(|e| fail(exit::USAGE, format!("{}: {e}", path.display())))?;
            report(true);
            Ok(exit::OK)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            report(false);
            Ok(exit::OK)
        }
        Err(e) => Err(fail(exit::USAGE, format!("{}: {e}", path.display()))),
    }
}

/// `agentd serve`: sets up the log on stderr, then runs the daemon until a signal. With
/// `--log-format json` a failure at start is a log record too, not a bare line.
pub fn serve(home: &Home, log_format: LogFormat, http: Option<&str>) -> Result<u8, Failure> {
    let http = match http {
        None => None,
        Some(text) => Some(parse_listen(text).map_err(|e| fail(exit::USAGE, format!("--http: {e}")))?),
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // actix-http's ERROR per unparseable request: the daemon logs those itself, at debug, rate-limited.
    if let Ok(silenced) = agentd_daemon::http::front::SILENCED_LOG.parse() {
        filter = filter.add_directive(silenced);
    }
    let json = log_format == LogFormat::Json;
    // The config is read once, here, before the log: its collector, if it names one, is where the
    // log's traces go; a config that does not load is reported once the log is set up (`serve_in`).
    let path = home.config();
    let loaded = path.exists().then(|| Config::load(&path));
    let configured = loaded.as_ref().and_then(|l| l.as_ref().ok()).and_then(|c| c.otlp_endpoint.as_deref());
    let endpoint = telemetry::endpoint(configured, |name| std::env::var(name).ok());
    let service = std::env::var("OTEL_SERVICE_NAME").ok().filter(|s| !s.trim().is_empty());
    let (telemetry, traces, refused) = match endpoint {
        None => (None, None, None),
        Some(url) => match Telemetry::start(&url, service.unwrap_or_else(|| "agentd".into())) {
            Ok((t, layer)) => (Some(t), Some(layer.with_filter(span_targets())), None),
            Err(e) => (None, None, Some(e)),
        },
    };
    let log = if json {
        tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).with_filter(filter).boxed()
    } else {
        let ansi = crate::print::colour_on_stderr();
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    tracing_subscriber::registry().with(traces).with(log).init();
    match (&telemetry, refused) {
        (Some(t), _) => tracing::info!(endpoint = %t.endpoint, "traces are exported over OTLP"),
        (None, Some(e)) => tracing::error!(error = %e, "traces are not exported"),
        (None, None) => {}
    }
    let options = ServeOptions { http, exports: telemetry.as_ref().map(|t| t.exports.clone()) };
    let outcome = serve_in(home, loaded, json, &options);
    if let Some(t) = telemetry {
        t.shutdown();
    }
    match outcome {
        // With JSON logs every line of stderr is JSON: the failure is a log record too.
        Err(mut f) if json => {
            tracing::error!(exit_code = f.code, error = %f.message, "agentd serve failed");
            f.logged = true;
            Err(f)
        }
        other => other,
    }
}

/// The daemon's run, after the log is set up: the config is checked first, so a bad one is
/// [`exit::USAGE`] naming the key.
fn serve_in(
    home: &Home,
    loaded: Option<Result<Config, ConfigError>>,
    json: bool,
    options: &ServeOptions,
) -> Result<u8, Failure> {
    // Check the config (as `serve` read it) before anything else, so a bad one is exit code 2 with
    // the key named.
    if let Some(loaded) = loaded {
        let loaded = loaded.map_err(|e| fail(exit::USAGE, e.to_string()))?;
        loaded.check_keys(|name| std::env::var_os(name)).map_err(|e| fail(exit::USAGE, e.to_string()))?;
    }
    let ready = move |socket: &std::path::Path| {
        // The JSON log already says so ("agentd is serving", with the socket).
        if !json {
            crate::print::warn(&format!("agentd: serving on {}", socket.display()));
        }
    };
    match run_daemon(home, options, ready) {
        Ok(()) => Ok(exit::OK),
        Err(e @ (DaemonError::Config(_) | DaemonError::NoConfig(_))) => Err(fail(exit::USAGE, e.to_string())),
        Err(e) => Err(fail(exit::FAILED, e.to_string())),
    }
}

/// `agentd dashboard`: the URL that logs a browser in, from the daemon's HTTP address and the token.
pub fn dashboard(home: &Home, json: bool) -> Result<u8, Failure> {
    let status: DaemonStatus = connect(home)?.call::<method::DaemonStatus>(NoParams {})?;
    let Some(http) = status.http else {
        return Err(fail(
            exit::USAGE,
            format!(
                "the daemon serves no dashboard: set `[http] listen = \"127.0.0.1:7878\"` in {} or run `agentd serve --http 127.0.0.1:7878`",
                home.config().display()
            ),
        ));
    };
    let path = home.http_token();
    let token =
        std::fs::read_to_string(&path).map_err(|e| fail(exit::FAILED, format!("{}: {e}", path.display())))?;
    let addr: std::net::SocketAddr = http
        .listen
        .parse()
        .map_err(|e| fail(exit::FAILED, format!("the daemon's HTTP address {:?}: {e}", http.listen)))?;
    // Listening on every address: this machine reaches it on loopback.
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        ip if ip.is_unspecified() => std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    let url = format!("http://{host}/?{}={}", agentd_protocol::http::TOKEN_QUERY, token.trim());
    if json {
        raw!("{}", serde_json::json!({ "url": url }));
    } else {
        say!("{url}");
    }
    Ok(exit::OK)
}

/// `agentd reload`: the daemon reads agentd.toml again; what changed.
pub fn reload(home: &Home, json: bool) -> Result<u8, Failure> {
    let r: ReloadResult = connect(home)?.call::<method::DaemonReload>(NoParams {})?;
    if json {
        raw!("{}", pretty(&r));
    } else {
        crate::print::print_reload(&r);
    }
    Ok(exit::OK)
}

/// A warning on stderr when agentd.toml on disk is not what the daemon runs (said by `status` and
/// `resume`, where a user who edited the file expects it applied). Quiet when the daemon cannot
/// say.
pub fn warn_if_config_changed(client: &mut agentd_client::Client) {
    if let Ok(status) = client.call::<method::DaemonStatus>(NoParams {}) {
        if status.config.differs {
            crate::print::warn(&format!(
                "agentd: {} has changed since the daemon read it ({}); it still runs the old one: `agentd reload` applies it",
                status.config.path, status.config.read_at
            ));
        }
    }
}

/// `agentd daemon`: the status, and a warning on stderr while the daemon's storage is failing.
pub fn status(home: &Home, json: bool) -> Result<u8, Failure> {
    let r: DaemonStatus = connect(home)?.call::<method::DaemonStatus>(NoParams {})?;
    if json {
        raw!("{}", pretty(&r));
    } else {
        print_daemon(&r);
    }
    if !r.storage.ok {
        crate::print::warn(&format!(
            "storage is failing since {}: {}",
            r.storage.since.as_deref().unwrap_or("?"),
            r.storage.error.as_deref().unwrap_or("")
        ));
    }
    Ok(exit::OK)
}
