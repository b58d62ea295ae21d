//! How a command reaches the daemon: one connection to its socket.

use crate::exit::Failure;
use agentd_client::Client;
use agentd_daemon::daemon::Home;

/// A connection to the daemon of `home` (exit code 3 when it cannot be reached).
pub(super) fn connect(home: &Home) -> Result<Client, Failure> {
    Ok(Client::connect(&home.socket())?)
}
