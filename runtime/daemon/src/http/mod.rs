//! The dashboard and the HTTP API: actix-web on the daemon's actix system, off unless `[http] listen`
//! or `agentd serve --http ADDR` names an address.
//!
//! The API is the socket protocol over HTTP, not a second vocabulary: each route of
//! [`agentd_protocol::rpc::ROUTES`] gathers its path segments, query parameters and JSON body into
//! the params of its method ([`params_of`]), reads them with the socket's own decoder
//! ([`crate::rpc::request_of`]) and calls [`Methods::call`]; results and errors are the socket's
//! types, errors with the HTTP status of their code. `tasks/{task_id}/events` is `task.subscribe` as
//! Server-Sent Events through [`crate::follow`], the loop the socket's subscriptions use.
//!
//! Every request but the OpenAPI document's needs the token ([`token`]): a bearer header, or the
//! cookie a browser gets for the dashboard's login URL (`/?token=…`, answered with a redirect that
//! drops the token from the address bar). A POST authenticated by the cookie must come from the
//! dashboard's own origin. The dashboard itself is static files embedded in the binary ([`assets`]).

pub mod assets;
pub mod front;
pub mod quiet;
pub mod token;

use crate::follow::follow;
use crate::rpc::{request_of, Methods};
use actix_service::{IntoServiceFactory, ServiceFactoryExt};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method as HttpMethod, StatusCode};
use actix_web::web::{self, Bytes};
use actix_web::{App, HttpRequest, HttpResponse};
use agentd_protocol::http::{status_of, ErrorBody, OPENAPI_PATH, TOKEN_COOKIE, TOKEN_QUERY};
use agentd_protocol::route::{ParamKind, Verb, API_PREFIX};
use agentd_protocol::rpc::{ErrorCode, Notification, Request, Route, RpcError, ROUTES};
use futures_util::StreamExt;
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::sync::Arc;
pub use token::{Token, TokenError};
use tokio::sync::mpsc;

/// The largest request body read, as the socket's longest line.
pub const MAX_BODY: usize = crate::socket::MAX_LINE;

/// What every handler shares: the socket's methods, the token, and the daemon's runtime, where
/// methods and subscriptions run (the HTTP workers only move bytes).
struct Api {
    methods: Arc<Methods>,
    token: Token,
    runtime: tokio::runtime::Handle,
}

/// Starts the HTTP server on `listener` (already bound, so a busy port fails the daemon's start).
/// Call it inside the daemon's actix system; stop it through the returned server's handle.
pub fn start(
    listener: std::net::TcpListener,
    methods: Arc<Methods>,
    token: Token,
) -> std::io::Result<actix_web::dev::Server> {
    let api = web::Data::new(Api { methods, token, runtime: tokio::runtime::Handle::current() });
    let addr = listener.local_addr()?;
    // actix-web's `HttpServer::listen`, assembled here so that each connection is wrapped in
    // [`front::Guarded`] (the JSON answers to requests actix cannot parse), with its settings.
    let server = actix_server::Server::build()
        .workers(2)
        // The daemon has its own signal handling and stops this server itself.
        .disable_signals()
        .shutdown_timeout(1)
        .listen("agentd-http", listener, move || {
            let app = App::new().app_data(api.clone()).configure(routes);
            let app = app.into_factory().map_err(|e: actix_web::Error| e.error_response());
            let h1 = actix_http::HttpService::build()
                .client_request_timeout(std::time::Duration::from_secs(5))
                .client_disconnect_timeout(std::time::Duration::from_secs(1))
                // A client that closes its side has gone: an event stream is not kept for it
                // (HTTP/1 clients do not half-close and then wait for an answer).
                .h1_allow_half_closed(false)
                .local_addr(addr)
                // The default config's host and address are only a fallback for a request without
                // a Host header (HTTP/1.1 requires one): the cross-origin check then refuses.
                .h1(actix_service::map_config(app, |()| actix_web::dev::AppConfig::default()));
            actix_service::fn_service(|io: tokio::net::TcpStream| {
                let peer = io.peer_addr().ok();
                std::future::ready(Ok::<_, actix_http::error::DispatchError>((front::Guarded::new(io), peer)))
            })
            .and_then(h1)
        })?
        .run();
    Ok(server)
}

