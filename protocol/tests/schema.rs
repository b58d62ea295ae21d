//! The committed schema (`docs/protocol.schema.json`) is the one the types generate: a client author
//! reads the real protocol. When this fails, run `cargo run -p agentd-protocol --example write_schema`
//! and commit the file.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_protocol::schema::protocol_schema_text;
use std::path::PathBuf;

fn committed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol.schema.json")
}

#[test]
fn the_committed_schema_is_current() {
    let path = committed();
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == protocol_schema_text(),
        "{} is stale: run `cargo run -p agentd-protocol --example write_schema` and commit it",
        path.display()
    );
}

#[test]
fn the_committed_openapi_document_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == agentd_protocol::openapi::openapi_text(),
        "{} is stale: run `cargo run -p agentd-protocol --example write_schema` and commit it",
        path.display()
    );
}

#[test]
fn the_schema_names_every_method_and_error_code() {
    let schema: serde_json::Value = serde_json::from_str(&protocol_schema_text()).unwrap();
    let text = schema.to_string();
    for method in [
        "task.submit",
        "task.list",
        "task.status",
        "task.cancel",
        "task.resume",
        "task.message",
        "task.subscribe",
        "task.events",
        "context.get",
        "log.get",
        "evidence.list",
        "evidence.get",
        "evidence.read",
        "evidence.verify",
        "settings.get",
        "settings.set",
        "models.probe",
        "daemon.status",
        "clock.advance",
        "task.event",
        "task.end",
    ] {
        assert!(text.contains(&format!("\"{method}\"")), "the schema does not name {method}");
    }
    // Every result type is reachable from the root, by method name.
    let results = &schema["properties"]["results"];
    assert!(results.is_object(), "{results}");
}
