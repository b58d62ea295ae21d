use super::*;
use proptest::prelude::*;

fn event(name: &str, data: &str) -> Event {
    Event { name: name.into(), data: data.into() }
}

/// The events of `pieces` fed one after the other, and the error that stopped the reading if one
/// did.
fn read_pieces(cap: usize, pieces: &[&[u8]]) -> (Vec<Event>, Option<ReadError>) {
    let mut reader = Reader::new(cap);
    let mut events = Vec::new();
    for piece in pieces {
        if let Err(e) = reader.feed(piece, &mut events) {
            return (events, Some(e));
        }
    }
    (events, None)
}

fn read(bytes: &[u8]) -> Vec<Event> {
    let (events, error) = read_pieces(MAX_EVENT_BYTES, &[bytes]);
    assert_eq!(error, None);
    events
}

/// The same rules written the plain way, over the whole stream at once: the oracle the reader's
/// pieces are held to. The events until the first error, and whether there was one.
fn reference(bytes: &[u8]) -> (Vec<Event>, bool) {
    let mut rest = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let mut lines = Vec::new();
    // A line is kept only with its end: the stream's last bytes without one are an unfinished line.
    while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
        lines.push(&rest[..end]);
        let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') { 2 } else { 1 };
        rest = &rest[end + skip..];
    }
    let (mut events, mut data, mut name) = (Vec::new(), Vec::<u8>::new(), Vec::<u8>::new());
    for line in lines {
        if line.is_empty() {
            let event_name = std::mem::take(&mut name);
            if data.is_empty() {
                continue;
            }
            data.pop();
            let Ok(text) = String::from_utf8(std::mem::take(&mut data)) else { return (events, true) };
            let event_name = if event_name.is_empty() {
                "message".to_string()
            } else {
                match String::from_utf8(event_name) {
                    Ok(n) => n,
                    Err(_) => return (events, true),
                }
            };
            events.push(Event { name: event_name, data: text });
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                data.extend_from_slice(value);
                data.push(b'\n');
            }
            b"event" => name = value.to_vec(),
            _ => {}
        }
    }
    (events, false)
}

/// `bytes` cut at `cuts` (any order, any repeats).
fn cut_at(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for to in cuts.into_iter().chain([bytes.len()]) {
        pieces.push(bytes[from..to].to_vec());
        from = to;
    }
    pieces
}

fn agrees_with_reference(bytes: &[u8], pieces: &[Vec<u8>]) -> Result<(), String> {
    let pieces: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    let (events, error) = read_pieces(MAX_EVENT_BYTES, &pieces);
    let (expected, failed) = reference(bytes);
    if events != expected || error.is_some() != failed {
        return Err(format!(
            "{:?} in {} pieces: read {events:?} {error:?}, the rules say {expected:?} (failed: {failed})",
            String::from_utf8_lossy(bytes),
            pieces.len()
        ));
    }
    Ok(())
}

const SAMPLE: &str = "\u{feff}: hello\n\
    data: {\"a\": 1}\n\n\
    event: delta\r\n\
    data:  two spaces\r\n\
    data:no space\r\n\
    data\r\n\
    id: 7\r\
    retry: 100\r\
    \r\
    :keep-alive\n\n\n\
    event: ping\n\
    data: ✓ héllo\n\
    \n\
    data: [DONE]\n\n";

#[test]
fn lines_end_at_lf_crlf_or_cr_and_data_lines_join_with_lf() {
    for end in ["\n", "\r\n", "\r"] {
        let stream = ["data: one", "data: two", "", "event: named", "data: three", ""].join(end) + end;
        assert_eq!(
            read(stream.as_bytes()),
            [event("message", "one\ntwo"), event("named", "three")],
            "{end:?}"
        );
    }
    assert_eq!(read(b"data: a\r\rdata: b\n\r\n"), [event("message", "a"), event("message", "b")]);
}

#[test]
fn the_sample_reads_as_the_rules_say() {
    assert_eq!(
        read(SAMPLE.as_bytes()),
        [
            event("message", "{\"a\": 1}"),
            event("delta", " two spaces\nno space\n"),
            event("ping", "✓ héllo"),
            event("message", "[DONE]"),
        ]
    );
}

