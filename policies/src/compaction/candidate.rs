//! The candidate a compaction rebuilds: what it keeps and what leaves ([`plan`]), the rebuilt history
//! ([`assemble`]) and whether it is accepted ([`judge`]), with the messages a compaction makes. See
//! the [parent module](super) for the layout of the candidate; the loop around these is
//! [`super::machine`]'s, which imports this module (never the other way round).

use super::price::{cheapest, Outlook};
use crate::observations::{observations_message, unresolved, Observation};
use crate::rounds::rounds;
use agentd_protocol::message::{Message, MessageKind, Part, Speaker};
use agentd_protocol::model::PromptCache;
use agentd_protocol::tokens::{Count, Tokens};

/// The first line of the checkpoint message, so the runtime and tests can recognise it.
pub const CHECKPOINT_HEADER: &str = "[checkpoint]";
/// The first line of the message carrying the coder's working files.
pub const FILES_HEADER: &str = "[working files]";
/// What the objective is prefixed with when it is re-inserted.
pub const OBJECTIVE_PREFIX: &str = "Objective: ";
/// The archive reference the plan budgets for, and a candidate is judged with, before the real
/// one is known: longer than an evidence id (`ev-` and a UUID) and of as varied digits, so that no
/// tokenizer counts it as cheaper than the id that replaces it.
pub(super) const ARCHIVE_REF_PLACEHOLDER: &str =
    "ev-9f3a1c7e-5b2d-4e8f-9a6c-0d1b7e3f5a92-c4e6b8d0f2a4c6e8b0d2f4a6c8e0b2d4";

/// A file the coder is working on, with its current text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkingFile {
    /// The file's path, relative to the workspace.
    pub path: String,
    /// The file's current text, as it is in the workspace now.
    pub text: String,
    /// Tokens of `text`, measured by the caller.
    pub tokens: Tokens,
}

/// Everything the plan needs, as data. `count` measures one message the way `message_tokens` were
/// measured (framing included); the plan uses it for the messages it synthesises (objective,
/// checkpoint skeleton, observations, working files), so their budget is exact rather than guessed.
#[derive(Clone, Copy)]
pub struct PlanInput<'a> {
    /// The role's active history (without the system prompt and tool schemas).
    pub history: &'a [Message],
    /// Same length as `history`: each message's own token count, framing included. A missing entry
    /// is measured with `count`.
    pub message_tokens: &'a [Tokens],
    /// System prompt + tool schemas + reply priming.
    pub fixed: Tokens,
    /// The task's objective, re-inserted at the head of the rebuilt request.
    pub objective: &'a str,
    /// The blocks every request starts with (the project's instructions, the memory notes), as they
    /// read now: put first in the rebuilt request, verbatim, and never summarised (the history's own
    /// copies are replaced by these).
    pub pinned: &'a [Message],
    /// The size the rebuilt request must land under, in tokens, counted with `fixed` included.
    pub destination: Tokens,
    /// Coder only, newest first; empty for the other roles.
    pub working_files: &'a [WorkingFile],
    /// The retry knob: keep at most this many recent rounds (`None`: as many as fit).
    pub keep_rounds_limit: Option<usize>,
    /// Tokens reserved for the summary text in the checkpoint message (on top of the message's own
    /// header, archive line and framing, which the plan measures).
    pub summary_reserve: Tokens,
    /// The caller's message counter.
    pub count: &'a dyn Fn(&Message) -> Tokens,
    /// The provider's prompt cache and the trigger, when the provider has a cache: the recent rounds
    /// kept are then the cheapest landing by [`price`](super::price) (the last round always kept),
    /// not as many as fit. `None`: as many as fit below `destination`.
    pub pricing: Option<Pricing>,
}

/// What a plan prices its landing with: the provider's prompt cache, and where the next compaction
/// comes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pricing {
    /// How the provider's prompt cache bills a prefix it has seen.
    pub cache: PromptCache,
    /// The role's trigger: where the next compaction comes.
    pub trigger: Tokens,
}

