//! The rules of durable memory: whether a quote is the user's, what a change (an edit, a deletion, an
//! undo) does to a note, and how the notes are laid out in a request within their bound.
//!
//! Memory is not compaction: nothing here reads a summary or a checkpoint. A note rests on the user's
//! own words ([`find_quote`]); it changes only by a recorded change ([`apply`]), and any change can be
//! undone by the inverse change, itself recorded (so an undo can be undone too).

use agentd_protocol::memory::{Author, ChangeAction, MemoryChange, NewNote, Note, NoteEdit};
use agentd_protocol::tokens::Tokens;
use std::fmt::Write as _;

/// The shortest quote accepted when it is not a whole user message: a word or two could be found in
/// any message, so it would prove nothing.
pub const MIN_QUOTE_CHARS: usize = 12;

/// The first line of the memory block of a request.
pub const MEMORY_HEADER: &str = "[memory]";

/// Why a `remember` call's quote was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    /// The quote is empty.
    #[error("`quote` is empty: quote the user's own words that this note rests on")]
    Empty,
    /// The quote is too short to prove anything.
    #[error(
        "`quote` is too short ({chars} characters): quote at least {MIN_QUOTE_CHARS} characters of the \
         user's words, or a whole message"
    )]
    TooShort {
        /// Its length.
        chars: usize,
    },
    /// No user message of the task contains it.
    #[error(
        "`quote` is not the user's words: no message the user sent in this task (the objective or a \
         follow-up) contains {quote:?}; quote the user verbatim, or do not save the note"
    )]
    NotFound {
        /// The quote as given.
        quote: String,
    },
}

/// The text with every run of whitespace made one space, trimmed: a quote may wrap lines differently
/// from the message it is taken from, and still be verbatim.
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The user message (its log sequence number) that contains `quote` verbatim, whitespace aside.
/// `messages` are the user's messages of the task — the objective and the follow-ups — with their
/// sequence numbers, oldest first; the newest that contains it is the source.
pub fn find_quote(quote: &str, messages: &[(u64, &str)]) -> Result<u64, QuoteError> {
    let wanted = normalised(quote);
    if wanted.is_empty() {
        return Err(QuoteError::Empty);
    }
    let mut short = false;
    for (seq, text) in messages.iter().rev() {
        let text = normalised(text);
        if text == wanted {
            return Ok(*seq);
        }
        if text.contains(&wanted) {
            if wanted.chars().count() >= MIN_QUOTE_CHARS {
                return Ok(*seq);
            }
            short = true;
        }
    }
    if short {
        return Err(QuoteError::TooShort { chars: wanted.chars().count() });
    }
    Err(QuoteError::NotFound { quote: quote.to_string() })
}

/// Why a change to a note was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// The new text is empty.
    #[error("the note's new text is empty; to remove the note, delete it")]
    EmptyText,
    /// The note is deleted: only an undo brings it back.
    #[error("note {0} is deleted; `agentd memory undo {0}` brings it back")]
    Deleted(String),
    /// The note has no change to undo (cannot happen for a stored note, which has its save).
    #[error("note {0} has no change to undo")]
    NothingToUndo(String),
    /// The edit would change nothing.
    #[error("note {0} already reads so")]
    Unchanged(String),
}

/// A change decided, for the store to record: the note as it becomes and the change's record (its
/// `seq` and `at` filled in by the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The note after the change.
    pub note: Note,
    /// What the change did.
    pub action: ChangeAction,
    /// The text before, as [`MemoryChange::before`] records it.
    pub before: Option<String>,
    /// The text after, as [`MemoryChange::after`] records it.
    pub after: Option<String>,
    /// The change undone, for an undo.
    pub undoes: Option<u64>,
}

impl Applied {
    /// The change's record, numbered `seq`, made by `by` at `at`.
    pub fn change(&self, seq: u64, by: Author, at: &str) -> MemoryChange {
        MemoryChange {
            seq,
            note_id: self.note.id.clone(),
            at: at.to_string(),
            by,
            action: self.action,
            before: self.before.clone(),
            after: self.after.clone(),
            undoes: self.undoes,
        }
    }
}

