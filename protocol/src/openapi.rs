//! The HTTP API as an OpenAPI 3.1 document, generated from the methods' declarations ([`crate::rpc::ROUTES`])
//! and the same schemars types as `docs/protocol.schema.json`: a route's parameters and body are its
//! method's params type, its answer is the method's result type, its errors are
//! [`ErrorBody`](crate::http::ErrorBody).
//!
//! The daemon serves it at [`OPENAPI_PATH`](crate::http::OPENAPI_PATH); `docs/openapi.json` is the
//! committed copy (`tests/schema.rs` fails when it is stale; `cargo run -p agentd-protocol --example
//! write_schema` rewrites it).

use crate::http::{ErrorBody, OPENAPI_PATH, TOKEN_COOKIE};
use crate::route::{ParamKind, Verb};
use crate::rpc::{Method, Notification, Route, TaskEnd, ROUTES};
use crate::Event;
use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

const SCHEMAS: &str = "#/components/schemas/";

/// The schema of a method's params type.
fn params_schema(method: Method, gen: &mut SchemaGenerator) -> Value {
    method.params_schema(gen).to_value()
}

/// The schema of a method's result type; for a method that streams (`task.subscribe` over HTTP),
/// one SSE message.
fn result_schema(method: Method, gen: &mut SchemaGenerator) -> Value {
    if method.streams() {
        return sse_message_schema(gen);
    }
    method.result_schema(gen).to_value()
}

/// One message of the event stream as an SSE parser reads it (OpenAPI 3.1: a `text/event-stream`
/// schema describes each message): `event: task.event` with the event's seq as its `id` and the
/// [`Event`] as its JSON `data`, or the closing `event: task.end` (no id) with [`TaskEnd`] as its data.
/// Comments (the opening line, keep-alives) are not messages.
fn sse_message_schema(gen: &mut SchemaGenerator) -> Value {
    let json_data = |schema: Value| json!({"type": "string", "contentMediaType": "application/json", "contentSchema": schema});
    let event = gen.subschema_for::<Event>().to_value();
    let end = gen.subschema_for::<TaskEnd>().to_value();
    // The socket's notification envelope, kept among the components for the socket's clients.
    gen.subschema_for::<Notification>();
    json!({"oneOf": [
        {
            "description": "One event, in order, no gap, no repeat; its id is the event's seq (what a reconnecting EventSource sends back as Last-Event-ID).",
            "type": "object",
            "properties": {
                "event": {"const": "task.event"},
                "id": {"type": "string", "pattern": "^[0-9]+$"},
                "data": json_data(event)
            },
            "required": ["event", "id", "data"]
        },
        {
            "description": "The end: after the terminal event that nothing follows (or at once, for a stream asked for at or past the end of a task that has ended); the server then closes the response.",
            "type": "object",
            "properties": {
                "event": {"const": "task.end"},
                "data": json_data(end)
            },
            "required": ["event", "data"]
        }
    ]})
}

/// The definition a `$ref` schema points at.
fn definition<'d>(schemas: &'d Map<String, Value>, schema: &Value) -> Option<&'d Value> {
    let name = schema.get("$ref")?.as_str()?.strip_prefix(SCHEMAS)?;
    schemas.get(name)
}

/// A property's schema in a params definition, with its description lifted out for OpenAPI.
fn property(params: Option<&Value>, name: &str) -> (Value, Option<Value>) {
    let mut schema = params
        .and_then(|p| p.get("properties"))
        .and_then(|p| p.get(name))
        .cloned()
        .unwrap_or_else(|| json!({"type": "string"}));
    let description = schema.as_object_mut().and_then(|o| o.remove("description"));
    (not_null(schema), description)
}

/// An optional param's schema without its `null`: a path or query string has no null.
fn not_null(schema: Value) -> Value {
    let null = json!({"type": "null"});
    match schema.get("anyOf").and_then(Value::as_array) {
        Some(alternatives) if alternatives.len() == 2 && alternatives.contains(&null) => {
            alternatives.iter().find(|a| **a != null).cloned().unwrap_or(schema)
        }
        _ => schema,
    }
}

fn parameters(route: &Route, params: Option<&Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for name in route.path_params() {
        // A path segment is always there: a default the params type documents does not apply.
        let (schema, _) = property(params, name);
        out.push(json!({"name": name, "in": "path", "required": true, "schema": schema}));
    }
    for q in route.query {
        let (mut schema, description) = property(params, q.name);
        match q.kind {
            // `type: ["integer", "null"]` in the params type; read as a u64.
            ParamKind::Integer => schema = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
            ParamKind::Boolean => schema = json!({"type": "boolean"}),
            ParamKind::String => {}
        }
        let mut p = json!({"name": q.name, "in": "query", "required": false, "schema": schema});
        if let Some(d) = description {
            p["description"] = d;
        }
        out.push(p);
    }
    if route.is_event_stream() {
        out.push(json!({
            "name": "Last-Event-ID",
            "in": "header",
            "required": false,
            "description": "Resume after this event's seq (what a browser's EventSource sends when it reconnects); wins over after_seq.",
            "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX}
        }));
    }
    out
}

/// The body schema of a route: its params type without the params its path carries.
fn body_schema(route: &Route, params: Option<&Value>) -> Value {
    let mut body = params.cloned().unwrap_or_else(|| json!({"type": "object"}));
    for name in route.path_params() {
        if let Some(props) = body.get_mut("properties").and_then(Value::as_object_mut) {
            props.remove(name);
        }
        if let Some(required) = body.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|r| r != name);
        }
    }
    body
}