/// What a rebuilt request keeps and what leaves it: the result of [`plan`], for [`assemble`] to build the
/// candidate from.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Indices of the history messages that leave the request (to be summarised and archived):
    /// everything not kept verbatim, i.e. `0..keep_from_message`, in order. On a retry with fewer
    /// rounds the list only grows at its end, so a folding summariser may fold just the new messages
    /// into its previous summary.
    pub summarise: Vec<usize>,
    /// The first round kept verbatim (rounds from here to the end are kept).
    pub keep_from_round: usize,
    /// The first message kept verbatim (`history.len()` when none is).
    pub keep_from_message: usize,
    /// How many recent rounds are kept verbatim (rounds `keep_from_round..`); 0 when none is.
    pub kept_rounds: usize,
    /// Unresolved observations whose round is not kept verbatim (those in kept rounds are present).
    pub observations: Vec<Observation>,
    /// Indices into `working_files` that are included, newest first.
    pub files: Vec<usize>,
    /// The rebuilt request's size as planned, `fixed` and the summary's reserve included: what the
    /// landing was chosen (and, with a cache, priced) by, before the candidate is counted in full.
    pub landing: Tokens,
    /// With a cache, what the landing was priced with: the accepted candidate's next trigger is
    /// priced with it too ([`super::price::next_trigger`]).
    pub outlook: Option<Outlook>,
}

/// The summary of what left the request, produced by the runtime from [`Plan::summarise`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// The summary text the summariser made of what left the request.
    pub summary: String,
    /// Where the removed messages are archived (an evidence id), when they are.
    pub archive_ref: Option<String>,
    /// How many folding steps made the summary.
    pub batches: u32,
}

/// The re-inserted objective.
pub fn objective_message(objective: &str) -> Message {
    Message::user(format!("{OBJECTIVE_PREFIX}{objective}")).with_kind(MessageKind::Objective)
}

/// The checkpoint: [`CHECKPOINT_HEADER`], the summary and, when archived, how to read the removed
/// steps back.
pub fn checkpoint_message(checkpoint: &Checkpoint) -> Message {
    let mut text = String::from(CHECKPOINT_HEADER);
    text.push('\n');
    text.push_str(&checkpoint.summary);
    if let Some(id) = &checkpoint.archive_ref {
        let quoted = serde_json::to_string(id).unwrap_or_else(|_| format!("\"{id}\""));
        text.push_str(&format!(
            "\n\nThe full text of the steps summarised here is archived as evidence {id}; \
             read it with read_evidence {{\"id\": {quoted}}}."
        ));
    }
    Message::user(text).with_kind(MessageKind::Checkpoint)
}

/// Whether `message` is a checkpoint made by [`checkpoint_message`].
pub fn is_checkpoint(message: &Message) -> bool {
    message.kind == MessageKind::Checkpoint
}

/// One message holding the working files, each as `--- path ---\n<text>`; `None` when there are none.
pub fn files_message<'f>(files: impl IntoIterator<Item = &'f WorkingFile>) -> Option<Message> {
    let mut text = String::from(FILES_HEADER);
    let mut any = false;
    for f in files {
        any = true;
        text.push_str(&format!("\n\n--- {} ---\n{}", f.path, f.text));
    }
    any.then(|| Message::user(text).with_kind(MessageKind::WorkingFiles))
}

