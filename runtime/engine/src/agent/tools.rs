//! One tool call, as an agent runs it.
//!
//! A tool the role does not have is answered as an error the model sees. The team's own tools are
//! here: `finish` (rejected while the role's `verify` command fails), `delegate` (a whole turn of
//! another member, handed the objective and the receipts), `read_evidence` (a page sized like a
//! whole result) and `remember` (a memory note on the user's own words, in [`super::memory`]). Every other tool is a workspace tool of `agentd-agents`, run so that a cancel ends
//! it at once. Bad arguments are an error result, never a failed turn; every tool's arguments, the
//! team's own included, are read by the one lenient reader of `agentd_policies::args`.

use super::{finish_summary, Agent};
use crate::error::TurnError;
use crate::tool_servers::ToolFailure;
use agentd_agents::tools::{self as agent_tools, ToolContext, ToolOutcome};
use agentd_policies::args::{Args, ArgsError};
use agentd_protocol::EventKind;
use agentd_protocol::ToolName;
use agentd_protocol::TurnSettings;

/// `read_evidence`'s arguments.
struct ReadEvidenceArgs {
    id: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

impl ReadEvidenceArgs {
    fn parse(arguments: &str) -> Result<ReadEvidenceArgs, ArgsError> {
        let args = Args::parse(ToolName::ReadEvidence.as_str(), arguments)?;
        Ok(ReadEvidenceArgs {
            id: args.str("id")?.to_string(),
            offset: args.opt_u64("offset")?,
            limit: args.opt_u64("limit")?,
        })
    }
}

/// `delegate`'s arguments.
pub(super) struct DelegateArgs {
    pub to: String,
    pub objective: String,
    /// Its own budget and deadline, when the call names them.
    pub asked: super::limits::Asked,
}

impl DelegateArgs {
    pub(super) fn parse(arguments: &str) -> Result<DelegateArgs, ArgsError> {
        let args = Args::parse(ToolName::Delegate.as_str(), arguments)?;
        let asked = super::limits::Asked {
            tokens: args.opt_u64("budget_tokens")?.filter(|n| *n > 0),
            deadline: args.opt_seconds("deadline")?,
        };
        Ok(DelegateArgs {
            to: args.str("to")?.to_string(),
            objective: args.str("objective")?.to_string(),
            asked,
        })
    }
}

/// What running one tool call produced.
pub(super) struct CallOutcome {
    pub outcome: ToolOutcome,
    /// Set by an accepted `finish`: the turn's summary.
    pub finished: Option<String>,
    /// Images an MCP tool answered beside its text.
    pub images: Vec<crate::tool_servers::Image>,
}

/// A result that does not end the turn.
pub(super) fn plain(outcome: ToolOutcome) -> Result<CallOutcome, TurnError> {
    Ok(CallOutcome { outcome, finished: None, images: Vec::new() })
}

impl Agent {
    pub(super) async fn call_tool(
        &mut self,
        snapshot: &TurnSettings,
        name: &ToolName,
        arguments: &str,
    ) -> Result<CallOutcome, TurnError> {
        if let Some(why) = name.mcp().and_then(|t| self.why_unavailable(t.server())) {
            if !snapshot.tools.contains(name) {
                return plain(failure(format!("tool {:?} is not available this turn: {why}", name.as_str())));
            }
        }
        if !snapshot.tools.contains(name) {
            return plain(failure(format!(
                "tool {:?} is not available to the {} role; available: {}",
                name.as_str(),
                self.name(),
                snapshot.tools.iter().map(ToolName::as_str).collect::<Vec<_>>().join(", ")
            )));
        }
        match name {
            ToolName::Finish => self.finish(snapshot, arguments).await,
            // A `delegate` call is a branch, started and settled by `super::branches`.
            ToolName::Delegate => plain(failure("delegate is not run as a tool here".into())),
            ToolName::ReadEvidence => self.read_evidence(snapshot, arguments).await,
            ToolName::Remember => self.remember(arguments).await,
            ToolName::Mcp(tool) => self.mcp(tool, arguments).await,
            _ => {
                let ctx = self.tool_context(snapshot);
                let outcome = self.cancellable(agent_tools::execute(&ctx, name, arguments)).await?;
                plain(outcome)
            }
        }
    }

