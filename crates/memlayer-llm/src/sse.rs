//! An incremental parser for server-sent events, reduced to what chat streams use: the
//! `data` of each event. Bytes arrive in arbitrary pieces (a network chunk can end inside a
//! line, a UTF-8 character or a `\r\n`), so the parser keeps the unfinished line between
//! calls and yields an event only once the blank line that ends it has arrived.
//!
//! It follows the WHATWG rules for lines (`\n`, `\r\n` or `\r`), comments (`:`), the optional
//! space after `data:`, and multi-line data (joined with `\n`); other fields (`event`, `id`,
//! `retry`) are ignored. Invalid UTF-8 is replaced rather than rejected: the JSON parser after
//! it reports the damage as a malformed chunk.

/// Parser state between two pieces of input.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes after the last line break seen.
    pending: Vec<u8>,
    /// The data lines of the event being read, joined with `\n`.
    data: String,
    /// Whether the event being read has a `data` field; an event with `data:` and nothing
    /// after it still counts, one without any `data` line does not.
    has_data: bool,
}

impl SseParser {
    /// Feeds the next piece of the body and appends the data of every event it completes.
    pub(crate) fn push(&mut self, bytes: &[u8], events: &mut Vec<String>) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(offset) = self.pending[start..]
            .iter()
            .position(|&byte| byte == b'\n' || byte == b'\r')
        {
            let end = start + offset;
            let break_len = match (self.pending[end], self.pending.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A `\r` at the end of the input may be the first half of a `\r\n`; wait for
                // the next piece so the `\n` is not taken for an empty line ending the event.
                (b'\r', None) => break,
                _ => 1,
            };
            let line = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
            self.line(&line, events);
            start = end + break_len;
        }
        self.pending.drain(..start);
    }

    /// Ends the input. A last event whose closing blank line never came is still delivered:
    /// the spec would drop it, but a server that closes right after `data: [DONE]` has said
    /// everything it meant to.
    pub(crate) fn finish(&mut self, events: &mut Vec<String>) {
        if !self.pending.is_empty() {
            // `push` leaves a final `\r` waiting for a `\n` that can no longer come.
            let line = self.pending.strip_suffix(b"\r").unwrap_or(&self.pending);
            let line = String::from_utf8_lossy(line).into_owned();
            self.pending.clear();
            self.line(&line, events);
        }
        self.line("", events);
    }

    fn line(&mut self, line: &str, events: &mut Vec<String>) {
        if line.is_empty() {
            if self.has_data {
                events.push(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        // An empty field name is a comment (`: keep-alive`); other fields carry nothing a
        // chat stream uses.
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::SseParser;

    fn parse_in_pieces(pieces: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut events);
        }
        parser.finish(&mut events);
        events
    }

    #[test]
    fn openai_style_events() {
        let body = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
        assert_eq!(
            parse_in_pieces(&[body]),
            ["{\"a\":1}", "{\"b\":2}", "[DONE]"]
        );
    }

    #[test]
    fn line_breaks_comments_and_fields() {
        let body = b": keep-alive\r\n\r\nevent: message\rid: 7\rdata:x\r\rdata: one\ndata: two\n\n";
        assert_eq!(parse_in_pieces(&[body]), ["x", "one\ntwo"]);
    }

    #[test]
    fn crlf_split_between_pieces_is_one_break() {
        // Were the `\r` taken as a break on its own, the `\n` after it would be an empty line
        // and end the event after `a`, splitting one event into two.
        let events = parse_in_pieces(&[b"data: a\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(events, ["a\nb"]);
    }

    #[test]
    fn event_without_closing_blank_line_is_delivered_at_the_end() {
        assert_eq!(parse_in_pieces(&[b"data: [DONE]"]), ["[DONE]"]);
        assert_eq!(parse_in_pieces(&[b"data: [DONE]\n"]), ["[DONE]"]);
        assert_eq!(parse_in_pieces(&[b"data: [DONE]\r"]), ["[DONE]"]);
    }

    #[test]
    fn blank_lines_without_data_are_no_event() {
        assert!(parse_in_pieces(&[b"\n\n: comment\n\nevent: ping\n\n"]).is_empty());
    }

    #[test]
    fn empty_data_is_an_event() {
        assert_eq!(parse_in_pieces(&[b"data\n\ndata:\n\n"]), ["", ""]);
    }

    fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
        // Mostly the bytes that matter to the grammar, so the cases are not all one long line.
        let byte = prop_oneof![
            Just(b'\n'),
            Just(b'\r'),
            Just(b':'),
            Just(b' '),
            Just(b'd'),
            Just(b'a'),
            Just(b't'),
            any::<u8>(),
        ];
        prop::collection::vec(byte, 0..200)
    }

    proptest! {
        /// However the network cuts the body, the events are the same as from one piece, and
        /// no input makes the parser panic.
        #[test]
        fn pieces_do_not_change_the_events(
            body in sse_bytes(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for cut in cuts {
                pieces.push(&body[start..cut]);
                start = cut;
            }
            pieces.push(&body[start..]);
            prop_assert_eq!(parse_in_pieces(&pieces), parse_in_pieces(&[&body]));
        }
    }
}
