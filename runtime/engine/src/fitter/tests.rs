//! The fitter's tests, against a scripted model over in-memory storage: windows, compaction past
//! the trigger, the gauge, calibration by usage reports and refusals.

use super::*;
use crate::context::TaskCtx;
use crate::storage::{Settings, Storage};
use crate::testing::{Rig, PROVIDER};
use agentd_policies::settings::PairCalibration;
use agentd_policies::Thresholds;
use agentd_protocol::{ChatRequest, MessageKind};
use agentd_protocol::{Message, Usage, WindowSource};
use agentd_test_support::{sse, text, ScriptedServer};

fn request(rig: &Rig, messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: rig.server.model().to_string(),
        system: "You are the coder.".into(),
        messages,
        tools: Vec::new(),
        tool_choice_none: false,
        max_tokens: None,
        thinking_budget: None,
        cache_key: None,
    }
}

async fn fit(rig: &Rig, task: &TaskCtx, role: &str, messages: Vec<Message>) -> Result<Fitted, FitError> {
    let client = rig.engine.model(PROVIDER).unwrap();
    let objective = messages.first().map(Message::text).unwrap_or_default();
    let fit = Fit {
        task_id: task.task_id.clone(),
        role: Role::from(role),
        client,
        request: request(rig, messages),
        compact_at: 80,
        objective,
        changed_files: Vec::new(),
        workspace: task.workspace.clone(),
        cancel: task.cancel.clone(),
        blocks: rig.engine.team().blocks.clone(),
        requested: None,
        summariser: None,
        gate: None,
    };
    rig.engine.fitter().fit(fit).await
}

async fn meter(rig: &Rig) -> Meter {
    let of = MeterOf { server: rig.server.base_url(), model: rig.server.model().to_string() };
    rig.engine.fitter().meter_of(of)
}

async fn observe(rig: &Rig, task: &TaskCtx, role: &str, prompt_tokens: u64) -> Option<(Window, Window)> {
    let usage = Some(Usage::new(prompt_tokens, 20));
    let msg = Observe { task_id: task.task_id.clone(), role: Role::from(role), usage };
    rig.engine.fitter().observe(msg).unwrap().window
}

fn long(words: usize) -> String {
    "the adder subtracts where it should add; ".repeat(words / 8)
}

#[tokio::test]
async fn a_request_is_measured_against_the_declared_window_and_the_gauge_outlives_the_fitter() {
    let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(32_000)).start().await).await;
    let task = rig.task("Fix the adder");
    let objective = Message::user("Fix the adder").with_kind(MessageKind::Objective);
    let fitted = fit(&rig, &task, "coder", vec![objective]).await.unwrap();
    assert_eq!(fitted.window, Window { tokens: Tokens(32_000), source: WindowSource::Declared });
    let reserve = rig.engine.model(PROVIDER).unwrap().output_reserve(&fitted.request);
    assert_eq!(fitted.thresholds, Thresholds::new(Tokens(32_000), 80, reserve));
    assert!(!fitted.count.total.estimated, "gpt-4o is counted by its own tokenizer");
    let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
    assert_eq!(known, Some(fitted.window), "a probed window is remembered");

    let gauge_of = || GaugeOf { task_id: task.task_id.clone(), role: "coder".into() };
    let gauge = rig.engine.fitter().gauge_of(gauge_of()).unwrap();
    assert_eq!(gauge.tokens, fitted.count.total.tokens);
    assert_eq!(gauge.free_tokens, Tokens(32_000) - fitted.count.total.tokens);
    assert_eq!(gauge.trigger_tokens, fitted.thresholds.trigger);
    assert!(gauge.categories.objective > Tokens::ZERO, "the objective is counted as such");
    // A fitter started afresh (a restarted daemon) shows the same gauge until the role measures.
    let again = Fitter::new(rig.storage.clone(), rig.engine.team().retry, Default::default());
    let kept = again.gauge_of(gauge_of()).unwrap();
    assert_eq!(
        (kept.tokens, kept.window, kept.trigger_tokens),
        (gauge.tokens, gauge.window, gauge.trigger_tokens)
    );
}

#[tokio::test]
async fn past_the_trigger_the_history_is_compacted_before_it_is_sent() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(4_000))
        .responder(|_| sse(vec![text("Summary: the files were read one by one.")]))
        .start()
        .await;
    let rig = Rig::start(server).await;
    let task = rig.task("Read the files");
    let fitted = fit(&rig, &task, "coder", crate::testing::rounds(12, 300)).await.unwrap();
    let done = fitted.compacted.as_ref().expect("compacted");
    assert_eq!(fitted.request.messages, done.history, "the rebuilt request is what is sent");
    assert!(fitted.count.total.tokens <= fitted.thresholds.trigger);
    assert_eq!(rig.kinds(&task.task_id), ["compaction_started", "compaction_finished"]);
    let gauge = rig.engine.fitter().gauge_of(GaugeOf { task_id: task.task_id.clone(), role: "coder".into() });
    assert_eq!(gauge.unwrap().tokens, fitted.count.total.tokens, "the gauge shows what is sent");
}

#[tokio::test]
async fn a_request_no_compaction_can_bring_under_the_window_is_not_sent() {
    let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(1_000)).start().await).await;
    let task = rig.task("x");
    let huge = "please consider this detail carefully. ".repeat(600);
    let error = fit(&rig, &task, "lead", vec![Message::user(huge)]).await.unwrap_err();
    let FitError::Compaction(reason) = &error else { panic!("{error:?}") };
    assert!(reason.contains("1000-token window"), "{reason}");
    assert_eq!(rig.kinds(&task.task_id), ["compaction_started", "compaction_failed"]);
    assert!(rig.server.chat_requests().is_empty());
}