/// Decides what the rebuilt request keeps. The budget, below `destination`:
/// `fixed` + the pinned blocks + the objective message + the checkpoint (its measured skeleton + `summary_reserve`) + the
/// observations message for the observations outside the kept rounds + the working files (up to half
/// of `destination - fixed`, and never more than the mandatory parts leave) + the kept rounds, taken
/// whole from the end while they fit (at most `keep_rounds_limit`).
pub fn plan(input: &PlanInput) -> Plan {
    let history = input.history;
    let count = input.count;
    let rs = rounds(history);
    let observations = unresolved(history);
    let message_tokens =
        |i: usize| input.message_tokens.get(i).copied().unwrap_or_else(|| count(&history[i]));
    let round_tokens: Vec<Tokens> = rs.iter().map(|r| r.clone().map(message_tokens).sum()).collect();

    let objective_cost = count(&objective_message(input.objective));
    let skeleton = Checkpoint {
        summary: String::new(),
        archive_ref: Some(ARCHIVE_REF_PLACEHOLDER.to_string()),
        batches: 0,
    };
    let checkpoint_cost = count(&checkpoint_message(&skeleton)) + input.summary_reserve;
    // The observations message when the kept rounds start at `from_round`.
    let observations_cost = |from_round: usize| -> Tokens {
        let carried = observations.iter().filter(|o| o.round < from_round).map(Observation::carried);
        observations_message(carried).map_or(Tokens::ZERO, |m| count(&m))
    };
    let pinned_cost: Tokens = input.pinned.iter().map(count).sum();
    let mandatory = input.fixed + pinned_cost + objective_cost + checkpoint_cost;

    // Working files: newest first, up to half of the rebuilt request, within what the mandatory
    // parts leave.
    let half = Tokens((input.destination - input.fixed).0 / 2);
    let files_budget = half.min(input.destination - (mandatory + observations_cost(rs.len())));
    let mut files: Vec<usize> = Vec::new();
    let mut estimate = Tokens::ZERO;
    for (i, f) in input.working_files.iter().enumerate() {
        let cost = f.tokens + Count::estimate_bytes(f.path.len() + 10).tokens;
        if estimate + cost <= files_budget {
            estimate += cost;
            files.push(i);
        }
    }
    let files_cost = |files: &[usize]| -> Tokens {
        files_message(files.iter().map(|&i| &input.working_files[i])).map_or(Tokens::ZERO, |m| count(&m))
    };
    let mut files_tokens = files_cost(&files);
    while files_tokens > files_budget && files.pop().is_some() {
        files_tokens = files_cost(&files);
    }

    // Recent rounds, whole, from the end: every landing that fits, as (first round kept, size).
    let limit = input.keep_rounds_limit.unwrap_or(usize::MAX);
    let mut keep_from = rs.len();
    let mut kept_tokens = Tokens::ZERO;
    let mut obs_tokens = observations_cost(rs.len());
    let mut landings = vec![(keep_from, mandatory + files_tokens + obs_tokens)];
    while keep_from > 0 && rs.len() - keep_from < limit {
        let k = keep_from - 1;
        // A lone tool result cannot open the kept part (only possible at the very start).
        if history[rs[k].start].role == Speaker::Tool {
            break;
        }
        // Keeping round k moves its observations out of the observations message.
        let obs_if_kept =
            if observations.iter().any(|o| o.round == k) { observations_cost(k) } else { obs_tokens };
        let total = mandatory + files_tokens + obs_if_kept + kept_tokens + round_tokens[k];
        if total > input.destination {
            break;
        }
        keep_from = k;
        kept_tokens += round_tokens[k];
        obs_tokens = obs_if_kept;
        landings.push((keep_from, total));
    }
    // With a prompt cache, the cheapest landing over the coming turns, the last round always kept
    // (the model has not answered it yet); without one, as many rounds as fit.
    let mut landing = landings.last().map_or(Tokens::ZERO, |l| l.1);
    let mut priced = None;
    if let Some(pricing) = input.pricing {
        let first = landings.len().min(2) - 1;
        let sizes: Vec<Tokens> = landings[first..].iter().map(|l| l.1).collect();
        let outlook = Outlook {
            cache: pricing.cache,
            fixed: input.fixed,
            floor: input.destination,
            trigger: pricing.trigger,
            growth: growth(history, &rs, &round_tokens),
            // Every landing priced keeps the last round, and with it what the model has not read.
            unseen: if first == 1 { unseen(history, rs.last(), &message_tokens) } else { Tokens::ZERO },
            summary: input.summary_reserve,
        };
        if let Some(i) = cheapest(&sizes, &outlook) {
            (keep_from, landing) = landings[first + i];
        }
        priced = Some(outlook);
    }
    let keep_from_message = rs.get(keep_from).map_or(history.len(), |r| r.start);

    // Dedup by exact text: a file whose current text is already verbatim in the kept part — in a
    // result that shows it, or in the write that made it — is not repeated.
    let kept = &history[keep_from_message..];
    files.retain(|&i| !present_verbatim(kept, &input.working_files[i].text));

    Plan {
        // The pinned blocks leave only to come back fresh: there is nothing of them to summarise.
        summarise: (0..keep_from_message).filter(|&i| !history[i].kind.is_pinned()).collect(),
        keep_from_round: keep_from,
        keep_from_message,
        kept_rounds: rs.len() - keep_from,
        observations: observations.into_iter().filter(|o| o.round < keep_from).collect(),
        files,
        landing,
        outlook: priced,
    }
}

