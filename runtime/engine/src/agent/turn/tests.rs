//! The turn loop's steps, each run against a scripted model over in-memory storage.

use super::*;
use crate::context::TaskCtx;
use crate::fitter::MeterOf;
use crate::storage::{Settings, Storage};
use crate::testing::{rounds, Rig};
use agentd_protocol::Role;
use agentd_protocol::{Event, Part, Window, WindowSource};
use agentd_test_support::{
    context_length_exceeded, hang, is_summary_request, rate_limited, sse, text, tool_call_with_id,
    ScriptedServer,
};
use serde_json::json;
use std::time::{Duration, Instant};

/// A turn's input as the agent logs it: the objective of the turn.
fn objective(text: &str) -> Message {
    Message::user(text).with_kind(MessageKind::Objective)
}

fn agent(role: Role, history: Vec<Message>, task: &Arc<TaskCtx>) -> Agent {
    Agent::new(role, history, Vec::new(), Vec::new(), None, task.clone(), std::sync::Weak::new())
}

fn of_kind<'a>(events: &'a [Event], kind: &str) -> Vec<&'a EventKind> {
    events.iter().filter(|e| e.kind.name() == kind).map(|e| &e.kind).collect()
}

async fn started(agent: &mut Agent, input: Option<&str>) -> Turn {
    match agent.start(input.map(str::to_string)).await.unwrap() {
        Started::Run(turn) => turn,
        Started::Over(summary) => panic!("the turn was over before it started: {summary}"),
    }
}

#[test]
fn a_roles_tools_are_converted_and_an_unknown_one_is_named() {
    let specs = tool_specs(&Role::Coder, &["read_file".into(), "finish".into()]).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["read_file", "finish"]);
    assert_eq!(specs[0].parameters["type"], "object");
    assert!(!specs[1].description.is_empty());
    let error = tool_specs(&Role::Coder, &["read_file".into(), "teleport".into()]).unwrap_err();
    assert_eq!(error.to_string(), "role coder: unknown tool teleport");
}

#[tokio::test]
async fn start_logs_the_settings_and_the_input_and_a_stored_end_sends_nothing() {
    let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
    let task = rig.task("Fix the adder");
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    let turn = started(&mut lead, Some("Fix the adder")).await;
    assert_eq!(turn.snapshot.model, rig.server.model());
    let names: Vec<ToolName> = turn.tools.iter().map(|t| ToolName::parse(&t.name)).collect();
    assert_eq!(names, agentd_agents::roles::LEAD_TOOLS);
    assert_eq!(rig.history(&task.task_id, "lead"), [objective("Fix the adder")]);
    let settings = rig.records(&task.task_id).into_iter().find_map(|r| match r {
        Record::Settings { role: Role::Lead, settings } => Some(settings),
        _ => None,
    });
    assert_eq!(settings.unwrap().model, rig.server.model());

    // Resumed with the turn's answer already stored: over, and the model is not asked.
    let history = vec![Message::user("Fix the adder"), Message::assistant_text("fixed it")];
    let mut resumed = agent(Role::Lead, history, &task);
    assert_eq!(resumed.run_turn(None).await.unwrap(), "fixed it");
    assert!(rig.server.chat_requests().is_empty());
}

#[tokio::test]
async fn fit_announces_the_request_and_keeps_its_measure() {
    let server = ScriptedServer::builder().max_model_len(Some(32_000)).start().await;
    let rig = Rig::start(server).await;
    let task = rig.task("Fix the adder");
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    let turn = started(&mut lead, Some("Fix the adder")).await;
    let (fitted, _) = lead.fit(&turn).await.unwrap();
    assert_eq!(fitted.window, Window { tokens: Tokens(32_000), source: WindowSource::Declared });
    assert!(fitted.compacted.is_none());
    assert_eq!(fitted.request.messages, lead.history);
    let last = lead.last_fit.as_ref().unwrap();
    assert_eq!(last.tokens, fitted.count.total.tokens);
    assert_eq!(last.thresholds, fitted.thresholds);
    let events = rig.events(&task.task_id);
    let [EventKind::RequestSent { tokens, window, window_source, trigger_tokens, measured_by, .. }] =
        of_kind(&events, "request_sent")[..]
    else {
        panic!("one request_sent: {events:#?}")
    };
    assert_eq!(*tokens, fitted.count.total.tokens);
    assert_eq!((*window, *window_source), (Tokens(32_000), WindowSource::Declared));
    assert_eq!(*trigger_tokens, fitted.thresholds.trigger);
    assert!(measured_by.is_some());
}

