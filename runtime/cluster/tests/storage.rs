//! The JetStream storage against a real `nats-server` (started here, on a free port): it keeps the
//! storage seam's whole contract, and two writers of one task's log can never both append at the
//! same place — the second is refused and the log keeps one order with no gap and no duplicate.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_cluster::lease::Leases;
use agentd_cluster::names::{EVIDENCE_BUCKET, LEASES_BUCKET, SETTINGS_BUCKET, TASKS_BUCKET, WINDOWS_BUCKET};
use agentd_cluster::storage::NatsConfig;
use agentd_cluster::{ClusterError, JetStreamStorage};
use agentd_engine::storage::{Storage, StorageError};
use agentd_protocol::{EventKind, Message, Record, Role, TaskMeta, TaskState};
use agentd_test_support::nats::{skip_or_fail, NatsServer};

fn connect(server: &NatsServer) -> JetStreamStorage {
    JetStreamStorage::connect(&NatsConfig { urls: vec![server.url()], replicas: 1, ..Default::default() })
        .unwrap()
}

fn meta(id: &str) -> TaskMeta {
    TaskMeta {
        task_id: id.into(),
        objective: "o".into(),
        workspace: "/tmp".into(),
        team: None,
        state: TaskState::Running,
        created_at: "2026-01-01T00:00:00.000Z".into(),
        updated_at: "2026-01-01T00:00:00.000Z".into(),
        result: None,
        error: None,
        node: None,
        budget: None,
        resume_at: None,
        ask: Vec::new(),
    }
}

#[test]
fn the_jetstream_storage_keeps_the_storage_contract() {
    let Some(server) = NatsServer::start() else {
        skip_or_fail("the_jetstream_storage_keeps_the_storage_contract");
        return;
    };
    let storage = connect(&server);
    let fallback = tempfile::tempdir().unwrap();
    agentd_engine::contract::check(&storage, |m| storage.create_task(&m).unwrap(), fallback.path());

    // What one daemon wrote, another reads: the history is the fleet's, not a process's.
    let other = connect(&server);
    assert_eq!(
        other.records("contract-task", 0, 1_000).unwrap(),
        storage.records("contract-task", 0, 1_000).unwrap()
    );
    assert_eq!(other.task("contract-task").unwrap(), storage.task("contract-task").unwrap());
    assert!(storage.create_task(&meta("contract-task")).is_err(), "a task id is recorded once");
}