/// How much a request adds to the one before it: the mean size of the history's rounds that the
/// model opened (an answer and its tool results), else of all its rounds; at least 1.
pub(super) fn growth(
    history: &[Message],
    rounds: &[std::ops::Range<usize>],
    round_tokens: &[Tokens],
) -> Tokens {
    let mean = |sizes: &[Tokens]| {
        let n = u64::try_from(sizes.len()).unwrap_or(u64::MAX).max(1);
        Tokens(sizes.iter().map(|t| t.0).sum::<u64>() / n)
    };
    let answers: Vec<Tokens> = rounds
        .iter()
        .zip(round_tokens)
        .filter(|(r, _)| history[r.start].role == Speaker::Assistant)
        .map(|(_, t)| *t)
        .collect();
    let g = if answers.is_empty() { mean(round_tokens) } else { mean(&answers) };
    g.max(Tokens(1))
}

/// The tokens of `last` (the history's last round) that the model has not read: the messages after
/// its last answer.
fn unseen(
    history: &[Message],
    last: Option<&std::ops::Range<usize>>,
    tokens: &dyn Fn(usize) -> Tokens,
) -> Tokens {
    let Some(last) = last else { return Tokens::ZERO };
    let answered = last.clone().rev().find(|&i| history[i].role == Speaker::Assistant);
    last.clone().filter(|&i| answered.is_none_or(|a| i > a)).map(tokens).sum()
}

/// Whether `text` stands verbatim in `messages`: inside a text or a tool result, or as the `content`
/// a tool call wrote.
fn present_verbatim(messages: &[Message], text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    messages.iter().flat_map(|m| &m.parts).any(|p| match p {
        Part::Text { text: t } => t.contains(text),
        Part::ToolResult { content, .. } => content.contains(text),
        Part::ToolCall { arguments, .. } => serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v.get("content").and_then(|c| c.as_str()).map(|c| c == text))
            .unwrap_or(false),
        _ => false,
    })
}

/// The rebuilt history, in order: the pinned blocks (instructions, memory) as they read now; the objective (the original message when it opens the kept part,
/// else `Objective: …`); the checkpoint, when anything was summarised; the unresolved observations
/// outside the kept rounds as one message; the working files as one message; the kept rounds.
pub fn assemble(input: &PlanInput, plan: &Plan, checkpoint: &Checkpoint) -> Vec<Message> {
    let history = input.history;
    let mut kept = &history[plan.keep_from_message.min(history.len())..];
    // The pinned blocks as they read now replace the history's copies, first.
    while kept.first().is_some_and(|m| m.kind.is_pinned()) {
        kept = &kept[1..];
    }
    let mut out = Vec::with_capacity(kept.len() + input.pinned.len() + 4);
    out.extend(input.pinned.iter().cloned());
    match kept.first() {
        Some(first) if first.role == Speaker::User && first.text() == input.objective => {
            out.push(first.clone());
            kept = &kept[1..];
        }
        _ => out.push(objective_message(input.objective)),
    }
    if !plan.summarise.is_empty() {
        out.push(checkpoint_message(checkpoint));
    }
    out.extend(observations_message(plan.observations.iter().map(Observation::carried)));
    out.extend(files_message(plan.files.iter().filter_map(|&i| input.working_files.get(i))));
    out.extend(kept.iter().filter(|m| !m.kind.is_pinned()).cloned());
    out
}

/// What [`judge`] says of a candidate counted in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The candidate is accepted: at or under the destination, or under the trigger and smaller than before.
    Accept,
    /// Not acceptable yet, but recent rounds are still kept: plan again with one round fewer.
    RetryWithFewerRounds,
    /// Nothing more can be removed and the candidate is still too large: the compaction fails.
    Fail {
        /// The numbers, in words (`compaction_failed`'s reason).
        reason: String,
    },
}

/// Judges a candidate counted in full: accepted when it is at or below the destination, or, failing
/// that, below the trigger and smaller than before; otherwise retried with fewer recent rounds while
/// any are kept; otherwise failed with the numbers (`compaction_failed`).
pub fn judge(
    candidate_tokens: Tokens,
    before_tokens: Tokens,
    destination: Tokens,
    trigger: Tokens,
    kept_rounds: usize,
) -> Verdict {
    if candidate_tokens <= destination || (candidate_tokens < trigger && candidate_tokens < before_tokens) {
        Verdict::Accept
    } else if kept_rounds > 0 {
        Verdict::RetryWithFewerRounds
    } else {
        Verdict::Fail {
            reason: format!(
                "compacted request is {candidate_tokens} tokens; destination {destination}, trigger \
                 {trigger}, before {before_tokens}; nothing more can be removed"
            ),
        }
    }
}
