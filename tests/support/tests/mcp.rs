//! The MCP fixture, as a program speaking MCP on its stdio, driven by the test MCP client: the tools
//! the agentd tests rely on answer what the module says they do.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_test_support::mcp::{McpClient, CRASH_EXIT_CODE, PIXEL_PNG};
use serde_json::json;

fn fixture() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mcp_fixture"));
    command.arg("stdio");
    command
}

#[tokio::test]
async fn the_fixture_lists_and_answers_its_tools_over_stdio() {
    let client = McpClient::spawn(fixture()).await;
    let names = client.tool_names().await;
    for tool in ["echo", "big", "fail", "slow", "crash", "image", "bad_image", "resource", "whereami"] {
        assert!(names.iter().any(|n| n == tool), "{tool} in {names:?}");
    }
    let echo = client.call("echo", json!({"text": "hello"})).await;
    assert_eq!((echo.is_error, echo.text.as_str()), (false, "hello"));
    let big = client.call("big", json!({"lines": 3})).await;
    assert_eq!(big.text.lines().count(), 3);
    assert!(big.text.starts_with("line 1 of 3: "), "{}", big.text);
    let fail = client.call("fail", json!({"message": "no such branch"})).await;
    assert_eq!((fail.is_error, fail.text.as_str()), (true, "no such branch"));
    let slow = client.call("slow", json!({"ms": 1})).await;
    assert_eq!(slow.text, "slept 1 ms");
    let here = client.call("whereami", json!({})).await.json();
    assert_eq!(here["cwd"], std::env::current_dir().unwrap().display().to_string());
    assert!(here["pid"].as_u64().is_some());
    client.close().await;
}

#[tokio::test]
async fn crash_ends_the_process_with_its_code() {
    let mut command = fixture();
    command.stderr(std::process::Stdio::null());
    let client = McpClient::spawn(command).await;
    let tools = client.tools().await;
    let image = tools.iter().find(|t| t.name == "image").unwrap();
    assert_eq!(image.input_schema["type"], "object");
    assert!(!PIXEL_PNG.is_empty());
    // The call gets no answer: the server exits first, and the session ends with the transport.
    let call = tokio::time::timeout(std::time::Duration::from_secs(10), client.try_call("crash", json!({})));
    assert!(call.await.expect("the call ends when the server exits").is_err());
    let status = client.close().await.expect("the fixture exited");
    assert_eq!(status.code(), Some(CRASH_EXIT_CODE));
}
