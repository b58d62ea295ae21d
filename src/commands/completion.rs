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

/// The commands whose first argument is an id of `kind`, each as its path (`["evidence", "show"]`),
/// read from the command line's own definition: a task's id is an argument named `task`; an
/// evidence id or a note's, the `id` of a subcommand of `evidence` or `memory`.
fn taking(kind: IdKind) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    walk(&Cli::command(), &mut Vec::new(), &mut |path, cmd| {
        let first = cmd.get_positionals().next().map(|a| a.get_id().as_str());
        let takes = matches!(
            (kind, path.first().map(String::as_str), first),
            (IdKind::Task, _, Some("task"))
                | (IdKind::Evidence, Some("evidence"), Some("id"))
                | (IdKind::Note, Some("memory"), Some("id"))
        );
        if takes {
            out.push(path.to_vec());
        }
    });
    out
}

/// Every long flag that takes a value, of any command but `--home` (`--role`, `--focus` …): what a
/// completion passes over with its value when it reads the words typed.
fn value_flags() -> Vec<String> {
    let mut flags = std::collections::BTreeSet::new();
    walk(&Cli::command(), &mut Vec::new(), &mut |_, cmd| {
        let taking_values = cmd.get_arguments().filter(|a| a.get_action().takes_values());
        flags.extend(
            taking_values.filter_map(|a| a.get_long()).filter(|l| *l != "home").map(|l| format!("--{l}")),
        );
    });
    flags.into_iter().collect()
}

/// Calls `f` with every command at any depth and its path.
fn walk(cmd: &clap::Command, path: &mut Vec<String>, f: &mut dyn FnMut(&[String], &clap::Command)) {
    f(path, cmd);
    for sub in cmd.get_subcommands() {
        path.push(sub.get_name().to_string());
        walk(sub, path, f);
        path.pop();
    }
}

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
    let patterns =
        |kind| taking(kind).iter().map(|p| format!("\"{}\"", p.join(" "))).collect::<Vec<_>>().join("|");
    let (tasks, evidence, notes) =
        (patterns(IdKind::Task), patterns(IdKind::Evidence), patterns(IdKind::Note));
    let flags = value_flags().join("|");
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
            {flags}) ((i++)) ;;
            -*) ;;
            *) words+=("$w") ;;
        esac
    done
    case "${{words[*]}}" in
        {tasks}) kind=task ;;
        {evidence}) kind=evidence ;;
        {notes}) kind=note ;;
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
    let mut out = String::from(
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
"#,
    );
    for (kind, name) in [(IdKind::Task, "task"), (IdKind::Evidence, "evidence"), (IdKind::Note, "note")] {
        // The commands by their parent (none for a top-level one), each group one condition.
        let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for path in taking(kind) {
            let (last, parents) = path.split_last().map_or((String::new(), &[][..]), |(l, p)| (l.clone(), p));
            groups.entry(parents.join(" ")).or_default().push(last);
        }
        for (parent, commands) in groups {
            let seen = format!("__fish_seen_subcommand_from {}", commands.join(" "));
            let condition = if parent.is_empty() {
                seen
            } else {
                format!("__fish_seen_subcommand_from {parent}; and {seen}")
            };
            out.push_str(&format!("complete -c agentd -n '{condition}' -f -a '(__agentd_ids {name})'\n"));
        }
    }
    out.push_str("complete -c agentd -l task -f -a '(__agentd_ids task)'\n");
    out
}
