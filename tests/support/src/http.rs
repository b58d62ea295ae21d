//! Minimal, defensive HTTP/1.1 plumbing on a raw [`TcpStream`].
//!
//! One request per connection: every response carries `Connection: close`
//! and the connection is closed once it has been written (clients such as
//! reqwest/hyper then never put the connection back in their pool). Request
//! bodies may be `Content-Length`-delimited or `Transfer-Encoding: chunked`.
//! Anything malformed yields a [`ReadError`], never a panic.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest accepted request head (request line + headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Largest accepted request body.
pub(crate) const MAX_BODY: usize = 32 * 1024 * 1024;
/// Longest accepted line inside a chunked body (size line / trailer).
const MAX_LINE: usize = 8 * 1024;
/// How long `close` keeps draining the client's leftovers.
const LINGER: Duration = Duration::from_millis(500);

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    /// The request target in origin form (`/path?query`).
    pub target: String,
    /// Lowercased names, trimmed values.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer went away (or the read failed) before a full request.
    Closed,
    /// Syntax error: answer 400.
    Malformed(String),
    /// Head or body over the limits: answer 413 / 431.
    TooLarge { status: u16, message: String },
}

fn malformed(msg: impl Into<String>) -> ReadError {
    ReadError::Malformed(msg.into())
}