/// A new note saved as change number `seq`: the note (its id `m` and the number) and its `saved`
/// change, made by the model that saved it.
pub fn saved(new: NewNote, seq: u64) -> (Note, MemoryChange) {
    let note = Note {
        id: format!("m{seq}"),
        text: new.text.trim().to_string(),
        quote: new.quote,
        scope: new.scope,
        workspace: new.workspace,
        task_id: new.task_id.clone(),
        role: new.role.clone(),
        source_seq: new.source_seq,
        created_at: new.at.clone(),
        updated_at: new.at.clone(),
        deleted: false,
    };
    let change = MemoryChange {
        seq,
        note_id: note.id.clone(),
        at: new.at,
        by: Author::Model { task_id: new.task_id, role: new.role },
        action: ChangeAction::Saved,
        before: None,
        after: Some(note.text.clone()),
        undoes: None,
    };
    (note, change)
}

/// What `edit` does to `note`, whose latest recorded change is `latest` (needed for an undo), at time
/// `at`.
pub fn apply(
    note: &Note,
    edit: &NoteEdit,
    latest: Option<&MemoryChange>,
    at: &str,
) -> Result<Applied, ChangeError> {
    let mut next = note.clone();
    next.updated_at = at.to_string();
    let applied =
        |next: Note, action, before, after, undoes| Applied { note: next, action, before, after, undoes };
    match edit {
        NoteEdit::Edit(text) => {
            let text = text.trim();
            if text.is_empty() {
                return Err(ChangeError::EmptyText);
            }
            if note.deleted {
                return Err(ChangeError::Deleted(note.id.clone()));
            }
            if text == note.text {
                return Err(ChangeError::Unchanged(note.id.clone()));
            }
            next.text = text.to_string();
            Ok(applied(next, ChangeAction::Edited, Some(note.text.clone()), Some(text.to_string()), None))
        }
        NoteEdit::Delete => {
            if note.deleted {
                return Err(ChangeError::Deleted(note.id.clone()));
            }
            next.deleted = true;
            Ok(applied(next, ChangeAction::Deleted, Some(note.text.clone()), None, None))
        }
        NoteEdit::Undo => {
            let latest = latest.ok_or_else(|| ChangeError::NothingToUndo(note.id.clone()))?;
            let undoes = Some(latest.seq);
            match latest.action {
                // A save (or a restore) is undone by deleting the note.
                ChangeAction::Saved | ChangeAction::Restored => {
                    next.deleted = true;
                    Ok(applied(next, ChangeAction::Deleted, Some(note.text.clone()), None, undoes))
                }
                ChangeAction::Deleted => {
                    next.deleted = false;
                    Ok(applied(next, ChangeAction::Restored, None, Some(note.text.clone()), undoes))
                }
                ChangeAction::Edited => {
                    let back = latest.before.clone().unwrap_or_else(|| note.text.clone());
                    next.text = back.clone();
                    next.deleted = false;
                    Ok(applied(next, ChangeAction::Edited, Some(note.text.clone()), Some(back), undoes))
                }
            }
        }
    }
}

/// The memory block of a request, within `budget` (counted with `count`) whatever the number and
/// size of the notes: the newest notes whole, newest first, while they fit; the older ones past the
/// first that does not are summarised by their number with how to read them all (`memory_more`,
/// given how many are left out: the evidence reader the caller offers) — never dropped silently,
/// never listed one by one (a list that grows with the notes would break the bound). When not even
/// the header and that pointer fit, the pointer alone under the header line; `None` when there is
/// no note, or when not even that fits the budget.
pub fn memory_block(
    notes: &[Note],
    budget: Tokens,
    count: &dyn Fn(&str) -> Tokens,
    memory_more: &dyn Fn(usize) -> String,
) -> Option<String> {
    if notes.is_empty() {
        return None;
    }
    let newest_first = newest_first(notes);
    let with_rest = |text: &str, rest: usize| {
        if rest == 0 {
            text.to_string()
        } else {
            format!("{text}\n{}", memory_more(rest))
        }
    };
    let mut text = memory_head();
    let mut shown = 0;
    for note in &newest_first {
        let candidate = format!("{text}\n{}", note_line(note));
        // The pointer to the rest must fit too.
        if count(&with_rest(&candidate, newest_first.len() - shown - 1)) > budget {
            break;
        }
        text = candidate;
        shown += 1;
    }
    let block = with_rest(&text, newest_first.len() - shown);
    if count(&block) <= budget {
        return Some(block);
    }
    // Not even the head and the pointer: the pointer under the header line alone.
    let bare = format!("{MEMORY_HEADER}\n{}", memory_more(newest_first.len()));
    (count(&bare) <= budget).then_some(bare)
}