/// Every error status a route answers with: each error code's, by [`crate::http::status_of`] (the
/// one place a code becomes a status), and 401 for a missing or wrong token.
fn error_responses() -> Value {
    let error = json!({"application/json": {"schema": {"$ref": format!("{SCHEMAS}ErrorBody")}}});
    let mut by_status: std::collections::BTreeMap<u16, Vec<String>> = std::collections::BTreeMap::new();
    for code in crate::rpc::ErrorCode::ALL {
        by_status.entry(crate::http::status_of(code)).or_default().push(format!(
            "{} ({})",
            code.what(),
            code.code()
        ));
    }
    by_status.entry(401).or_default().push("no token, or the wrong one (-32600)".to_string());
    let responses: Map<String, Value> = by_status
        .into_iter()
        .map(|(status, whats)| {
            let mut description = whats.join("; ");
            if let Some(first) = description.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            (status.to_string(), json!({"description": description, "content": error}))
        })
        .collect();
    Value::Object(responses)
}

fn operation(route: &Route, params_ref: &Value, result: &Value, schemas: &Map<String, Value>) -> Value {
    let params = definition(schemas, params_ref);
    let method = route.method.name();
    let mut op = json!({
        "operationId": method,
        "summary": route.summary,
        "description": format!("Calls `{method}` with the same params, result and error codes as the socket."),
        "parameters": parameters(route, params),
        "responses": error_responses(),
    });
    let ok = if route.is_event_stream() {
        json!({
            "description": "Server-Sent Events: `event: task.event` messages (id: the event's seq; data: the event) with no gap and no repeat, then one `event: task.end` (data: its params), and the stream ends. A comment line (`: keep-alive`) is sent at `[http] keep_alive` while nothing else is. The schema describes one message.",
            "content": {"text/event-stream": {"schema": result}}
        })
    } else {
        json!({
            "description": format!("The result of `{method}`"),
            "content": {"application/json": {"schema": result}}
        })
    };
    op["responses"]["200"] = ok;
    if route.body {
        op["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": body_schema(route, params)}}
        });
    }
    op
}

/// The OpenAPI 3.1 document of the HTTP API.
pub fn openapi_document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    let mut gen = SchemaGenerator::new(settings);
    gen.subschema_for::<ErrorBody>();
    let typed: Vec<(Value, Value)> = ROUTES
        .iter()
        .map(|r| (params_schema(r.method, &mut gen), result_schema(r.method, &mut gen)))
        .collect();
    let schemas = gen.take_definitions(true);
    let mut paths = Map::new();
    for (route, (params, result)) in ROUTES.iter().zip(&typed) {
        let verb = match route.verb {
            Verb::Get => "get",
            Verb::Post => "post",
        };
        let entry = paths.entry(route.full_path()).or_insert_with(|| json!({}));
        entry[verb] = operation(route, params, result, &schemas);
    }
    paths.insert(
        OPENAPI_PATH.to_string(),
        json!({"get": {
            "operationId": "openapi",
            "summary": "This document; served without the token (it is the same for every daemon of this version, committed as docs/openapi.json)",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}}
        }}),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agentd HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The socket protocol's methods over HTTP: the same params, results and error codes \
                (docs/interface.md, docs/protocol.schema.json). Every request but this document's needs the daemon's \
                token (<home>/http.token): `Authorization: Bearer TOKEN`, or the cookie a browser gets for GET /?token=TOKEN."
        },
        "security": [{"bearer": []}, {"cookie": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "The contents of <home>/http.token"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": TOKEN_COOKIE}
            },
            "schemas": schemas
        }
    })
}

/// The document as the committed `docs/openapi.json` holds it: pretty JSON with a final newline.
pub fn openapi_text() -> String {
    crate::schema::pretty_sorted(openapi_document())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_an_operation_with_its_methods_types() {
        let doc = openapi_document();
        for route in ROUTES.iter() {
            let verb = route.verb.as_str().to_lowercase();
            let op = &doc["paths"][route.full_path()][&verb];
            assert_eq!(op["operationId"], route.method.name(), "{route:?}");
            for name in route.path_params() {
                let p = op["parameters"].as_array().unwrap().iter().find(|p| p["name"] == name);
                assert_eq!(p.unwrap()["in"], "path", "{route:?}");
            }
        }
        let message = &doc["paths"]["/api/v1/tasks/{task_id}/message"]["post"];
        let body = &message["requestBody"]["content"]["application/json"]["schema"];
        assert!(body["properties"].get("text").is_some(), "{body}");
        assert!(body["properties"].get("task_id").is_none(), "the path carries it: {body}");
        let log = &doc["paths"]["/api/v1/tasks/{task_id}/log"]["get"]["parameters"];
        let after = log.as_array().unwrap().iter().find(|p| p["name"] == "after_seq").unwrap();
        assert_eq!(after["schema"]["type"], "integer");
        assert!(doc["components"]["schemas"]["TaskStatus"].is_object());
        assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    }

    #[test]
    fn query_params_read_as_integers_are_integers_in_their_params_types() {
        let mut settings = SchemaSettings::draft2020_12();
        settings.definitions_path = "/components/schemas".into();
        let mut gen = SchemaGenerator::new(settings);
        let refs: Vec<Value> = ROUTES.iter().map(|r| params_schema(r.method, &mut gen)).collect();
        let schemas = gen.take_definitions(true);
        for (route, params) in ROUTES.iter().zip(&refs) {
            let params = definition(&schemas, params);
            for q in route.query {
                let (schema, _) = property(params, q.name);
                let integer = schema.to_string().contains("integer");
                assert_eq!(integer, q.kind == ParamKind::Integer, "{} {}: {schema}", route.path, q.name);
                let boolean = schema.to_string().contains("boolean");
                assert_eq!(boolean, q.kind == ParamKind::Boolean, "{} {}: {schema}", route.path, q.name);
            }
        }
    }
}
