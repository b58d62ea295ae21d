//! The EXAMPLES section of every command's `--help`, by the command's path: what a user types,
//! as `gh` and `docker` show it. [`with_examples`] puts each under its command; a test holds that
//! every command has one.

/// Each command's examples, by its path (`evidence read`).
const EXAMPLES: &[(&str, &[&str])] = &[
    ("init", &["agentd init", "agentd init --json"]),
    (
        "serve",
        &[
            "agentd serve",
            "agentd serve --http 7878 2>>~/.agentd/serve.log",
            "agentd serve --log-format json",
        ],
    ),
    ("dashboard", &["xdg-open \"$(agentd dashboard)\""]),
    (
        "submit",
        &[
            "agentd submit \"Fix the failing parser test\" --wait",
            "echo \"Add a --verbose flag\" | agentd submit - --workspace ~/src/app",
            "agentd submit \"Refactor the store\" --budget-tokens 500000 --budget-cost 2",
        ],
    ),
    (
        "tasks",
        &["agentd tasks", "agentd tasks --json | jq -r '.[] | select(.state == \"failed\") | .task_id'"],
    ),
    ("status", &["agentd status 01a2430d", "agentd status 01a2430d --json"]),
    (
        "watch",
        &["agentd watch 01a2430d", "agentd watch 01a2430d --json | jq -c 'select(.kind == \"tool_called\")'"],
    ),
    ("cancel", &["agentd cancel 01a2430d"]),
    ("resume", &["agentd resume 01a2430d", "agentd resume 01a2430d --budget-tokens 800000"]),
    (
        "message",
        &[
            "agentd message 01a2430d \"Now add a test for it\" --wait",
            "agentd message 01a2430d - < followup.txt",
        ],
    ),
    (
        "compact",
        &[
            "agentd compact 01a2430d",
            "agentd compact 01a2430d --role coder --focus \"keep the parser details\"",
        ],
    ),
    (
        "diff",
        &[
            "agentd diff 01a2430d",
            "agentd diff 01a2430d --stat",
            "agentd diff 01a2430d --since 40 | git apply -R",
        ],
    ),
    ("revert", &["agentd revert 01a2430d --to 40", "agentd revert 01a2430d --call 57 --force"]),
    ("context", &["agentd context 01a2430d", "agentd context 01a2430d --role coder --json"]),
    (
        "log",
        &[
            "agentd log 01a2430d",
            "agentd log 01a2430d --role coder --full --no-pager",
            "agentd log 01a2430d --json | jq -c 'select(.type == \"event\")'",
        ],
    ),
    ("evidence list", &["agentd evidence list", "agentd evidence list --task 01a2430d"]),
    ("evidence show", &["agentd evidence show ev-0193a1f2-7c4d-7a9f-8e21-5d3c9b7f1a04"]),
    (
        "evidence read",
        &["agentd evidence read ev-0193a1f2-7c4d-7a9f-8e21-5d3c9b7f1a04 --lines --offset 200 --limit 50"],
    ),
    ("evidence verify", &["agentd evidence verify"]),
    ("memory list", &["agentd memory list", "agentd memory list --workspace . --deleted"]),
    ("memory show", &["agentd memory show m17"]),
    ("memory edit", &["agentd memory edit m17 \"Use tabs in Makefiles\""]),
    ("memory delete", &["agentd memory delete m17"]),
    ("memory undo", &["agentd memory undo", "agentd memory undo m17"]),
    ("models probe", &["agentd models probe --role lead"]),
    ("settings", &["agentd settings coder compact_at", "agentd settings coder compact_at 70"]),
    ("daemon", &["agentd daemon", "agentd daemon --json | jq .providers"]),
    (
        "reload",
        &["$EDITOR ~/.agentd/agentd.toml && agentd reload", "kill -HUP \"$(pgrep -f 'agentd serve')\""],
    ),
    (
        "usage",
        &["agentd usage", "agentd usage --by day --since 2026-12-01", "agentd usage --by model --json"],
    ),
    ("doctor", &["agentd doctor", "agentd doctor --no-probe --workspace ~/src/app"]),
    (
        "completions",
        &[
            "agentd completions bash > ~/.local/share/bash-completion/completions/agentd",
            "agentd completions fish > ~/.config/fish/completions/agentd.fish",
        ],
    ),
    ("mcp", &["claude mcp add agentd -- agentd mcp"]),
    (
        "acp",
        &["agentd acp   # as Zed's agent_servers command: {\"command\": \"agentd\", \"args\": [\"acp\"]}"],
    ),
];

/// `cmd` with each command's EXAMPLES after its help.
pub fn with_examples(mut cmd: clap::Command) -> clap::Command {
    add(&mut cmd, "");
    cmd
}

fn add(cmd: &mut clap::Command, path: &str) {
    for sub in cmd.get_subcommands_mut() {
        let here = format!("{path} {}", sub.get_name()).trim().to_string();
        add(sub, &here);
        if let Some((_, lines)) = EXAMPLES.iter().find(|(p, _)| *p == here) {
            let text = format!(
                "EXAMPLES:\n{}",
                lines.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
            );
            *sub = std::mem::take(sub).after_help(text);
        }
    }
}
