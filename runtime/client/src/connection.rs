//! A blocking client of the socket protocol, for the CLI and for tests: one request line out, lines in
//! until the answer with our id (notifications that arrive meanwhile are kept for `next_item`).
//!
//! [`Client::call`] speaks the protocol's types: `call::<method::TaskStatus>(TaskRef { … })` sends
//! that method's params and reads its declared result type ([`RpcMethod`]), so a caller cannot
//! pick the wrong one; [`Client::call_raw`] sends any method and params, for tests of what the
//! daemon does with bad ones.
//!
//! Lines are framed as the daemon frames them ([`crate::framing`], a length-capped `LinesCodec`),
//! with caps on both sides: a request over the daemon's [`MAX_LINE`] is refused here before it is
//! sent, and an answer line over [`MAX_ANSWER_LINE`] is an error instead of unbounded memory.

use crate::framing::MAX_LINE;
use crate::framing::{Frame, Lines};
use agentd_protocol::rpc::{ErrorCode, Notification, RpcMethod, TaskEnd};
use agentd_protocol::Event;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{Read, Write};
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
    /// The daemon sent a line longer than the client reads ([`MAX_ANSWER_LINE`]).
    #[error("the daemon sent a line over {max} bytes; it was not read")]
    AnswerTooLong {
        /// The cap, in bytes.
        max: usize,
    },
    /// A request whose line is longer than the daemon accepts ([`MAX_LINE`]); it was not sent.
    #[error("the {method} request is {bytes} bytes, over the daemon's limit of {max} bytes per line; it was not sent")]
    RequestTooLong {
        /// The request's method.
        method: String,
        /// Its line's length, in bytes.
        bytes: usize,
        /// The daemon's cap, in bytes.
        max: usize,
    },
}

/// The longest answer line the client reads, in bytes. Answers can be large (a page of log
/// records carries whole messages), so this is a bound on memory, not a size anyone should meet.
pub const MAX_ANSWER_LINE: usize = 256 << 20;

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
    reader: UnixStream,
    lines: Lines,
    /// What one read takes from the socket before the framing sees it.
    chunk: Vec<u8>,
    writer: UnixStream,
    next_id: u64,
    pending: VecDeque<Value>,
}

impl Client {
    /// Connects to the daemon's socket at `socket`.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(socket)
            .map_err(|source| ClientError::Connect { path: socket.to_path_buf(), source })?;
        Client::over(stream, MAX_ANSWER_LINE)
    }

    /// A client over a connected stream, reading answer lines of at most `max_answer` bytes.
    fn over(stream: UnixStream, max_answer: usize) -> Result<Client, ClientError> {
        let writer = stream.try_clone()?;
        let lines = Lines::new(max_answer);
        let chunk = vec![0u8; 64 << 10];
        Ok(Client { reader: stream, lines, chunk, writer, next_id: 1, pending: VecDeque::new() })
    }

    fn read_line(&mut self) -> Result<Value, ClientError> {
        loop {
            match self.lines.next_frame() {
                Some(Frame::Line(line)) => {
                    return serde_json::from_str(&line)
                        .map_err(|e| ClientError::Protocol(format!("{e}: {line}")))
                }
                Some(Frame::Oversized) => return Err(ClientError::AnswerTooLong { max: self.lines.max() }),
                Some(Frame::NotUtf8) => {
                    return Err(ClientError::Protocol("the daemon sent a line that is not UTF-8".into()))
                }
                None => {}
            }
            let n = match self.reader.read(&mut self.chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(ClientError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection",
                )));
            }
            self.lines.extend(&self.chunk[..n]);
        }
    }

    /// Calls method `M` with its params and reads the answer as its result type.
    pub fn call<M: RpcMethod>(&mut self, params: M::Params) -> Result<M::Result, ClientError> {
        let (method, params) = M::request(params).to_wire();
        let result = self.call_raw(method, params)?;
        serde_json::from_value(result).map_err(|e| ClientError::Protocol(format!("{method} answered: {e}")))
    }

    /// Calls a method by name with any params and waits for its answer, as JSON.
    pub fn call_raw(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        if request.len() > MAX_LINE {
            let (method, bytes) = (method.to_string(), request.len());
            return Err(ClientError::RequestTooLong { method, bytes, max: MAX_LINE });
        }
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
                Notification::TaskEvent(e) => StreamItem::Event(e),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn an_answer_over_the_cap_is_an_error_and_the_next_answer_is_read() {
        let (mine, mut daemon) = UnixStream::pair().unwrap();
        let mut client = Client::over(mine, 64).unwrap();
        let answers = std::thread::spawn(move || {
            let mut requests = std::io::BufReader::new(daemon.try_clone().unwrap());
            let mut line = String::new();
            requests.read_line(&mut line).unwrap();
            let pad = "x".repeat(100);
            writeln!(daemon, r#"{{"jsonrpc":"2.0","id":1,"result":"{pad}"}}"#).unwrap();
            line.clear();
            requests.read_line(&mut line).unwrap();
            writeln!(daemon, r#"{{"jsonrpc":"2.0","id":2,"result":7}}"#).unwrap();
        });
        let e = client.call_raw("daemon.status", json!({})).unwrap_err();
        assert!(matches!(e, ClientError::AnswerTooLong { max: 64 }), "{e}");
        assert_eq!(client.call_raw("daemon.status", json!({})).unwrap(), json!(7));
        answers.join().unwrap();
    }

    #[test]
    fn a_request_over_the_daemons_cap_is_not_sent() {
        let (mine, daemon) = UnixStream::pair().unwrap();
        let mut client = Client::over(mine, MAX_ANSWER_LINE).unwrap();
        let text = "y".repeat(MAX_LINE);
        let e = client.call_raw("task.message", json!({"task_id": "t", "text": text})).unwrap_err();
        assert!(
            matches!(&e, ClientError::RequestTooLong { method, max, .. } if method == "task.message" && *max == MAX_LINE),
            "{e}"
        );
        assert!(e.to_string().contains("it was not sent"), "{e}");
        daemon.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        let read = (&daemon).read(&mut buf);
        assert!(matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "{read:?}");
    }
}
