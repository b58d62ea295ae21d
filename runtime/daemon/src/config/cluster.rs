//! `[cluster]`: run this daemon as one node of a fleet on NATS JetStream (`docs/cluster.md`). Absent,
//! the daemon runs alone on sled, as it always has.
//!
//! ```toml
//! [cluster]
//! nats = ["nats://10.0.0.5:4222"]   # required: the NATS servers (JetStream on), any of them will do
//! node = "build-1"                  # this daemon's name in the fleet; default: the host name
//! max_tasks = 8                     # tasks it runs at once (default 8)
//! workspaces = ["/srv/work"]        # workspace roots it reaches (default ["/"]: any it can open)
//! replicas = 3                      # JetStream replicas of agentd's data (default 1)
//! lease = "15s"                     # a running task's lease (default 15s, from 3s to 10min)
//! start_timeout = "5m"              # how long `serve` waits for NATS and JetStream to be ready
//!                                   # (default 5min, from 1s to 1h); meanwhile `daemon.status` says why
//! credentials = "/etc/agentd/nats.creds"   # or token_env, or user + password_env
//! tls_ca = "/etc/agentd/ca.pem"     # and tls_cert + tls_key, tls_required
//! ```

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawCluster;
use std::path::PathBuf;
use std::time::Duration;

/// `[cluster]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The NATS servers' URLs.
    pub nats: Vec<String>,
    /// This daemon's name in the fleet.
    pub node: String,
    /// How many tasks it runs at once.
    pub max_tasks: usize,
    /// The workspace roots it reaches, absolute.
    pub workspaces: Vec<PathBuf>,
    /// JetStream replicas of agentd's streams, buckets and object store.
    pub replicas: usize,
    /// How long a running task's lease lasts without renewal.
    pub lease: Duration,
    /// How long `serve` waits for NATS and JetStream to be ready before it gives up.
    pub start_timeout: Duration,
    /// A `.creds` file to log in with.
    pub credentials: Option<PathBuf>,
    /// The environment variable holding a token to log in with.
    pub token_env: Option<String>,
    /// A user name to log in with (its password in `password_env`).
    pub user: Option<String>,
    /// The environment variable holding `user`'s password.
    pub password_env: Option<String>,
    /// PEM file of the certificate authorities to trust.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) and its key.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// Refuse a connection that is not TLS.
    pub tls_required: bool,
}

impl ClusterConfig {
    /// The environment variables whose values are secrets (the token, the password).
    pub fn secret_env(&self) -> impl Iterator<Item = &String> {
        self.token_env.iter().chain(&self.password_env)
    }
}

/// A duration key: `default` when absent, else a humantime duration within `secs` (inclusive),
/// refused naming `key` and the range in words.
fn duration(
    invalid: &Invalid,
    key: &str,
    text: Option<String>,
    default: Duration,
    (min, max): (u64, u64),
    range: &str,
) -> Result<Duration, ConfigError> {
    let Some(text) = text else { return Ok(default) };
    let d = humantime::parse_duration(&text).map_err(|e| invalid(key.into(), format!("{e}: {text:?}")))?;
    if !(Duration::from_secs(min)..=Duration::from_secs(max)).contains(&d) {
        return Err(invalid(key.into(), format!("must be from {range}, got {text:?}")));
    }
    Ok(d)
}

