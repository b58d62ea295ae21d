use super::*;
use std::io::Cursor;

fn lines_of(input: &[u8], max: usize) -> Vec<Line> {
    let mut input = Cursor::new(input.to_vec());
    std::iter::from_fn(|| next_line(&mut input, max).unwrap()).collect()
}

fn refused(line: &Line) -> &Value {
    match line {
        Line::Refused(answer) => answer,
        Line::Json(text) => panic!("passed through: {text}"),
    }
}

#[test]
fn json_lines_pass_whole_and_blank_lines_and_a_trailing_cr_go() {
    let got = lines_of(b"{\"a\":1}\r\n\n   \r\n[1,2]\n\"last, no newline\"", 1024);
    assert_eq!(
        got,
        vec![
            Line::Json("{\"a\":1}".into()),
            Line::Json("[1,2]".into()),
            Line::Json("\"last, no newline\"".into())
        ]
    );
    assert!(lines_of(b"", 1024).is_empty());
}

#[test]
fn a_line_that_is_not_utf8_is_a_parse_error_and_the_next_line_is_read() {
    let got = lines_of(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\xff\"}\n{\"ok\":true}\n", 1024);
    assert_eq!(got.len(), 2);
    let answer = refused(&got[0]);
    assert_eq!(answer["id"], Value::Null);
    assert_eq!(answer["error"]["code"], -32700);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("not valid UTF-8 (at byte 35)"), "{message}");
    assert_eq!(answer["error"]["data"]["line"], "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\u{fffd}\"}");
    assert!(answer["error"]["data"].get("cut_bytes").is_none(), "whole: {answer}");
    assert_eq!(got[1], Line::Json("{\"ok\":true}".into()));
}

#[test]
fn a_long_malformed_line_is_quoted_cut_and_says_how_much_was_cut() {
    let mut long = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/prompt\",\"params\":".to_vec();
    long.extend(std::iter::repeat_n(b'x', 100_000));
    long.push(b'\n');
    let got = lines_of(&long, 1 << 20);
    let answer = refused(&got[0]);
    assert_eq!(answer["error"]["code"], -32700);
    assert!(answer["error"]["message"].as_str().unwrap().starts_with("Parse error: the line is not JSON"));
    let data = &answer["error"]["data"];
    let shown = data["line"].as_str().unwrap();
    assert_eq!(shown.len(), QUOTED);
    assert!(shown.starts_with("{\"jsonrpc\""));
    let total = long.len() - 1;
    assert_eq!(
        (data["line_bytes"].as_u64(), data["cut_bytes"].as_u64()),
        (Some(total as u64), Some((total - QUOTED) as u64))
    );
    // The whole answer stays small.
    assert!(answer.to_string().len() < 2 * QUOTED, "{}", answer.to_string().len());
    // Cut on a character boundary: a 3-byte character straddling the cut is left out whole.
    let mut wide = b"[".to_vec();
    wide.extend(std::iter::repeat_n(b'a', QUOTED - 2));
    wide.extend("€€€ and no end".as_bytes());
    let answer = refused(&lines_of(&wide, 1 << 20)[0]).clone();
    assert_eq!(answer["error"]["data"]["line"].as_str().unwrap().len(), QUOTED - 1);
}

#[test]
fn a_line_over_the_bound_is_dropped_as_it_comes_and_the_next_is_read() {
    let mut input = vec![b'{'; 5000];
    input.extend(b"\n{\"next\":1}\n");
    // A reader that hands out 100 bytes at a time, as a pipe might.
    let mut reader = BufReader::with_capacity(100, Cursor::new(input));
    let first = next_line(&mut reader, 1000).unwrap().unwrap();
    let answer = refused(&first);
    assert_eq!(answer["error"]["code"], -32600);
    assert_eq!(answer["id"], Value::Null);
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("request line over 1000 bytes: 5000 bytes"));
    assert_eq!(answer["error"]["data"], json!({"max_bytes": 1000, "line_bytes": 5000}));
    assert_eq!(next_line(&mut reader, 1000).unwrap(), Some(Line::Json("{\"next\":1}".into())));
    assert_eq!(next_line(&mut reader, 1000).unwrap(), None);
    // Exactly at the bound is a line; one byte over is not.
    assert!(matches!(&lines_of(&[b'7'; 1000], 1000)[0], Line::Json(_)));
    assert!(matches!(&lines_of(&[b'7'; 1001], 1000)[0], Line::Refused(_)));
}

use proptest::prelude::*;

proptest! {
    /// Whatever the bytes and however the reads split them, the lines are those between newlines:
    /// each over the bound refused with its length, each other judged whole — and nothing panics.
    #[test]
    fn the_lines_are_the_same_however_the_reads_split_them(
        lines in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![
                any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
                Just(b'{'),
                Just(b'1'),
                Just(b'\r'),
            ], 0..300),
            0..8,
        ),
        capacity in 1usize..64,
        max in 1usize..200,
    ) {
        let mut input = Vec::new();
        for line in &lines {
            input.extend(line);
            input.push(b'\n');
        }
        let expected: Vec<Line> = lines
            .iter()
            .filter_map(|line| match line.len() > max {
                true => Some(Line::Refused(error(
                    -32600,
                    format!("request line over {max} bytes: {} bytes were read and dropped", line.len()),
                    json!({ "max_bytes": max, "line_bytes": line.len() }),
                ))),
                false => judge(line.clone()),
            })
            .collect();
        let mut reader = BufReader::with_capacity(capacity, Cursor::new(input));
        let got: Vec<Line> = std::iter::from_fn(|| next_line(&mut reader, max).unwrap()).collect();
        prop_assert_eq!(got, expected);
    }
}
