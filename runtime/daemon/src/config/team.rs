//! `[team]`: the roles. The lead and the coder are always there; specialists are named by their
//! tables (`[team.specialists.NAME]`). Every role names a configured provider and a model; the rest
//! is optional and checked for range (`compact_at`, `thinking_budget`, `max_output_tokens`) or for
//! who may take it: only the coder takes `verify`, only a specialist a tool list. Errors name the
//! role's table: `team.lead.compact_at`, `team.specialists.NAME.tools`.

use super::error::ConfigError;
use super::error::Invalid;
use super::providers::ProviderConfig;
use super::raw::{RawRole, RawStall, RawTeam};
use agentd_agents::roles::ALL_TOOLS;
use agentd_engine::team::{RoleConfig, Summariser};
use agentd_policies::stall::StallPolicy;
use agentd_protocol::{Role, ToolName};
use std::collections::BTreeMap;

/// The most agents of one role a task may run at once (`max_instances`).
pub const MAX_INSTANCES: u16 = 64;

/// The smallest extended-thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: i64 = 1024;

/// `[team]` validated: each role's configuration.
pub(super) struct Roles {
    /// `[team.lead]`.
    pub(super) lead: RoleConfig,
    /// `[team.coder]`.
    pub(super) coder: RoleConfig,
    /// `[team.specialists.NAME]`, by name.
    pub(super) specialists: BTreeMap<String, RoleConfig>,
    /// `[team.stall]`.
    pub(super) stall: StallPolicy,
}

impl Roles {
    /// Every role of the team: the lead, the coder, then the specialists by name.
    pub(super) fn all(&self) -> Vec<Role> {
        [Role::Lead, Role::Coder]
            .into_iter()
            .chain(self.specialists.keys().cloned().map(Role::Specialist))
            .collect()
    }
}

/// Checks the lead, then the coder, then the specialists in name order.
pub(super) fn roles(
    raw: RawTeam,
    providers: &BTreeMap<String, ProviderConfig>,
    invalid: Invalid,
) -> Result<Roles, ConfigError> {
    let stall = stall(raw.stall, invalid)?;
    let lead = role(Role::Lead, raw.lead, providers, invalid)?;
    let coder = role(Role::Coder, raw.coder, providers, invalid)?;
    let mut specialists = BTreeMap::new();
    for (name, r) in raw.specialists {
        if Role::parse(&name).is_fixed() {
            return Err(invalid(
                format!("team.specialists.{name}"),
                "a specialist may not be named lead or coder".into(),
            ));
        }
        if name.contains(agentd_protocol::role::INSTANCE_MARK) {
            return Err(invalid(
                format!("team.specialists.{name}"),
                "a specialist's name may not hold `#`: `NAME#2` names the second agent of a role".into(),
            ));
        }
        let cfg = role(Role::Specialist(name.clone()), r, providers, invalid)?;
        specialists.insert(name, cfg);
    }
    Ok(Roles { lead, coder, specialists, stall })
}

/// The most a stall threshold may say.
const MAX_STALL: i64 = 10_000;

/// `[team.stall] repeats, idle_requests`: counts from 0 (that test off) to [`MAX_STALL`]; `repeats`
/// is 0 or at least 2 (a call made once is no repeat).
fn stall(raw: Option<RawStall>, invalid: Invalid) -> Result<StallPolicy, ConfigError> {
    let mut policy = StallPolicy::default();
    let Some(raw) = raw else { return Ok(policy) };
    for (key, value, least, slot) in [
        ("repeats", raw.repeats, 2, &mut policy.repeats),
        ("idle_requests", raw.idle_requests, 1, &mut policy.idle_requests),
    ] {
        match value {
            None => {}
            Some(v) if v == 0 || (least..=MAX_STALL).contains(&v) => *slot = v as u32,
            Some(v) => {
                return Err(invalid(
                    format!("team.stall.{key}"),
                    format!("must be 0 (off) or a count from {least} to {MAX_STALL}, got {v}"),
                ))
            }
        }
    }
    Ok(policy)
}