fn routes(cfg: &mut web::ServiceConfig) {
    // One resource per path, one route per verb on it (GET and POST /tasks share a path).
    let mut paths: Vec<&'static str> = Vec::new();
    for route in ROUTES.iter() {
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    // A path of fixed words before one with a `{param}` in its place: `POST /evidence/verify`
    // must not be taken for `/evidence/{id}`.
    paths.sort_by_key(|path| path.matches('{').count());
    // The document is public: another verb on it is a 405 whoever asks (there is no token to check).
    cfg.service(web::resource(OPENAPI_PATH).route(web::get().to(openapi)).default_service(web::to(
        |req: HttpRequest| async move { not_a_verb_of(&req, OPENAPI_PATH, &["GET"]) },
    )));
    for path in paths {
        let mut resource = web::resource(format!("{API_PREFIX}{path}"));
        for route in ROUTES.iter().filter(|r| r.path == path) {
            let verb = match route.verb {
                Verb::Get => web::get(),
                Verb::Post => web::post(),
            };
            resource =
                resource.route(verb.to(move |req: HttpRequest, body: web::Payload, api: web::Data<Api>| {
                    call(route, req, body, api)
                }));
        }
        resource =
            resource.default_service(web::to(move |req: HttpRequest, api: web::Data<Api>| async move {
                wrong_verb(path, &req, &api)
            }));
        cfg.service(resource);
    }
    cfg.route("/", web::get().to(index));
    cfg.route("/metrics", web::get().to(metrics));
    cfg.route("/assets/{file:.*}", web::get().to(asset));
    cfg.default_service(web::to(not_found));
}

/// How a request proved it holds the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Bearer,
    Cookie,
}

/// Why a request is refused before any method runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refused {
    #[error(
        "missing or wrong token: send `Authorization: Bearer TOKEN` with the contents of <home>/http.token, \
         or open the URL `agentd dashboard` prints"
    )]
    Token,
    #[error("a POST with the dashboard's cookie must come from the dashboard (Origin {origin:?} is not {expected:?})")]
    CrossOrigin { origin: String, expected: String },
}

impl Refused {
    fn status(&self) -> StatusCode {
        match self {
            Refused::Token => StatusCode::UNAUTHORIZED,
            Refused::CrossOrigin { .. } => StatusCode::FORBIDDEN,
        }
    }
}

/// The token a request carries, by bearer header or cookie. A wrong bearer header is a refusal
/// even beside a right cookie: the caller meant the header.
fn credential(req: &HttpRequest, token: &Token) -> Result<Credential, Refused> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let bearer = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
        return match bearer {
            Some(t) if token.matches(t) => Ok(Credential::Bearer),
            _ => Err(Refused::Token),
        };
    }
    let cookies = req.headers().get_all(header::COOKIE).filter_map(|v| v.to_str().ok());
    for pair in cookies.flat_map(|line| line.split(';')) {
        if let Some((name, value)) = pair.trim().split_once('=') {
            if name == TOKEN_COOKIE && token.matches(value) {
                return Ok(Credential::Cookie);
            }
        }
    }
    Err(Refused::Token)
}

/// The token check every route makes, and for a cookie's POST the same-origin check: a page of
/// another site cannot make the browser act with the dashboard's cookie.
fn authorize(req: &HttpRequest, api: &Api) -> Result<Credential, Refused> {
    let credential = credential(req, &api.token)?;
    if credential == Credential::Cookie && req.method() == HttpMethod::POST {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("").to_string();
            let expected = format!("http://{}", req.connection_info().host());
            if origin != expected {
                return Err(Refused::CrossOrigin { origin, expected });
            }
        }
    }
    Ok(credential)
}

/// An error as the API answers it: the socket's error object, with its code's status.
pub fn error_response(error: RpcError) -> HttpResponse {
    let status = StatusCode::from_u16(status_of(error.code)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).json(ErrorBody { error })
}

