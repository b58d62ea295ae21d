//! A fleet starts as services start: daemons started at the same moment on a fresh three-server
//! JetStream cluster (a reboot, systemd) all join it — creating or opening the same streams and
//! buckets at once converges on one configuration — where all three exited ("stream name already
//! in use with a different configuration (10058)", "jetstream request timed out").

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_cluster::fleet::{Fleet, NodeConfig};
use agentd_cluster::storage::NatsConfig;
use agentd_test_support::nats::{skip_or_fail, NatsCluster};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn node(urls: &[String], name: &str) -> NodeConfig {
    NodeConfig {
        nats: NatsConfig { urls: urls.to_vec(), replicas: 3, ..Default::default() },
        node: name.into(),
        lease: Duration::from_secs(5),
        start_within: Duration::from_secs(120),
    }
}

/// Joins `n` nodes to `urls` at the same instant; each one's outcome and how long it took.
fn join_at_once(urls: &[String], n: usize, round: usize) -> Vec<(String, Result<Fleet, String>, Duration)> {
    let barrier = Arc::new(Barrier::new(n));
    let joins: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, config) = (barrier.clone(), node(urls, &format!("r{round}-n{i}")));
            std::thread::spawn(move || {
                barrier.wait();
                let started = Instant::now();
                let name = config.node.clone();
                let joined = Fleet::connect(config, |j| eprintln!("{name}: {j}")).map_err(|e| e.to_string());
                (format!("r{round}-n{i}"), joined, started.elapsed())
            })
        })
        .collect();
    joins.into_iter().map(|j| j.join().unwrap()).collect()
}

#[test]
fn daemons_started_at_the_same_moment_all_join_a_fresh_cluster() {
    for round in 0..2 {
        let Some(nats) = NatsCluster::start(3) else {
            skip_or_fail("daemons_started_at_the_same_moment_all_join_a_fresh_cluster");
            return;
        };
        let joined = join_at_once(&nats.urls(), 3, round);
        for (name, outcome, took) in &joined {
            eprintln!("round {round}: {name} joined in {took:?}: {:?}", outcome.as_ref().err());
            assert!(
                outcome.is_ok(),
                "round {round}: {name} did not join after {took:?}: {:?}",
                outcome.as_ref().err()
            );
        }
        // One configuration: every node's storage works against the same streams.
        let fleets: Vec<Fleet> = joined.into_iter().map(|(_, f, _)| f.unwrap()).collect();
        let health = fleets[0].storage.block_on({
            let js = fleets[0].storage.jetstream().clone();
            async move {
                let mut names = Vec::new();
                let mut streams = js.stream_names();
                use futures_util::StreamExt;
                while let Some(name) = streams.next().await {
                    names.push(name.unwrap());
                }
                Ok::<_, agentd_cluster::ClusterError>(names)
            }
        });
        let mut names = health.unwrap();
        names.sort();
        assert!(names.len() >= 8, "round {round}: {names:?}");
    }
}
