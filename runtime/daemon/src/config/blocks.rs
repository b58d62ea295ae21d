//! `[instructions]` and `[memory]`: the blocks every request of a task starts with.
//!
//! `[instructions] files` names the project's instructions files at the workspace root (default
//! `["AGENTS.md"]`; every one found is included, in order; `[]` turns the block off), `max_percent` the
//! most of the window the block may take (default 10). `[memory] enabled` (default true) carries the
//! memory notes and lets `remember` save them; `max_percent` bounds the block (default 5);
//! `max_note_chars` the note (and the quote) `remember` saves (default 1000, from 20 to 100000).

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::{RawInstructions, RawMemory};
use agentd_engine::blocks::BlocksConfig;

/// The blocks' settings, from the two tables.
pub(super) fn blocks(
    instructions: RawInstructions,
    memory: RawMemory,
    invalid: Invalid,
) -> Result<BlocksConfig, ConfigError> {
    let defaults = BlocksConfig::default();
    let percent = |key: &str, value: Option<u8>, default: u8| match value {
        None => Ok(default),
        Some(p) if (1..=50).contains(&p) => Ok(p),
        Some(p) => {
            Err(invalid(key.into(), format!("must be a percentage of the window from 1 to 50, got {p}")))
        }
    };
    let files = instructions.files.unwrap_or(defaults.instruction_files);
    for (i, name) in files.iter().enumerate() {
        let plain = !name.trim().is_empty()
            && !name.starts_with('/')
            && name.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
        if !plain {
            return Err(invalid(
                format!("instructions.files[{i}]"),
                format!("must be a path relative to the workspace root, without `..`, got {name:?}"),
            ));
        }
    }
    Ok(BlocksConfig {
        instruction_files: files,
        instructions_percent: percent(
            "instructions.max_percent",
            instructions.max_percent,
            defaults.instructions_percent,
        )?,
        memory: memory.enabled.unwrap_or(defaults.memory),
        memory_percent: percent("memory.max_percent", memory.max_percent, defaults.memory_percent)?,
        max_note_chars: match memory.max_note_chars {
            None => defaults.max_note_chars,
            Some(n) if (20..=100_000).contains(&n) => n as usize,
            Some(n) => {
                return Err(invalid(
                    "memory.max_note_chars".into(),
                    format!("must be a number of characters from 20 to 100000, got {n}"),
                ))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;

    #[test]
    fn agents_md_and_memory_are_on_by_default_and_bad_values_are_named() {
        let blocks = parse(DEFAULT_CONFIG).unwrap().team.blocks;
        assert_eq!(blocks.instruction_files, ["AGENTS.md"]);
        assert!(blocks.memory);
        let with = |extra: &str| parse(&format!("{DEFAULT_CONFIG}\n{extra}\n"));
        let set = with("[instructions]\nfiles = [\"AGENTS.md\", \"CLAUDE.md\"]\nmax_percent = 20\n[memory]\nenabled = false").unwrap();
        assert_eq!(set.team.blocks.instruction_files, ["AGENTS.md", "CLAUDE.md"]);
        assert_eq!((set.team.blocks.instructions_percent, set.team.blocks.memory), (20, false));
        let err = with("[instructions]\nfiles = [\"../secrets.md\"]").unwrap_err().to_string();
        assert!(err.contains("instructions.files[0]") && err.contains("/h/agentd.toml"), "{err}");
        let err = with("[memory]\nmax_percent = 90").unwrap_err().to_string();
        assert!(err.contains("memory.max_percent") && err.contains("90"), "{err}");
        assert_eq!(blocks.max_note_chars, 1_000);
        assert_eq!(with("[memory]\nmax_note_chars = 300").unwrap().team.blocks.max_note_chars, 300);
        let err = with("[memory]\nmax_note_chars = 5").unwrap_err().to_string();
        assert!(err.contains("memory.max_note_chars") && err.contains("got 5"), "{err}");
        assert!(with("[memory]\ncolour = 1").unwrap_err().to_string().contains("colour"));
    }
}
