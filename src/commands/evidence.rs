//! `agentd evidence …`: the archive of full tool outputs the agents saw only in part — list it,
//! show one piece's metadata, read a page of it, or re-hash every blob (`verify`, exit 1 when any
//! is missing or altered).

use super::connect::connect;
use crate::cli::EvidenceCommand;
use crate::exit::{self, Failure};
use crate::print::raw;
use crate::print::{pretty, print_evidence_line, print_meta, print_verify};
use agentd_daemon::daemon::Home;
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{EvidenceListParams, EvidenceReadParams, EvidenceRef, NoParams, VerifyResult};
use agentd_protocol::{EvidenceMeta, Page, Unit};

/// Runs one `evidence` subcommand.
pub fn evidence(home: &Home, command: EvidenceCommand) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    match command {
        EvidenceCommand::List { task, json } => {
            let list: Vec<EvidenceMeta> =
                client.call::<method::EvidenceList>(EvidenceListParams { task_id: task })?;
            if json {
                raw!("{}", pretty(&list));
            } else {
                crate::print::print_evidence_header(list.is_empty());
                list.iter().for_each(print_evidence_line);
            }
        }
        EvidenceCommand::Show { id, json } => {
            let meta: EvidenceMeta = client.call::<method::EvidenceGet>(EvidenceRef { id })?;
            if json {
                raw!("{}", pretty(&meta));
            } else {
                print_meta(&meta);
            }
        }
        EvidenceCommand::Read { id, offset, limit, lines, json } => {
            let unit = if lines { Unit::Lines } else { Unit::Bytes };
            let params = EvidenceReadParams { id, offset: Some(offset), limit, unit: Some(unit) };
            let page: Page = client.call::<method::EvidenceRead>(params)?;
            if json {
                raw!("{}", pretty(&page));
                return Ok(exit::OK);
            }
            // The data as it is (no newline added) when it goes to a file or a program; to a
            // terminal, made safe like every other text a tool or a file wrote. Where to go on, on
            // stderr.
            if crate::print::to_a_terminal() {
                crate::print::bytes(agentd_client::terminal::safe(&page.data).as_bytes());
            } else {
                crate::print::bytes(page.data.as_bytes());
            }
            if let Some(next) = page.next_offset {
                crate::print::warn(&format!("\n(more: --offset {next})"));
            }
        }
        EvidenceCommand::Verify { json } => {
            let r: VerifyResult = client.call::<method::EvidenceVerify>(NoParams {})?;
            if json {
                raw!("{}", pretty(&r));
            } else {
                print_verify(&r);
            }
            if !r.problems.is_empty() {
                return Ok(exit::FAILED);
            }
        }
    }
    Ok(exit::OK)
}