/// Requests refused for their token or origin: anyone who reaches the port can send them.
static REFUSED: quiet::Quiet = quiet::Quiet::new("request without the token (or from another origin)");

fn refusal(refused: &Refused, page: bool) -> HttpResponse {
    REFUSED.note(&refused.to_string());
    let mut response = HttpResponse::build(refused.status());
    if refused == &Refused::Token {
        response.insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"agentd\""));
    }
    if page {
        return response
            .content_type("text/html; charset=utf-8")
            .body(assets::refusal_page(&refused.to_string()));
    }
    let error = RpcError::new(ErrorCode::InvalidRequest, refused.to_string());
    response.json(ErrorBody { error })
}

/// Reads a body up to [`MAX_BODY`].
async fn read_body(mut payload: web::Payload) -> Result<Vec<u8>, RpcError> {
    let mut body = Vec::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| RpcError::new(ErrorCode::InvalidRequest, format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(RpcError::new(
                ErrorCode::InvalidRequest,
                format!("request body over {MAX_BODY} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A route's params: its JSON body's fields (for a route that takes a body; no body at all is `{}`,
/// while one of only whitespace is not JSON), then its declared query parameters, then its path
/// segments, each later one winning. A query parameter the route does not declare is ignored, as
/// unknown params are on the socket.
pub fn params_of(
    route: &Route,
    path: &[(&str, String)],
    query: &[(String, String)],
    body: &[u8],
) -> Result<Value, RpcError> {
    let mut params = Map::new();
    if route.body && !body.is_empty() {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| RpcError::new(ErrorCode::ParseError, format!("the body is not JSON: {e}")))?;
        match value {
            Value::Object(fields) => params = fields,
            _ => {
                return Err(RpcError::invalid_params("the body must be a JSON object of the method's params"))
            }
        }
    }
    for (name, text) in query {
        let Some(declared) = route.query.iter().find(|q| q.name == name) else { continue };
        let value = match declared.kind {
            ParamKind::String => Value::String(text.clone()),
            ParamKind::Integer => match text.trim().parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => {
                    return Err(RpcError::invalid_params(format!(
                        "param `{name}`: expected a non-negative integer, got {text:?}"
                    )))
                }
            },
            ParamKind::Boolean => match text.trim() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "param `{name}`: expected true or false, got {text:?}"
                    )))
                }
            },
        };
        params.insert(name.clone(), value);
    }
    for (name, value) in path {
        params.insert((*name).to_string(), Value::String(value.clone()));
    }
    Ok(Value::Object(params))
}

/// A query string's `name=value` pairs, percent-decoded; a query that is not one is -32602.
pub fn query_pairs(query: &str) -> Result<Vec<(String, String)>, RpcError> {
    web::Query::<Vec<(String, String)>>::from_query(query)
        .map(web::Query::into_inner)
        .map_err(|e| RpcError::invalid_params(format!("the query string: {e}")))
}

/// What a route makes of a request: its path segments' values (in the route's order), its query
/// string and its body, read into the route's method's params — exactly what the server dispatches.
pub fn decode_route(route: &Route, path: &[String], query: &str, body: &[u8]) -> Result<Request, RpcError> {
    let names: Vec<(&str, String)> = route.path_params().zip(path.iter().cloned()).collect();
    let pairs = query_pairs(query)?;
    let params = params_of(route, &names, &pairs, if route.body { body } else { b"" })?;
    request_of(route.method.name(), params)
}

impl Api {
    /// The request with its task id made whole when it is a unique prefix (`rpc::task_ids`), on the
    /// daemon's runtime.
    async fn full_task_id(&self, request: Request) -> Result<Request, RpcError> {
        let methods = self.methods.clone();
        self.runtime.spawn(async move { methods.full_task_id(request) }).await.unwrap_or_else(|e| {
            Err(RpcError::internal(format!("the request's task ended before it answered: {e}")))
        })
    }

