//! The MCP server of agentd's tests, as a program: `mcp_fixture stdio` speaks MCP on stdin and
//! stdout; `mcp_fixture http` serves streamable HTTP on a free port of 127.0.0.1 and prints
//! `listening http://127.0.0.1:PORT/mcp`. Its tools are those of `agentd_test_support::mcp`.

// A test helper: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_test_support::mcp::{serve_http, serve_stdio, Fixture};
use std::io::Write;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("stdio") => serve_stdio().await,
        Some("http") => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let mut out = std::io::stdout();
            writeln!(out, "listening http://{}/mcp", listener.local_addr()?)?;
            out.flush()?;
            serve_http(listener, Fixture { exit_on_crash: true }, std::env::var("MCP_FIXTURE_TOKEN").ok())
                .await;
            Ok(())
        }
        _ => {
            eprintln!("usage: mcp_fixture stdio | http");
            std::process::exit(2)
        }
    }
}
