//! What an MCP tool answered, as agentd gives it to a model: one text and the images.
//!
//! A `tools/call` result is a list of content blocks and, optionally, structured content. The text
//! blocks become the result's text, in order, one per line; an embedded text resource is its text
//! under a `[resource URI]` line; what a model cannot read (audio, a binary resource) is a line
//! saying what it was; a resource link is a line naming it. With no content at all, the structured
//! content is the text (as JSON). Images stay images: the provider shows them to the model, and
//! they are counted by the provider's rule like any image. `isError: true` makes the whole an error
//! result. An image that is not base64 or of a type no provider takes makes the result invalid: the
//! model is told so instead of being sent what the provider would refuse.

use super::error::McpError;
use agentd_engine::tool_servers::{Image, ToolReply};
use agentd_protocol::McpTool;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// The image types the providers take in a request (OpenAI and Anthropic alike).
pub const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The result of `tool`'s call as a model gets it, or why it is not a valid result.
pub fn outcome(tool: &McpTool, result: CallToolResult) -> Result<ToolReply, McpError> {
    let invalid = |reason: String| McpError::Invalid { tool: tool.to_string(), reason };
    let mut lines: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for block in result.content {
        match block {
            ContentBlock::Text(t) => lines.push(t.text),
            ContentBlock::Image(image) => {
                if !IMAGE_TYPES.contains(&image.mime_type.as_str()) {
                    return Err(invalid(format!(
                        "an image of type {:?}; the models take {}",
                        image.mime_type,
                        IMAGE_TYPES.join(", ")
                    )));
                }
                let bytes = decode_base64(&image.data).ok_or_else(|| {
                    invalid(format!("an {} image whose data is not base64", image.mime_type))
                })?;
                images.push(Image { media_type: image.mime_type, data: image.data, bytes });
            }
            ContentBlock::Audio(audio) => lines.push(format!(
                "[audio {}, {} bytes of base64: not shown]",
                audio.mime_type,
                audio.data.len()
            )),
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    lines.push(format!("[resource {uri}]\n{text}"))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => lines.push(format!(
                    "[resource {uri} ({}), {} bytes of base64: not shown]",
                    mime_type.as_deref().unwrap_or("binary"),
                    blob.len()
                )),
                _ => lines.push("[a resource of a kind agentd does not know: not shown]".to_string()),
            },
            ContentBlock::ResourceLink(link) => {
                lines.push(format!("[resource link {}: {}]", link.uri, link.name))
            }
            // A kind of content newer than this build knows.
            _ => lines.push("[content of a kind agentd does not know: not shown]".to_string()),
        }
    }
    if lines.is_empty() && images.is_empty() {
        if let Some(structured) = result.structured_content {
            lines.push(serde_json::to_string_pretty(&structured).unwrap_or_default());
        } else {
            lines.push("(no content)".to_string());
        }
    }
    Ok(ToolReply { ok: !result.is_error.unwrap_or(false), text: lines.join("\n"), images })
}

/// Standard base64 (padding optional, whitespace ignored), decoded; `None` when it is not base64.
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let clean: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let body = clean.strip_suffix(b"==").or_else(|| clean.strip_suffix(b"=")).unwrap_or(&clean);
    if body.is_empty() || body.len() % 4 == 1 || (clean.len() != body.len() && !clean.len().is_multiple_of(4))
    {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Resource;
    use serde_json::json;

    fn tool() -> McpTool {
        McpTool::new("fix", "t").unwrap()
    }

    #[test]
    fn base64_decodes_with_and_without_padding_and_refuses_the_rest() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVs\nbG8h").unwrap(), b"hello!");
        assert_eq!(decode_base64("aA==").unwrap(), b"h");
        for bad in ["", "not base64 at all!", "a", "aGVsbG8=x", "aGV=sbG8", "aGVsbG8==="] {
            assert_eq!(decode_base64(bad), None, "{bad:?}");
        }
        let png = decode_base64(agentd_test_support::mcp::PIXEL_PNG).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }

    #[test]
    fn text_resources_and_images_become_one_text_and_the_images() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("first"),
            ContentBlock::image(agentd_test_support::mcp::PIXEL_PNG, "image/png"),
            ContentBlock::resource(ResourceContents::text("notes", "file:///n.txt")),
            ContentBlock::resource_link(Resource::new("file:///d.csv", "d.csv")),
            ContentBlock::audio("AAAA", "audio/wav"),
        ]);
        let out = outcome(&tool(), result).unwrap();
        assert!(out.ok);
        assert_eq!(
            out.text,
            "first\n[resource file:///n.txt]\nnotes\n[resource link file:///d.csv: d.csv]\n\
             [audio audio/wav, 4 bytes of base64: not shown]"
        );
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].media_type, "image/png");
    }

    #[test]
    fn an_error_result_structured_content_and_nothing_at_all() {
        let failed =
            outcome(&tool(), CallToolResult::error(vec![ContentBlock::text("no such file")])).unwrap();
        assert_eq!((failed.ok, failed.text.as_str()), (false, "no such file"));
        let structured = outcome(&tool(), CallToolResult::structured(json!({"n": 1}))).unwrap();
        assert!(structured.text.contains("\"n\""), "{}", structured.text);
        let empty = outcome(&tool(), CallToolResult::success(vec![])).unwrap();
        assert_eq!(empty.text, "(no content)");
    }

    #[test]
    fn an_image_no_provider_takes_is_an_invalid_result_naming_the_tool() {
        let bad_data = CallToolResult::success(vec![ContentBlock::image("not base64!", "image/png")]);
        let e = outcome(&tool(), bad_data).unwrap_err().to_string();
        assert!(e.contains("mcp__fix__t") && e.contains("not base64"), "{e}");
        let bad_type = CallToolResult::success(vec![ContentBlock::image("AAAA", "image/tiff")]);
        let e = outcome(&tool(), bad_type).unwrap_err().to_string();
        assert!(e.contains("image/tiff") && e.contains("image/png"), "{e}");
    }
}
