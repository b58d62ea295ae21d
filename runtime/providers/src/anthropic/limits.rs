//! What the Messages API requires of a request's size: a `max_tokens` always, above the thinking
//! budget when there is one, and at most [`MAX_CACHE_BREAKPOINTS`] cache breakpoints.

use agentd_protocol::ChatRequest;

/// `max_tokens` is required by the Messages API; this is sent when the request names none.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// With extended thinking, `max_tokens` (which includes the thinking) is at least the budget plus
/// this much room for the answer itself.
pub const THINKING_ANSWER_ROOM: u32 = 4096;
/// Anthropic accepts at most this many `cache_control` breakpoints in one request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The `max_tokens` sent: Anthropic requires one, and with thinking it must exceed the budget.
pub(super) fn max_tokens(req: &ChatRequest) -> u32 {
    let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if let Some(budget) = req.thinking_budget {
        max_tokens = max_tokens.max(budget.saturating_add(THINKING_ANSWER_ROOM));
    }
    max_tokens
}