#[tokio::test]
async fn a_compaction_of_the_fit_becomes_the_active_history_through_a_checkpoint() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(4_000))
        .responder(|_| sse(vec![text("Summary: the files were read one by one.")]))
        .start()
        .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Read the files");
    let mut coder = agent(Role::Coder, rounds(12, 300), &task);
    let turn = started(&mut coder, None).await;
    let (fitted, _) = coder.fit(&turn).await.unwrap();
    let done = fitted.compacted.as_ref().expect("past the trigger the history is compacted");
    assert_eq!(coder.history, done.history);
    assert!(coder.history.len() < rounds(12, 300).len());
    assert!(fitted.count.total.tokens <= fitted.thresholds.trigger);
    let checkpoint = rig.records(&task.task_id).into_iter().find_map(|r| match r {
        Record::Checkpoint { role, subtype: CheckpointKind::Compaction, history, archive_id } => {
            Some((role, history, archive_id))
        }
        _ => None,
    });
    let (role, history, archive_id) = checkpoint.expect("a compaction checkpoint");
    assert_eq!((&role, &history), (&Role::Coder, &done.history));
    assert_eq!(archive_id.as_deref(), Some(done.archive_id.as_str()));
    // What a resume reads is the compacted history.
    assert_eq!(rig.history(&task.task_id, "coder"), done.history);
}

#[tokio::test]
async fn a_refusal_with_a_stated_limit_lowers_the_window_and_the_retry_fits_under_it() {
    // The server enforces 2 400 tokens and says so when it refuses; nothing is declared, so the
    // fitter starts from the assumed window.
    let server = ScriptedServer::builder()
        .window(2_400)
        .responder(|body| {
            if is_summary_request(body) {
                sse(vec![text("Summary: the files were read one by one.")])
            } else {
                sse(vec![agentd_test_support::finish("read them all")])
            }
        })
        .start()
        .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Read the files");
    let mut coder = agent(Role::Coder, rounds(10, 300), &task);
    assert_eq!(coder.run_turn(None).await.unwrap(), "read them all");

    assert_eq!(rig.server.refused(), 1, "one refusal, then never again");
    let events = rig.events(&task.task_id);
    let [EventKind::WindowLearned { old_window, new_window, source }] =
        of_kind(&events, "window_learned")[..]
    else {
        panic!("one window_learned: {events:#?}")
    };
    assert_eq!(
        (*old_window, *new_window, *source),
        (Window::assumed().tokens, Tokens(2_400), WindowSource::Error)
    );
    let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
    assert_eq!(known, Some(Window { tokens: Tokens(2_400), source: WindowSource::Error }));
    assert_eq!(of_kind(&events, "compaction_finished").len(), 1);
    let sent = of_kind(&events, "request_sent");
    let Some(EventKind::RequestSent { tokens, window, trigger_tokens, .. }) = sent.last() else {
        panic!("{events:#?}")
    };
    assert_eq!(*window, Tokens(2_400));
    assert!(tokens <= trigger_tokens && *tokens < Tokens(2_400), "{tokens} over {trigger_tokens}");
    assert!(rig.server.counted().last().is_some_and(|&n| n <= 2_400), "{:?}", rig.server.counted());
}

