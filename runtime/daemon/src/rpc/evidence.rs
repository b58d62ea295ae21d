//! The `evidence.*` methods: the archive's items, their metadata, a page of one, and a re-hash of
//! every blob.

use super::{Answer, Methods};
use agentd_protocol::evidence::{EvidenceMeta, Page, Unit};
use agentd_protocol::rpc::{
    method, EvidenceListParams, EvidenceReadParams, EvidenceRef, Handle, NoParams, VerifyResult,
};

impl Handle<method::EvidenceList> for Methods {
    async fn handle(&self, p: EvidenceListParams) -> Answer<Vec<EvidenceMeta>> {
        Ok(self.shared.storage.evidence_list(p.task_id.as_deref())?)
    }
}

impl Handle<method::EvidenceGet> for Methods {
    async fn handle(&self, p: EvidenceRef) -> Answer<EvidenceMeta> {
        Ok(self.shared.storage.evidence(&p.id)?)
    }
}

/// A page of 64 KiB unless a limit is given, 4 MiB at the most.
impl Handle<method::EvidenceRead> for Methods {
    async fn handle(&self, p: EvidenceReadParams) -> Answer<Page> {
        let offset = p.offset.unwrap_or(0);
        let limit = p.limit.unwrap_or(64 << 10).min(4 << 20);
        let unit = p.unit.unwrap_or(Unit::Bytes);
        Ok(self.shared.storage.read_evidence(&p.id, offset, limit, unit)?)
    }
}

impl Handle<method::EvidenceVerify> for Methods {
    async fn handle(&self, _: NoParams) -> Answer<VerifyResult> {
        let problems = self.shared.storage.verify_evidence()?;
        let checked = self.shared.storage.evidence_list(None)?.len() as u64;
        Ok(VerifyResult { checked, problems })
    }
}
