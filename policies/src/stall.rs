//! Agents that go in circles: a watch over one turn's answers that says when an agent is stalled.
//!
//! The watch sees each answer's calls with their results, in order, and asks two questions:
//!
//! - **Is it going round a loop?** The last calls are a short loop — one call, or up to
//!   [`MAX_PERIOD`] calls — made again and again, each with the same arguments and the same result,
//!   `repeats` times in all (default 3): `A,A,A`, or `A,B,A,B,A,B`, caught at the answer that
//!   completes the last round, whatever else the turn did before.
//! - **Is it getting anywhere?** `idle_requests` answers in a row (default 30) with no *progress*.
//!   Progress is a successful call whose result the agent had not seen in the turn, or a successful
//!   call that changes things (`write_file`, `edit_file`, `run_command`, an MCP tool) made with
//!   arguments and a result not seen before. A failed call is never progress, however new its error
//!   reads: a teammate reading a different missing file each time gets nowhere. So is reading the
//!   same text again, or writing the same file with the same content.
//!
//! An answer that made progress is never a stall, and forgives: the agent may stall again later, and
//! is told again. The first time an answer is stalled, the agent is told once, plainly (the runtime
//! adds a notice to its next request and says `agent_stalled`); if the condition still holds at its
//! next answer, its turn ends with a failure its caller reads. A compaction starts the watch's
//! memory afresh (what the agent saw has left its request: reading it again is not going in
//! circles), but not its count of idle answers. A threshold of 0 turns its test off.
//!
//! The watch is a pure state machine over what the log holds (each answer's calls and their
//! results), so a resumed turn replays its history into a fresh watch and is where it was. Its
//! memory is bounded by [`MAX_PERIOD`] calls, plus one 64-bit hash per distinct result and call
//! seen in the turn.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

/// Identical rounds in a row that make an agent stalled, by default.
pub const DEFAULT_REPEATS: u32 = 3;
/// Answers in a row with no progress that make an agent stalled, by default: high enough that an
/// agent reading around a large workspace is not taken for one going in circles.
pub const DEFAULT_IDLE_REQUESTS: u32 = 30;
/// The longest loop the watch looks for, in calls: a loop of more calls is left to `idle_requests`.
pub const MAX_PERIOD: usize = 8;

/// When an agent counts as going in circles (`[team.stall]`); 0 turns a test off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallPolicy {
    /// The same call, or the same loop of up to [`MAX_PERIOD`] calls, with the same results, this
    /// many times in a row (0: off; 1 is read as 2, the least that is a repeat).
    pub repeats: u32,
    /// This many answers in a row with no progress.
    pub idle_requests: u32,
}

impl Default for StallPolicy {
    fn default() -> StallPolicy {
        StallPolicy { repeats: DEFAULT_REPEATS, idle_requests: DEFAULT_IDLE_REQUESTS }
    }
}

/// One call of an answer, with its result, as the watch sees it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// Its arguments, as the model wrote them.
    pub arguments: &'a str,
    /// Its result, as the model read it.
    pub result: &'a str,
    /// Whether it succeeded.
    pub ok: bool,
    /// Whether the tool may change something beyond the conversation (`write_file`, `edit_file`,
    /// `run_command`, an MCP tool): then a new call that succeeds is progress even when its result
    /// reads as another's did (`exit code: 0`).
    pub acts: bool,
}

/// What an answer's calls make of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not stalled.
    Going,
    /// Stalled just now: tell it, once (`why`, and how many calls or answers it took).
    Stalled {
        /// What it keeps doing, in words.
        why: String,
        /// The calls of the loop (its rounds × its length), or the answers with no progress.
        calls: u32,
    },
    /// Told already, and still at it: its turn ends.
    StillStalled {
        /// What it keeps doing, in words.
        why: String,
        /// The calls of the loop, or the answers with no progress.
        calls: u32,
    },
}

/// The watch over one turn.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    policy: StallPolicy,
    /// The last [`MAX_PERIOD`] calls, oldest first: each one's key (tool, arguments, result, outcome)
    /// and how the agent is told of it.
    recent: VecDeque<(u64, String)>,
    /// For each loop length `p` (at `p - 1`): how many calls in a row have been the call `p` before
    /// them. `runs[p - 1] + p` calls are then `p` calls made over and over.
    runs: [u32; MAX_PERIOD],
    /// The results seen in the turn (since its last compaction).
    results: HashSet<u64>,
    /// The calls seen in the turn (since its last compaction), by key.
    calls: HashSet<u64>,
    /// Answers in a row with no progress.
    idle: u32,
    told: bool,
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// A call as the agent is told of it: the tool and its arguments, cut short.
fn shown(tool: &str, arguments: &str) -> String {
    let args: String = arguments.chars().take(120).collect();
    let more = if arguments.chars().count() > 120 { "…" } else { "" };
    format!("{tool} {args}{more}")
}