#[test]
fn every_cut_of_the_sample_reads_the_same() {
    let bytes = SAMPLE.as_bytes();
    let whole = read(bytes);
    for at in 0..=bytes.len() {
        let (events, error) = read_pieces(MAX_EVENT_BYTES, &[&bytes[..at], &bytes[at..]]);
        assert_eq!((events, error), (whole.clone(), None), "cut at {at}");
    }
    let bytes_one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(read_pieces(MAX_EVENT_BYTES, &bytes_one_by_one), (whole, None));
}

#[test]
fn a_cr_ending_one_piece_and_a_lf_starting_the_next_are_one_line_end() {
    let (events, _) = read_pieces(MAX_EVENT_BYTES, &[b"data: a\r", b"\ndata: b\r", b"", b"\n\r", b"\n"]);
    assert_eq!(events, [event("message", "a\nb")]);
    // Two CRs are two line ends: the second one a blank line.
    let (events, _) = read_pieces(MAX_EVENT_BYTES, &[b"data: a\r", b"\r"]);
    assert_eq!(events, [event("message", "a")]);
}

#[test]
fn fields_comments_and_blank_lines() {
    // The value loses one space after the colon, no more; a name alone is a field with no value.
    assert_eq!(read(b"data:  x\n\n"), [event("message", " x")]);
    assert_eq!(read(b"data\n\n"), [event("message", "")]);
    assert_eq!(read(b"data:\ndata:\n\n"), [event("message", "\n")]);
    // Comments, ids, retries and unknown fields are no part of an event.
    assert_eq!(read(b": comment\nid: 1\nretry: 5\nfoo: bar\nfoo\n\n"), []);
    // A blank line with no data completes nothing and forgets the name.
    assert_eq!(read(b"event: lost\n\ndata: x\n\n"), [event("message", "x")]);
    // The last `event:` line wins; a colon in the value is the value's.
    assert_eq!(read(b"event: a\nevent: b\ndata: {\"k\": \"v:w\"}\n\n"), [event("b", "{\"k\": \"v:w\"}")]);
    // An event the stream ends inside is dropped, a finished line or not.
    assert_eq!(read(b"data: done\n\ndata: half\n"), [event("message", "done")]);
    assert_eq!(read(b"data: done\n\ndata: half"), [event("message", "done")]);
}

