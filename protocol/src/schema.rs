//! The protocol's JSON Schema, generated from its types: what a client author reads.
//!
//! `docs/protocol.schema.json` is this schema, committed; `tests/schema.rs` fails when the file is
//! stale, and `cargo run -p agentd-protocol --example write_schema` rewrites it.

use crate::event::Event;
use crate::gauge::Gauge;
use crate::rpc::{ErrorCode, Method, Notification, Request, RpcError};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use std::borrow::Cow;

/// Every type a client sends or receives, under one root: `request`, `notification`, `error`, and a
/// result type per method.
#[derive(Serialize, JsonSchema)]
#[allow(dead_code)]
struct Protocol {
    request: Request,
    notification: Notification,
    error: RpcError,
    error_code: ErrorCode,
    event: Event,
    results: Results,
    /// `context.get`'s gauge, named on its own for clients that only want it.
    gauge: Gauge,
    /// The HTTP API's error answer (`docs/openapi.json` has the routes).
    http_error: crate::http::ErrorBody,
}

/// The result of each method, by method name: made from the methods' declarations.
#[derive(Serialize)]
struct Results;

impl JsonSchema for Results {
    fn schema_name() -> Cow<'static, str> {
        "Results".into()
    }

    fn json_schema(gen: &mut SchemaGenerator) -> Schema {
        let mut properties = serde_json::Map::new();
        for &method in Method::ALL {
            properties.insert(method.name().to_string(), method.result_schema(gen).to_value());
        }
        let required: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
        json_schema!({
            "description": "The result of each method, by method name.",
            "type": "object",
            "properties": properties,
            "required": required,
        })
    }
}

/// The protocol's schema (JSON Schema 2020-12).
pub fn protocol_schema() -> Schema {
    SchemaGenerator::default().into_root_schema_for::<Protocol>()
}

/// The schema as the committed file holds it: pretty JSON with a final newline.
pub fn protocol_schema_text() -> String {
    pretty_sorted(serde_json::to_value(protocol_schema()).unwrap_or_default())
}

/// `value` as pretty JSON with every object's keys in sorted order, whatever the build: a
/// dependency of the binary (the ACP crate) turns on serde_json's `preserve_order`, under which a
/// map keeps the order keys were inserted in, so the committed documents are written sorted.
pub fn pretty_sorted(value: serde_json::Value) -> String {
    fn sorted(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<_> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sorted).collect())
            }
            other => other,
        }
    }
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap_or_default();
    text.push('\n');
    text
}