impl Watch {
    /// A watch with nothing seen yet.
    pub fn new(policy: StallPolicy) -> Watch {
        Watch { policy, ..Watch::default() }
    }

    /// The agent was judged stalled but never told (the daemon stopped before the notice was logged):
    /// it is told at its next stalled answer rather than stopped.
    pub fn untold(&mut self) {
        self.told = false;
    }

    /// A compaction took what the agent saw out of its request: every result is new again, and a
    /// call made again is no round of a loop. The answers with no progress go on counting.
    pub fn compacted(&mut self) {
        self.results.clear();
        self.calls.clear();
        self.recent.clear();
        self.runs = [0; MAX_PERIOD];
    }

    /// Takes one call in: the loops it continues or breaks, and whether it is progress.
    fn call(&mut self, call: &Seen<'_>) -> bool {
        let outcome = if call.ok { "ok" } else { "failed" };
        let key = hash_of(&[call.tool, call.arguments, call.result, outcome]);
        for (p, run) in (1..=MAX_PERIOD).zip(self.runs.iter_mut()) {
            let before = self.recent.len().checked_sub(p).and_then(|at| self.recent.get(at));
            *run = match before {
                Some((k, _)) if *k == key => run.saturating_add(1),
                _ => 0,
            };
        }
        if self.recent.len() == MAX_PERIOD {
            self.recent.pop_front();
        }
        self.recent.push_back((key, shown(call.tool, call.arguments)));
        let new_result = self.results.insert(hash_of(&[call.result]));
        let new_call = self.calls.insert(key);
        call.ok && (new_result || (call.acts && new_call))
    }

    /// The shortest loop the last calls go round `repeats` times: its length and its calls.
    fn looping(&self) -> Option<(usize, u32)> {
        if self.policy.repeats == 0 {
            return None;
        }
        let rounds_after_the_first = self.policy.repeats.max(2) - 1;
        (1..=MAX_PERIOD).zip(self.runs).find_map(|(p, run)| {
            let p32 = p as u32;
            (run >= p32.saturating_mul(rounds_after_the_first)).then(|| (p, run.saturating_add(p32)))
        })
    }

    /// What the agent keeps doing, in words, when it is stalled.
    fn stalled(&self) -> Option<(String, u32)> {
        if let Some((p, calls)) = self.looping() {
            let why = if p == 1 {
                let last = self.recent.back().map_or("", |(_, shown)| shown.as_str());
                format!("made the same call {calls} times in a row with the same result: {last}")
            } else {
                let round: Vec<&str> =
                    self.recent.iter().skip(self.recent.len() - p).map(|(_, s)| s.as_str()).collect();
                format!(
                    "went round the same {p} calls {} times in a row, each with the same result: {}",
                    calls / p as u32,
                    round.join(" → ")
                )
            };
            return Some((why, calls));
        }
        (self.policy.idle_requests > 0 && self.idle >= self.policy.idle_requests).then(|| {
            (
                format!(
                    "answered {} times in a row without getting anywhere: no call succeeded with a result it \
                     had not seen, and nothing new was changed (a failed call is no progress)",
                    self.idle
                ),
                self.idle,
            )
        })
    }

    /// The calls of one answer, with their results, in order; what they make of the agent.
    pub fn answered(&mut self, calls: &[Seen<'_>]) -> Verdict {
        let mut progress = false;
        for call in calls {
            // Every call is taken in, after progress as before it.
            progress |= self.call(call);
        }
        if progress {
            self.idle = 0;
            self.told = false;
            return Verdict::Going;
        }
        self.idle = self.idle.saturating_add(1);
        match self.stalled() {
            None => Verdict::Going,
            Some((why, calls)) if self.told => Verdict::StillStalled { why, calls },
            Some((why, calls)) => {
                self.told = true;
                Verdict::Stalled { why, calls }
            }
        }
    }
}

#[cfg(test)]
mod tests;
