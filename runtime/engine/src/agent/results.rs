//! A tool result sized for the model.
//!
//! A result within the limit of the request it answers (see `Thresholds::whole_result_limit`, by the
//! role's measure) goes into the history whole. A larger one is stored whole as evidence, and the
//! model gets its first page with the id, the size and how to read on (`read_evidence`); when the
//! database cannot take it, it is written whole to a workspace file the model can read instead.
//! Pages are cut by lines, halved until they fit their budget. A tool that held part of its output
//! back (its [`Overflow`]: `search` past its caps) has the complete output stored as evidence, and
//! the model gets the part the tool showed with where to read on.

use super::Agent;
use crate::clock::now_rfc3339;
use crate::error::TurnError;
use crate::meter::Meter;
use crate::storage::StorageError;
use agentd_agents::tools::{Overflow, ToolOutcome};
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::text::truncate_bytes;
use agentd_protocol::Model;
use agentd_protocol::TurnSettings;
use agentd_protocol::{Message, Part, Speaker, Tokens};
use agentd_protocol::{NewEvidence, Source, Stored, Unit};
use agentd_protocol::{Producer, ToolName};

/// A tool result as it goes into the history.
pub(super) struct Bounded {
    pub content: String,
    pub evidence_id: Option<String>,
    /// `content`, by the role's measure.
    pub tokens: Tokens,
}

