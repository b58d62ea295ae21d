//! The configuration `agentd init` writes: a working file with every other key present but commented,
//! so a user learns what exists by reading it. The tests of this module hold it to that promise: the
//! file parses as written, and its commented examples parse once uncommented.

/// The text `agentd init` writes: every key commented, so a user sees what exists.
pub const DEFAULT_CONFIG: &str = r#"# agentd configuration. The context window is never set here: agentd probes it from the provider,
# learns it from a refusal's stated limit and corrects it from usage reports.

[providers.local]
kind = "openai"                     # openai | ollama | anthropic | openai-responses (openai: vLLM, llama.cpp …)
base_url = "http://127.0.0.1:8000/v1"
# api_key_env = "OPENAI_API_KEY"    # optional: the name of an environment variable holding the key
# cache = { read_factor = 0.1, min_tokens = 1024 }   # optional: the server's prompt cache (a cached
#                                   # token at 0.1x); compactions then land where the next turns cost least
# max_concurrent = 4                # model requests in flight to this server at once; more wait their turn

[team.lead]
provider = "local"
model = "qwen3-coder"
# compact_at = 80                   # percent of the window at which a request is rebuilt
# max_output_tokens = 4096          # optional: the most an answer may take; the trigger makes room for it
# thinking_budget = 4096            # optional, >= 1024: extended thinking tokens (sent only to anthropic)

[team.coder]
provider = "local"
model = "qwen3-coder"
# verify = "cargo test"             # optional: the coder's finish is rejected while this command fails
max_instances = 3                   # coders one task may run at once (coder, coder#2, coder#3), each
                                    # in a working copy of its own, merged back; 1: one at a time

# [team.specialists.reviewer]
# provider = "local"
# model = "qwen3-coder"
# prompt = "You review diffs for correctness."
# tools = ["read_file", "list_dir", "search"]

# [scheduler]
# idle_thinking_cleanup_after = "1h"   # a new request after this much idleness clears old thinking
# idle_thinking_clear_at_least = 512   # tokens: a cleanup that would free fewer is skipped (it would
#                                      # throw the provider's prompt cache away for little)
# tz = "UTC"                           # the zone of the cron expressions: UTC, +02:00, or local ($TZ)
# [[scheduler.jobs]]
# name = "verify-evidence"
# cron = "0 3 * * *"                   # min hour day month weekday (or 6 fields, seconds first)
# action = "evidence.verify"           # or "logs.export"

# [retry]
# rate_limit = { attempts = 10, delay = "60s" }     # Retry-After wins when the server sends it
# stream_anomaly = { attempts = 2, delay = "2s" }   # incremental: 2s, then 4s
# server_error = { attempts = 3, delay = "2s" }     # exponential: 2s, 4s, 8s
# overloaded = { attempts = 5, delay = "5s" }       # 529: incremental 5s, 10s, … (Retry-After wins)

# [secrets]
# env = ["GITHUB_TOKEN"]  # variables whose values are redacted from every tool result (provider keys always are)

# [requests]
# idle_timeout = "60s"    # a stream with no part of an event for this long is cut (keep-alives are none)
# timeout = "10m"         # a whole model request, from sending to the last event

# The dashboard and HTTP API (off unless listen is set, or `agentd serve --http ADDR`). Every request
# needs the token in <home>/http.token; `agentd dashboard` prints the URL that logs a browser in.
# [http]
# listen = "127.0.0.1:7878"         # a port alone means 127.0.0.1; another address must be named
# keep_alive = "15s"                # an event stream with nothing to send writes a comment this often

[tools]
command_timeout = "120s"
# copies = "/var/tmp/agentd-copies-UID"   # where writers running at once get their working copies

# The kernel sandbox of run_command and `verify` (Landlock, plus network and mount namespaces and no
# capabilities where the daemon may make them). Commands write only beneath the workspace and a
# temp dir of their own ($TMPDIR, also $HOME, removed after the call), read the system's
# directories, never see the daemon's home, and get only PATH LANG LC_ALL TERM TZ USER from its
# environment. On a kernel without Landlock, commands are refused unless mode = "off".
# [tools.sandbox]
# mode = "workspace-write"          # workspace-write | read-only (the workspace too) | off (no sandbox)
# network = false                   # true: allow TCP (and keep the daemon's network namespace)
# env = ["CARGO_HOME"]              # more variables passed through; never a provider's api_key_env
# read = ["/root/.cargo"]           # more paths commands may read (absolute)

# MCP servers whose tools the roles get, each named to the model as mcp__SERVER__TOOL. A stdio server
# is started for a task when one of its roles first needs it (in the task's workspace, in the sandbox
# above, with only the env names below passed from the daemon's environment) and stopped when the
# task ends; a crashed one is restarted at its next use, after a backoff.
# [mcp.servers.git]
# command = "mcp-server-git"        # a stdio server: the program, found on PATH
# args = ["--repository", "."]
# env = ["GIT_AUTHOR_NAME"]         # variables passed through (never a provider's api_key_env)
# roles = ["coder"]                 # who sees its tools (default: the coder)
# tools = ["git_status", "git_diff"] # only these of its tools (default: all)
# timeout = "60s"                   # one tool call, from sending to its result
# network = true                    # override [tools.sandbox] network for this server
# [mcp.servers.docs]
# url = "http://127.0.0.1:8931/mcp" # a streamable HTTP server
# bearer_env = "DOCS_TOKEN"         # optional: sent as `Authorization: Bearer …`, redacted like a secret
# roles = ["lead", "coder"]
"#;

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::DEFAULT_CONFIG;
    use std::time::Duration;

    #[test]
    fn default_config_parses() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.lead.model, "qwen3-coder");
        assert_eq!(c.team.command_timeout, Duration::from_secs(120));
    }

    #[test]
    fn the_default_configs_mcp_example_parses_when_uncommented() {
        let start = DEFAULT_CONFIG.find("# [mcp.servers.git]").unwrap();
        let example: String = DEFAULT_CONFIG[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let c = parse(&format!("{}\n{example}\n", &DEFAULT_CONFIG[..start])).unwrap();
        assert_eq!(c.mcp.keys().collect::<Vec<_>>(), ["docs", "git"]);
    }
}
