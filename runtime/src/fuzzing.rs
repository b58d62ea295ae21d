//! Entry points for the fuzz targets (`fuzz/`) and the property tests (`tests/fuzz_props.rs`): thin
//! wrappers that feed untrusted bytes through the code the daemon really runs — the socket's line
//! framing and request decoding, the SSE driver with each protocol's assembler, the config parser —
//! and nothing else: no socket, no network, no filesystem. Not an API; hidden from the docs.

use crate::config::{Config, ConfigError};
use crate::provider::sse::drive_within;
use crate::provider::{anthropic_stream, stream, ChatResponse, ProviderError};
use crate::rpc::{Params, RpcError};
pub use crate::socket::Request;
use crate::socket::{decode_request, error_response, oversized_error, Frame, Framer};
use serde_json::Value;
use std::path::Path;

/// What the socket makes of one request line.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A well-formed request whose params are an object or absent: it would be dispatched.
    Request(Request),
    /// The error the socket answers with, and the response line it sends.
    Error { id: Value, error: RpcError, line: String },
}

/// Splits `bytes` into request lines as a connection does (with a line limit of `max_line` bytes, the
/// socket's being [`crate::socket::MAX_LINE`]), feeding the framer pieces of at most `piece` bytes
/// (0: all at once), and decodes each line. A line not ended by `\n` is never decoded, as on the
/// socket.
pub fn decode_rpc_lines(bytes: &[u8], max_line: usize, piece: usize) -> Vec<Decoded> {
    let mut framer = Framer::new(max_line);
    let mut out = Vec::new();
    let pieces: Vec<&[u8]> = if piece == 0 { vec![bytes] } else { bytes.chunks(piece).collect() };
    for mut buf in pieces {
        while !buf.is_empty() {
            let (used, frame) = framer.feed(buf);
            buf = &buf[used..];
            match frame {
                None => {}
                Some(Frame::Oversized) => out.push(error(Value::Null, oversized_error(max_line))),
                Some(Frame::Line(text)) => out.push(decode_rpc_line(&text)),
            }
        }
    }
    out
}

/// One request line (without its `\n`) as the socket decodes it, params checked as every method
/// checks them first.
pub fn decode_rpc_line(text: &[u8]) -> Decoded {
    match decode_request(text) {
        Ok(request) => match Params::of(&request.params) {
            Ok(_) => Decoded::Request(request),
            Err(e) => error(request.id, e),
        },
        Err((id, e)) => error(id, e),
    }
}

fn error(id: Value, e: RpcError) -> Decoded {
    let line = error_response(id.clone(), &e);
    Decoded::Error { id, error: e, line }
}

/// How a fuzzed stream arrives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delivery {
    /// Chunks of at most this many bytes (0: one chunk), so events and UTF-8 sequences split anywhere.
    pub piece: usize,
    /// The connection breaks after the last chunk instead of closing cleanly.
    pub reset: bool,
}

/// `bytes` as an OpenAI chat-completions SSE stream, through the real driver and assembler.
pub fn assemble_openai_sse(bytes: &[u8], delivery: Delivery) -> Result<ChatResponse, ProviderError> {
    block_on(drive_within(chunks(bytes, delivery), stream::Assembler::default(), None))
}

/// `bytes` as an Anthropic Messages SSE stream, through the real driver and assembler.
pub fn assemble_anthropic_sse(bytes: &[u8], delivery: Delivery) -> Result<ChatResponse, ProviderError> {
    block_on(drive_within(chunks(bytes, delivery), anthropic_stream::Assembler::default(), None))
}

/// `body` as a non-streamed OpenAI answer (a server that ignored `stream: true`).
pub fn openai_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    stream::from_json_body(body)
}

/// `body` as a non-streamed Anthropic answer.
pub fn anthropic_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    anthropic_stream::from_json_body(body)
}

/// `text` as the daemon's config file (named `agentd.toml` in errors).
pub fn parse_config(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("agentd.toml"))
}

type Chunk = Result<Vec<u8>, std::io::Error>;

fn chunks(bytes: &[u8], delivery: Delivery) -> futures_util::stream::Iter<std::vec::IntoIter<Chunk>> {
    let mut pieces: Vec<Chunk> = if delivery.piece == 0 {
        vec![Ok(bytes.to_vec())]
    } else {
        bytes.chunks(delivery.piece).map(|c| Ok(c.to_vec())).collect()
    };
    if delivery.reset {
        pieces
            .push(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer")));
    }
    futures_util::stream::iter(pieces)
}

/// Runs a future that never waits on a timer or IO (the streams here are all ready).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt,
            Err(e) => panic!("cannot build the fuzzing runtime: {e}"),
        };
    }
    RUNTIME.with(|rt| rt.block_on(future))
}
