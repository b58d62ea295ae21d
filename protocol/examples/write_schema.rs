//! Writes `docs/protocol.schema.json` and `docs/openapi.json` from the protocol's types (the test
//! `schema` checks both).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

fn main() -> std::io::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol.schema.json");
    std::fs::write(&path, agentd_protocol::schema::protocol_schema_text())?;
    println!("wrote {}", path.display());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    std::fs::write(&path, agentd_protocol::openapi::openapi_text())?;
    println!("wrote {}", path.display());
    Ok(())
}
