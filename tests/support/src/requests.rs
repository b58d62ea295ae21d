//! Telling a team's requests apart at the server, on either wire protocol: a summary request (a
//! folding one with the summariser's own system prompt, or one continuing a role's request with tools
//! forbidden), the lead's (it alone may `delegate`), or the coder's.

use serde_json::Value;

/// How agentd's summariser system prompt begins.
pub const SUMMARISER_SYSTEM_START: &str = "You compact the working history";

/// The system prompt of a chat body: OpenAI's first `system` message, or Anthropic's `system` (a
/// string or text blocks).
fn system_text(body: &Value) -> Option<&str> {
    let openai = &body["messages"][0];
    if openai["role"] == "system" {
        return openai["content"].as_str();
    }
    body["system"].as_str().or_else(|| body["system"][0]["text"].as_str())
}

/// A summary request (`tool_choice: "none"` / `{"type": "none"}`, or the summariser's system prompt).
pub fn is_summary_request(body: &Value) -> bool {
    body["tool_choice"] == "none"
        || body["tool_choice"]["type"] == "none"
        || system_text(body).is_some_and(|s| s.starts_with(SUMMARISER_SYSTEM_START))
}

/// Whether the body offers a tool of this name (OpenAI `function.name`, Anthropic `name`).
pub fn offers_tool(body: &Value, name: &str) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == name || t["name"] == name))
}

/// The lead's request: the only role that may delegate.
pub fn is_lead_request(body: &Value) -> bool {
    !is_summary_request(body) && offers_tool(body, "delegate")
}

/// The coder's request (in a lead + coder team): neither a summary nor the lead's.
pub fn is_coder_request(body: &Value) -> bool {
    !is_summary_request(body) && !offers_tool(body, "delegate")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_wire_protocols() {
        let delegate_openai = json!([{"type": "function", "function": {"name": "delegate"}}]);
        let lead =
            json!({"messages": [{"role": "system", "content": "You lead."}], "tools": delegate_openai});
        assert!(is_lead_request(&lead) && !is_coder_request(&lead) && !is_summary_request(&lead));
        let in_place = json!({"messages": [], "tools": delegate_openai, "tool_choice": "none"});
        assert!(is_summary_request(&in_place) && !is_lead_request(&in_place));
        let fold =
            json!({"messages": [{"role": "system", "content": "You compact the working history of…"}]});
        assert!(is_summary_request(&fold) && !is_coder_request(&fold));
        let anthropic_lead =
            json!({"system": [{"type": "text", "text": "You lead."}], "tools": [{"name": "delegate"}]});
        assert!(is_lead_request(&anthropic_lead));
        let anthropic_fold = json!({"system": [{"type": "text", "text": "You compact the working history"}]});
        assert!(is_summary_request(&anthropic_fold));
        let anthropic_in_place =
            json!({"system": "s", "tools": [{"name": "read_file"}], "tool_choice": {"type": "none"}});
        assert!(is_summary_request(&anthropic_in_place));
        let coder = json!({"system": "s", "tools": [{"name": "read_file"}]});
        assert!(is_coder_request(&coder));
    }
}
