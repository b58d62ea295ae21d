//! Where agentd's data lives on NATS and how this client logs in: [`NatsConfig`] and [`NatsAuth`],
//! as the daemon's configuration fills them, and the `async-nats` options they make.

use crate::error::ClusterError;
use async_nats::ConnectOptions;
use std::path::PathBuf;

/// Where agentd's data lives on NATS, how many replicas JetStream keeps of it, and how to log in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatsConfig {
    /// The servers' URLs (`nats://host:4222`); any of them will do.
    pub urls: Vec<String>,
    /// Replicas of each stream, bucket and object store (1 on a single server, 3 for a cluster).
    pub replicas: usize,
    /// How this client proves who it is, and the TLS it asks for.
    pub auth: NatsAuth,
    /// The connection's name, as the servers show it (`agentd build-1`).
    pub name: Option<String>,
}

/// How a client logs in to NATS and the TLS it uses, as `async-nats` offers them. Secrets are values
/// here: the daemon reads them from the environment variables its configuration names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatsAuth {
    /// A `.creds` file (a user JWT and its NKey seed).
    pub credentials: Option<PathBuf>,
    /// A token.
    pub token: Option<String>,
    /// A user name and its password.
    pub user: Option<(String, String)>,
    /// PEM files of the certificate authorities to trust.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// Refuse a connection that is not TLS.
    pub tls_required: bool,
}

impl NatsConfig {
    /// The client's options for this configuration.
    pub(super) async fn options(&self) -> Result<ConnectOptions, ClusterError> {
        let auth = &self.auth;
        let mut options = match &auth.credentials {
            Some(path) => ConnectOptions::with_credentials_file(path.clone()).await.map_err(|e| {
                ClusterError::Connect {
                    urls: self.urls.join(","),
                    message: format!("cannot read the credentials file {}: {e}", path.display()),
                }
            })?,
            None => ConnectOptions::new(),
        };
        if let Some(token) = &auth.token {
            options = options.token(token.clone());
        }
        if let Some((user, password)) = &auth.user {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(ca) = &auth.tls_ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &auth.tls_client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(name) = &self.name {
            options = options.name(name);
        }
        Ok(options.require_tls(auth.tls_required).connection_timeout(std::time::Duration::from_secs(5)))
    }
}