#[tokio::test]
async fn a_model_that_keeps_refusing_fails_the_turn_after_one_lesson() {
    let server = ScriptedServer::start(vec![
        context_length_exceeded(16_384, 20_000),
        context_length_exceeded(16_384, 20_000),
        sse(vec![text("never asked")]),
    ])
    .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Fix it");
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    let error = lead.run_turn(Some("Fix it".into())).await.unwrap_err();
    assert!(
        matches!(
            error,
            TurnError::Provider(ProviderError::ContextOverflow { limit: Some(Tokens(16_384)), .. })
        ),
        "{error:?}"
    );
    assert_eq!(rig.server.chat_requests().len(), 2);
    assert_eq!(rig.kinds(&task.task_id), ["request_sent", "window_learned", "request_sent"]);
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_the_scheduled_wait_and_the_retry_announced() {
    let server = ScriptedServer::start(vec![rate_limited(Some("1")), sse(vec![text("done")])]).await;
    let rig = Rig::start_with(server, |team| {
        team.retry.rate_limit = agentd_policies::retry::Schedule { attempts: 3, delay_ms: 60_000 }
    })
    .await;
    let task = rig.task("Fix it");
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    let began = Instant::now();
    let turn = tokio::spawn(async move {
        let result = lead.run_turn(Some("Fix it".into())).await;
        (lead, result)
    });
    // While the retry waits, the task says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.state(&task.task_id) != TaskState::WaitingRetry {
        assert!(Instant::now() < deadline, "the task never showed waiting_retry");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (lead, result) = turn.await.unwrap();
    assert_eq!(result.unwrap(), "done");
    assert!(began.elapsed() >= Duration::from_secs(1), "Retry-After was not waited out");
    assert_eq!(rig.state(&task.task_id), TaskState::Running);
    let events = rig.events(&task.task_id);
    assert_eq!(rig.kinds(&task.task_id), ["request_sent", "retry_scheduled", "response_received"]);
    let [EventKind::RetryScheduled { reason, attempt, max_attempts, delay_ms }] =
        of_kind(&events, "retry_scheduled")[..]
    else {
        panic!("{events:#?}")
    };
    // Retry-After (1 s) wins over the configured 60 s.
    assert_eq!((reason.as_str(), *attempt, *max_attempts, *delay_ms), ("rate_limit", 1, 3, 1_000));
    let sent = rig.server.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["messages"], sent[1]["messages"], "the same request, resent");
    assert_eq!(lead.history, [objective("Fix it"), Message::assistant_text("done")]);
}

#[tokio::test]
async fn usage_reports_calibrate_the_measure() {
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![
            sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "notes.txt"}))]),
            sse(vec![text("read it")]),
        ])
        .start()
        .await;
    let rig = Rig::start(server).await;
    std::fs::write(rig.workspace.path().join("notes.txt"), "the adder subtracts\n").unwrap();
    let task = rig.task("Read the notes");
    let (base_url, model) = (rig.server.base_url(), rig.server.model().to_string());
    let meter =
        |rig: &Rig| rig.engine.fitter().meter_of(MeterOf { server: base_url.clone(), model: model.clone() });
    assert_eq!(meter(&rig).calibration().reports(), 0);
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    assert_eq!(lead.run_turn(Some("Read the notes".into())).await.unwrap(), "read it");

    let events = rig.events(&task.task_id);
    let reported: Vec<u64> = of_kind(&events, "response_received")
        .into_iter()
        .map(|k| match k {
            EventKind::ResponseReceived { usage: Some(u), .. } => u.prompt_tokens,
            other => panic!("a response without its usage: {other:?}"),
        })
        .collect();
    assert_eq!(reported, rig.server.counted(), "each answer's usage is the server's count");
    let calibration = meter(&rig).calibration().clone();
    assert_eq!(calibration.reports(), 2, "both reports taught the calibration");
    assert!(calibration.is_calibrated());
    // Kept: a restarted daemon starts calibrated.
    let key = agentd_policies::settings::PairCalibration { server: &base_url, model: &model };
    assert!(rig.storage.get(&key).unwrap().is_some());
    assert!(lead.last_answer_at.is_some());
}

#[tokio::test]
async fn a_usage_report_of_a_truncated_prompt_clamps_the_window() {
    let server = ScriptedServer::builder()
        .silent_truncation_at(2_000)
        .script(vec![sse(vec![text("I saw part of it")])])
        .start()
        .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Read the files");
    let mut coder = agent(Role::Coder, rounds(10, 300), &task);
    let turn = started(&mut coder, None).await;
    let (fitted, _) = coder.fit(&turn).await.unwrap();
    let response = coder.send(&turn, &fitted.request).await.unwrap();
    coder.record_usage(&turn, &response).await.unwrap();
    let events = rig.events(&task.task_id);
    let [EventKind::WindowLearned { old_window, new_window, source }] =
        of_kind(&events, "window_learned")[..]
    else {
        panic!("one window_learned: {events:#?}")
    };
    assert_eq!(*source, WindowSource::Usage);
    assert_eq!(*old_window, Window::assumed().tokens);
    assert!((Tokens(2_000)..Tokens(2_100)).contains(new_window), "{new_window}");
    let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
    assert_eq!(known.map(|w| w.tokens), Some(*new_window));
    assert_eq!(rig.kinds(&task.task_id).last().map(String::as_str), Some("response_received"));
}