/// The memory block with every note whole, newest first — what [`memory_block`] makes when they
/// all fit. `None` when there is no note.
pub fn memory_text(notes: &[Note]) -> Option<String> {
    if notes.is_empty() {
        return None;
    }
    let mut text = memory_head();
    for note in newest_first(notes) {
        let _ = write!(text, "\n{}", note_line(note));
    }
    Some(text)
}

/// The notes, newest first (by when they were saved, then by id).
fn newest_first(notes: &[Note]) -> Vec<&Note> {
    let mut sorted: Vec<&Note> = notes.iter().collect();
    sorted.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    sorted
}

/// The block's first lines: its header and what the notes are.
fn memory_head() -> String {
    format!(
        "{MEMORY_HEADER}\nWhat the user asked agentd to remember (durable notes, each resting on the user's own \
         words). Follow them unless the user now says otherwise."
    )
}

/// One note as the block shows it: `- [m17, workspace] text (the user said: "quote")`.
pub fn note_line(note: &Note) -> String {
    format!("- [{}, {}] {} (the user said: {:?})", note.id, note.scope, note.text, note.quote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::memory::MemoryScope;
    use agentd_protocol::Role;

    fn note(id: &str, text: &str, at: &str) -> Note {
        Note {
            id: id.into(),
            text: text.into(),
            quote: "we always use cargo nextest".into(),
            scope: MemoryScope::Workspace,
            workspace: "/w".into(),
            task_id: "t".into(),
            role: Role::Lead,
            source_seq: 1,
            created_at: at.into(),
            updated_at: at.into(),
            deleted: false,
        }
    }

    fn change(seq: u64, action: ChangeAction, before: Option<&str>, after: Option<&str>) -> MemoryChange {
        MemoryChange {
            seq,
            note_id: "m1".into(),
            at: "t".into(),
            by: Author::User,
            action,
            before: before.map(Into::into),
            after: after.map(Into::into),
            undoes: None,
        }
    }

    #[test]
    fn a_quote_is_found_verbatim_whitespace_aside_and_an_invented_one_is_refused() {
        let messages =
            [(1, "Fix the parser.\nWe always use `cargo nextest`,  never `cargo test`."), (7, "thanks")];
        assert_eq!(find_quote("We always use `cargo nextest`, never `cargo test`.", &messages), Ok(1));
        assert_eq!(find_quote("thanks", &messages), Ok(7), "a whole message, however short");
        assert_eq!(find_quote("  ", &messages), Err(QuoteError::Empty));
        assert_eq!(find_quote("nextest", &messages), Err(QuoteError::TooShort { chars: 7 }));
        let invented = "the user prefers tabs over spaces";
        assert_eq!(find_quote(invented, &messages), Err(QuoteError::NotFound { quote: invented.into() }));
        assert!(find_quote(invented, &messages).unwrap_err().to_string().contains("not the user's words"));
    }

    #[test]
    fn every_change_has_an_inverse_and_an_undo_can_be_undone() {
        let n = note("m1", "use nextest", "1");
        let edited = apply(&n, &NoteEdit::Edit("use cargo nextest".into()), None, "2").unwrap();
        assert_eq!((edited.action, edited.before.as_deref()), (ChangeAction::Edited, Some("use nextest")));
        let e = change(2, ChangeAction::Edited, Some("use nextest"), Some("use cargo nextest"));
        let undone = apply(&edited.note, &NoteEdit::Undo, Some(&e), "3").unwrap();
        assert_eq!((undone.note.text.as_str(), undone.undoes), ("use nextest", Some(2)));
        // Redo: the undo is itself an edit, so undoing it brings the edit back.
        let u = change(3, ChangeAction::Edited, Some("use cargo nextest"), Some("use nextest"));
        let redone = apply(&undone.note, &NoteEdit::Undo, Some(&u), "4").unwrap();
        assert_eq!(redone.note.text, "use cargo nextest");

        let saved = change(1, ChangeAction::Saved, None, Some("use nextest"));
        let gone = apply(&n, &NoteEdit::Undo, Some(&saved), "5").unwrap();
        assert!(gone.note.deleted);
        assert_eq!(gone.action, ChangeAction::Deleted);
        let d = change(5, ChangeAction::Deleted, Some("use nextest"), None);
        let back = apply(&gone.note, &NoteEdit::Undo, Some(&d), "6").unwrap();
        assert!(!back.note.deleted);
        assert_eq!(back.action, ChangeAction::Restored);

        assert_eq!(apply(&gone.note, &NoteEdit::Delete, None, "7"), Err(ChangeError::Deleted("m1".into())));
        assert_eq!(apply(&n, &NoteEdit::Edit(" ".into()), None, "7"), Err(ChangeError::EmptyText));
        assert_eq!(
            apply(&n, &NoteEdit::Edit("use nextest".into()), None, "7"),
            Err(ChangeError::Unchanged("m1".into()))
        );
    }

    fn more(rest: usize) -> String {
        format!("{rest} older notes not shown here: every note is evidence ev-1; read it with read_evidence")
    }

    fn count(text: &str) -> Tokens {
        Tokens(text.len().div_ceil(4) as u64)
    }

    #[test]
    fn the_block_shows_the_newest_notes_whole_and_counts_the_rest() {
        let notes: Vec<Note> =
            (1..=6).map(|i| note(&format!("m{i}"), &"x".repeat(100), &format!("{i}"))).collect();
        let all = memory_block(&notes, Tokens(10_000), &count, &more).unwrap();
        assert!(all.starts_with(MEMORY_HEADER));
        assert!(all.find("[m6,").unwrap() < all.find("[m1,").unwrap(), "newest first");
        assert!(!all.contains("older notes"));
        assert_eq!(memory_text(&notes).as_deref(), Some(all.as_str()), "all of them whole: the whole text");
        let bounded = memory_block(&notes, Tokens(150), &count, &more).unwrap();
        assert!(count(&bounded) <= Tokens(150), "{}", count(&bounded));
        assert!(bounded.contains("[m6,"));
        let shown = notes.iter().filter(|n| bounded.contains(&format!("[{},", n.id))).count();
        assert!(bounded.contains(&format!("{} older notes not shown", 6 - shown)), "{bounded}");
        assert_eq!(memory_block(&[], Tokens(100), &count, &more), None);
    }

    /// 1,300 notes, and one huge newest note: the block kept a growing list of ids and went to
    /// 2,255 tokens against a bound of 1,638. Now the newest that fit come whole, and the rest are a
    /// count.
    #[test]
    fn many_notes_and_a_huge_one_stay_within_the_bound() {
        let mut notes: Vec<Note> =
            (1..=1_300).map(|i| note(&format!("m{i}"), "use cargo nextest", &format!("{i:05}"))).collect();
        let bound = Tokens(1_638);
        let block = memory_block(&notes, bound, &count, &more).unwrap();
        assert!(count(&block) <= bound, "{}", count(&block));
        assert!(block.contains("[m1300,") && block.contains("older notes not shown"), "{block}");
        notes.push(note("m9999", &"y".repeat(1 << 20), "99999"));
        let block = memory_block(&notes, bound, &count, &more).unwrap();
        assert!(count(&block) <= bound, "{}", count(&block));
        assert!(block.contains("1301 older notes not shown"), "the huge newest one is not shown whole");
    }

    proptest::proptest! {
        /// Whatever the notes and the bound: the block never exceeds it; the notes it shows are the
        /// newest, whole, in order; the count it gives covers every other one.
        #[test]
        fn the_block_never_exceeds_its_bound(
            sizes in proptest::collection::vec(0usize..2_000, 0..40),
            bound in 0u64..3_000,
        ) {
            let notes: Vec<Note> = sizes
                .iter()
                .enumerate()
                .map(|(i, n)| note(&format!("m{i}"), &"z".repeat(*n), &format!("{i:03}")))
                .collect();
            let Some(block) = memory_block(&notes, Tokens(bound), &count, &more) else {
                // Nothing to show, or not even the header and the pointer fit.
                let bare = format!("{MEMORY_HEADER}\n{}", more(notes.len()));
                proptest::prop_assert!(notes.is_empty() || count(&bare) > Tokens(bound));
                return Ok(());
            };
            proptest::prop_assert!(count(&block) <= Tokens(bound), "{} > {bound}", count(&block));
            let newest_first = newest_first(&notes);
            let shown = newest_first.iter().take_while(|n| block.contains(&note_line(n))).count();
            for n in &newest_first[shown..] {
                proptest::prop_assert!(!block.contains(&format!("[{},", n.id)), "only the newest are shown");
            }
            let rest = notes.len() - shown;
            if rest > 0 {
                proptest::prop_assert!(block.ends_with(&more(rest)), "{rest} left out: {block}");
            }
        }
    }
}
