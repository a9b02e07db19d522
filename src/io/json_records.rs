//! Streaming reader for the native dataset files: a JSON array of records (HotpotQA,
//! 2Wiki) or JSON lines (MuSiQue), either optionally gzip-compressed. The layout is
//! detected from the content (gzip magic bytes, then the first non-blank character),
//! never from the file name. Records are handed to a callback one at a time, so a
//! multi-gigabyte training file never sits in memory as a whole.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context, Result};
use flate2::read::MultiGzDecoder;
use serde_json::Value;

/// Read buffer size; large enough that the JSON parser rarely waits on the decoder.
const BUFFER_BYTES: usize = 1 << 20;

/// One record of a native file: its 0-based position in the file and the parsed value,
/// or why that record cannot be parsed.
pub struct Record {
    /// 0-based record number in the file (array element or non-blank line).
    pub index: u64,
    /// The parsed record, or why it is not valid JSON.
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

/// Where the element splitter is inside the JSON text.
#[derive(Default)]
struct Scan {
    /// Open `{`/`[` inside the current element.
    depth: u32,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
}

/// Reads a top-level JSON array (its `[` still unread) element by element: a byte scanner
/// finds each element's extent (tracking strings and nesting), then the element alone is
/// parsed. An element that is not valid JSON becomes a record with an error, like a bad
/// JSON line; a file that ends inside the array is an error. Errors from `each` pass
/// unchanged.
fn read_array(
    path: &Path,
    mut reader: impl BufRead,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<u64> {
    reader.consume(1); // the `[`
    let mut element = Vec::new();
    let mut scan = Scan::default();
    let mut index = 0u64;
    loop {
        let buf = reader
            .fill_buf()
            .with_context(|| format!("reading {}", path.display()))?;
        if buf.is_empty() {
            bail!(
                "{} ends inside the JSON array after {index} records (is the file truncated?)",
                path.display()
            );
        }
        let (len, mut segment) = (buf.len(), 0);
        let mut closed_at = None;
        for (i, &b) in buf.iter().enumerate() {
            if scan.in_string {
                match b {
                    _ if scan.escaped => scan.escaped = false,
                    b'\\' => scan.escaped = true,
                    b'"' => scan.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => scan.in_string = true,
                b'{' | b'[' => scan.depth += 1,
                b'}' | b']' if scan.depth > 0 => scan.depth -= 1,
                b',' | b']' if scan.depth == 0 => {
                    element.extend_from_slice(&buf[segment..i]);
                    segment = i + 1;
                    emit(&mut element, b == b']', &mut index, each)?;
                    if b == b']' {
                        closed_at = Some(i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(end) = closed_at {
            reader.consume(end);
            break;
        }
        element.extend_from_slice(&buf[segment..]);
        reader.consume(len);
    }
    match skip_blank(&mut reader).with_context(|| format!("reading {}", path.display()))? {
        None => Ok(index),
        Some(b) => bail!(
            "{} has data after the closing `]` of its JSON array (starting with {:?})",
            path.display(),
            b as char
        ),
    }
}

/// Hands one array element (raw bytes, cleared afterwards) to `each`. The blank element
/// before the `]` of an empty array is no record.
fn emit(
    element: &mut Vec<u8>,
    last: bool,
    index: &mut u64,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let blank = element.iter().all(u8::is_ascii_whitespace);
    if !(blank && last && *index == 0) {
        let value = if blank {
            Err("the array element is empty (a stray comma?)".to_string())
        } else {
            serde_json::from_slice::<Value>(element)
                .map_err(|e| format!("the array element is not valid JSON: {e}"))
        };
        each(Record {
            index: *index,
            value,
        })?;
        *index += 1;
    }
    element.clear();
    Ok(())
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
    fn array_elements_are_split_outside_strings_and_bad_ones_are_records() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        // Brackets, commas and escaped quotes inside strings do not split elements.
        std::fs::write(&p, r#"[{"a": "x],\"y\\"}, [1, [2]] ,{"a": }, "s", ]"#).unwrap();
        let got = collect(&p);
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], Ok(serde_json::json!({"a": "x],\"y\\"})));
        assert_eq!(got[1], Ok(serde_json::json!([1, [2]])));
        assert!(got[2]
            .as_ref()
            .unwrap_err()
            .starts_with("the array element is not valid JSON"));
        assert_eq!(got[3], Ok(serde_json::json!("s")));
        assert!(got[4].as_ref().unwrap_err().contains("stray comma"));
        std::fs::write(&p, " [ ] ").unwrap();
        assert!(collect(&p).is_empty());
    }

    #[test]
    fn truncated_files_and_handler_errors_stop_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        std::fs::write(&p, "[{\"a\": 1}, {\"a\": [").unwrap();
        let err = for_each_record(&p, |_| Ok(())).unwrap_err().to_string();
        assert!(
            err.contains("ends inside the JSON array after 1 records"),
            "{err}"
        );
        std::fs::write(&p, "[1] [2]").unwrap();
        let err = for_each_record(&p, |_| Ok(())).unwrap_err().to_string();
        assert!(err.contains("data after the closing"), "{err}");

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
