//! `agentd memory …`: the user's hold on what agentd remembers across tasks — list the notes, show one
//! with its changes, edit, delete, undo. Every change is recorded, so an undo can be undone too.

use super::connect::connect;
use crate::cli::MemoryCommand;
use crate::exit::{self, fail, Failure};
use crate::print::pretty;
use crate::print::{raw, say};
use agentd_client::render::one_line;
use agentd_daemon::daemon::Home;
use agentd_protocol::memory::{Author, MemoryChange, Note, NoteFilter};
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{NoteChanged, NoteDetail, NoteEditParams, NoteRef, UndoParams};

/// Runs one `memory` subcommand.
pub fn memory(home: &Home, command: MemoryCommand) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    match command {
        MemoryCommand::List { workspace, user, deleted, json } => {
            let workspace = match workspace {
                None => None,
                Some(dir) => Some(
                    std::fs::canonicalize(&dir)
                        .map_err(|e| fail(exit::USAGE, format!("--workspace {}: {e}", dir.display())))?
                        .display()
                        .to_string(),
                ),
            };
            let notes: Vec<Note> =
                client.call::<method::MemoryList>(NoteFilter { workspace, user, deleted })?;
            if json {
                raw!("{}", pretty(&notes));
            } else if notes.is_empty() {
                say!("no notes");
            } else {
                notes.iter().for_each(print_note_line);
            }
        }
        MemoryCommand::Show { id, json } => {
            let detail: NoteDetail = client.call::<method::MemoryGet>(NoteRef { id })?;
            if json {
                raw!("{}", pretty(&detail));
            } else {
                print_note(&detail);
            }
        }
        MemoryCommand::Edit { id, text, json } => {
            changed(client.call::<method::MemoryEdit>(NoteEditParams { id, text })?, json)
        }
        MemoryCommand::Delete { id, json } => {
            changed(client.call::<method::MemoryDelete>(NoteRef { id })?, json)
        }
        MemoryCommand::Undo { id, json } => {
            changed(client.call::<method::MemoryUndo>(UndoParams { id })?, json)
        }
    }
    Ok(exit::OK)
}

/// `m17  workspace  /path  the note`.
fn print_note_line(n: &Note) {
    let place = match n.scope {
        agentd_protocol::memory::MemoryScope::User => "(every workspace)".to_string(),
        agentd_protocol::memory::MemoryScope::Workspace => n.workspace.clone(),
    };
    let deleted = if n.deleted { "  [deleted]" } else { "" };
    say!("{:<5} {:<9} {}  {}{deleted}", n.id, n.scope.as_str(), place, one_line(&n.text, 80));
}

fn print_note(d: &NoteDetail) {
    let n = &d.note;
    say!("note       {}{}", n.id, if n.deleted { " (deleted)" } else { "" });
    say!("text       {}", n.text);
    say!("you said   {:?}", n.quote);
    say!("scope      {} ({})", n.scope, n.workspace);
    say!("from       task {} ({}), record {}", n.task_id, n.role, n.source_seq);
    say!("saved      {}", n.created_at);
    say!("changes");
    d.changes.iter().for_each(|c| say!("  {}", change_line(c)));
}

/// `#4 2026-… edited by you: "old" → "new"`.
fn change_line(c: &MemoryChange) -> String {
    let by = match &c.by {
        Author::User => "you".to_string(),
        Author::Model { task_id, role } => format!("{role} in task {task_id}"),
    };
    let what = match (&c.before, &c.after) {
        (Some(b), Some(a)) => format!(": {:?} → {:?}", one_line(b, 60), one_line(a, 60)),
        (None, Some(a)) => format!(": {:?}", one_line(a, 60)),
        (Some(b), None) => format!(" (was {:?})", one_line(b, 60)),
        (None, None) => String::new(),
    };
    let undo = c.undoes.map(|s| format!(", undoing #{s}")).unwrap_or_default();
    format!("#{} {} {} by {by}{undo}{what}", c.seq, c.at, c.action.as_str())
}

fn changed(answer: NoteChanged, json: bool) {
    if json {
        raw!("{}", pretty(&answer));
    } else {
        say!("{} {}", answer.note.id, change_line(&answer.change));
    }
}
