//! The blocks every request of a task starts with: the project's instructions (`AGENTS.md`) and the
//! durable memory notes — each a message of its own kind ([`MessageKind::Instructions`],
//! [`MessageKind::Memory`]) and its own gauge category.
//!
//! They are made when a role's first turn of a task starts (persisted at the head of its history,
//! before the objective, so every later request of the task carries them unchanged: a stable prefix
//! the provider's cache keeps) and again at each compaction, which puts them back first, as they
//! read then, and never summarises them. A note saved during the task is already in the conversation
//! (the `remember` call and its result); edits and deletions apply from the next task or the next
//! compaction, never mid-chain.
//!
//! Each block is bounded by a share of the window: past it, the instructions show their first part
//! and the memory its newest notes whole, with the rest stored as evidence and named with how to
//! read it — never dropped silently.

use crate::meter::Meter;
use crate::storage::{Storage, StorageError};
use agentd_agents::workspace::Workspace;
use agentd_policies::instructions::{cut_to_fit, instructions_text, with_more};
use agentd_policies::memory::{memory_block, memory_text};
use agentd_protocol::memory::{Note, NoteFilter};
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::{Message, MessageKind, NewEvidence, Producer, Role, Source, Stored, Tokens};

/// The most bytes of one instructions file read.
pub const MAX_INSTRUCTIONS_FILE_BYTES: u64 = 1 << 20;

/// Which blocks a task's requests carry and how large they may grow (`[instructions]`, `[memory]`).
#[derive(Debug, Clone, PartialEq)]
pub struct BlocksConfig {
    /// The instructions files read from the workspace root, in order; every one found is included.
    /// Empty: no instructions block.
    pub instruction_files: Vec<String>,
    /// The most the instructions block may take, in percent of the window.
    pub instructions_percent: u8,
    /// Whether the memory block is carried (and `remember` saves notes).
    pub memory: bool,
    /// The most the memory block may take, in percent of the window.
    pub memory_percent: u8,
    /// The longest note (and quote) `remember` saves, in characters: a longer one is refused, and the
    /// model told to say it shorter.
    pub max_note_chars: usize,
}

impl Default for BlocksConfig {
    fn default() -> BlocksConfig {
        BlocksConfig {
            instruction_files: vec!["AGENTS.md".to_string()],
            instructions_percent: 10,
            memory: true,
            memory_percent: 5,
            max_note_chars: 1_000,
        }
    }
}

/// Where and for whom the blocks are made.
pub struct BlocksFor<'a> {
    /// The storage: notes are read from it, and what does not fit is stored in it as evidence.
    pub storage: &'a dyn Storage,
    /// The task's workspace: its root holds the instructions files; its notes are the workspace's.
    pub workspace: &'a Workspace,
    /// The task (the evidence's source).
    pub task_id: &'a str,
    /// The role whose request they open.
    pub role: &'a Role,
    /// The role's window, which the bounds are shares of.
    pub window: Tokens,
    /// The role's measure.
    pub meter: &'a Meter,
}

/// The blocks as they read now: the instructions, then the memory; either left out when empty.
pub fn blocks(config: &BlocksConfig, at: &BlocksFor<'_>) -> Result<Vec<Message>, StorageError> {
    let mut out = Vec::new();
    if let Some(text) = instructions(config, at)? {
        out.push(Message::user(text).with_kind(MessageKind::Instructions));
    }
    if config.memory {
        let notes = at.storage.notes(&NoteFilter::for_task(&workspace_key(at.workspace)))?;
        if let Some(text) = memory(&notes, config, at)? {
            out.push(Message::user(text).with_kind(MessageKind::Memory));
        }
    }
    Ok(out)
}

/// How a workspace is named in its notes: its canonical root.
pub fn workspace_key(workspace: &Workspace) -> String {
    workspace.root().display().to_string()
}

fn instructions(config: &BlocksConfig, at: &BlocksFor<'_>) -> Result<Option<String>, StorageError> {
    let mut files = Vec::new();
    for name in &config.instruction_files {
        match at.workspace.read_text(name, MAX_INSTRUCTIONS_FILE_BYTES) {
            Ok(text) => files.push((name.clone(), text)),
            Err(agentd_agents::ToolError::NotFound(_)) => {}
            // Present but unreadable (too large, not a file, no permission): the model is told, as the
            // user would want to be.
            Err(e) => files.push((name.clone(), format!("({name} could not be read: {e})"))),
        }
    }
    let Some(text) = instructions_text(&files) else { return Ok(None) };
    let budget = at.window.percent(config.instructions_percent);
    let count = |t: &str| at.meter.count_text(t).tokens;
    if count(&text) <= budget {
        return Ok(Some(text));
    }
    let id = store(at, &text, Producer::Instructions, "the project's instructions")?;
    // The pointer's offset is the first line not shown; cut with room for the widest one.
    let pointer = |offset: &str| {
        format!(
            "[the instructions are longer than their share of the request: the whole text is evidence {id}; \
             read on with read_evidence {{\"id\": \"{id}\", \"offset\": {offset}}}]"
        )
    };
    let shown = cut_to_fit(&text, budget, &count, &pointer("9999999"));
    Ok(Some(with_more(shown, &pointer(&shown.lines().count().to_string()))))
}