    /// Runs a method on the daemon's runtime.
    async fn call(&self, request: Request) -> Result<Value, RpcError> {
        let methods = self.methods.clone();
        self.runtime.spawn(async move { methods.call(request).await }).await.unwrap_or_else(|e| {
            Err(RpcError::internal(format!("the request's task ended before it answered: {e}")))
        })
    }
}

/// One route: authorize, gather the params, read them as the method's, call it.
async fn call(
    route: &'static Route,
    req: HttpRequest,
    payload: web::Payload,
    api: web::Data<Api>,
) -> HttpResponse {
    if let Err(refused) = authorize(&req, &api) {
        return refusal(&refused, false);
    }
    let body = match route.body {
        true => match read_body(payload).await {
            Ok(body) => body,
            Err(e) => return error_response(e),
        },
        false => Vec::new(),
    };
    let path: Vec<String> =
        route.path_params().map(|name| req.match_info().get(name).unwrap_or_default().to_string()).collect();
    let request = match decode_route(route, &path, req.query_string(), &body) {
        Ok(request) => api.full_task_id(request).await,
        Err(e) => Err(e),
    };
    let request = match request {
        Ok(request) => request,
        Err(e) => return error_response(e),
    };
    if route.is_event_stream() {
        return events(&api, &req, request).await;
    }
    match api.call(request).await {
        Ok(value) => HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(value),
        Err(e) => error_response(e),
    }
}

/// One notification as an SSE message: an event under its `seq` as the message id (what a
/// reconnecting `EventSource` sends back as `Last-Event-ID`), the end without one. The SSE event
/// names are the notifications' method names.
pub fn sse_message(n: &Notification) -> Bytes {
    let text = match n {
        Notification::TaskEvent(e) => {
            format!(
                "id: {}\nevent: task.event\ndata: {}\n\n",
                e.seq,
                serde_json::to_string(e).unwrap_or_default()
            )
        }
        Notification::TaskEnd(end) => {
            format!("event: task.end\ndata: {}\n\n", serde_json::to_string(end).unwrap_or_default())
        }
    };
    Bytes::from(text)
}