impl Agent {
    /// A tool result as the model gets it: whole when it is within `limit` (by the role's measure;
    /// see `Thresholds::whole_result_limit`); otherwise stored whole as evidence, and the model gets
    /// the first page, the id, the size and how to read on.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn bounded(
        &self,
        snapshot: &TurnSettings,
        client: &dyn Model,
        meter: &Meter,
        limit: Tokens,
        tool: &ToolName,
        call_id: &str,
        arguments: &str,
        outcome: &ToolOutcome,
    ) -> Result<Bounded, TurnError> {
        let whole = |tokens: Tokens| Bounded { content: outcome.content.clone(), evidence_id: None, tokens };
        // An evidence page was sized when it was read.
        if *tool == ToolName::ReadEvidence {
            return Ok(whole(meter.count_text(&outcome.content).tokens));
        }
        if let Some(overflow) = &outcome.overflow {
            return self
                .with_overflow(snapshot, client, meter, limit, tool, call_id, arguments, outcome, overflow)
                .await;
        }
        let tokens = meter.measure_text(client, &snapshot.model, &outcome.content).await.tokens;
        if tokens <= limit {
            return Ok(whole(tokens));
        }
        let stored = self.store_whole(tool, call_id, arguments, &outcome.content, outcome.complete)?;
        match stored {
            Stored::InStore(meta) => self.first_page(snapshot, client, meter, meta.id, limit).await,
            Stored::Fallback { path, meta } => {
                // The database could not hold it: the whole text is in a file the model can read.
                let rel =
                    path.strip_prefix(self.task.workspace.root()).unwrap_or(&path).display().to_string();
                let mut head = outcome.content.clone();
                truncate_bytes(&mut head, limit.0 as usize);
                let content = format!(
                    "[the {tool} result ({} bytes) was too large for one request and the evidence \
                     database could not take it; it is stored whole in the workspace file {rel} — \
                     read it with read_file {{\"path\": \"{rel}\", \"offset\": N}}. Its beginning:]\n{head}",
                    meta.bytes
                );
                let tokens = meter.count_text(&content).tokens;
                Ok(Bounded { content, evidence_id: None, tokens })
            }
        }
    }

    /// What the model gets of a result stored as evidence `id`: its first page within `limit`.
    async fn first_page(
        &self,
        snapshot: &TurnSettings,
        client: &dyn Model,
        meter: &Meter,
        id: String,
        limit: Tokens,
    ) -> Result<Bounded, TurnError> {
        let page = self.page(snapshot, client, meter, &id, 0, None, limit).await?;
        let tokens = meter.count_text(&page).tokens;
        Ok(Bounded { content: page, evidence_id: Some(id), tokens })
    }

    /// A result whose tool held part of its output back (a `search` past its caps): the complete
    /// output is stored as evidence, and the result is the tool's shown part with a line naming the
    /// evidence and where to read on — the first line not shown. If even that is over `limit`, the
    /// model gets the evidence's first page instead, as for any large result.
    #[allow(clippy::too_many_arguments)]
    async fn with_overflow(
        &self,
        snapshot: &TurnSettings,
        client: &dyn Model,
        meter: &Meter,
        limit: Tokens,
        tool: &ToolName,
        call_id: &str,
        arguments: &str,
        outcome: &ToolOutcome,
        overflow: &Overflow,
    ) -> Result<Bounded, TurnError> {
        let shown = overflow.shown_lines;
        let stored = self.store_whole(tool, call_id, arguments, &overflow.full, outcome.complete)?;
        let (note, evidence_id) = match &stored {
            Stored::InStore(meta) => (
                format!(
                    "[the complete output is evidence {id}: {} bytes, {} lines, of which the first {shown} \
                     are above. Read on with read_evidence {{\"id\": \"{id}\", \"offset\": {shown}}}.]",
                    meta.bytes,
                    meta.lines,
                    id = meta.id
                ),
                Some(meta.id.clone()),
            ),
            Stored::Fallback { path, meta } => {
                let rel = path.strip_prefix(self.task.workspace.root()).unwrap_or(path).display().to_string();
                let next = shown + 1;
                (
                    format!(
                        "[the complete output ({} bytes) is in the workspace file {rel} (the evidence database \
                         could not take it); the first {shown} lines are above. Read on with read_file \
                         {{\"path\": \"{rel}\", \"offset\": {next}}}.]",
                        meta.bytes
                    ),
                    None,
                )
            }
        };
        let content = format!("{}\n{note}", outcome.content);
        let tokens = meter.measure_text(client, &snapshot.model, &content).await.tokens;
        if tokens <= limit {
            return Ok(Bounded { content, evidence_id, tokens });
        }
        match (stored, evidence_id) {
            (Stored::InStore(_), Some(id)) => self.first_page(snapshot, client, meter, id, limit).await,
            _ => {
                // The shown part alone is over the limit and there is no evidence to page: its beginning.
                let mut head = content;
                truncate_bytes(&mut head, limit.0 as usize);
                let tokens = meter.count_text(&head).tokens;
                Ok(Bounded { content: head, evidence_id: None, tokens })
            }
        }
    }

    /// Stores `text`, a result of `tool`, whole as evidence (or, when the database cannot take it,
    /// in the workspace's `.agentd-evidence/`).
    fn store_whole(
        &self,
        tool: &ToolName,
        call_id: &str,
        arguments: &str,
        text: &str,
        complete: bool,
    ) -> Result<Stored, TurnError> {
        let detail = agentd_policies::args::detail(tool.as_str(), arguments);
        self.task
            .engine
            .storage()
            .put_evidence(
                NewEvidence {
                    data: text.as_bytes(),
                    media_type: "text/plain",
                    source: Source {
                        task_id: self.task.task_id.clone(),
                        role: self.role.clone(),
                        tool: Producer::Tool(tool.clone()),
                        call_id: Some(call_id.to_string()),
                        detail,
                    },
                    complete,
                    incomplete_reason: (!complete).then(|| "the producer was cut off (see the text)".into()),
                    created_at: &now_rfc3339(),
                },
                &self.task.workspace.root().join(EVIDENCE_FOLDER),
            )
            .map_err(|source| TurnError::ResultNotStored { tool: tool.to_string(), what: "a large", source })
    }

    /// The images of a result (an MCP tool's), as parts of its message: counted by the provider's
    /// rule (the counter's), they go along when the text and they fit `limit` together. Past it,
    /// each is stored as evidence with its own type and the text says so — the model is not sent
    /// what does not fit, and nothing is lost.
    pub(super) fn bounded_images(
        &self,
        meter: &Meter,
        limit: Tokens,
        tool: &ToolName,
        call_id: &str,
        bounded: &mut Bounded,
        images: Vec<crate::tool_servers::Image>,
    ) -> Result<Vec<Part>, TurnError> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let parts: Vec<Part> = images
            .iter()
            .map(|i| Part::Image { media_type: i.media_type.clone(), data: i.data.clone() })
            .collect();
        let tokens = meter.count_message(&Message::new(Speaker::Tool, parts.clone())).tokens;
        if bounded.tokens + tokens <= limit {
            bounded.tokens += tokens;
            return Ok(parts);
        }
        let mut notes = String::new();
        for image in &images {
            let stored = self
                .task
                .engine
                .storage()
                .put_evidence(
                    NewEvidence {
                        data: &image.bytes,
                        media_type: &image.media_type,
                        source: Source {
                            task_id: self.task.task_id.clone(),
                            role: self.role.clone(),
                            tool: Producer::Tool(tool.clone()),
                            call_id: Some(call_id.to_string()),
                            detail: Some(format!("an image of the {tool} result")),
                        },
                        complete: true,
                        incomplete_reason: None,
                        created_at: &now_rfc3339(),
                    },
                    &self.task.workspace.root().join(EVIDENCE_FOLDER),
                )
                .map_err(|source| TurnError::ResultNotStored {
                    tool: tool.to_string(),
                    what: "an image of a",
                    source,
                })?;
            let place = match stored {
                Stored::InStore(meta) => format!("evidence {}", meta.id),
                Stored::Fallback { path, .. } => {
                    let rel = path.strip_prefix(self.task.workspace.root()).unwrap_or(&path);
                    format!("the workspace file {}", rel.display())
                }
            };
            notes.push_str(&format!(
                "\n[an image ({}, {} bytes) of this result does not fit this request and is not shown; it is stored as {place}]",
                image.media_type,
                image.bytes.len()
            ));
        }
        bounded.content.push_str(&notes);
        bounded.tokens += meter.count_text(&notes).tokens;
        Ok(Vec::new())
    }

    /// One page of evidence, in lines from `offset`, no larger than `budget` tokens, with a header
    /// that says where it is and how to read on.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn page(
        &self,
        snapshot: &TurnSettings,
        client: &dyn Model,
        meter: &Meter,
        id: &str,
        offset: u64,
        limit: Option<u64>,
        budget: Tokens,
    ) -> Result<String, StorageError> {
        let store = &self.task.engine.storage();
        let meta = store.evidence(id)?;
        let mut lines = limit.unwrap_or(400).clamp(1, 100_000);
        loop {
            let page = store.read_evidence(id, offset, lines, Unit::Lines)?;
            let fits = meter.measure_text(client, &snapshot.model, &page.data).await.tokens <= budget;
            if fits || lines == 1 {
                let mut data = page.data;
                let mut note = String::new();
                if !fits {
                    // One line longer than a page: show its beginning and say so.
                    truncate_bytes(&mut data, (budget.0 * 3) as usize);
                    note =
                        format!(" Line {} is longer than a page; only its beginning is shown.", offset + 1);
                }
                let end = page.offset + page.len;
                let next = match page.next_offset {
                    Some(n) => format!(" Read on with read_evidence {{\"id\": \"{id}\", \"offset\": {n}}}."),
                    None => " This is the end.".to_string(),
                };
                let complete =
                    if meta.complete { "" } else { " The producer was cut off: the evidence is incomplete." };
                return Ok(format!(
                    "[evidence {id}: {} bytes, {} lines; lines {}-{} shown.{next}{note}{complete}]\n{data}",
                    meta.bytes,
                    meta.lines,
                    page.offset + 1,
                    end
                ));
            }
            lines = (lines / 2).max(1);
        }
    }
}
