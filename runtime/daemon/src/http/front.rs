//! The connection under the HTTP server: every answer in the API's own JSON error shape, even those
//! actix-http gives before any handler runs.
//!
//! A request actix cannot parse — a request line over 64 KiB, NUL or control bytes in the path or
//! a header, conflicting lengths, a head over its 128 KiB or 96 headers — is answered by its
//! dispatcher itself with a bare `400` or `431` and no body, then the connection is closed. No
//! application setting reaches that answer, so [`Guarded`] wraps each connection and replaces it on
//! the way out: the same status with `{"error": {"code": -32600, "message": …}}`. It can tell that
//! answer from every other: the application never sends an error without a JSON body, and a JSON
//! body cannot hold the raw line breaks the bare head is made of. Each such request is logged at
//! `debug`, rate-limited ([`super::quiet`]): anyone who reaches the port can send them.

use super::quiet::Quiet;
use agentd_protocol::http::ErrorBody;
use agentd_protocol::rpc::{ErrorCode, RpcError};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The log filter directive that silences actix-http's own line about each request it cannot parse
/// (an `ERROR` per request, which anyone who reaches the port could repeat to fill the log):
/// [`Guarded`] logs them instead, at `debug` and rate-limited. `agentd serve` adds it to its filter.
pub const SILENCED_LOG: &str = "actix_http::h1::dispatcher=off";

/// Requests the server could not parse.
static UNPARSED: Quiet = Quiet::new("request the server cannot parse");

/// A connection whose bare pre-handler error answers are replaced by JSON ones.
pub struct Guarded<T> {
    inner: T,
    /// A replacement answer being written, and how much of it was.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> Guarded<T> {
    /// Wraps a connection.
    pub fn new(inner: T) -> Guarded<T> {
        Guarded { inner, pending: None }
    }
}

/// The start of actix-http's own bodiless error answers: `HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n`.
const BARE_MARK: &[u8] = b"\r\ncontent-length: 0\r\n";

/// Where in `buf` a bare error answer starts, with its status and the length of its head.
pub fn bare_error(buf: &[u8]) -> Option<(usize, u16, usize)> {
    const STATUS_LINE: &[u8] = b"HTTP/1.1 ";
    let mut from = 0;
    while let Some(at) = find(&buf[from..], STATUS_LINE).map(|i| i + from) {
        let rest = &buf[at + STATUS_LINE.len()..];
        let status = std::str::from_utf8(rest.get(..3)?).ok().and_then(|s| s.parse::<u16>().ok());
        let line_end = find(rest, b"\r\n");
        if let (Some(status @ 400..=599), Some(line_end)) = (status, line_end) {
            if rest[line_end..].starts_with(BARE_MARK) {
                let head_end = find(rest, b"\r\n\r\n")? + 4;
                return Some((at, status, STATUS_LINE.len() + head_end));
            }
        }
        from = at + 1;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The JSON answer that replaces a bare one of `status`.
pub fn json_answer(status: u16) -> Vec<u8> {
    let (reason, message) = match status {
        431 => (
            "Request Header Fields Too Large",
            "the request's head is too large for the server (over 128 KiB, or more than 96 headers)",
        ),
        408 => ("Request Timeout", "the request's head did not arrive in time"),
        400..=499 => (
            "Bad Request",
            "a malformed HTTP request: the server cannot parse its request line or headers (bytes HTTP \
             does not allow in the path or a header, a URI over 64 KiB, conflicting lengths …)",
        ),
        _ => ("Internal Server Error", "the server failed before the request reached the API"),
    };
    let code = if status >= 500 { ErrorCode::Internal } else { ErrorCode::InvalidRequest };
    let body = ErrorBody { error: RpcError::new(code, message) };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

impl<T: AsyncWrite + Unpin> Guarded<T> {
    /// Writes what is left of a replacement answer.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match this.drain(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match bare_error(buf) {
            // What comes before it goes out as it is.
            Some((at, _, _)) if at > 0 => Pin::new(&mut this.inner).poll_write(cx, &buf[..at]),
            Some((_, status, len)) => {
                UNPARSED.note(&format!("answered {status}"));
                this.pending = Some((json_answer(status), 0));
                // The bare head is taken as written; its replacement goes out in its place.
                if let Poll::Ready(Err(e)) = this.drain(cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(len))
            }
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BARE: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: Wed, 02 Dec 2026 11:10:52 GMT\r\n\r\n";

    #[test]
    fn only_actix_bare_error_heads_are_found() {
        assert_eq!(bare_error(BARE), Some((0, 400, BARE.len())));
        let mut after = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let at = after.len();
        after.extend_from_slice(BARE);
        assert_eq!(bare_error(&after), Some((at, 400, BARE.len())));
        let big =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        assert_eq!(bare_error(big), Some((0, 431, big.len())));
        // The API's own errors carry a body; a success may be empty.
        for other in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 58\r\ncontent-type: application/json\r\n\r\n"[..],
            b"HTTP/1.1 303 See Other\r\ncontent-length: 0\r\nlocation: /\r\n\r\n",
            b"data: {\"text\": \"HTTP/1.1 400 Bad Request\\r\\ncontent-length: 0\\r\\n\"}\n\n",
        ] {
            assert_eq!(bare_error(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn the_replacement_is_the_apis_error_shape() {
        let answer = String::from_utf8(json_answer(400)).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n") && head.contains("application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let body: ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(body.error.code, ErrorCode::InvalidRequest);
        assert!(json_answer(431).starts_with(b"HTTP/1.1 431 "));
    }

    #[tokio::test]
    async fn a_bare_answer_is_replaced_on_the_way_out_and_others_pass() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut guarded = Guarded::new(server);
        guarded.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await.unwrap();
        guarded.write_all(BARE).await.unwrap();
        guarded.shutdown().await.unwrap();
        drop(guarded);
        let mut out = Vec::new();
        let mut client = client;
        client.read_to_end(&mut out).await.unwrap();
        let mut expected = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        expected.extend_from_slice(&json_answer(400));
        assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(expected).unwrap());
    }
}