/// One accepted connection with its read buffer.
pub(crate) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Self {
        // Send each SSE event as soon as it is written.
        let _ = stream.set_nodelay(true);
        Conn { stream, buf: Vec::with_capacity(8 * 1024) }
    }

    /// Reads more bytes into the buffer; `Ok(0)` means EOF.
    async fn fill(&mut self) -> Result<usize, ReadError> {
        let mut tmp = [0u8; 8 * 1024];
        match self.stream.read(&mut tmp).await {
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(n)
            }
            Err(_) => Err(ReadError::Closed),
        }
    }

    /// Reads and parses one full request (head and body).
    pub async fn read_request(&mut self) -> Result<Request, ReadError> {
        // Head.
        let (head_len, consumed) = loop {
            // RFC 9112 §2.2: ignore empty lines before the request line.
            let leading = self.buf.iter().take_while(|b| **b == b'\r' || **b == b'\n').count();
            if leading > 0 {
                self.buf.drain(..leading);
            }
            if let Some(found) = find_head_end(&self.buf) {
                break found;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::TooLarge {
                    status: 431,
                    message: "request header section too large".into(),
                });
            }
            if self.fill().await? == 0 {
                return Err(ReadError::Closed);
            }
        };
        if head_len > MAX_HEAD {
            return Err(ReadError::TooLarge {
                status: 431,
                message: "request header section too large".into(),
            });
        }
        let head: Vec<u8> = self.buf.drain(..consumed).take(head_len).collect();
        let head = String::from_utf8(head).map_err(|_| malformed("request head is not UTF-8"))?;
        let (method, target, headers) = parse_head(&head)?;

        // Body framing.
        let chunked = match header_values(&headers, "transfer-encoding") {
            None => false,
            Some(te) => {
                let last = te.rsplit(',').next().unwrap_or("").trim();
                if last.eq_ignore_ascii_case("chunked") {
                    true
                } else {
                    return Err(malformed(format!("unsupported transfer-encoding: {te}")));
                }
            }
        };
        let content_length = if chunked { None } else { parse_content_length(&headers)? };
        if let Some(len) = content_length {
            if len > MAX_BODY as u64 {
                return Err(ReadError::TooLarge {
                    status: 413,
                    message: format!("request body too large ({len} bytes)"),
                });
            }
        }

        let expects_body = chunked || content_length.unwrap_or(0) > 0;
        let expect_continue =
            headers.iter().any(|(k, v)| k == "expect" && v.eq_ignore_ascii_case("100-continue"));
        if expects_body && expect_continue && self.buf.is_empty() {
            self.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.map_err(|_| ReadError::Closed)?;
        }

        let body = if chunked {
            self.read_chunked_body().await?
        } else {
            self.take_exact(content_length.unwrap_or(0) as usize).await?
        };

        Ok(Request { method, target, headers, body })
    }

    async fn take_exact(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            if self.fill().await? == 0 {
                return Err(ReadError::Closed);
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    async fn take_line(&mut self) -> Result<String, ReadError> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                if i > MAX_LINE {
                    return Err(malformed("chunked body line too long"));
                }
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let line =
                    String::from_utf8(line).map_err(|_| malformed("chunked body line is not UTF-8"))?;
                return Ok(line.trim_end_matches(['\r', '\n']).to_string());
            }
            if self.buf.len() > MAX_LINE {
                return Err(malformed("chunked body line too long"));
            }
            if self.fill().await? == 0 {
                return Err(ReadError::Closed);
            }
        }
    }

    async fn read_chunked_body(&mut self) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.take_line().await?;
            let size_str = line.split(';').next().unwrap_or("").trim();
            if size_str.is_empty() || !size_str.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(malformed(format!("bad chunk size line: {line:?}")));
            }
            let size = usize::from_str_radix(size_str, 16)
                .map_err(|_| malformed(format!("bad chunk size: {size_str:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    if self.take_line().await?.is_empty() {
                        return Ok(body);
                    }
                }
            }
            if body.len().saturating_add(size) > MAX_BODY {
                return Err(ReadError::TooLarge {
                    status: 413,
                    message: "chunked request body too large".into(),
                });
            }
            let data = self.take_exact(size).await?;
            body.extend_from_slice(&data);
            if !self.take_line().await?.is_empty() {
                return Err(malformed("chunk data not followed by CRLF"));
            }
        }
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Writes a complete response with a `Content-Length` body.
    pub async fn send_response(
        &mut self,
        status: u16,
        content_type: &str,
        extra_headers: &[(&str, String)],
        body: &[u8],
    ) -> std::io::Result<()> {
        let mut out = response_head(status, content_type, extra_headers);
        out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(body);
        self.write_all(&bytes).await
    }

    /// Writes a JSON response.
    pub async fn send_json(
        &mut self,
        status: u16,
        extra_headers: &[(&str, String)],
        body: &serde_json::Value,
    ) -> std::io::Result<()> {
        let body = serde_json::to_vec(body).unwrap_or_default();
        self.send_response(status, "application/json", extra_headers, &body).await
    }

    /// Writes a response head announcing a chunked body.
    pub async fn start_chunked(
        &mut self,
        status: u16,
        content_type: &str,
        extra_headers: &[(&str, String)],
    ) -> std::io::Result<()> {
        let mut out = response_head(status, content_type, extra_headers);
        out.push_str("Transfer-Encoding: chunked\r\n\r\n");
        self.write_all(out.as_bytes()).await
    }

    /// Writes one HTTP chunk (empty data is skipped: it would end the body).
    pub async fn send_chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut bytes = format!("{:x}\r\n", data.len()).into_bytes();
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(b"\r\n");
        self.write_all(&bytes).await
    }

    /// Writes the terminating zero-length chunk.
    pub async fn end_chunked(&mut self) -> std::io::Result<()> {
        self.write_all(b"0\r\n\r\n").await
    }

    /// Resolves once the peer closes (or resets) the connection. Anything
    /// the peer sends meanwhile is discarded.
    pub async fn wait_for_disconnect(&mut self) {
        let mut tmp = [0u8; 4096];
        loop {
            match self.stream.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Half-closes our side, then briefly drains whatever the client still
    /// sends, so that unread input does not turn our close into a RST that
    /// could destroy the response in flight.
    pub async fn close(mut self) {
        let _ = self.stream.shutdown().await;
        let _ = tokio::time::timeout(LINGER, self.wait_for_disconnect()).await;
    }
}

fn response_head(status: u16, content_type: &str, extra_headers: &[(&str, String)]) -> String {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    out.push_str(&format!("Content-Type: {content_type}\r\n"));
    out.push_str("Connection: close\r\n");
    for (name, value) in extra_headers {
        // Never let a scripted value inject extra header lines.
        let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out
}

/// Finds the blank line ending the head: returns `(head_len, consumed)`
/// where `head_len` excludes the terminating blank line. Accepts CRLF and
/// bare LF line endings.
fn find_head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i + 1, i + 2));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i + 1, i + 3));
            }
        }
        i += 1;
    }
    None
}

