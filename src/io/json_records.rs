//! Streaming reader for the native dataset files: a JSON array of records (HotpotQA,
//! 2Wiki) or JSON lines (MuSiQue), either optionally gzip-compressed. The layout is
//! detected from the content (gzip magic bytes, then the first non-blank character),
//! never from the file name. Records are handed to a callback one at a time, so a
//! multi-gigabyte training file never sits in memory as a whole.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use flate2::read::MultiGzDecoder;
use serde::de::{DeserializeSeed, Deserializer, Error as _, SeqAccess, Visitor};
use serde_json::Value;

/// Read buffer size; large enough that the JSON parser rarely waits on the decoder.
const BUFFER_BYTES: usize = 1 << 20;

/// One record of a native file: its 0-based position in the file and the parsed value,
/// or why that record cannot be parsed (only JSON lines can lose a single record; a
/// syntax error inside a JSON array ends the file with an error).
pub struct Record {
    pub index: u64,
    pub value: std::result::Result<Value, String>,
}

/// Calls `each` for every record of `path` in file order and returns the number of
/// records. An error returned by `each` stops the reading and is passed on.
pub fn for_each_record(path: &Path, mut each: impl FnMut(Record) -> Result<()>) -> Result<u64> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut raw = BufReader::with_capacity(BUFFER_BYTES, file);
    let gzip = raw.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let mut reader: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::with_capacity(
            BUFFER_BYTES,
            MultiGzDecoder::new(raw),
        ))
    } else {
        Box::new(raw)
    };
    let first = skip_blank(&mut reader).with_context(|| format!("reading {}", path.display()))?;
    match first {
        Some(b'[') => read_array(path, reader, &mut each),
        Some(b'{') => read_lines(path, reader, &mut each),
        Some(other) => bail!(
            "{} starts with {:?}; expected a JSON array (`[`) or JSON lines (`{{` on each line), optionally gzip-compressed",
            path.display(),
            other as char
        ),
        None => Ok(0),
    }
}

/// Consumes whitespace and a UTF-8 byte-order mark; returns the next byte without
/// consuming it (`None` at end of input).
fn skip_blank(reader: &mut dyn BufRead) -> Result<Option<u8>> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(None);
        }
        if buf.starts_with(&[0xef, 0xbb, 0xbf]) {
            reader.consume(3);
            continue;
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(k) => {
                let b = buf[k];
                reader.consume(k);
                return Ok(Some(b));
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

/// Parses a top-level JSON array element by element. Errors from `each` pass unchanged.
fn read_array(
    path: &Path,
    reader: impl Read,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<u64> {
    let mut stopped = None;
    let mut de = serde_json::Deserializer::from_reader(reader);
    let seed = Elements {
        each,
        stopped: &mut stopped,
    };
    let outcome = seed.deserialize(&mut de).and_then(|n| de.end().map(|()| n));
    match (outcome, stopped) {
        (_, Some(e)) => Err(e),
        (Ok(n), None) => Ok(n),
        (Err(e), None) => Err(anyhow!(
            "{} is not a valid JSON array: {e} (a syntax error inside a JSON array cannot be skipped; repair the file or convert it to JSON lines)",
            path.display()
        )),
    }
}

/// Seed and visitor that hand each array element to the callback; an error from the
/// callback is parked in `stopped` (serde errors cannot carry it).
struct Elements<'a> {
    each: &'a mut dyn FnMut(Record) -> Result<()>,
    stopped: &'a mut Option<anyhow::Error>,
}

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<u64, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of question records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<u64, A::Error> {
        let mut index = 0;
        while let Some(value) = seq.next_element::<Value>()? {
            if let Err(e) = (self.each)(Record {
                index,
                value: Ok(value),
            }) {
                *self.stopped = Some(e);
                return Err(A::Error::custom("stopped by the record handler"));
            }
            index += 1;
        }
        Ok(index)
    }
}

/// Parses one JSON value per non-blank line; a line that is not valid JSON (or not
/// UTF-8) becomes a record with an error instead of stopping the file. Errors from
/// `each` pass unchanged.
fn read_lines(
    path: &Path,
    mut reader: impl BufRead,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<u64> {
    let (mut index, mut line_no) = (0u64, 0u64);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(index);
        }
        line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = serde_json::from_slice::<Value>(&line)
            .map_err(|e| format!("line {line_no} is not valid JSON: {e}"));
        each(Record { index, value })?;
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn collect(path: &Path) -> Vec<std::result::Result<Value, String>> {
        let mut out = Vec::new();
        let n = for_each_record(path, |r| {
            assert_eq!(r.index as usize, out.len());
            out.push(r.value);
            Ok(())
        })
        .unwrap();
        assert_eq!(n as usize, out.len());
        out
    }

    #[test]
    fn reads_arrays_and_lines_plain_or_gzipped() {
        let dir = tempfile::tempdir().unwrap();
        let array = dir.path().join("a.json");
        std::fs::write(&array, "\u{feff} \n[{\"a\": 1}, {\"a\": [2, 3]}]\n").unwrap();
        assert_eq!(
            collect(&array),
            vec![
                Ok(serde_json::json!({"a": 1})),
                Ok(serde_json::json!({"a": [2, 3]}))
            ]
        );

        // Gzip detected by content, not by the (misleading) extension.
        let lines = dir.path().join("b.json");
        let mut gz = flate2::write::GzEncoder::new(
            File::create(&lines).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(b"{\"a\": 1}\n\n{\"a\": oops}\n{\"a\": 3}")
            .unwrap();
        gz.finish().unwrap();
        let got = collect(&lines);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Ok(serde_json::json!({"a": 1})));
        assert!(
            got[1]
                .as_ref()
                .unwrap_err()
                .starts_with("line 3 is not valid JSON"),
            "{:?}",
            got[1]
        );
        assert_eq!(got[2], Ok(serde_json::json!({"a": 3})));
    }

    #[test]
    fn array_syntax_errors_and_handler_errors_stop_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        std::fs::write(&p, "[{\"a\": 1}, {\"a\": }]").unwrap();
        let err = format!("{:#}", for_each_record(&p, |_| Ok(())).unwrap_err());
        assert!(err.contains("cannot be skipped"), "{err}");

        std::fs::write(&p, "[1, 2, 3]").unwrap();
        let mut seen = 0;
        let err = for_each_record(&p, |_| {
            seen += 1;
            if seen == 2 {
                bail!("disk full")
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!((err.to_string(), seen), ("disk full".to_string(), 2));

        std::fs::write(&p, "id,question\n").unwrap();
        let err = for_each_record(&p, |_| Ok(())).unwrap_err().to_string();
        assert!(err.contains("starts with 'i'"), "{err}");
    }
}
