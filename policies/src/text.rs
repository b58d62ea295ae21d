//! Cutting text by size without splitting a character.

/// The largest byte index at most `max_bytes` that falls on a character boundary of `text` (its
/// length when it is shorter): where a cut to at most `max_bytes` bytes may go.
pub fn floor_boundary(text: &str, max_bytes: usize) -> usize {
    let mut cut = max_bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// Shortens `text` to at most `max_bytes` bytes, at a character boundary.
pub fn truncate_bytes(text: &mut String, max_bytes: usize) {
    let cut = floor_boundary(text, max_bytes);
    text.truncate(cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_between_characters() {
        assert_eq!(floor_boundary("héllo", 2), 1, "é is two bytes: a cut at 2 would split it");
        assert_eq!(floor_boundary("héllo", 3), 3);
        assert_eq!(floor_boundary("ab", 10), 2);
        let mut s = String::from("ééé");
        truncate_bytes(&mut s, 5);
        assert_eq!(s, "éé");
    }
}