type Head = (String, String, Vec<(String, String)>);

fn parse_head(head: &str) -> Result<Head, ReadError> {
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, version] = parts.as_slice() else {
        return Err(malformed(format!("bad request line: {request_line:?}")));
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Err(malformed(format!("bad method: {method:?}")));
    }
    if *version != "HTTP/1.1" && *version != "HTTP/1.0" {
        return Err(malformed(format!("unsupported HTTP version: {version:?}")));
    }
    let target = origin_form(target).ok_or_else(|| malformed(format!("bad request target: {target:?}")))?;

    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(malformed("obsolete header line folding"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(malformed(format!("bad header line: {line:?}")));
        };
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(malformed(format!("bad header name: {name:?}")));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok((method.to_string(), target, headers))
}

/// Converts a request target to origin form (`/path?query`); accepts
/// absolute form (`http://host/path`) too.
fn origin_form(target: &str) -> Option<String> {
    if target.starts_with('/') {
        return Some(target.to_string());
    }
    if target == "*" {
        return Some(target.to_string());
    }
    let rest = target.strip_prefix("http://").or_else(|| target.strip_prefix("https://"))?;
    match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => Some(rest[i..].to_string()),
        Some(i) => Some(format!("/{}", &rest[i..])),
        None => Some("/".to_string()),
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// All values of a header joined with ", " (None when absent).
fn header_values(headers: &[(String, String)], name: &str) -> Option<String> {
    let values: Vec<&str> = headers.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect();
    (!values.is_empty()).then(|| values.join(", "))
}

fn parse_content_length(headers: &[(String, String)]) -> Result<Option<u64>, ReadError> {
    let mut found: Option<u64> = None;
    for (_, value) in headers.iter().filter(|(k, _)| k == "content-length") {
        for piece in value.split(',') {
            let piece = piece.trim();
            if piece.is_empty() || !piece.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed(format!("bad content-length: {value:?}")));
            }
            let len: u64 = piece.parse().map_err(|_| malformed(format!("bad content-length: {value:?}")))?;
            match found {
                Some(prev) if prev != len => {
                    return Err(malformed("conflicting content-length headers"));
                }
                _ => found = Some(len),
            }
        }
    }
    Ok(found)
}

pub(crate) fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_end_accepts_crlf_and_lf() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some((16, 18)));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\nrest"), Some((15, 16)));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn parses_head() {
        let (m, t, h) = parse_head("POST http://x:1/v1/models?a=1 HTTP/1.1\r\nX-Thing:  v \r\nB:c").unwrap();
        assert_eq!(m, "POST");
        assert_eq!(t, "/v1/models?a=1");
        assert_eq!(h, vec![("x-thing".into(), "v".into()), ("b".into(), "c".into())]);
    }

    #[test]
    fn rejects_garbage() {
        for head in [
            "GARBAGE",
            "GET /",
            "GET / HTTP/2.0",
            "G ET / HTTP/1.1",
            "GET nope HTTP/1.1",
            "GET / HTTP/1.1\r\nno colon",
            "GET / HTTP/1.1\r\nbad name: v",
            "GET / HTTP/1.1\r\nA: b\r\n folded",
        ] {
            assert!(matches!(parse_head(head), Err(ReadError::Malformed(_))), "{head:?}");
        }
    }

    #[test]
    fn content_length_rules() {
        let h = |v: &str| vec![("content-length".to_string(), v.to_string())];
        assert_eq!(parse_content_length(&h("12")).unwrap(), Some(12));
        assert_eq!(parse_content_length(&h("12, 12")).unwrap(), Some(12));
        assert!(parse_content_length(&h("12, 13")).is_err());
        assert!(parse_content_length(&h("-1")).is_err());
        assert!(parse_content_length(&h("+1")).is_err());
        assert!(parse_content_length(&h("99999999999999999999999")).is_err());
        assert_eq!(parse_content_length(&[]).unwrap(), None);
    }
}