#[tokio::test]
async fn learn_keeps_a_refusals_window_and_answers_the_one_believed_before() {
    let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
    let (server, model) = (rig.server.base_url(), rig.server.model().to_string());
    let learn = |tokens| Learn {
        server: server.clone(),
        model: model.clone(),
        window: Window { tokens: Tokens(tokens), source: WindowSource::Error },
    };
    assert_eq!(rig.engine.fitter().learn(learn(16_384)).unwrap(), Window::assumed());
    let old = rig.engine.fitter().learn(learn(8_192)).unwrap();
    assert_eq!(old, Window { tokens: Tokens(16_384), source: WindowSource::Error });
    let learned = Window { tokens: Tokens(8_192), source: WindowSource::Error };
    assert_eq!(rig.storage.window(&server, &model).unwrap(), Some(learned));
    let client = rig.engine.model(PROVIDER).unwrap();
    let known = rig.engine.fitter().window_of(WindowOf { client, model: model.clone(), fresh: false });
    assert_eq!(known.await.unwrap(), learned);
}

#[tokio::test]
async fn a_usage_report_calibrates_the_count_and_is_the_basis_of_the_next_request() {
    let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(100_000)).start().await).await;
    let task = rig.task("Fix the adder");
    let first = vec![Message::user("Fix the adder"), Message::assistant_text(long(400))];
    let a = fit(&rig, &task, "coder", first.clone()).await.unwrap();
    let raw_a = a.count.total.tokens;
    // This server counts twice what we do.
    assert_eq!(observe(&rig, &task, "coder", raw_a.0 * 2).await, None);
    let calibration = meter(&rig).await.calibration().clone();
    assert_eq!(calibration.reports(), 1);
    let server = rig.server.base_url();
    let key = PairCalibration { server: &server, model: rig.server.model() };
    assert!(rig.storage.get(&key).unwrap().is_some(), "the calibration is kept");

    // Another role's first request extends nothing: counted at the server's ratio.
    let other = vec![Message::user(long(400))];
    let raw_other = a.meter.count_raw(&request(&rig, other.clone())).0.total.tokens;
    let counted = fit(&rig, &task, "lead", other).await.unwrap().count.total.tokens;
    assert!(counted.0 >= raw_other.0 * 2, "{counted} for a raw {raw_other}");
    // The coder's next request extends the answered one: the server's figure plus what was added.
    let mut next = first;
    next.push(Message::user(long(400)));
    let raw_next = a.meter.count_raw(&request(&rig, next.clone())).0.total.tokens;
    let counted = fit(&rig, &task, "coder", next).await.unwrap().count.total.tokens;
    let added = raw_next - raw_a;
    assert!(
        counted >= raw_a + raw_a + added,
        "{counted}: at least the server's {} plus {added}",
        raw_a.0 * 2
    );
    assert!(counted.0 < raw_next.0 * 2, "{counted}: the basis is the report, not a ratio of the whole");
}

#[tokio::test]
async fn a_report_of_a_truncated_prompt_clamps_the_window_and_teaches_nothing_else() {
    let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(32_000)).start().await).await;
    let task = rig.task("Fix the adder");
    let sent = fit(&rig, &task, "coder", vec![Message::user(long(3_000))]).await.unwrap();
    assert!(sent.count.total.tokens > Tokens(2_000));
    let (old, new) = observe(&rig, &task, "coder", 1_000).await.expect("a correction");
    assert_eq!(old, sent.window);
    assert_eq!(new, Window { tokens: Tokens(1_020), source: WindowSource::Usage });
    assert_eq!(rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap(), Some(new));
    assert_eq!(meter(&rig).await.calibration().reports(), 0, "a cut prompt's report measures what was kept");
    // Nothing is pending any more: a second report for the same request changes nothing.
    assert_eq!(observe(&rig, &task, "coder", 1_000).await, None);
}

#[tokio::test]
async fn a_refusal_of_a_request_counted_as_fitting_widens_the_margin() {
    let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(100_000)).start().await).await;
    let task = rig.task("Fix the adder");
    let mut history = vec![Message::user("Fix the adder")];
    for _ in 0..4 {
        history.push(Message::assistant_text(long(400)));
        let fitted = fit(&rig, &task, "coder", history.clone()).await.unwrap();
        let raw = fitted.meter.count_raw(&fitted.request).0.total.tokens;
        observe(&rig, &task, "coder", raw.0).await;
    }
    let before = meter(&rig).await.calibration().clone();
    let other = vec![Message::user(long(400))];
    let lead_before = fit(&rig, &task, "lead", other.clone()).await.unwrap().count.total.tokens;
    fit(&rig, &task, "coder", history).await.unwrap();
    let refused =
        Underestimated { task_id: task.task_id.clone(), role: "coder".into(), window: Tokens(100_000) };
    rig.engine.fitter().underestimated(refused);
    let after = meter(&rig).await.calibration().clone();
    assert!(after.margin() > before.margin(), "{} then {}", before.margin(), after.margin());
    assert!(!after.confirmed());
    let lead_after = fit(&rig, &task, "lead", other).await.unwrap().count.total.tokens;
    assert!(
        lead_after > lead_before,
        "measured again, the same request counts more: {lead_before} then {lead_after}"
    );
}
