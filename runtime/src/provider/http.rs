//! The HTTP client both wire protocols send with.

use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two reads of a stream: a thinking model can be silent for a while, not for five minutes.
const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// Servers close idle keep-alive connections after a few seconds (uvicorn: 5 s); reusing one then
/// fails with "connection closed before message completed".
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// A client whose connecting times out after 10 s and whose stream may run as long as it keeps
/// sending (a read waits at most 300 s); idle pooled connections are dropped after 4 s.
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build()
        .expect("the HTTP client (TLS backend) could not be initialised")
}