fn memory(notes: &[Note], config: &BlocksConfig, at: &BlocksFor<'_>) -> Result<Option<String>, StorageError> {
    let Some(whole) = memory_text(notes) else { return Ok(None) };
    let budget = at.window.percent(config.memory_percent);
    let count = |t: &str| at.meter.count_text(t).tokens;
    if count(&whole) <= budget {
        return Ok(Some(whole));
    }
    // Too many to show whole: the whole block is kept as evidence, and the block names what it leaves out.
    let id = store(at, &whole, Producer::Memory, "every memory note, newest first")?;
    let more = |rest: usize| {
        format!(
            "{rest} older notes not shown here: every note, newest first, is evidence {id}; read it with \
             read_evidence {{\"id\": \"{id}\"}}."
        )
    };
    Ok(memory_block(notes, budget, &count, &more))
}

/// Stores `text` whole as evidence of the task and says its id (or the workspace file it fell back to).
fn store(at: &BlocksFor<'_>, text: &str, producer: Producer, detail: &str) -> Result<String, StorageError> {
    let stored = at.storage.put_evidence(
        NewEvidence {
            data: text.as_bytes(),
            media_type: "text/markdown",
            source: Source {
                task_id: at.task_id.to_string(),
                role: at.role.clone(),
                tool: producer,
                call_id: None,
                detail: Some(detail.to_string()),
            },
            complete: true,
            incomplete_reason: None,
            created_at: &crate::clock::now_rfc3339(),
        },
        &at.workspace.root().join(EVIDENCE_FOLDER),
    )?;
    Ok(match stored {
        Stored::InStore(meta) => meta.id,
        Stored::Fallback { path, .. } => path.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fitter::MeterOf;
    use crate::testing::Rig;
    use agentd_protocol::memory::{MemoryScope, NewNote};
    use agentd_test_support::ScriptedServer;

    fn note(rig: &Rig, i: usize, workspace: &str) -> Note {
        rig.storage
            .save_note(NewNote {
                text: format!("note {i}: {}", "keep this in mind ".repeat(8)),
                quote: "we always use cargo nextest".into(),
                scope: MemoryScope::Workspace,
                workspace: workspace.into(),
                task_id: "t".into(),
                role: Role::Lead,
                source_seq: 1,
                at: format!("2026-01-01T00:00:{i:02}.000Z"),
            })
            .unwrap()
    }

    #[tokio::test]
    async fn past_their_bounds_the_blocks_keep_their_first_part_and_name_the_rest_in_evidence() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let workspace = Workspace::new(rig.workspace.path()).unwrap();
        let key = workspace_key(&workspace);
        for i in 0..30 {
            note(&rig, i, &key);
        }
        note(&rig, 99, "/another/project");
        let rules: String = (0..2_000).map(|i| format!("rule {i}: keep it tidy\n")).collect();
        std::fs::write(rig.workspace.path().join("AGENTS.md"), &rules).unwrap();
        let meter = rig
            .engine
            .fitter()
            .meter_of(MeterOf { server: rig.server.base_url(), model: rig.server.model().into() });
        let window = Tokens(20_000);
        let at = BlocksFor {
            storage: rig.storage.as_ref(),
            workspace: &workspace,
            task_id: "t",
            role: &Role::Lead,
            window,
            meter: &meter,
        };
        let config = BlocksConfig::default();
        let made = blocks(&config, &at).unwrap();
        assert_eq!(
            made.iter().map(|m| m.kind).collect::<Vec<_>>(),
            [MessageKind::Instructions, MessageKind::Memory]
        );

        let instructions = made[0].text();
        assert!(meter.count_text(&instructions).tokens <= window.percent(config.instructions_percent));
        assert!(instructions.contains("rule 0: keep it tidy") && !instructions.contains("rule 1999"));
        let id = instructions.split("evidence ").nth(1).unwrap().split(';').next().unwrap().to_string();
        let offset: u64 =
            instructions.rsplit("\"offset\": ").next().unwrap().trim_end_matches("}]").parse().unwrap();
        let next = rig.storage.read_evidence(&id, offset, 1, agentd_protocol::Unit::Lines).unwrap();
        assert!(
            !instructions.contains(next.data.trim_end()),
            "reading on starts at the first line not shown: {}",
            next.data
        );

        let memory = made[1].text();
        assert!(meter.count_text(&memory).tokens <= window.percent(config.memory_percent));
        assert!(memory.contains("[m30, workspace]"), "the newest whole");
        let shown = memory.matches("\n- [m").count();
        assert!(
            memory.contains(&format!("{} older notes not shown here", 30 - shown)),
            "the rest counted, with where they all are: {memory}"
        );
        let id = memory.split("is evidence ").nth(1).unwrap().split(';').next().unwrap();
        let all = rig.storage.read_evidence(id, 0, 1 << 20, agentd_protocol::Unit::Bytes).unwrap();
        assert!(all.data.contains("[m1, workspace]"), "every note is in the evidence");
        assert!(!memory.contains("m31"), "another project's note is not this one's");

        // Nothing configured, nothing there: no block.
        let none = BlocksConfig { instruction_files: Vec::new(), memory: false, ..config };
        assert!(blocks(&none, &at).unwrap().is_empty());
    }
}
