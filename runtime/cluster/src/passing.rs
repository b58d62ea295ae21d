//! Trouble that passes by itself — a server of the cluster down, a stream's leader being elected, a
//! reconnect under way — and the one way agentd rides it out: what may be done twice (a read, a
//! put, a publish the server deduplicates) is tried again for a while ([`retrying`]).

use crate::error::ClusterError;

/// How long a read (or a write that may land twice) is tried again while NATS is in passing trouble.
pub const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs the future `make` builds, and again while NATS answers with a passing trouble
/// ([`ClusterError::is_passing`]: a timeout, no responders while a server is down or a leader is
/// being elected), for up to [`RETRY_FOR`]. Only for what may be done twice: reads and puts.
pub async fn retrying<T, F, Fut>(make: F) -> Result<T, ClusterError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let clock = agentd_engine::clock::clock();
    let deadline = clock.now() + RETRY_FOR;
    loop {
        match make().await {
            Err(e) if e.is_passing() && clock.now() < deadline => {
                tracing::debug!(error = %e, "NATS in passing trouble; trying again");
                clock.sleep(std::time::Duration::from_millis(250)).await;
            }
            done => return done,
        }
    }
}