    /// `finish`: accepted, unless the role's `verify` command fails (`finish_rejected`).
    async fn finish(&mut self, snapshot: &TurnSettings, arguments: &str) -> Result<CallOutcome, TurnError> {
        let summary = match finish_summary(arguments) {
            Ok(s) => s,
            Err(e) => return plain(failure(e.to_string())),
        };
        if let Some(verify) = &snapshot.verify {
            let ctx = self.tool_context(snapshot);
            let check = serde_json::json!({ "command": verify }).to_string();
            let outcome = self.cancellable(agent_tools::execute(&ctx, &ToolName::RunCommand, &check)).await?;
            if !outcome.ok {
                let reason = format!("verification `{verify}` failed");
                self.emit(EventKind::FinishRejected { reason: reason.clone() })?;
                return plain(failure(format!(
                    "finish rejected: {reason}; fix it and call finish again.\n{}",
                    outcome.content
                )));
            }
        }
        Ok(CallOutcome { outcome: ToolOutcome::ok("finished"), finished: Some(summary), images: Vec::new() })
    }

    /// `read_evidence`: one page, sized by the same rule as a whole result of the last request.
    async fn read_evidence(
        &mut self,
        snapshot: &TurnSettings,
        arguments: &str,
    ) -> Result<CallOutcome, TurnError> {
        let args = match ReadEvidenceArgs::parse(arguments) {
            Ok(a) => a,
            Err(e) => return plain(failure(e.to_string())),
        };
        let Some(last) = self.last_fit.clone() else {
            return plain(failure("read_evidence before any request was measured".into()));
        };
        // A page is sized by the same rule as a whole result.
        let budget = last.thresholds.whole_result_limit(last.tokens);
        let client = self.task.model(&snapshot.provider)?;
        let offset = args.offset.unwrap_or(0);
        plain(
            match self
                .page(snapshot, client.as_ref(), &last.meter, &args.id, offset, args.limit, budget)
                .await
            {
                Ok(page) => ToolOutcome::ok(page),
                Err(e) => failure(e.to_string()),
            },
        )
    }

    /// A tool of one of the task's MCP servers. Whatever goes wrong — the server is down, the tool
    /// errs, times out or answers something invalid — is an error result the model reads; only a
    /// cancel of the task ends the turn.
    async fn mcp(
        &mut self,
        tool: &agentd_protocol::McpTool,
        arguments: &str,
    ) -> Result<CallOutcome, TurnError> {
        let answer = self.task.servers.call(tool, arguments, &self.task.cancel).await;
        self.record_server_news()?;
        match answer {
            Ok(answer) => Ok(CallOutcome {
                outcome: ToolOutcome { ok: answer.ok, content: answer.text, complete: true, overflow: None },
                finished: None,
                images: answer.images,
            }),
            Err(ToolFailure::Cancelled) => Err(TurnError::Cancelled),
            Err(ToolFailure::Failed(reason)) => plain(failure(reason)),
        }
    }

    fn tool_context(&self, snapshot: &TurnSettings) -> ToolContext {
        ToolContext {
            workspace: self.workspace().clone(),
            command_timeout: std::time::Duration::from_secs(snapshot.command_timeout_s),
            max_output_bytes: 8 << 20,
            sandbox: self.task.engine.team().sandbox.clone(),
        }
    }

    /// Runs a tool until it ends or the task is cancelled.
    async fn cancellable<F: std::future::Future<Output = ToolOutcome>>(
        &self,
        f: F,
    ) -> Result<ToolOutcome, TurnError> {
        tokio::select! {
            outcome = f => Ok(outcome),
            _ = self.task.cancel.cancelled() => Err(TurnError::Cancelled),
        }
    }
}

pub(super) fn failure(content: String) -> ToolOutcome {
    ToolOutcome::error(content)
}
