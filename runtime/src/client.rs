//! A blocking client of the socket protocol, for the CLI and for tests: one request line out, lines in
//! until the answer with our id (notifications that arrive meanwhile are kept for `next_item`).
//!
//! [`Client::request`] speaks the protocol's types (a [`Request`] in, the method's result type out);
//! [`Client::call`] sends any method and params, for tests of what the daemon does with bad ones.

use agentd_protocol::rpc::{ErrorCode, Notification, TaskEnd};
use agentd_protocol::{Event, Request};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Why a call over the socket failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be connected to: no daemon is serving this home, or the path is wrong.
    #[error("cannot reach the daemon at {path}: {source}")]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// The connection broke, or the daemon closed it.
    #[error("connection to the daemon lost: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon sent a line that is not the protocol (not JSON, or not the shape expected).
    #[error("the daemon sent an unreadable line: {0}")]
    Protocol(String),
    /// The daemon answered with a JSON-RPC error.
    #[error("{message}")]
    Rpc {
        /// The error's code (see [`ErrorCode`]).
        code: i64,
        /// The daemon's message, naming what was wrong.
        message: String,
    },
}

impl ClientError {
    /// The protocol's error code, when the daemon answered with a known one.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Rpc { code, .. } => ErrorCode::from_code(*code),
            _ => None,
        }
    }
}

/// A connection to the daemon's socket. Blocking, and one request at a time: it sends a line and reads lines
/// until the answer with its id, keeping notifications that arrive meanwhile for [`Client::next_item`].
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    pending: VecDeque<Value>,
}

impl Client {
    /// Connects to the daemon's socket at `socket`.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(socket)
            .map_err(|source| ClientError::Connect { path: socket.to_path_buf(), source })?;
        let writer = stream.try_clone()?;
        Ok(Client { reader: BufReader::new(stream), writer, next_id: 1, pending: VecDeque::new() })
    }

    fn read_line(&mut self) -> Result<Value, ClientError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            )));
        }
        serde_json::from_str(&line).map_err(|e| ClientError::Protocol(format!("{e}: {line}")))
    }

    /// Sends a typed request and reads its answer as the method's result type.
    pub fn request<T: DeserializeOwned>(&mut self, request: &Request) -> Result<T, ClientError> {
        let (method, params) = request.to_wire();
        let result = self.call(&method, params)?;
        serde_json::from_value(result).map_err(|e| ClientError::Protocol(format!("{method} answered: {e}")))
    }

    /// Calls a method and waits for its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = writeln!(self.writer, "{request}") {
            // The daemon may have answered before we wrote (a refused connection): say what it said.
            return Err(match self.read_line() {
                Ok(msg) if msg.get("error").is_some() => rpc_error(&msg),
                _ => e.into(),
            });
        }
        loop {
            let msg = self.read_line()?;
            let answers_us = msg.get("id") == Some(&json!(id));
            // An error that answers no request (`id: null`) is the daemon refusing this connection
            // or a line it could not parse: either way it is the answer to this call.
            let refuses = msg.get("id").is_none_or(Value::is_null) && msg.get("error").is_some();
            if answers_us || refuses {
                if msg.get("error").is_some() {
                    return Err(rpc_error(&msg));
                }
                return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
            }
            self.pending.push_back(msg);
        }
    }

    /// The next item of a subscription, blocking until one arrives: an event, or the end the daemon
    /// marks after the terminal event that nothing follows (`task.end`).
    pub fn next_item(&mut self) -> Result<StreamItem, ClientError> {
        loop {
            let msg = match self.pending.pop_front() {
                Some(m) => m,
                None => self.read_line()?,
            };
            if msg.get("method").is_none() {
                continue;
            }
            let notification: Notification = serde_json::from_value(msg.clone())
                .map_err(|e| ClientError::Protocol(format!("notification {msg}: {e}")))?;
            return Ok(match notification {
                Notification::TaskEvent(e) => StreamItem::Event(Box::new(e)),
                Notification::TaskEnd(end) => StreamItem::End(end),
            });
        }
    }
}

/// What a subscription delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// One event of the task, in order.
    Event(Box<Event>),
    /// The terminal event that ended the stream; or, for a task whose end the daemon could not
    /// record (its storage failed), `recorded: false` with the state and error — never a success.
    End(TaskEnd),
}

fn rpc_error(msg: &Value) -> ClientError {
    let err = msg.get("error").cloned().unwrap_or(Value::Null);
    ClientError::Rpc {
        code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
        message: err.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
    }
}
