//! Shell completion: `agentd completions SHELL` prints clap's script for the command line, and for
//! bash, zsh and fish adds the ids a command takes — tasks, evidence, memory notes — asked of the
//! running daemon when the user presses TAB, through the hidden `agentd __ids KIND` (one id a line,
//! nothing when the daemon cannot be reached: a completion never prints an error).

use super::connect::connect;
use crate::cli::{Cli, IdKind};
use crate::exit::{self, Failure};
use crate::print::raw;
use agentd_daemon::daemon::Home;
use agentd_protocol::memory::{Note, NoteFilter};
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{EvidenceListParams, NoParams};
use agentd_protocol::EvidenceMeta;
use clap::CommandFactory;
use clap_complete::Shell;

/// The commands whose first argument is a task's id.
const TASK_COMMANDS: &str = "status watch cancel resume message compact diff revert context log";

/// `agentd completions SHELL`.
pub fn script(shell: Shell) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "agentd", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    match shell {
        Shell::Bash => script.push_str(&bash_ids()),
        Shell::Fish => script.push_str(&fish_ids()),
        Shell::Zsh => script = zsh_ids(&script),
        _ => {}
    }
    crate::print::bytes(script.as_bytes());
    Ok(exit::OK)
}

/// `agentd __ids KIND`: the ids, newest last; quiet (and exit 0) when the daemon does not answer.
pub fn ids(home: &Home, kind: IdKind) -> Result<u8, Failure> {
    let Ok(mut client) = connect(home) else { return Ok(exit::OK) };
    let ids: Vec<String> = match kind {
        IdKind::Task => client
            .call::<method::TaskList>(NoParams {})
            .map(|tasks| tasks.into_iter().map(|t| t.task_id).collect())
            .unwrap_or_default(),
        IdKind::Evidence => client
            .call::<method::EvidenceList>(EvidenceListParams { task_id: None })
            .map(|list: Vec<EvidenceMeta>| list.into_iter().map(|e| e.id).collect())
            .unwrap_or_default(),
        IdKind::Note => client
            .call::<method::MemoryList>(NoteFilter::default())
            .map(|notes: Vec<Note>| notes.into_iter().map(|n| n.id).collect())
            .unwrap_or_default(),
    };
    for id in ids {
        raw!("{id}");
    }
    Ok(exit::OK)
}

/// Bash: a function in front of clap's `_agentd` that completes the id a command takes (its first
/// argument, `--task`'s value) from the daemon of the home typed (`--home`), and leaves the rest
/// to clap's.
fn bash_ids() -> String {
    let tasks = TASK_COMMANDS.split(' ').map(|c| format!("\"{c} 1\"")).collect::<Vec<_>>().join("|");
    format!(
        r#"
# Task, evidence and note ids from the running daemon (`agentd __ids`).
_agentd_ids() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" kind="" i w
    local -a words=() home=()
    ((COMP_CWORD > 0)) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case "$w" in
            --home) home=(--home "${{COMP_WORDS[i+1]}}"); ((i++)) ;;
            --role|--focus|--since|--call|--to|--workspace|--team|--budget-tokens|--budget-cost|--offset|--limit|--task|--by|--http|--log-format) ((i++)) ;;
            -*) ;;
            *) words+=("$w") ;;
        esac
    done
    case "${{words[0]}} ${{#words[@]}}" in
        {tasks}) kind=task ;;
        "evidence 2") [[ "${{words[1]}}" == show || "${{words[1]}}" == read ]] && kind=evidence ;;
        "memory 2") [[ "${{words[1]}}" =~ ^(show|edit|delete|undo)$ ]] && kind=note ;;
    esac
    [[ "$prev" == "--task" ]] && kind=task
    if [[ -n "$kind" && "$cur" != -* ]]; then
        COMPREPLY=($(compgen -W "$("${{COMP_WORDS[0]}}" "${{home[@]}}" __ids "$kind" 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _agentd "$@"
}}
complete -F _agentd_ids -o nosort -o bashdefault -o default agentd
"#
    )
}

/// Zsh: the id arguments of clap's script (`:task -- …:_default`, `:id -- The evidence id…`,
/// `:id -- The note's id…`, `--task=[…]:TASK:_default`) completed by `_agentd_ids KIND`, defined
/// first.
fn zsh_ids(script: &str) -> String {
    let function = r#"
# Task, evidence and note ids from the running daemon (`agentd __ids`), of the home typed.
_agentd_ids() {
    local -a ids home
    local i=${words[(I)--home]}
    (( i )) && home=(--home ${words[i+1]})
    ids=(${(f)"$(${words[1]} $home __ids $1 2>/dev/null)"})
    compadd -a ids
}
"#;
    let mut out = String::new();
    for line in script.lines() {
        let action = if line.starts_with("':task -- ") || line.starts_with("'--task=[") {
            Some("task")
        } else if line.starts_with("':id -- The evidence id") {
            Some("evidence")
        } else if line.starts_with("':id -- The note") {
            Some("note")
        } else {
            None
        };
        match action {
            Some(kind) => out.push_str(&line.replacen(":_default'", &format!(":_agentd_ids {kind}'"), 1)),
            None => out.push_str(line),
        }
        out.push('\n');
        if line == "#compdef agentd" {
            out.push_str(function);
        }
    }
    out
}

/// Fish: the ids as the values of the commands and flags that take them, from the daemon of the
/// home typed (`--home`).
fn fish_ids() -> String {
    format!(
        r#"
# Task, evidence and note ids from the running daemon (`agentd __ids`), of the home typed.
function __agentd_ids
    set -l words (commandline -opc)
    set -l home
    if set -l i (contains -i -- --home $words)
        set home --home $words[(math $i + 1)]
    end
    $words[1] $home __ids $argv 2>/dev/null
end
complete -c agentd -n '__fish_seen_subcommand_from {TASK_COMMANDS}' -f -a '(__agentd_ids task)'
complete -c agentd -n '__fish_seen_subcommand_from evidence; and __fish_seen_subcommand_from show read' -f -a '(__agentd_ids evidence)'
complete -c agentd -n '__fish_seen_subcommand_from memory; and __fish_seen_subcommand_from show edit delete undo' -f -a '(__agentd_ids note)'
complete -c agentd -l task -f -a '(__agentd_ids task)'
"#
    )
}