/// One role's table, checked key by key in the order the errors are reported.
fn role(
    who: Role,
    r: RawRole,
    providers: &BTreeMap<String, ProviderConfig>,
    invalid: Invalid,
) -> Result<RoleConfig, ConfigError> {
    let key = match &who {
        Role::Specialist(name) => format!("team.specialists.{name}"),
        other => format!("team.{other}"),
    };
    let is_specialist = !who.is_fixed();
    if !providers.contains_key(&r.provider) {
        return Err(invalid(
            format!("{key}.provider"),
            format!("no provider named {:?} in [providers]", r.provider),
        ));
    }
    if r.model.trim().is_empty() {
        return Err(invalid(format!("{key}.model"), "must not be empty".into()));
    }
    let compact_at = match r.compact_at {
        None => None,
        Some(v) if (1..=100).contains(&v) => Some(v as u8),
        Some(v) => {
            return Err(invalid(
                format!("{key}.compact_at"),
                format!("must be a percentage from 1 to 100, got {v}"),
            ))
        }
    };
    let thinking_budget = match r.thinking_budget {
        None => None,
        Some(v) if (MIN_THINKING_BUDGET..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
        Some(v) => {
            return Err(invalid(
                format!("{key}.thinking_budget"),
                format!("must be a token count of at least {MIN_THINKING_BUDGET}, got {v}"),
            ))
        }
    };
    let max_output_tokens = match r.max_output_tokens {
        None => None,
        Some(v) if (1..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
        Some(v) => {
            return Err(invalid(
                format!("{key}.max_output_tokens"),
                format!("must be a positive token count, got {v}"),
            ))
        }
    };
    if let Some(tools) = &r.tools {
        if !is_specialist {
            return Err(invalid(
                format!("{key}.tools"),
                "only specialists take a tool list; the lead's and coder's are fixed".into(),
            ));
        }
        for t in tools {
            if !ALL_TOOLS.contains(t) || *t == ToolName::Delegate {
                return Err(invalid(format!("{key}.tools"), format!("unknown tool {t:?} for a specialist")));
            }
        }
    }
    if r.verify.is_some() && who != Role::Coder {
        return Err(invalid(format!("{key}.verify"), "only the coder takes `verify`".into()));
    }
    let summariser = match r.compaction {
        None => None,
        Some(c) if !providers.contains_key(&c.provider) => {
            return Err(invalid(
                format!("{key}.compaction.provider"),
                format!("no provider named {:?} in [providers]", c.provider),
            ))
        }
        Some(c) if c.model.trim().is_empty() => {
            return Err(invalid(format!("{key}.compaction.model"), "must not be empty".into()))
        }
        Some(c) => Some(Summariser { provider: c.provider, model: c.model }),
    };
    let max_instances = match r.max_instances {
        None => 1,
        Some(_) if who == Role::Lead => {
            return Err(invalid(
                format!("{key}.max_instances"),
                "the lead is one agent; only a teammate's role can run more than once".into(),
            ))
        }
        Some(v) if (1..=i64::from(MAX_INSTANCES)).contains(&v) => v as u16,
        Some(v) => {
            return Err(invalid(
                format!("{key}.max_instances"),
                format!("must be a count from 1 to {MAX_INSTANCES}, got {v}"),
            ))
        }
    };
    let delegation_budget_tokens = match r.delegation_budget_tokens {
        None => None,
        Some(_) if who == Role::Lead => {
            return Err(invalid(
                format!("{key}.delegation_budget_tokens"),
                "the lead is never delegated to; set it on a teammate's role".into(),
            ))
        }
        Some(v) if v > 0 => Some(v as u64),
        Some(v) => {
            return Err(invalid(
                format!("{key}.delegation_budget_tokens"),
                format!("must be a positive token count, got {v}"),
            ))
        }
    };
    let delegation_deadline = match r.delegation_deadline {
        None => None,
        Some(_) if who == Role::Lead => {
            return Err(invalid(
                format!("{key}.delegation_deadline"),
                "the lead is never delegated to; set it on a teammate's role".into(),
            ))
        }
        Some(text) => match humantime::parse_duration(&text) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                return Err(invalid(format!("{key}.delegation_deadline"), "must be longer than 0s".into()))
            }
            Err(e) => return Err(invalid(format!("{key}.delegation_deadline"), format!("{e}: {text:?}"))),
        },
    };
    Ok(RoleConfig {
        max_instances,
        delegation_budget_tokens,
        delegation_deadline,
        summariser,
        provider: r.provider,
        model: r.model,
        compact_at,
        verify: r.verify,
        prompt: r.prompt,
        tools: r.tools,
        thinking_budget,
        max_output_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;

    #[test]
    fn bad_compact_at_is_named() {
        let text = DEFAULT_CONFIG.replace("# compact_at = 80", "compact_at = 180");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.lead.compact_at"), "{e}");
    }

    #[test]
    fn delegation_limits_are_read_and_a_bad_one_is_named() {
        let coder = |t: &str| DEFAULT_CONFIG.replacen("[team.coder]", &format!("[team.coder]\n{t}"), 1);
        let c = parse(&coder("delegation_budget_tokens = 50000\ndelegation_deadline = \"10m\"")).unwrap();
        assert_eq!(c.team.coder.delegation_budget_tokens, Some(50_000));
        assert_eq!(c.team.coder.delegation_deadline, Some(std::time::Duration::from_secs(600)));
        assert_eq!(
            parse(DEFAULT_CONFIG).unwrap().team.coder.delegation_budget_tokens,
            None,
            "no limit unless set"
        );
        for (bad, key, why) in [
            ("delegation_budget_tokens = 0", "team.coder.delegation_budget_tokens", "positive"),
            ("delegation_deadline = \"soon\"", "team.coder.delegation_deadline", "soon"),
            ("delegation_deadline = \"0s\"", "team.coder.delegation_deadline", "longer than 0s"),
        ] {
            let e = parse(&coder(bad)).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(why), "{bad}: {e}");
        }
        let lead = DEFAULT_CONFIG.replacen("[team.lead]", "[team.lead]\ndelegation_budget_tokens = 5", 1);
        let e = parse(&lead).unwrap_err().to_string();
        assert!(e.contains("team.lead.delegation_budget_tokens") && e.contains("never delegated to"), "{e}");
    }

    #[test]
    fn checkpoints_max_bytes_is_read_and_a_negative_one_is_named() {
        let with = |t: &str| format!("{DEFAULT_CONFIG}\n[checkpoints]\n{t}\n");
        assert_eq!(
            parse(DEFAULT_CONFIG).unwrap().team.checkpoint_bytes,
            agentd_engine::checkpoints::DEFAULT_MAX_BYTES
        );
        assert_eq!(parse(&with("max_bytes = 0")).unwrap().team.checkpoint_bytes, 0, "0: no checkpoints");
        let e = parse(&with("max_bytes = -1")).unwrap_err().to_string();
        assert!(e.contains("checkpoints.max_bytes"), "{e}");
        let e = parse(&with("max_size = 1")).unwrap_err().to_string();
        assert!(e.contains("max_size"), "an unknown key is named: {e}");
    }

    #[test]
    fn a_summariser_parses_and_a_bad_one_is_named() {
        let with =
            |t: &str| DEFAULT_CONFIG.replacen("[team.coder]", &format!("[team.coder]\ncompaction = {t}"), 1);
        let c = parse(&with("{ provider = \"local\", model = \"small\" }")).unwrap();
        let s = c.team.coder.summariser.unwrap();
        assert_eq!((s.provider.as_str(), s.model.as_str()), ("local", "small"));
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().team.coder.summariser, None);
        for (t, key) in [
            ("{ provider = \"nope\", model = \"m\" }", "team.coder.compaction.provider"),
            ("{ provider = \"local\", model = \" \" }", "team.coder.compaction.model"),
            ("{ provider = \"local\" }", "model"),
        ] {
            let e = parse(&with(t)).unwrap_err().to_string();
            assert!(e.contains(key), "{t}: {e}");
        }
    }

    #[test]
    fn max_instances_is_read_and_a_bad_one_is_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!((c.team.lead.max_instances, c.team.coder.max_instances), (1, 3), "the example shows 3");
        let plain = DEFAULT_CONFIG.replace("max_instances = 3 ", "");
        assert_eq!(parse(&plain).unwrap().team.coder.max_instances, 1, "default: one at a time");
        for (bad, key) in [("0", "team.coder.max_instances"), ("65", "team.coder.max_instances")] {
            let e = parse(&DEFAULT_CONFIG.replace("max_instances = 3", &format!("max_instances = {bad}")))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(bad), "{e}");
        }
        let lead = DEFAULT_CONFIG.replacen("[team.lead]\n", "[team.lead]\nmax_instances = 2\n", 1);
        let e = parse(&lead).unwrap_err().to_string();
        assert!(e.contains("team.lead.max_instances") && e.contains("the lead is one"), "{e}");
        let hashed =
            format!("{DEFAULT_CONFIG}\n[team.specialists.\"rev#2\"]\nprovider = \"local\"\nmodel = \"m\"\n");
        let e = parse(&hashed).unwrap_err().to_string();
        assert!(e.contains("team.specialists.rev#2") && e.contains("`#`"), "{e}");
    }

    #[test]
    fn stall_thresholds_are_read_and_a_bad_one_is_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.stall, agentd_policies::stall::StallPolicy::default());
        let with =
            |t: &str| DEFAULT_CONFIG.replacen("[team.lead]", &format!("[team.stall]\n{t}\n\n[team.lead]"), 1);
        let c = parse(&with("repeats = 0\nidle_requests = 30")).unwrap();
        assert_eq!((c.team.stall.repeats, c.team.stall.idle_requests), (0, 30));
        let e = parse(&with("repeats = -1")).unwrap_err().to_string();
        assert!(e.contains("team.stall.repeats"), "{e}");
        let e = parse(&with("repeats = 1")).unwrap_err().to_string();
        assert!(e.contains("team.stall.repeats") && e.contains("0 (off) or a count from 2"), "{e}");
    }

    #[test]
    fn unknown_provider_is_named() {
        let text = DEFAULT_CONFIG.replacen("provider = \"local\"", "provider = \"nope\"", 1);
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.lead.provider"), "{e}");
    }

    #[test]
    fn thinking_budget_parses_and_a_small_one_is_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.lead.thinking_budget, None);
        let text = DEFAULT_CONFIG.replace("# thinking_budget = 4096", "thinking_budget = 2048");
        let c = parse(&text).unwrap();
        assert_eq!(c.team.lead.thinking_budget, Some(2048));
        assert_eq!(c.team.coder.thinking_budget, None);
        for bad in ["1023", "0", "-5", "5000000000"] {
            let text =
                DEFAULT_CONFIG.replace("# thinking_budget = 4096", &format!("thinking_budget = {bad}"));
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("team.lead.thinking_budget") && e.contains(bad), "{e}");
        }
        let specialist = format!(
            "{DEFAULT_CONFIG}\n[team.specialists.rev]\nprovider = \"local\"\nmodel = \"m\"\nthinking_budget = 1024\n"
        );
        assert_eq!(parse(&specialist).unwrap().team.specialists["rev"].thinking_budget, Some(1024));
    }

    #[test]
    fn specialist_unknown_tool_is_named() {
        let text = format!(
            "{DEFAULT_CONFIG}\n[team.specialists.rev]\nprovider = \"local\"\nmodel = \"m\"\ntools = [\"read_file\", \"fly\"]\n"
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.specialists.rev.tools"), "{e}");
        assert!(e.contains("fly"), "{e}");
    }
}