#[test]
fn a_byte_order_mark_is_skipped_only_at_the_start() {
    assert_eq!(read(b"\xEF\xBB\xBFdata: a\n\n"), [event("message", "a")]);
    let (events, _) = read_pieces(MAX_EVENT_BYTES, &[b"\xEF", b"\xBB", b"\xBF", b"data: a\n\n"]);
    assert_eq!(events, [event("message", "a")]);
    assert_eq!(read(b"\xEF\xBB\xBF\ndata: a\n\n"), [event("message", "a")]);
    assert_eq!(read(b"\xEF\xBB\xBF: comment\ndata: a\n\n"), [event("message", "a")]);
    // Later, it is part of a name nobody knows.
    assert_eq!(read(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"), [event("message", "a")]);
}

#[test]
fn utf8_is_checked_in_what_is_kept_and_may_split_anywhere() {
    let text = "data: ✓ héllo\n\n".as_bytes();
    for at in 0..text.len() {
        let (events, error) = read_pieces(MAX_EVENT_BYTES, &[&text[..at], &text[at..]]);
        assert_eq!((events, error), (vec![event("message", "✓ héllo")], None));
    }
    let (events, error) = read_pieces(MAX_EVENT_BYTES, &[b"data: ok\n\ndata: \xFF\xFE\n\ndata: never\n\n"]);
    assert_eq!(events, [event("message", "ok")]);
    assert!(matches!(error, Some(ReadError::NotUtf8 { what: "data", .. })), "{error:?}");
    let (_, error) = read_pieces(MAX_EVENT_BYTES, &[b"event: \xC3\ndata: x\n\n"]);
    assert!(matches!(error, Some(ReadError::NotUtf8 { what: "name", .. })), "{error:?}");
    // Bytes that are not kept are not read as text.
    assert_eq!(read(b": \xFF\xFE\nid: \xC3\ndata: fine\n\n"), [event("message", "fine")]);
}

#[test]
fn an_event_over_the_cap_stops_the_reading_with_its_size_so_far() {
    let cap = 16;
    // 15 bytes of data and its `\n`: exactly the cap.
    let (events, error) = read_pieces(cap, &[b"data: 0123456789abcde\n\n"]);
    assert_eq!((events, error), (vec![event("message", "0123456789abcde")], None));
    let (events, error) = read_pieces(cap, &[b"data: 0123456789", b"abcdef", b"gh\n\n"]);
    assert_eq!(events, []);
    assert_eq!(error, Some(ReadError::TooLarge { cap, size: 16 + 2 }));
    // Each event has its own cap; the joints and the name count.
    let (events, error) = read_pieces(cap, &[b"data: 0123456789abcde\n\ndata: 0123456789abcde\n\n"]);
    assert_eq!((events.len(), error), (2, None));
    let (_, error) = read_pieces(cap, &[b"event: abcdefgh\ndata: 01234567\n\n"]);
    assert_eq!(error, Some(ReadError::TooLarge { cap, size: 8 + 8 + 1 }));
    // A line with no colon yet is held, so it counts too.
    let long_name = format!("data{}", "a".repeat(20));
    let (_, error) = read_pieces(cap, &[long_name.as_bytes()]);
    assert_eq!(error, Some(ReadError::TooLarge { cap, size: 24 }));
    // What is not kept is not counted: a comment of any length costs nothing.
    let comment = format!(": {}\ndata: x\n\n", "k".repeat(10 * cap));
    assert_eq!(read_pieces(cap, &[comment.as_bytes()]), (vec![event("message", "x")], None));
}

#[test]
fn only_bytes_of_an_event_are_progress() {
    let mut reader = Reader::new(MAX_EVENT_BYTES);
    let mut events = Vec::new();
    let mut feed = |bytes: &[u8]| reader.feed(bytes, &mut events).unwrap();
    for idle in
        [&b": keep-alive\n\n"[..], b"\n", b"\r\n", b"id: 3\nretry: 10\n", b": ping", b"\n", b"", b"da"]
    {
        assert_eq!(feed(idle), Progress::Idle, "{:?}", String::from_utf8_lossy(idle));
    }
    // The name's end, then each part of the value, then its line end, then the blank line.
    for made in [&b"ta:"[..], b" {\"delta\"", b": \"x\"}", b"\n", b"\n", b"event: e", b"\n"] {
        assert_eq!(feed(made), Progress::Made, "{:?}", String::from_utf8_lossy(made));
    }
    assert_eq!(events, [event("message", "{\"delta\": \"x\"}")]);
}

fn piece() -> impl Strategy<Value = Vec<u8>> {
    let tokens: Vec<&'static [u8]> = vec![
        b"data: ",
        b"data:",
        b"data",
        b"event: ",
        b"event:",
        b": keep-alive",
        b":",
        b"id: 7",
        b"retry: 10",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
        b" ",
        b"{\"delta\": \"x\"}",
        "✓ héllo".as_bytes(),
        b"\xEF\xBB\xBF",
        b"\xFF",
        b"\xC3",
        b"[DONE]",
    ];
    prop_oneof![
        8 => prop::sample::select(tokens).prop_map(<[u8]>::to_vec),
        1 => Just(vec![b'x'; 300]),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// However a stream is cut into pieces, the reader reads from it what the rules (read from the
    /// whole stream at once) say it holds.
    #[test]
    fn any_cut_of_any_stream_reads_as_the_rules_say(
        parts in prop::collection::vec(piece(), 0..40),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let bytes = parts.concat();
        agrees_with_reference(&bytes, &cut_at(&bytes, &cuts)).map_err(TestCaseError::fail)?;
        agrees_with_reference(&bytes, &cut_at(&bytes, &[])).map_err(TestCaseError::fail)?;
    }

    /// Arbitrary bytes too, in pieces of any size down to one byte.
    #[test]
    fn any_bytes_in_pieces_of_any_size_read_as_the_rules_say(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        size in 1usize..40,
    ) {
        let pieces: Vec<Vec<u8>> = bytes.chunks(size).map(<[u8]>::to_vec).collect();
        agrees_with_reference(&bytes, &pieces).map_err(TestCaseError::fail)?;
    }
}
