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

#[test]
fn the_schema_the_openapi_document_and_the_routes_list_every_declared_method() {
    use agentd_protocol::rpc::{Method, ROUTES};
    let schema: serde_json::Value = serde_json::from_str(&protocol_schema_text()).unwrap();
    let requests = schema["$defs"]["Request"]["oneOf"].as_array().unwrap();
    let named: Vec<&str> =
        requests.iter().filter_map(|r| r["properties"]["method"]["const"].as_str()).collect();
    let declared: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(named, declared, "the request's schema names each declared method, in order");
    let results = schema["$defs"]["Results"]["properties"].as_object().unwrap();
    assert_eq!(results.keys().count(), declared.len());
    for name in &declared {
        assert!(results.contains_key(*name), "no result schema for {name}");
    }

    let doc = agentd_protocol::openapi::openapi_document();
    let mut operations: Vec<String> = Vec::new();
    for (path, verbs) in doc["paths"].as_object().unwrap() {
        for op in verbs.as_object().unwrap().values() {
            let id = op["operationId"].as_str().unwrap().to_string();
            if id != "openapi" {
                assert!(path.starts_with(agentd_protocol::route::API_PREFIX), "{path}");
                operations.push(id);
            }
        }
    }
    operations.sort();
    let mut routed: Vec<String> =
        Method::ALL.iter().filter(|m| m.route().is_some()).map(|m| m.name().to_string()).collect();
    routed.sort();
    assert_eq!(operations, routed, "one operation per method declared with a route");
    let mut listed: Vec<String> = ROUTES.iter().map(|r| r.method.name().to_string()).collect();
    listed.sort();
    assert_eq!(listed, routed, "ROUTES lists every declared route");
    assert!(ROUTES.iter().all(|r| r.method.route() == Some(*r)));
}