/// `task.subscribe` as Server-Sent Events: after `Last-Event-ID` (else `after_seq`), through the
/// same loop as the socket's, until the end nothing follows or the client leaves.
async fn events(api: &Api, req: &HttpRequest, request: Request) -> HttpResponse {
    let Request::TaskSubscribe(mut params) = request else {
        return error_response(RpcError::internal("the event stream route did not read a subscription"));
    };
    if let Some(value) = req.headers().get("last-event-id") {
        let text = value.to_str().unwrap_or("").trim().to_string();
        match text.parse::<u64>() {
            Ok(seq) => params.after_seq = Some(seq),
            Err(_) => {
                return error_response(RpcError::invalid_params(format!(
                    "header `Last-Event-ID`: expected the seq of an event, got {text:?}"
                )))
            }
        }
    }
    // Subscribe before the task is checked and answered, so nothing published in between is missed.
    let live = api.methods.shared.live.subscribe();
    let (task_id, after) = (params.task_id.clone(), params.after_seq.unwrap_or(0));
    if let Err(e) = api.call(Request::TaskSubscribe(params)).await {
        return error_response(e);
    }
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let methods = api.methods.clone();
    let every = methods.shared.config().http_keep_alive;
    let _ = tx.try_send(Bytes::from(format!(": agentd follows task {task_id} after event {after}\n\n")));
    api.runtime.spawn(async move {
        let (closer, beat) = (tx.clone(), tx.clone());
        let send = move |n: Notification| {
            let tx = tx.clone();
            async move { tx.send(sse_message(&n)).await.is_ok() }
        };
        let following =
            follow(&methods.shared, &task_id, after, live, send, async move { closer.closed().await });
        // Whichever ends first ends both: the stream's end, or a keep-alive the client is not there
        // to take. Every sender then drops, and the response ends.
        tokio::select! {
            () = following => {}
            () = keep_alive(beat, every) => {}
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .streaming(body)
}

/// What an event stream writes while it has nothing else to send.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Writes [`KEEP_ALIVE`] every `every` (on the daemon's clock) until the stream's reader is gone:
/// a write to a connection whose client left fails, and the server closes it.
async fn keep_alive(tx: mpsc::Sender<Bytes>, every: std::time::Duration) {
    let clock = agentd_engine::clock::clock();
    loop {
        clock.sleep(every).await;
        if tx.send(Bytes::from_static(KEEP_ALIVE)).await.is_err() {
            return;
        }
    }
}

/// A path of the API that does not take this verb.
fn wrong_verb(path: &str, req: &HttpRequest, api: &Api) -> HttpResponse {
    if let Err(refused) = authorize(req, api) {
        return refusal(&refused, false);
    }
    let verbs: Vec<&str> = ROUTES.iter().filter(|r| r.path == path).map(|r| r.verb.as_str()).collect();
    not_a_verb_of(req, &format!("{API_PREFIX}{path}"), &verbs)
}

/// 405 for a verb `path` does not take, with the `Allow` header naming those it does.
fn not_a_verb_of(req: &HttpRequest, path: &str, verbs: &[&str]) -> HttpResponse {
    let message = format!("{} is not a route of {path}; it takes {}", req.method(), verbs.join(", "));
    let allow = HeaderValue::from_str(&verbs.join(", ")).unwrap_or(HeaderValue::from_static("GET"));
    let mut response = error_response(RpcError::new(ErrorCode::MethodNotFound, message));
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response.headers_mut().insert(header::ALLOW, allow);
    response
}

async fn not_found(req: HttpRequest, api: web::Data<Api>) -> HttpResponse {
    let page = !req.path().starts_with(API_PREFIX);
    if let Err(refused) = authorize(&req, &api) {
        return refusal(&refused, page);
    }
    let message = format!("no route {} {} (the API's routes: {OPENAPI_PATH})", req.method(), req.path());
    error_response(RpcError::new(ErrorCode::MethodNotFound, message))
}

/// The OpenAPI document, served without the token: it is the same for every daemon of this
/// version (`docs/openapi.json`), and a client needs it before it has a token to send.
async fn openapi() -> HttpResponse {
    // The same for the daemon's life: generated once.
    static DOCUMENT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    HttpResponse::Ok().json(DOCUMENT.get_or_init(agentd_protocol::openapi::openapi_document))
}

/// `GET /metrics`: the counters in the Prometheus text format, behind the token unless `[http]
/// metrics_public` says otherwise.
async fn metrics(req: HttpRequest, api: web::Data<Api>) -> HttpResponse {
    let shared = api.methods.shared.clone();
    if !shared.config().http_metrics_public {
        if let Err(refused) = authorize(&req, &api) {
            return refusal(&refused, false);
        }
    }
    let read = tokio::task::spawn_blocking(move || {
        shared.storage.tasks().map(|tasks| shared.metrics.render(&tasks))
    });
    match read.await {
        Ok(Ok(text)) => HttpResponse::Ok()
            .content_type(crate::metrics::CONTENT_TYPE)
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .body(text),
        Ok(Err(e)) => {
            error_response(RpcError::new(ErrorCode::Internal, format!("cannot read the tasks: {e}")))
        }
        Err(e) => error_response(RpcError::internal(e)),
    }
}

/// The dashboard: `/?token=…` exchanges the token for the cookie and redirects to `/`, so the token
/// leaves the address bar and the history; `/` with the cookie is the page.
async fn index(req: HttpRequest, api: web::Data<Api>) -> HttpResponse {
    let query = query_pairs(req.query_string());
    let offered = query.ok().and_then(|q| q.into_iter().find(|(k, _)| k == TOKEN_QUERY).map(|(_, v)| v));
    if let Some(offered) = offered {
        if !api.token.matches(&offered) {
            return refusal(&Refused::Token, true);
        }
        let cookie = format!("{TOKEN_COOKIE}={offered}; HttpOnly; SameSite=Strict; Path=/");
        return HttpResponse::SeeOther()
            .insert_header((header::LOCATION, "/"))
            .insert_header((header::SET_COOKIE, cookie))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .finish();
    }
    if let Err(refused) = authorize(&req, &api) {
        return refusal(&refused, true);
    }
    page(assets::INDEX)
}

async fn asset(req: HttpRequest, api: web::Data<Api>) -> HttpResponse {
    if let Err(refused) = authorize(&req, &api) {
        return refusal(&refused, true);
    }
    match assets::find(req.path()) {
        Some(asset) => page(asset),
        None => error_response(RpcError::new(ErrorCode::MethodNotFound, format!("no file {}", req.path()))),
    }
}

fn page(asset: &assets::Asset) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(asset.content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        ))
        .body(asset.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::rpc::Method;

    fn route(method: Method) -> &'static Route {
        ROUTES.iter().find(|r| r.method == method).unwrap()
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn params_come_from_the_body_the_query_and_the_path_and_the_path_wins() {
        let message = route(Method::TaskMessage);
        let p = params_of(message, &[("task_id", "t1".into())], &[], br#"{"text": "more", "task_id": "t2"}"#)
            .unwrap();
        assert_eq!(p, serde_json::json!({"task_id": "t1", "text": "more"}));
        let log = route(Method::LogGet);
        let q = query(&[("after_seq", "12"), ("role", "coder"), ("colour", "red")]);
        let p = params_of(log, &[("task_id", "t".into())], &q, b"ignored: no body on this route").unwrap();
        assert_eq!(p, serde_json::json!({"task_id": "t", "after_seq": 12, "role": "coder"}));
        let submit = route(Method::TaskSubmit);
        assert_eq!(params_of(submit, &[], &[], b"").unwrap(), serde_json::json!({}));
        // Whitespace alone is no JSON text: refused as such, not read as no body.
        let e = params_of(submit, &[], &[], b" \n").unwrap_err();
        assert_eq!(e.code, ErrorCode::ParseError, "{e}");
    }

    #[test]
    fn bad_params_are_named_with_the_sockets_codes() {
        let log = route(Method::LogGet);
        let e = params_of(log, &[("task_id", "t".into())], &query(&[("limit", "ten")]), b"").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(e.message.contains("`limit`") && e.message.contains("\"ten\""), "{e}");
        let submit = route(Method::TaskSubmit);
        let e = params_of(submit, &[], &[], b"{objective").unwrap_err();
        assert_eq!(e.code, ErrorCode::ParseError, "{e}");
        let e = params_of(submit, &[], &[], b"[1]").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams, "{e}");
        let e = request_of("task.submit", params_of(submit, &[], &[], br#"{"objective": 1}"#).unwrap())
            .unwrap_err();
        assert!(e.message.contains("param `objective`"), "{e}");
    }

    #[test]
    fn sse_messages_carry_the_seq_as_id_and_the_notification_names() {
        let event = agentd_protocol::Event {
            seq: 7,
            task_id: "t".into(),
            role: agentd_protocol::Role::Lead,
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: agentd_protocol::EventKind::TaskFinished { summary: "done\nreally".into() },
        };
        let end = crate::follow::task_end(&event).unwrap();
        let text = String::from_utf8(sse_message(&Notification::TaskEvent(Box::new(event.clone()))).to_vec())
            .unwrap();
        let lines: Vec<&str> = text.trim_end().lines().collect();
        assert_eq!(lines[..2], ["id: 7", "event: task.event"]);
        assert!(text.ends_with("\n\n") && lines.len() == 3, "one data line: {text:?}");
        let data: agentd_protocol::Event =
            serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data, event);
        let text = String::from_utf8(sse_message(&Notification::TaskEnd(end.clone())).to_vec()).unwrap();
        assert!(text.starts_with("event: task.end\ndata: "), "{text}");
        // The SSE names are the notifications' own method names.
        for (n, name) in [
            (Notification::TaskEvent(Box::new(event)), "task.event"),
            (Notification::TaskEnd(end), "task.end"),
        ] {
            assert_eq!(serde_json::to_value(n).unwrap()["method"], name);
        }
    }
}
