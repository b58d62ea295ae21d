//! A file name as text, whatever its bytes: how a path that is not UTF-8 crosses the wire.
//!
//! A Linux file name is any bytes but `/` and NUL; the protocol speaks JSON strings. Every path a
//! checkpoint, a diff, a revert or a working copy's patch names is [`encode`]d from its bytes and
//! [`decode`]d back to them before anything is opened, so a name that is not UTF-8 is recorded,
//! diffed and put back byte for byte instead of being passed over.
//!
//! The text is the name itself when the name is UTF-8 (all but freak names): each byte that is not
//! part of valid UTF-8 becomes one character of a private range, byte 0xNN as U+10FFNN — such a
//! byte is always 0x80 or above. A name that really holds a character of that range (the last 128
//! code points of Unicode, private use) has that character's own four bytes escaped the same way, so
//! no text is ambiguous: `decode(encode(b)) == b` for every byte string, and a text that holds no
//! character of the range means its own UTF-8.
//!
//! A person sees an escaped byte as `\xNN` (the client's `terminal::safe`), as git and `ls` show one.

/// The first character of the escape range: byte 0x80's. Byte `b` (0x80..=0xFF) is
/// `ESCAPE_BASE + (b - 0x80)`.
const ESCAPE_BASE: u32 = 0x10_FF80;

/// Whether `c` is an escaped byte.
pub fn is_escape(c: char) -> bool {
    u32::from(c) >= ESCAPE_BASE
}

/// The byte an escape character stands for (`None` for any other character).
pub fn escaped_byte(c: char) -> Option<u8> {
    u32::from(c).checked_sub(ESCAPE_BASE).and_then(|d| u8::try_from(d + 0x80).ok())
}

/// The escape character of byte `b` (0x80 or above).
fn escape(b: u8) -> char {
    // 0x10FF80 + (0..=0x7F) is at most 0x10FFFF, a valid scalar value.
    char::from_u32(ESCAPE_BASE + u32::from(b.saturating_sub(0x80))).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The text of a name (or of a path: `/` is ASCII and stays as it is) given as bytes.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_escape(c) {
                let mut buf = [0; 4];
                out.extend(c.encode_utf8(&mut buf).bytes().map(escape));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().copied().map(escape));
    }
    out
}

/// The bytes of a name (or path) [`encode`] wrote.
pub fn decode(text: &str) -> Vec<u8> {
    if !text.chars().any(is_escape) {
        return text.as_bytes().to_vec();
    }
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match escaped_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes come back as they were.
        #[test]
        fn every_name_comes_back_byte_for_byte(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(decode(&encode(&bytes)), bytes);
        }

        /// A UTF-8 name without a character of the escape range is its own text.
        #[test]
        fn a_utf8_name_is_its_own_text(text in "\\PC{0,30}") {
            prop_assume!(!text.chars().any(is_escape));
            prop_assert_eq!(encode(text.as_bytes()), text.clone());
            prop_assert_eq!(decode(&text), text.into_bytes());
        }

        /// Escaped names mixing everything still come back: real escape-range characters, invalid
        /// bytes, plain text.
        #[test]
        fn mixed_names_come_back(parts in proptest::collection::vec(prop_oneof![
            "[a-z/]{1,4}".prop_map(String::into_bytes),
            (0x10_FF80u32..=0x10_FFFF).prop_map(|c| char::from_u32(c).unwrap().to_string().into_bytes()),
            proptest::collection::vec(0x80u8..=0xff, 1..3),
        ], 0..8)) {
            let bytes: Vec<u8> = parts.concat();
            prop_assert_eq!(decode(&encode(&bytes)), bytes);
        }
    }

    #[test]
    fn an_invalid_byte_is_one_character_of_the_range() {
        // Byte 0xNN is U+10FFNN.
        let text = encode(b"caf\xe9.txt");
        assert_eq!(text, "caf\u{10ffe9}.txt");
        assert_eq!(text.chars().count(), 8);
        assert_eq!(text.chars().nth(3).and_then(escaped_byte), Some(0xe9));
        assert_eq!(encode("café.txt".as_bytes()), "café.txt");
        assert_eq!(escaped_byte('a'), None);
    }
}
