//! The compaction plan: what a rebuilt request keeps, what leaves it, and whether the result is
//! accepted. Pure: the runtime measures, summarises and archives; this module decides.
//!
//! When a request crosses the trigger, the candidate is, in order: system + tools (`fixed`, not part
//! of the history); the pinned blocks (the project's instructions and the memory notes, as they read
//! now, never summarised); the original objective; the checkpoint (a folded summary of everything that
//! leaves the request, naming the archive it can be read back from); the unresolved observations
//! that sat in the removed part, verbatim; for the coder, the current text of its working files,
//! newest first, up to half of the rebuilt request; then the most recent rounds verbatim, as many as
//! fit below the destination — or, when the provider has a prompt cache, as many as land cheapest over
//! the coming turns ([`price`]), the last round always. Rounds are kept or removed whole, so a tool call is never separated from
//! its result. Dedup is by exact text only.
//!
//! The candidate is counted again in full and judged ([`judge`]); when it is not accepted, the plan is
//! rebuilt with fewer recent rounds, down to none, and then compaction fails with the numbers. That
//! loop — with the summaries and the archive it needs — is the state machine in [`machine`], which the
//! runtime drives with real IO; [`compact_with`] drives the same machine with a synchronous
//! summariser, for tests.
//!
//! A compaction the user asks for below the trigger aims lower and is refused when nothing can leave
//! (`requested.rs`). The files: `candidate.rs` holds the plan, the assembly and the verdict, `machine.rs` the loop; this
//! file only names what they offer, so that neither imports a file that imports it back.

mod candidate;
pub mod machine;
pub mod price;
mod requested;

pub use candidate::{
    assemble, checkpoint_message, files_message, is_checkpoint, judge, objective_message, plan, Checkpoint,
    Plan, PlanInput, Pricing, Verdict, WorkingFile, CHECKPOINT_HEADER, FILES_HEADER, OBJECTIVE_PREFIX,
};
pub use machine::{compact_with, Answer, Brief, Compacted, Compaction, Measure, Need, SentPrefix, Setup};
pub use requested::{requested, NothingToCompact};

#[cfg(test)]
mod tests;