/// This machine's host name, the default node name.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A node name is a word of letters, digits, `-`, `_` and `.`, at most 64 bytes.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `[cluster]`, when present.
pub(super) fn cluster(
    raw: Option<RawCluster>,
    invalid: Invalid,
) -> Result<Option<ClusterConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let nats = raw.nats.unwrap_or_default();
    if nats.is_empty() {
        return Err(invalid("cluster.nats".into(), "must list at least one NATS server URL".into()));
    }
    for (i, url) in nats.iter().enumerate() {
        let scheme_ok = ["nats://", "tls://", "ws://", "wss://"].iter().any(|s| url.starts_with(s));
        if !scheme_ok || url.contains(char::is_whitespace) {
            return Err(invalid(
                format!("cluster.nats[{i}]"),
                format!("must be a URL such as \"nats://10.0.0.5:4222\", got {url:?}"),
            ));
        }
    }
    let node = match raw.node.or_else(host_name) {
        Some(node) if plain_name(&node) => node,
        Some(node) => {
            return Err(invalid(
                "cluster.node".into(),
                format!("must be letters, digits, `-`, `_` and `.` (at most 64), got {node:?}"),
            ))
        }
        None => {
            return Err(invalid("cluster.node".into(), "the host name is unknown: set a node name".into()))
        }
    };
    let max_tasks = match raw.max_tasks {
        None => 8,
        Some(n) if (1..=10_000).contains(&n) => n as usize,
        Some(n) => {
            return Err(invalid("cluster.max_tasks".into(), format!("must be from 1 to 10000, got {n}")))
        }
    };
    let workspaces = raw.workspaces.unwrap_or_else(|| vec!["/".into()]);
    if workspaces.is_empty() {
        return Err(invalid("cluster.workspaces".into(), "must list at least one workspace root".into()));
    }
    for (i, root) in workspaces.iter().enumerate() {
        if !root.is_absolute() {
            return Err(invalid(
                format!("cluster.workspaces[{i}]"),
                format!("must be an absolute path, got {:?}", root.display().to_string()),
            ));
        }
    }
    let replicas = match raw.replicas {
        None => 1,
        Some(n) if (1..=5).contains(&n) => n as usize,
        Some(n) => return Err(invalid("cluster.replicas".into(), format!("must be from 1 to 5, got {n}"))),
    };
    let lease =
        duration(&invalid, "cluster.lease", raw.lease, Duration::from_secs(15), (3, 600), "3s to 10min")?;
    let start_timeout = duration(
        &invalid,
        "cluster.start_timeout",
        raw.start_timeout,
        Duration::from_secs(300),
        (1, 3_600),
        "1s to 1h",
    )?;
    if raw.user.is_some() != raw.password_env.is_some() {
        return Err(invalid("cluster.password_env".into(), "`user` and `password_env` go together".into()));
    }
    let tls_client = match (raw.tls_cert, raw.tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err(invalid("cluster.tls_key".into(), "`tls_cert` and `tls_key` go together".into())),
    };
    for (key, value) in [("cluster.token_env", &raw.token_env), ("cluster.password_env", &raw.password_env)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(invalid(key.into(), "must name an environment variable".into()));
        }
    }
    Ok(Some(ClusterConfig {
        nats,
        node,
        max_tasks,
        workspaces,
        replicas,
        lease,
        start_timeout,
        credentials: raw.credentials,
        token_env: raw.token_env,
        user: raw.user,
        password_env: raw.password_env,
        tls_ca: raw.tls_ca,
        tls_client,
        tls_required: raw.tls_required.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use std::time::Duration;

    fn with(section: &str) -> Result<super::super::Config, super::super::ConfigError> {
        parse(&format!("{DEFAULT_CONFIG}\n[cluster]\n{section}\n"))
    }

    #[test]
    fn without_a_cluster_section_the_daemon_runs_alone() {
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().cluster, None);
    }

    #[test]
    fn a_cluster_section_is_read_with_its_defaults() {
        let c = with("nats = [\"nats://127.0.0.1:4222\"]\nnode = \"build-1\"").unwrap().cluster.unwrap();
        assert_eq!(c.nats, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.node, "build-1");
        assert_eq!((c.max_tasks, c.replicas, c.lease), (8, 1, Duration::from_secs(15)));
        assert_eq!(c.start_timeout, Duration::from_secs(300));
        assert_eq!(c.workspaces, [std::path::PathBuf::from("/")]);
        let c = with("nats = [\"nats://a:1\", \"tls://b:2\"]\nnode = \"n\"\nmax_tasks = 2\nworkspaces = [\"/srv/w\"]\nreplicas = 3\nlease = \"30s\"")
            .unwrap()
            .cluster
            .unwrap();
        assert_eq!((c.max_tasks, c.replicas, c.lease), (2, 3, Duration::from_secs(30)));
    }

    #[test]
    fn a_bad_cluster_value_names_its_key() {
        let url = "nats = [\"nats://a:1\"]\nnode = \"n\"\n";
        for (section, key) in [
            ("nats = []", "cluster.nats"),
            ("nats = [\"a:1\"]", "cluster.nats[0]"),
            ("nats = [\"nats://a:1\"]\nnode = \"a b\"", "cluster.node"),
            (&format!("{url}max_tasks = 0"), "cluster.max_tasks"),
            (&format!("{url}workspaces = [\"srv\"]"), "cluster.workspaces[0]"),
            (&format!("{url}workspaces = []"), "cluster.workspaces"),
            (&format!("{url}replicas = 7"), "cluster.replicas"),
            (&format!("{url}lease = \"1s\""), "cluster.lease"),
            (&format!("{url}lease = \"soon\""), "cluster.lease"),
            (&format!("{url}user = \"u\""), "cluster.password_env"),
            (&format!("{url}tls_cert = \"/c.pem\""), "cluster.tls_key"),
            (&format!("{url}token_env = \" \""), "cluster.token_env"),
        ] {
            let e = with(section).unwrap_err().to_string();
            assert!(e.contains(&format!("`{key}`")) && e.contains("/h/agentd.toml"), "{section}: {e}");
        }
        let e = with(&format!("{url}colour = 1")).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
    }
}