#[test]
fn two_writers_of_one_log_never_append_at_the_same_place() {
    let Some(server) = NatsServer::start() else {
        skip_or_fail("two_writers_of_one_log_never_append_at_the_same_place");
        return;
    };
    let (a, b) = (connect(&server), connect(&server));
    a.create_task(&meta("t")).unwrap();
    let record = |text: &str| Record::Message { role: Role::Lead, message: Message::user(text) };
    assert_eq!(a.append("t", &record("a1")).unwrap(), 1);
    assert_eq!(b.append("t", &record("b1")).unwrap(), 2, "a new writer reads the head first");
    // `a` still believes the log ends at 1: its append is refused, nothing is written …
    let refused = a.append("t", &record("a2")).unwrap_err();
    assert!(matches!(refused, StorageError::Conflict(_)), "{refused}");
    // … and it lost the task: it writes nothing of it (not its end on the record either) until it
    // takes the task anew, when it reads the head again and lands after `b`'s.
    assert!(a.abandoned("t"));
    let refused = a.append("t", &record("a2 again")).unwrap_err();
    assert!(matches!(refused, StorageError::Fenced(_)), "{refused}");
    assert!(a.update_task("t", &mut |t| t.state = TaskState::Failed).is_err(), "nor its record");
    a.fence("t", 0);
    assert_eq!(a.append("t", &record("a3")).unwrap(), 3);
    let event = b.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).unwrap_err();
    assert!(event.to_string().contains("moved on"), "b's view is stale too: {event}");
    b.fence("t", 0);
    assert_eq!(b.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).unwrap().seq, 1);
    let numbers: Vec<u64> = a.records("t", 0, 100).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(numbers, [1, 2, 3, 4], "one order, no gap, no duplicate");
    let texts: Vec<String> = a
        .records("t", 0, 3)
        .unwrap()
        .into_iter()
        .map(|(_, r)| match r {
            Record::Message { message, .. } => message.text(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["a1", "b1", "a3"]);
}

#[test]
fn a_lapsed_lease_changes_hands_and_fences_its_old_holder_out_of_the_log() {
    let Some(server) = NatsServer::start() else {
        skip_or_fail("a_lapsed_lease_changes_hands_and_fences_its_old_holder_out_of_the_log");
        return;
    };
    let (a, b) = (connect(&server), connect(&server));
    a.create_task(&meta("t")).unwrap();
    let ttl = std::time::Duration::from_millis(400);
    let js = a.jetstream().clone();
    let leases = a.block_on(async move { Leases::open(&js, 1, ttl).await }).unwrap();
    let take = |node: &'static str| {
        let leases = leases.clone();
        a.block_on(async move { leases.acquire("t", node).await })
    };
    let first = take("node-a").unwrap();
    assert_eq!(first.epoch, 1);
    a.fence("t", first.epoch);
    let record = |text: &str| Record::Message { role: Role::Lead, message: Message::user(text) };
    assert_eq!(a.append("t", &record("a1")).unwrap(), 1);
    // Held: another node cannot take it, the holder can renew it.
    assert!(matches!(take("node-b"), Err(ClusterError::Held { holder, .. }) if holder == "node-a"));
    let renewed = {
        let (leases, lease) = (leases.clone(), first.clone());
        a.block_on(async move { leases.renew(&lease).await }).unwrap()
    };
    assert!(renewed.until_ms >= first.until_ms);

    // Not renewed: it lapses, node-b takes it with the next epoch and appends under it.
    std::thread::sleep(ttl + std::time::Duration::from_millis(200));
    let second = take("node-b").unwrap();
    assert_eq!(second.epoch, 2);
    b.fence("t", second.epoch);
    assert_eq!(b.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).unwrap().seq, 1);
    // node-a's renewal says it lost the lease; its appends are refused, even after reading again.
    let lost = {
        let leases = leases.clone();
        a.block_on(async move { leases.renew(&renewed).await }).unwrap_err()
    };
    assert!(matches!(lost, ClusterError::LeaseLost { epoch: 1, .. }), "{lost}");
    assert!(a.append("t", &record("late")).is_err(), "a stale head: refused by the stream");
    // The refusal told it another writer holds the task: it refuses itself from then on.
    let refused = a.append("t", &record("later")).unwrap_err();
    assert!(matches!(refused, StorageError::Fenced(_)), "{refused}");
    // Even one that takes it back with its old epoch is fenced out by the log.
    a.fence("t", 1);
    let fenced = a.append("t", &record("later")).unwrap_err();
    // Fenced by the log itself (its newest epoch, 2, is newer than the writer's 1).
    assert!(
        matches!(fenced, StorageError::Fenced(_)) && fenced.to_string().contains("lease epoch 2"),
        "{fenced}"
    );
    assert_eq!(b.append("t", &record("b1")).unwrap(), 3, "the new holder goes on");
    let numbers: Vec<u64> = b.records("t", 0, 100).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(numbers, [1, 2, 3]);
}

#[test]
fn every_bucket_is_read_from_its_leader_even_one_made_with_direct_gets() {
    let Some(server) = NatsServer::start() else {
        skip_or_fail("every_bucket_is_read_from_its_leader_even_one_made_with_direct_gets");
        return;
    };
    // The tasks' bucket as an earlier agentd made it: with direct gets, which any replica answers.
    let (url, made) = (server.url(), tokio::runtime::Runtime::new().unwrap());
    let direct = made.block_on(async move {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        js.create_key_value(async_nats::jetstream::kv::Config {
            bucket: TASKS_BUCKET.into(),
            ..Default::default()
        })
        .await
        .unwrap();
        js.get_stream(format!("KV_{TASKS_BUCKET}")).await.unwrap().cached_info().config.allow_direct
    });
    assert!(direct, "a bucket is made with direct gets");

    let storage = connect(&server);
    let js = storage.jetstream().clone();
    let direct_gets = storage
        .block_on(async move {
            Leases::open(&js, 1, std::time::Duration::from_secs(5)).await?;
            let mut out = Vec::new();
            for bucket in [TASKS_BUCKET, SETTINGS_BUCKET, WINDOWS_BUCKET, EVIDENCE_BUCKET, LEASES_BUCKET] {
                let stream = js.get_stream(format!("KV_{bucket}")).await.unwrap();
                out.push((bucket, stream.cached_info().config.allow_direct));
            }
            Ok::<_, ClusterError>(out)
        })
        .unwrap();
    assert!(direct_gets.iter().all(|(_, direct)| !direct), "{direct_gets:?}");
    // And the data is where it was.
    storage.create_task(&meta("t")).unwrap();
    assert_eq!(connect(&server).task("t").unwrap().map(|m| m.state), Some(TaskState::Running));
}
