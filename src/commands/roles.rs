//! The commands about one role of a task or of the config: `context` (its gauge), `models probe`
//! (the window its provider reports) and `settings` (read or change its `compact_at`).

use super::connect::connect;
use crate::exit::{self, fail, Failure};
use crate::print::{pretty, print_gauge, print_probe, print_setting};
use crate::print::{raw, say};
use agentd_daemon::daemon::Home;
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{
    ContextParams, ContextResult, ProbeResult, RoleParams, Setting, SettingParams, SettingResult,
};
use agentd_protocol::Role;

/// `agentd context TASK [--role ROLE]`: a role not yet measured is a line saying why, not a failure.
pub fn context(home: &Home, task: String, role: String, json: bool) -> Result<u8, Failure> {
    let params = ContextParams { task_id: task, role: Some(Role::from(role)) };
    let g: ContextResult = connect(home)?.call::<method::ContextGet>(params)?;
    if json {
        raw!("{}", pretty(&g));
    } else {
        match g {
            ContextResult::Measured(g) => print_gauge(&g),
            ContextResult::Unmeasured(u) => say!("{}: {}", u.role, u.note),
        }
    }
    Ok(exit::OK)
}

/// `agentd models probe --role ROLE`.
pub fn probe(home: &Home, role: String, json: bool) -> Result<u8, Failure> {
    let params = RoleParams { role: Role::from(role) };
    let r: ProbeResult = connect(home)?.call::<method::ModelsProbe>(params)?;
    if json {
        raw!("{}", pretty(&r));
    } else {
        print_probe(&r);
    }
    Ok(exit::OK)
}

/// `agentd settings ROLE KEY [VALUE]`: an unknown key is bad usage, refused before connecting.
pub fn settings(
    home: &Home,
    role: String,
    key: String,
    value: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    let key: Setting = serde_json::from_value(serde_json::Value::String(key.clone()))
        .map_err(|_| fail(exit::USAGE, format!("unknown setting {key:?}; settable: compact_at")))?;
    let mut client = connect(home)?;
    let params = SettingParams { role: Role::from(role), key, value: value.map(serde_json::Value::from) };
    let r: SettingResult = match params.value {
        Some(_) => client.call::<method::SettingsSet>(params)?,
        None => client.call::<method::SettingsGet>(params)?,
    };
    if json {
        raw!("{}", pretty(&r));
    } else {
        print_setting(&r);
    }
    Ok(exit::OK)
}
