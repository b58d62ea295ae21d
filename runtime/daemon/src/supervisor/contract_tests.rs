//! The one contract both runners keep: whatever runs a task — this machine, or the node of a fleet that
//! takes it from the queue — the supervisor's answers and the tasks' records come out the same.
//! [`keeps_the_contract`] is run against the local runner and against the fleet's, the latter on a
//! real `nats-server` the test starts (skipped, and said so, when none is installed and
//! `AGENTD_REQUIRE_NATS` is unset).

use super::{Cancel, Followup, Resume, Supervisor, SupervisorError};
use crate::testing::Rig;
use actix::prelude::*;
use agentd_engine::clock::clock;
use agentd_protocol::TaskState;
use agentd_test_support::nats::{skip_or_fail, NatsServer};
use agentd_test_support::{finish, hang, server_error, sse, ScriptedServer, Step};
use std::time::Duration;

/// What the model answers, in order: two finishes (a task, then its follow-up), a request that never
/// ends (the task to cancel), a refusal that fails a task, and the finish of its resume.
fn script() -> Vec<Step> {
    vec![
        sse(vec![finish("first")]),
        sse(vec![finish("second")]),
        hang(),
        server_error(400, "the request is malformed"),
        sse(vec![finish("recovered")]),
    ]
}

/// Waits (at most 30 s) until the task's record is `state` with `result` (when one is given); the
/// record as it is then.
async fn reached(
    rig: &Rig,
    task_id: &str,
    state: TaskState,
    result: Option<&str>,
) -> (TaskState, Option<String>) {
    let read = || {
        let meta = rig.shared.storage.task(task_id).unwrap().unwrap();
        (meta.state, meta.result)
    };
    for _ in 0..3_000 {
        let (now, got) = read();
        if now == state && (result.is_none() || got.as_deref() == result) {
            break;
        }
        clock().sleep(Duration::from_millis(10)).await;
    }
    read()
}

/// Waits (at most 30 s) until the model has been asked `n` times.
async fn asked(rig: &Rig, n: usize) {
    for _ in 0..3_000 {
        if rig.server.chat_requests().len() >= n {
            return;
        }
        clock().sleep(Duration::from_millis(10)).await;
    }
    panic!("the model was asked {} times, not {n}", rig.server.chat_requests().len());
}

/// Submitted, a task runs to its end; followed up, it runs again; a running task is cancelled at once
/// and a second cancel says it had ended; a failed task resumed runs again.
async fn keeps_the_contract(rig: &Rig) {
    let supervisor = Supervisor::new(rig.shared.clone()).start();

    let task = supervisor.send(rig.submit("Fix the adder")).await.unwrap().unwrap();
    let ended = reached(rig, &task, TaskState::Finished, Some("first")).await;
    assert_eq!(ended, (TaskState::Finished, Some("first".into())));
    let kinds = rig.kinds(&task);
    assert_eq!(kinds.first().map(String::as_str), Some("task_started"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("task_finished"), "{kinds:?}");

    let more = Followup { task_id: task.clone(), text: "Now add a test".into() };
    let answer = supervisor.send(more).await.unwrap().unwrap();
    assert!(answer.is_active(), "a follow-up starts the task again: {answer}");
    let ended = reached(rig, &task, TaskState::Finished, Some("second")).await;
    assert_eq!(ended, (TaskState::Finished, Some("second".into())));
    assert!(rig.kinds(&task).contains(&"task_message".to_string()));

    let waiting = supervisor.send(rig.submit("Wait forever")).await.unwrap().unwrap();
    asked(rig, 3).await;
    let cancelled = supervisor.send(Cancel { task_id: waiting.clone() }).await.unwrap().unwrap();
    assert_eq!(cancelled, TaskState::Cancelled);
    assert_eq!(rig.state(&waiting), TaskState::Cancelled);
    let again = supervisor.send(Cancel { task_id: waiting.clone() }).await.unwrap().unwrap_err();
    assert!(matches!(again, SupervisorError::AlreadyEnded { state: TaskState::Cancelled, .. }), "{again}");

    let failing = supervisor.send(rig.submit("Break it")).await.unwrap().unwrap();
    let failed = reached(rig, &failing, TaskState::Failed, None).await;
    assert_eq!(failed.0, TaskState::Failed);
    let answer = supervisor.send(Resume { task_id: failing.clone(), budget: None }).await.unwrap().unwrap();
    assert!(answer.is_active(), "a resume starts the task again: {answer}");
    let ended = reached(rig, &failing, TaskState::Finished, Some("recovered")).await;
    assert_eq!(ended, (TaskState::Finished, Some("recovered".into())));
    assert!(rig.kinds(&failing).contains(&"task_resumed".to_string()));
    assert_eq!(rig.server.chat_requests().len(), 5, "each run asked the model once");
}

#[actix::test]
async fn the_local_runner_keeps_the_contract() {
    let rig = Rig::start(ScriptedServer::start(script()).await, "").await;
    keeps_the_contract(&rig).await;
    let nodes: Vec<_> = rig.shared.storage.tasks().unwrap().into_iter().map(|t| t.node).collect();
    assert_eq!(nodes, [None, None, None], "no node runs a task on one machine");
}

#[actix::test]
async fn the_fleet_runner_keeps_the_contract() {
    let Some(nats) = NatsServer::start() else {
        return skip_or_fail("the_fleet_runner_keeps_the_contract");
    };
    let rig = Rig::on_fleet(ScriptedServer::start(script()).await, &nats.url()).await;
    keeps_the_contract(&rig).await;
    let nodes: Vec<_> = rig.shared.storage.tasks().unwrap().into_iter().map(|t| t.node).collect();
    assert_eq!(nodes, vec![Some("contract".to_string()); 3], "each task was taken from the fleet's queue");
}
