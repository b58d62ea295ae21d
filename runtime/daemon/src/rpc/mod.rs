//! The methods of the socket protocol (`docs/interface.md`; each declared once in
//! `agentd_protocol::rpc`): decoding a line into a [`Request`] with errors that name the parameter,
//! and [`Methods`], the server that answers them — a handler per method, by family, in the files
//! beneath (`task`, `inspect`, `evidence`, `memory`, `settings`, `daemon`), each implementing
//! [`Handle`](agentd_protocol::rpc::Handle) for its methods so that the compiler ties each answer to
//! its method's result type. `refusal` is the one place domain errors become [`ErrorCode`]s.

mod daemon;
mod evidence;
mod inspect;
mod memory;
mod refusal;
mod settings;
mod task;
mod task_ids;

pub use refusal::Refusal;

use crate::shared::Shared;
use crate::supervisor::{Supervisor, SupervisorError};
use actix::prelude::*;
use agentd_protocol::rpc::{Method, Notification, Server};
use agentd_protocol::{ErrorCode, Request, Role, RpcError, TaskState};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// A request line's id and its request, or the id (null when unreadable) and the error to answer.
pub type Decoded = Result<(Value, Request), (Value, RpcError)>;

/// Reads one request line: JSON-RPC 2.0 framing, then the method's name, then its params into the
/// method's params type. Absent or `null` params read as `{}`.
pub fn decode_request(text: &[u8]) -> Decoded {
    let line: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            return Err((Value::Null, RpcError::new(ErrorCode::ParseError, format!("parse error: {e}"))))
        }
    };
    let id = line.get("id").cloned().unwrap_or(Value::Null);
    let name = match (&line, line.get("jsonrpc"), line.get("method")) {
        (Value::Object(_), Some(Value::String(v)), Some(Value::String(m))) if v == "2.0" => m.clone(),
        _ => {
            let e = RpcError::new(
                ErrorCode::InvalidRequest,
                "invalid request: expected an object with \"jsonrpc\": \"2.0\" and a string \"method\"",
            );
            return Err((id, e));
        }
    };
    if Method::parse(&name).is_none() {
        return Err((id, RpcError::new(ErrorCode::MethodNotFound, format!("unknown method {name:?}"))));
    }
    let params = match line.get("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err((id, RpcError::invalid_params("params must be an object"))),
    };
    match request_of(&name, params) {
        Ok(request) => Ok((id, request)),
        Err(e) => Err((id, e)),
    }
}

/// Reads a method's name and its params object into a [`Request`]: the one decoding of params,
/// behind the socket's lines and the HTTP API's routes alike, so both refuse bad params with the
/// same words. An unknown name is -32601; params that do not fit the method's params type are
/// -32602 naming the parameter (``param `task_id`: invalid type: integer `42`, expected a
/// string``). Params the method does not know are ignored.
pub fn request_of(name: &str, params: Value) -> Result<Request, RpcError> {
    if Method::parse(name).is_none() {
        return Err(RpcError::new(ErrorCode::MethodNotFound, format!("unknown method {name:?}")));
    }
    let wire = serde_json::json!({"method": name, "params": params});
    serde_path_to_error::deserialize::<_, Request>(wire).map_err(|e| {
        let path = e.path().to_string();
        let field = path.strip_prefix("params.").unwrap_or("");
        let message = if field.is_empty() {
            format!("invalid params for {name}: {}", e.inner())
        } else {
            format!("param `{field}`: {}", e.inner())
        };
        RpcError::invalid_params(message)
    })
}

/// A JSON-RPC result line.
pub fn result_response(id: Value, result: Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// A JSON-RPC error line.
pub fn error_response(id: Value, e: &RpcError) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": e}).to_string()
}

/// A notification line.
pub fn notification(n: &Notification) -> String {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut v {
        o.insert("jsonrpc".into(), Value::String("2.0".into()));
    }
    v.to_string()
}

/// What a handler answers: its method's result, or a refusal with its code.
type Answer<T> = Result<T, Refusal>;

/// Everything a method needs.
pub struct Methods {
    /// The state every task shares: store, bus, configuration, actors and provider clients.
    pub shared: Arc<Shared>,
    /// The supervisor, which owns the tasks.
    pub supervisor: Addr<Supervisor>,
    /// When the daemon started (`daemon.status`'s `uptime_s`).
    pub started: Instant,
    /// Where the HTTP server listens, for `daemon.status` (`None`: it is off).
    pub http: Option<std::net::SocketAddr>,
}

impl Server for Methods {
    type Error = Refusal;
}

impl Methods {
    /// Runs one request with its method's handler. `task.subscribe` is answered here and followed by
    /// the connection.
    pub async fn call(&self, request: Request) -> Result<Value, RpcError> {
        request.dispatch(self).await.map_err(|refusal| refusal.0)
    }

    /// Asks the supervisor something answered by the task's new state.
    async fn ask<M>(&self, msg: M) -> Answer<agentd_protocol::rpc::StateResult>
    where
        M: actix::Message<Result = Result<TaskState, SupervisorError>> + Send + 'static,
        Supervisor: Handler<M>,
    {
        let state = self.supervisor.send(msg).await??;
        Ok(agentd_protocol::rpc::StateResult { state })
    }

    /// The task's record, or -32001.
    fn task(&self, task_id: &str) -> Answer<agentd_protocol::task::TaskMeta> {
        self.shared
            .storage
            .task(task_id)?
            .ok_or_else(|| Refusal(RpcError::new(ErrorCode::UnknownTask, format!("unknown task {task_id}"))))
    }

    /// The role's configuration, or -32005.
    fn known_role(&self, role: &Role) -> Answer<agentd_engine::team::RoleConfig> {
        self.shared.config().team.role(role).cloned().ok_or_else(|| {
            Refusal(RpcError::new(ErrorCode::UnknownRole, format!("no role {:?} in the team", role.name())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_param_is_named_with_what_was_expected() {
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"task.status","params":{"task_id":42}}"#;
        let (id, e) = decode_request(line).unwrap_err();
        assert_eq!((id, e.code), (serde_json::json!(3), ErrorCode::InvalidParams));
        assert!(
            e.message.starts_with("param `task_id`: invalid type: integer `42`, expected a string"),
            "{e}"
        );
        let line = br#"{"jsonrpc":"2.0","id":4,"method":"task.status"}"#;
        let (_, e) = decode_request(line).unwrap_err();
        assert!(e.message.contains("missing field `task_id`"), "{e}");
        let line = br#"{"jsonrpc":"2.0","id":5,"method":"task.explode","params":{}}"#;
        let (_, e) = decode_request(line).unwrap_err();
        assert_eq!(e.code, ErrorCode::MethodNotFound);
        let (_, request) =
            decode_request(br#"{"jsonrpc":"2.0","id":6,"method":"task.list","params":null}"#).unwrap();
        assert_eq!(request.method(), agentd_protocol::Method::TaskList);
    }
}
