//! Setup the provider integration tests share.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A token that a spawned task cancels after `delay`.
pub fn cancel_after(delay: Duration) -> CancellationToken {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        trigger.cancel();
    });
    cancel
}
