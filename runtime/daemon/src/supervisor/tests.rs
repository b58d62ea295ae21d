//! The supervisor on one machine, driven by its messages over a scripted model.

use super::*;
use crate::testing::Rig;
use agentd_protocol::{EventKind, Role};
use agentd_test_support::{finish, hang, sse, ScriptedServer};
use std::time::Duration;

async fn supervised(steps: Vec<agentd_test_support::Step>) -> (Rig, Addr<Supervisor>) {
    let rig = Rig::start(ScriptedServer::start(steps).await, "").await;
    let supervisor = Supervisor::new(rig.shared.clone()).start();
    (rig, supervisor)
}

/// Waits until the task's recorded state is terminal (or interrupted), at most 20 s.
async fn settled(rig: &Rig, task_id: &str) -> TaskState {
    for _ in 0..2_000 {
        let state = rig.state(task_id);
        if !state.is_active() {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rig.state(task_id)
}

#[actix::test]
async fn a_submitted_task_runs_to_its_end_and_is_recorded_as_started_first() {
    let (rig, supervisor) = supervised(vec![sse(vec![finish("done")])]).await;
    let task_id = supervisor.send(rig.submit("Fix the adder")).await.unwrap().unwrap();
    assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
    let kinds = rig.kinds(&task_id);
    assert_eq!(kinds.first().map(String::as_str), Some("task_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("task_finished"));
    let meta = rig.shared.storage.task(&task_id).unwrap().unwrap();
    assert_eq!(meta.result.as_deref(), Some("done"));
    assert_eq!(supervisor.send(RunningCount).await.unwrap(), 0);
}

#[actix::test]
async fn bad_submissions_are_refused_with_what_was_wrong_and_nothing_is_stored() {
    let (rig, supervisor) = supervised(vec![]).await;
    let refused = |msg: Submit| {
        let supervisor = supervisor.clone();
        async move { supervisor.send(msg).await.unwrap().unwrap_err() }
    };
    assert!(matches!(refused(rig.submit("  ")).await, SupervisorError::EmptyObjective));
    let relative = Submit { workspace: "relative/dir".into(), ..rig.submit("x") };
    assert!(matches!(refused(relative).await, SupervisorError::RelativeWorkspace(p) if p == "relative/dir"));
    let missing = Submit { workspace: "/no/such/dir".into(), ..rig.submit("x") };
    assert!(
        matches!(refused(missing).await, SupervisorError::Workspace { path, .. } if path == "/no/such/dir")
    );
    let root = Submit { workspace: "/".into(), ..rig.submit("x") };
    assert!(matches!(refused(root).await, SupervisorError::RefusedWorkspace { .. }));
    let team = Submit { team: Some("other".into()), ..rig.submit("x") };
    assert!(matches!(refused(team).await, SupervisorError::UnknownTeam(t) if t == "other"));
    let id = Submit { task_id: Some("not-a-uuid".into()), ..rig.submit("x") };
    assert!(matches!(refused(id).await, SupervisorError::InvalidTaskId(i) if i == "not-a-uuid"));
    let ask = Submit { ask: vec![agentd_protocol::ToolName::parse("teleport")], ..rig.submit("x") };
    assert!(matches!(refused(ask).await, SupervisorError::UnaskableTool(t) if t == "teleport"));
    assert!(rig.shared.storage.tasks().unwrap().is_empty(), "a refused task is not stored");
    // A chosen id is the task's; the same id again is refused.
    let chosen = "0190aaaa-0000-7000-8000-000000000001";
    let first = Submit { task_id: Some(chosen.into()), ..rig.submit("x") };
    assert_eq!(supervisor.send(first).await.unwrap().unwrap(), chosen);
    let again = Submit { task_id: Some(chosen.into()), ..rig.submit("x") };
    assert!(matches!(refused(again).await, SupervisorError::TaskIdTaken(i) if i == chosen));
}

#[actix::test]
async fn a_running_task_is_cancelled_at_once_and_an_ended_one_refuses() {
    let (rig, supervisor) = supervised(vec![hang()]).await;
    let task_id = supervisor.send(rig.submit("Wait forever")).await.unwrap().unwrap();
    while rig.server.chat_requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let state = supervisor.send(Cancel { task_id: task_id.clone() }).await.unwrap().unwrap();
    assert_eq!(state, TaskState::Cancelled);
    assert_eq!(rig.state(&task_id), TaskState::Cancelled);
    let again = supervisor.send(Cancel { task_id: task_id.clone() }).await.unwrap().unwrap_err();
    assert!(matches!(again, SupervisorError::AlreadyEnded { state: TaskState::Cancelled, .. }));
    let unknown = supervisor.send(Cancel { task_id: "nope".into() }).await.unwrap().unwrap_err();
    assert!(matches!(unknown, SupervisorError::UnknownTask(id) if id == "nope"));
    // A cancelled task takes no follow-up and cannot be resumed.
    let followup = Followup { task_id: task_id.clone(), text: "more".into() };
    let refused = supervisor.send(followup).await.unwrap().unwrap_err();
    assert!(matches!(refused, SupervisorError::WasCancelled(_)));
    let resumed = supervisor.send(Resume { task_id, budget: None }).await.unwrap().unwrap_err();
    assert!(matches!(resumed, SupervisorError::NotResumable { state: TaskState::Cancelled, .. }));
}

#[actix::test]
async fn a_finished_task_takes_a_follow_up_and_runs_again() {
    let (rig, supervisor) = supervised(vec![sse(vec![finish("first")]), sse(vec![finish("second")])]).await;
    let task_id = supervisor.send(rig.submit("Fix it")).await.unwrap().unwrap();
    assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
    let empty = Followup { task_id: task_id.clone(), text: " ".into() };
    assert!(matches!(supervisor.send(empty).await.unwrap(), Err(SupervisorError::EmptyText)));
    let more = Followup { task_id: task_id.clone(), text: "Now add a test".into() };
    assert_eq!(supervisor.send(more).await.unwrap().unwrap(), TaskState::Running);
    assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
    let meta = rig.shared.storage.task(&task_id).unwrap().unwrap();
    assert_eq!(meta.result.as_deref(), Some("second"));
    assert!(rig.kinds(&task_id).contains(&"task_message".to_string()));
}

#[actix::test]
async fn shutdown_interrupts_what_runs_and_refuses_new_work_and_recover_finds_nothing_left() {
    let (rig, supervisor) = supervised(vec![hang()]).await;
    let task_id = supervisor.send(rig.submit("Wait forever")).await.unwrap().unwrap();
    while rig.server.chat_requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    supervisor.send(Shutdown).await.unwrap();
    assert_eq!(rig.state(&task_id), TaskState::Interrupted);
    assert_eq!(rig.kinds(&task_id).last().map(String::as_str), Some("task_interrupted"));
    let late = supervisor.send(rig.submit("Too late")).await.unwrap().unwrap_err();
    assert!(matches!(late, SupervisorError::ShuttingDown));
    // What a restarted daemon finds: nothing active, so nothing to mark.
    assert_eq!(Supervisor::new(rig.shared.clone()).recover().unwrap(), 0);
}

#[actix::test]
async fn a_task_a_crashed_daemon_left_running_is_marked_interrupted_with_its_calls_closed() {
    let rig = Rig::start(ScriptedServer::start(vec![]).await, "").await;
    let task = rig.task("Left running");
    let called = EventKind::ToolCalled {
        tool: agentd_protocol::ToolName::RunCommand,
        call_id: "c1".into(),
        checkpoint: None,
    };
    rig.shared.storage.emit(&task.task_id, &Role::Coder, called).unwrap();
    assert_eq!(Supervisor::new(rig.shared.clone()).recover().unwrap(), 1);
    assert_eq!(rig.state(&task.task_id), TaskState::Interrupted);
    let events = rig.events(&task.task_id);
    let n = events.len();
    assert!(matches!(&events[n - 2].kind, EventKind::ToolFinished { interrupted: true, .. }));
    assert!(matches!(events[n - 1].kind, EventKind::TaskInterrupted {}));
}