#[tokio::test]
async fn an_image_past_the_limit_is_stored_as_evidence_and_named_instead() {
    let server = ScriptedServer::start(vec![]).await;
    let model = server.model().to_string();
    let rig = Rig::start(server).await;
    let task = rig.task("x");
    let coder = agent(Role::Coder, Vec::new(), &task);
    let meter = rig.engine.fitter().meter_of(MeterOf { server: rig.server.base_url(), model });
    // The bytes behind the image: what is stored when it does not fit.
    let png = vec![0u8; 70];
    let image = crate::tool_servers::Image {
        media_type: "image/png".into(),
        data: agentd_test_support::mcp::PIXEL_PNG.into(),
        bytes: png.clone(),
    };
    let tool = ToolName::parse("mcp__fix__image");
    let mut bounded =
        super::super::results::Bounded { content: "a 1x1 png:".into(), evidence_id: None, tokens: Tokens(5) };
    let parts = coder.bounded_images(&meter, Tokens(100), &tool, "c1", &mut bounded, vec![image]).unwrap();
    assert!(parts.is_empty(), "an image of 765 tokens does not fit 100");
    let id = bounded.content.split("stored as evidence ").nth(1).unwrap().trim_end_matches(']').to_string();
    assert!(bounded
        .content
        .starts_with("a 1x1 png:\n[an image (image/png, 70 bytes) of this result does not fit"));
    let meta = rig.storage.evidence(&id).unwrap();
    assert_eq!((meta.media_type.as_str(), meta.bytes), ("image/png", png.len() as u64));
    assert!(bounded.tokens > Tokens(5));
}

#[tokio::test]
async fn a_tool_calls_result_is_logged_with_a_receipt_and_tool_finished() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "notes.txt"}))]),
        sse(vec![tool_call_with_id("c2", "finish", json!({"summary": "read the notes"}))]),
    ])
    .await;
    let rig = Rig::start(server).await;
    std::fs::write(rig.workspace.path().join("notes.txt"), "the adder subtracts\n").unwrap();
    let task = rig.task("Read the notes");
    let mut coder = agent(Role::Coder, Vec::new(), &task);
    assert_eq!(coder.run_turn(Some("Read the notes".into())).await.unwrap(), "read the notes");

    let logged = rig.history(&task.task_id, "coder");
    assert_eq!(logged, coder.history);
    let Some(Part::ToolResult { call_id, content, is_error }) = logged.get(2).and_then(|m| m.parts.first())
    else {
        panic!("the read's result follows its call: {logged:#?}")
    };
    assert_eq!((call_id.as_str(), *is_error), ("c1", false));
    assert!(content.contains("the adder subtracts"), "{content}");
    // The model saw it in the next request.
    assert!(rig.server.chat_requests()[1].to_string().contains("the adder subtracts"));
    let tools: Vec<&str> = coder.receipts.iter().map(|r| r.tool.as_str()).collect();
    assert_eq!(tools, ["read_file", "finish"]);
    let events = rig.events(&task.task_id);
    assert_eq!(
        rig.kinds(&task.task_id),
        [
            "request_sent",
            "response_received",
            "tool_called",
            "tool_finished",
            "request_sent",
            "response_received",
            "tool_called",
            "tool_finished"
        ]
    );
    let EventKind::ToolFinished { tool, call_id, ok, evidence_id, result_tokens, whole_limit, .. } =
        of_kind(&events, "tool_finished")[0]
    else {
        unreachable!()
    };
    assert_eq!((tool.as_str(), call_id.as_str(), *ok, evidence_id), ("read_file", "c1", true, &None));
    assert!(result_tokens.is_some_and(|t| t > Tokens::ZERO && Some(t) <= *whole_limit));
}

