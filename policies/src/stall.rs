//! Agents that go in circles: a watch over one turn's answers that says when an agent is stalled.
//!
//! An agent is *stalled* when it makes the same tool call with the same arguments and gets the same
//! result `repeats` times in a row (default 3), or answers `idle_requests` times in a row (default
//! 30) with neither a tool result it has not seen before in the turn nor a successful write (a
//! compaction makes every result new again: what the agent saw has left its request). The
//! first time, it is told once, plainly (the runtime adds a notice to its next request and says
//! `agent_stalled`); if it keeps on — the condition still holds at its next answer — its turn ends
//! with a failure its caller reads. Progress (a new result, a write) forgives: it may stall again
//! later, and is told again. A threshold of 0 turns that test off.
//!
//! The watch is a pure state machine over what the log holds (each answer's calls and their
//! results), so a resumed turn replays its history into a fresh watch and is where it was.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Identical calls with identical results in a row that make an agent stalled, by default.
pub const DEFAULT_REPEATS: u32 = 3;
/// Answers in a row with nothing new that make an agent stalled, by default: high enough that an
/// agent reading around a large workspace is not taken for one going in circles.
pub const DEFAULT_IDLE_REQUESTS: u32 = 30;

/// When an agent counts as going in circles (`[team.stall]`); 0 turns a test off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallPolicy {
    /// The same call with the same result this many times in a row.
    pub repeats: u32,
    /// This many answers in a row with no new tool result and no successful write.
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
    /// Whether the tool changes the workspace (`write_file`, `edit_file`).
    pub writes: bool,
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
        /// The repeats or idle answers counted.
        calls: u32,
    },
    /// Told already, and still at it: its turn ends.
    StillStalled {
        /// What it keeps doing, in words.
        why: String,
        /// The repeats or idle answers counted.
        calls: u32,
    },
}

/// The watch over one turn.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    policy: StallPolicy,
    last: Option<u64>,
    last_call: String,
    repeats: u32,
    seen: HashSet<u64>,
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

    /// A compaction took what the agent saw out of its request: every result is new again.
    pub fn compacted(&mut self) {
        self.seen.clear();
    }

    /// The calls of one answer, with their results, in order; what they make of the agent.
    pub fn answered(&mut self, calls: &[Seen<'_>]) -> Verdict {
        let mut progress = false;
        for call in calls {
            let key = hash_of(&[call.tool, call.arguments, call.result]);
            if self.last == Some(key) {
                self.repeats = self.repeats.saturating_add(1);
            } else {
                self.last = Some(key);
                self.repeats = 1;
                self.last_call = shown(call.tool, call.arguments);
            }
            if self.seen.insert(hash_of(&[call.result])) || (call.writes && call.ok) {
                progress = true;
            }
        }
        self.idle = if progress { 0 } else { self.idle.saturating_add(1) };
        let stalled = if self.policy.repeats > 0 && self.repeats >= self.policy.repeats {
            Some((
                format!(
                    "made the same call {} times in a row with the same result: {}",
                    self.repeats, self.last_call
                ),
                self.repeats,
            ))
        } else if self.policy.idle_requests > 0 && self.idle >= self.policy.idle_requests {
            Some((
                format!(
                    "answered {} times in a row with no tool result it had not seen and no change to the workspace",
                    self.idle
                ),
                self.idle,
            ))
        } else {
            None
        };
        match stalled {
            None => {
                if progress {
                    self.told = false;
                }
                Verdict::Going
            }
            Some((why, calls)) if self.told => Verdict::StillStalled { why, calls },
            Some((why, calls)) => {
                self.told = true;
                Verdict::Stalled { why, calls }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(result: &str) -> Seen<'_> {
        Seen { tool: "run_command", arguments: r#"{"command":"make"}"#, result, ok: false, writes: false }
    }

    #[test]
    fn the_same_failing_call_three_times_stalls_then_ends_the_turn() {
        let mut w = Watch::new(StallPolicy::default());
        assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
        assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
        let Verdict::Stalled { why, calls } = w.answered(&[run("error 1")]) else { panic!() };
        assert_eq!(calls, 3);
        assert!(
            why.contains("same call 3 times") && why.contains("run_command {\"command\":\"make\"}"),
            "{why}"
        );
        assert!(matches!(w.answered(&[run("error 1")]), Verdict::StillStalled { calls: 4, .. }));
    }

    #[test]
    fn progress_forgives_and_a_different_result_is_no_repeat() {
        let mut w = Watch::new(StallPolicy::default());
        for _ in 0..2 {
            assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
        }
        assert_eq!(w.answered(&[run("error 2")]), Verdict::Going, "another result: counting starts again");
        let write = Seen { tool: "write_file", arguments: "{}", result: "wrote", ok: true, writes: true };
        assert!(matches!(w.answered(&[run("error 2")]), Verdict::Going));
        assert!(matches!(w.answered(&[run("error 2")]), Verdict::Stalled { .. }));
        // Told; then it writes something new: forgiven, and a later stall is told again.
        assert_eq!(w.answered(&[write]), Verdict::Going);
        for _ in 0..2 {
            w.answered(&[run("error 3")]);
        }
        assert!(matches!(w.answered(&[run("error 3")]), Verdict::Stalled { .. }));
    }

    #[test]
    fn answers_with_nothing_new_stall_and_zero_turns_the_tests_off() {
        let policy = StallPolicy { repeats: 0, idle_requests: 3 };
        let mut w = Watch::new(policy);
        let read = |p: &'static str| Seen {
            tool: "read_file",
            arguments: p,
            result: "same text",
            ok: true,
            writes: false,
        };
        assert_eq!(w.answered(&[read("a")]), Verdict::Going, "a new result is progress");
        assert_eq!(w.answered(&[read("b")]), Verdict::Going);
        assert_eq!(w.answered(&[read("c")]), Verdict::Going);
        assert!(matches!(w.answered(&[read("d")]), Verdict::Stalled { calls: 3, .. }));
        // A compaction makes what it saw new again.
        let mut w = Watch::new(policy);
        w.answered(&[read("a")]);
        w.answered(&[read("b")]);
        w.compacted();
        assert_eq!(w.answered(&[read("c")]), Verdict::Going);
        assert_eq!(w.answered(&[read("d")]), Verdict::Going, "idle counted from the compaction");
        let mut off = Watch::new(StallPolicy { repeats: 0, idle_requests: 0 });
        for _ in 0..50 {
            assert_eq!(off.answered(&[run("error")]), Verdict::Going);
        }
    }
}
