use super::*;
use agentd_protocol::event::Event;
use agentd_protocol::message::Message;

fn event(role: Role, kind: EventKind) -> Record {
    Record::Event {
        event: Event { seq: 1, task_id: "t".into(), role, at: "2026-12-05T00:00:00.000Z".into(), kind },
    }
}

fn said(role: Role, parts: Vec<Part>) -> Record {
    Record::Message { role, message: Message::new(Speaker::Assistant, parts) }
}

fn result(role: Role, call_id: &str, content: &str, is_error: bool) -> Record {
    let part = Part::ToolResult { call_id: call_id.into(), content: content.into(), is_error };
    Record::Message { role, message: Message::new(Speaker::Tool, vec![part]) }
}

fn coder() -> Role {
    Role::parse("coder")
}

fn json(updates: &[SessionUpdate]) -> Vec<Value> {
    updates.iter().map(|u| serde_json::to_value(u).unwrap_or(Value::Null)).collect()
}

#[test]
fn the_leads_text_is_the_answer_and_a_teammates_is_a_thought() {
    let mut replay = Replay::new(Path::new("/w"), false);
    let lead = json(&replay.record(&said(Role::Lead, vec![Part::Text { text: "On it.".into() }])));
    assert_eq!(lead[0]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(lead[0]["content"]["text"], "On it.");
    let parts = vec![
        Part::Thinking { text: "hmm".into(), signature: None, redacted: false },
        Part::Thinking { text: "opaque".into(), signature: None, redacted: true },
        Part::Text { text: "found it".into() },
    ];
    let coder = json(&replay.record(&said(coder(), parts)));
    assert_eq!(coder.len(), 2, "a redacted block is not shown: {coder:?}");
    assert_eq!(coder[0]["sessionUpdate"], "agent_thought_chunk");
    assert_eq!(coder[0]["content"]["text"], "coder: hmm");
    assert_eq!(coder[1]["content"]["text"], "coder: found it");
}

#[test]
fn a_call_is_shown_with_its_kind_and_file_then_its_status_and_bounded_result() {
    let mut replay = Replay::new(Path::new("/w"), false);
    let call = Part::ToolCall {
        id: "c1".into(),
        name: "read_file".into(),
        arguments: r#"{"path":"src/lib.rs","offset":12}"#.into(),
    };
    let shown = json(&replay.record(&said(coder(), vec![call])));
    assert_eq!(shown[0]["sessionUpdate"], "tool_call");
    assert_eq!(shown[0]["kind"], "read");
    // `pending` is the protocol's default, left out on the wire.
    assert!(matches!(shown[0]["status"].as_str(), None | Some("pending")), "{}", shown[0]);
    assert_eq!(shown[0]["title"], "coder: read_file src/lib.rs");
    assert_eq!(shown[0]["locations"][0]["path"], "/w/src/lib.rs");
    assert_eq!(shown[0]["locations"][0]["line"], 12);
    assert_eq!(shown[0]["rawInput"]["path"], "src/lib.rs");
    let id = shown[0]["toolCallId"].clone();

    let running = json(&replay.record(&event(
        coder(),
        EventKind::ToolCalled { tool: ToolName::ReadFile, call_id: "c1".into(), checkpoint: None },
    )));
    assert_eq!(running[0]["toolCallId"], id);
    assert_eq!(running[0]["status"], "in_progress");

    let big = "é".repeat(RESULT_BYTES); // two bytes a character: cut at a character's edge
    let done = json(&replay.record(&result(coder(), "c1", &big, false)));
    assert_eq!(done[0]["toolCallId"], id);
    assert_eq!(done[0]["status"], "completed");
    let text = done[0]["content"][0]["content"]["text"].as_str().unwrap_or("");
    assert!(text.len() < RESULT_BYTES + 100 && text.contains("bytes more"), "{}", text.len());

    // The same model id again, in a later answer, is another call for the editor.
    let again = Part::ToolCall {
        id: "c1".into(),
        name: "run_command".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    };
    let shown = json(&replay.record(&said(coder(), vec![again])));
    assert_ne!(shown[0]["toolCallId"], id);
    assert_eq!(shown[0]["kind"], "execute");
    let failed = json(&replay.record(&result(coder(), "c1", "exit 2", true)));
    assert_eq!(failed[0]["status"], "failed");
}

#[test]
fn delegations_are_plan_entries_and_finish_is_no_call() {
    let mut replay = Replay::new(Path::new("/w"), false);
    let calls = vec![
        Part::ToolCall { id: "d1".into(), name: "delegate".into(), arguments: "{}".into() },
        Part::ToolCall { id: "f1".into(), name: "finish".into(), arguments: "{}".into() },
    ];
    assert!(replay.record(&said(Role::Lead, calls)).is_empty());
    let delegated = EventKind::Delegated {
        to_role: coder(),
        call_id: Some("d1".into()),
        working_copy: None,
        objective: "Fix add()\nthen run the checks".into(),
        receipts_id: None,
        budget_tokens: None,
        measured_by: None,
        limit_tokens: None,
        deadline: None,
        not_copied: Vec::new(),
    };
    let plan = json(&replay.record(&event(Role::Lead, delegated)));
    assert_eq!(plan[0]["sessionUpdate"], "plan");
    assert_eq!(plan[0]["entries"][0]["content"], "coder: Fix add()");
    assert_eq!(plan[0]["entries"][0]["status"], "in_progress");
    let returned = EventKind::DelegationReturned {
        from_role: coder(),
        summary: "done".into(),
        call_id: Some("d1".into()),
        failed: false,
        patch_evidence_id: None,
        files_changed: 0,
        lines_added: 0,
        lines_removed: 0,
        conflicts: Vec::new(),
        not_carried: Vec::new(),
    };
    let plan = json(&replay.record(&event(Role::Lead, returned)));
    assert_eq!(plan[0]["entries"][0]["status"], "completed");
}

#[test]
fn the_turn_ends_as_the_task_does_and_counts_its_usage() {
    let mut replay = Replay::new(Path::new("/w"), false);
    let answered = EventKind::ResponseReceived {
        finish_reason: "stop".into(),
        usage: Some(Usage {
            prompt_tokens: 100,
            completion_tokens: 10,
            cache_read_tokens: 60,
            cache_write_tokens: 0,
        }),
        model: None,
        cost_usd: Some(0.5),
    };
    replay.record(&event(Role::Lead, answered.clone()));
    replay.record(&event(coder(), answered));
    assert_eq!(replay.turn().stop, None);
    let finished =
        json(&replay.record(&event(Role::Lead, EventKind::TaskFinished { summary: "Fixed.".into() })));
    assert_eq!(finished[0]["content"]["text"], "\nFixed.");
    let turn = replay.next_turn();
    assert_eq!(turn.stop, Some(StopReason::EndTurn));
    assert_eq!((turn.usage.prompt_tokens, turn.usage.cache_read_tokens, turn.answers), (200, 120, 2));
    assert!((turn.cost_usd - 1.0).abs() < 1e-9);
    assert_eq!(replay.turn(), &Turn::default());

    replay.record(&event(Role::Lead, EventKind::TaskCancelled {}));
    assert_eq!(replay.next_turn().stop, Some(StopReason::Cancelled));
    replay.record(&event(Role::Lead, EventKind::TaskFailed { error: "boom".into() }));
    assert_eq!(replay.next_turn().stop, Some(StopReason::EndTurn));
}

#[test]
fn the_users_words_are_shown_only_in_a_replay() {
    let started = || event(Role::Lead, EventKind::TaskStarted { objective: "Fix it".into() });
    assert!(Replay::new(Path::new("/w"), false).record(&started()).is_empty());
    let shown = json(&Replay::new(Path::new("/w"), true).record(&started()));
    assert_eq!(shown[0]["sessionUpdate"], "user_message_chunk");
    assert_eq!(shown[0]["content"]["text"], "Fix it");
}

#[test]
fn a_compaction_is_told_in_words_with_its_numbers() {
    let mut replay = Replay::new(Path::new("/w"), false);
    let compacted = EventKind::CompactionFinished {
        tokens_before: agentd_protocol::Tokens(30000),
        tokens_after: agentd_protocol::Tokens(9000),
        archive_id: "ev1".into(),
        batches: 2,
        measured_by: None,
        summary_model: None,
        summary_usage: None,
        cost_usd: None,
        next_trigger_tokens: None,
    };
    let told = json(&replay.record(&event(coder(), compacted)));
    let text = told[0]["content"]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("coder's context compacted: 30000 → 9000 tokens") && text.contains("ev1"),
        "{text}"
    );
}