#[tokio::test]
async fn a_large_result_goes_to_evidence_and_the_model_gets_its_first_page() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(8_000))
        .script(vec![
            sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "big.log"}))]),
            sse(vec![text("too long to read whole")]),
        ])
        .start()
        .await;
    let rig = Rig::start(server).await;
    let lines: String = (0..3_000).map(|i| format!("line {i}: request handled in {i} ms\n")).collect();
    std::fs::write(rig.workspace.path().join("big.log"), &lines).unwrap();
    let task = rig.task("Read the log");
    let mut coder = agent(Role::Coder, Vec::new(), &task);
    coder.run_turn(Some("Read the log".into())).await.unwrap();

    let events = rig.events(&task.task_id);
    let EventKind::ToolFinished {
        evidence_id: Some(id),
        result_tokens: Some(tokens),
        whole_limit: Some(limit),
        ..
    } = of_kind(&events, "tool_finished")[0]
    else {
        panic!("the large result is evidence: {events:#?}")
    };
    assert!(tokens <= limit, "the page ({tokens}) fits the limit ({limit})");
    let meta = rig.storage.evidence(id).unwrap();
    assert!(meta.bytes as usize >= lines.len(), "stored whole: {} bytes", meta.bytes);
    let Some(Part::ToolResult { content, .. }) = coder.history[2].parts.first() else { panic!() };
    assert!(content.starts_with(&format!("[evidence {id}:")), "{content}");
    assert!(content.contains("read_evidence"), "it says how to read on: {content}");
    assert_eq!(coder.receipts[0].evidence_id.as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn a_tool_the_role_lacks_is_an_error_the_model_sees() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call_with_id("c1", "write_file", json!({"path": "a.txt", "content": "x"}))]),
        sse(vec![text("understood")]),
    ])
    .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Write a file");
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    assert_eq!(lead.run_turn(Some("Write a file".into())).await.unwrap(), "understood");
    let Some(Part::ToolResult { content, is_error: true, .. }) = lead.history[2].parts.first() else {
        panic!("{:#?}", lead.history)
    };
    assert!(content.contains("not available to the lead role"), "{content}");
    assert!(!rig.workspace.path().join("a.txt").exists());
    let events = rig.events(&task.task_id);
    assert!(matches!(of_kind(&events, "tool_finished")[0], EventKind::ToolFinished { ok: false, .. }));
}

#[tokio::test]
async fn finish_is_rejected_while_verify_fails() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call_with_id("c1", "finish", json!({"summary": "too early"}))]),
        sse(vec![tool_call_with_id("c2", "write_file", json!({"path": "done.txt", "content": "ok\n"}))]),
        sse(vec![tool_call_with_id("c3", "finish", json!({"summary": "verified"}))]),
    ])
    .await;
    let rig = Rig::start_with(server, |team| {
        team.coder.verify = Some("test -f done.txt".into());
        team.sandbox.mode = agentd_agents::tools::SandboxMode::Off;
    })
    .await;
    let task = rig.task("Make it pass");
    let mut coder = agent(Role::Coder, Vec::new(), &task);
    assert_eq!(coder.run_turn(Some("Make it pass".into())).await.unwrap(), "verified");
    let Some(Part::ToolResult { content, is_error: true, .. }) = coder.history[2].parts.first() else {
        panic!("{:#?}", coder.history)
    };
    assert!(content.starts_with("finish rejected: verification `test -f done.txt` failed"), "{content}");
    let events = rig.events(&task.task_id);
    let [EventKind::FinishRejected { reason }] = of_kind(&events, "finish_rejected")[..] else {
        panic!("{events:#?}")
    };
    assert_eq!(reason, "verification `test -f done.txt` failed");
    assert_eq!(coder.changed_files, ["done.txt"]);
}

#[tokio::test]
async fn a_cancelled_turn_stops() {
    // Cancelled before it starts asking: no request goes out.
    let rig = Rig::start(ScriptedServer::start(vec![sse(vec![text("never")])]).await).await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let task = rig.task_with("Fix it", cancel);
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    assert!(matches!(lead.run_turn(Some("Fix it".into())).await, Err(TurnError::Cancelled)));
    assert!(rig.server.chat_requests().is_empty());
    assert_eq!(lead.history, [objective("Fix it")], "the input is logged all the same");

    // Cancelled while the model thinks: the request is dropped at once and nothing is stored.
    let rig = Rig::start(ScriptedServer::start(vec![hang()]).await).await;
    let cancel = CancellationToken::new();
    let task = rig.task_with("Fix it", cancel.clone());
    let mut lead = agent(Role::Lead, Vec::new(), &task);
    // Cancelled once the server holds the request (whatever the first count costs).
    let cancel_when_sent = async {
        while rig.server.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    };
    let began = Instant::now();
    let (ended, ()) = tokio::join!(lead.run_turn(Some("Fix it".into())), cancel_when_sent);
    assert!(matches!(ended, Err(TurnError::Cancelled)));
    assert!(began.elapsed() < Duration::from_secs(10));
    assert_eq!(rig.server.chat_requests().len(), 1);
    assert_eq!(rig.kinds(&task.task_id), ["request_sent"]);
    assert_eq!(lead.history.len(), 1);
}
