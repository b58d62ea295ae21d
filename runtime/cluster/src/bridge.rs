//! The bridge from the storage seam's synchronous calls to the async NATS client: a runtime of this
//! crate's own runs every call, and the caller's thread waits for the answer on a channel (it may be
//! a tokio worker: it blocks in place, as a sled flush does, and never enters the runtime itself).

use crate::error::ClusterError;
use std::future::Future;
use tokio::runtime::Runtime;

/// The runtime the client lives on.
pub struct Bridge {
    runtime: Option<Runtime>,
}

impl Bridge {
    /// A runtime with one worker thread, named after this crate.
    pub fn new() -> Result<Bridge, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentd-nats")
            .enable_all()
            .build()
            .map_err(ClusterError::Runtime)?;
        Ok(Bridge { runtime: Some(runtime) })
    }

    /// Runs `future` on the bridge's runtime and waits for its output on this thread.
    pub fn run<F>(&self, future: F) -> Result<F::Output, ClusterError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self.runtime.as_ref().ok_or(ClusterError::Stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv().map_err(|_| ClusterError::Stopped)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // Dropped from inside an async context too (a test's runtime): never wait for the workers.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
