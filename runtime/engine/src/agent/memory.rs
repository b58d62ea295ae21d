//! The agent's side of durable memory: the blocks its first request of a task opens with, and the
//! `remember` tool, which saves a note only on the user's own words.

use super::tools::{failure, plain, CallOutcome};
use super::Agent;
use crate::blocks::{blocks, workspace_key, BlocksFor};
use crate::clock::now_rfc3339;
use crate::error::TurnError;
use crate::fitter::{MeterOf, WindowOf};
use crate::storage::each_record;
use agentd_agents::tools::ToolOutcome;
use agentd_policies::args::{Args, ArgsError};
use agentd_policies::memory::find_quote;
use agentd_protocol::memory::{MemoryScope, NewNote};
use agentd_protocol::{EventKind, Message, MessageKind, Record, Role, Speaker, ToolName, TurnSettings};

/// `remember`'s arguments.
struct RememberArgs {
    note: String,
    quote: String,
    scope: MemoryScope,
}

impl RememberArgs {
    fn parse(arguments: &str) -> Result<RememberArgs, ArgsError> {
        let args = Args::parse(ToolName::Remember.as_str(), arguments)?;
        let scope = match args.opt_str("scope")? {
            None => MemoryScope::Workspace,
            Some(word) => MemoryScope::parse(word).ok_or_else(|| {
                args.invalid(format!("field `scope` must be \"workspace\" or \"user\", got {word:?}"))
            })?,
        };
        Ok(RememberArgs {
            note: args.str("note")?.trim().to_string(),
            quote: args.str("quote")?.to_string(),
            scope,
        })
    }
}

impl Agent {
    /// The instructions and memory blocks a role's first request of the task opens with, as they
    /// read now; persisted by the caller at the head of the history.
    pub(super) async fn opening_blocks(&self, snapshot: &TurnSettings) -> Result<Vec<Message>, TurnError> {
        let config = self.task.engine.team().blocks.clone();
        if config.instruction_files.is_empty() && !config.memory {
            return Ok(Vec::new());
        }
        let client = self.task.model(&snapshot.provider)?;
        let fitter = self.task.engine.fitter();
        let window =
            fitter.window_of(WindowOf { client, model: snapshot.model.clone(), fresh: false }).await?;
        let meter =
            fitter.meter_of(MeterOf { server: snapshot.server.clone(), model: snapshot.model.clone() });
        let at = BlocksFor {
            storage: self.task.engine.storage().as_ref(),
            workspace: &self.task.workspace,
            task_id: &self.task.task_id,
            role: &self.role,
            window: window.tokens,
            meter: &meter,
        };
        Ok(blocks(&config, &at)?)
    }

    /// `remember`: saves a note resting on a quote of the user's own words in this task, or refuses
    /// (an error result the model sees) when the quote is not the user's.
    pub(super) async fn remember(&mut self, arguments: &str) -> Result<CallOutcome, TurnError> {
        if !self.task.engine.team().blocks.memory {
            return plain(failure(
                "memory is turned off in this daemon's configuration ([memory] enabled = false)".into(),
            ));
        }
        let args = match RememberArgs::parse(arguments) {
            Ok(a) => a,
            Err(e) => return plain(failure(e.to_string())),
        };
        if args.note.is_empty() {
            return plain(failure("`note` is empty: say what to remember".into()));
        }
        let max = self.task.engine.team().blocks.max_note_chars;
        for (field, text) in [("note", &args.note), ("quote", &args.quote)] {
            let chars = text.chars().count();
            if chars > max {
                return plain(failure(format!(
                    "`{field}` is {chars} characters; a note and its quote hold at most {max} each ([memory] \
                     max_note_chars): remember the point in fewer words, quoting only the user's words it rests on"
                )));
            }
        }
        let said = self.user_messages()?;
        let said: Vec<(u64, &str)> = said.iter().map(|(seq, text)| (*seq, text.as_str())).collect();
        let source_seq = match find_quote(&args.quote, &said) {
            Ok(seq) => seq,
            Err(e) => return plain(failure(e.to_string())),
        };
        let note = self.task.engine.storage().save_note(NewNote {
            text: args.note,
            quote: args.quote.trim().to_string(),
            scope: args.scope,
            workspace: workspace_key(&self.task.workspace),
            task_id: self.task.task_id.clone(),
            role: self.role.clone(),
            source_seq,
            at: now_rfc3339(),
        })?;
        self.emit(EventKind::MemorySaved {
            id: note.id.clone(),
            note: note.text.clone(),
            scope: note.scope,
        })?;
        let reach = match note.scope {
            MemoryScope::Workspace => "every later task in this workspace",
            MemoryScope::User => "every later task of this user, in any workspace",
        };
        plain(ToolOutcome::ok(format!(
            "Saved as note {} ({}): {reach} will carry it. The user can undo it with `agentd memory undo {}`.",
            note.id, note.scope, note.id
        )))
    }

    /// What the user said in this task — the objective and every follow-up, as the lead received
    /// them — with their log sequence numbers, oldest first. Read from the log, so a compaction that
    /// took them out of the request does not take them out of reach.
    fn user_messages(&self) -> Result<Vec<(u64, String)>, TurnError> {
        let mut out = Vec::new();
        each_record(self.task.engine.storage().as_ref(), &self.task.task_id, |seq, record| {
            if let Record::Message { role: Role::Lead, message } = record {
                if message.role == Speaker::User && message.kind == MessageKind::Objective {
                    out.push((seq, message.text()));
                }
            }
        })?;
        Ok(out)
    }
}
