//! Text → token ids: the tokenizer wrappers (tokenizers crate, `tokenizer.json` or
//! GGUF metadata).

pub mod causal_tokenizer;
pub mod prompt;
pub mod render;
pub mod rerank_prompt;
pub mod tokenizer;
pub mod words;

pub use tokenizer::TextTokenizer;

/// The ids `encode` gives `text`, or, for a long text, at least its first
/// `max_tokens + 1` ids without tokenising all of it (a tokenizer holds several copies
/// of its input per byte: a 2 MB passage took hundreds of MB). Prefixes of growing
/// length are encoded until two of them agree on the first `max_tokens + 1` ids
/// (cutting a text changes only the tokens near the cut), so memory depends on
/// `max_tokens`, not on the text.
pub fn leading_ids(
    encode: impl Fn(&str) -> anyhow::Result<Vec<u32>>,
    text: &str,
    max_tokens: usize,
) -> anyhow::Result<Vec<u32>> {
    let prefix = |bytes: usize| {
        let mut end = bytes.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    };
    let want = max_tokens + 1;
    let mut len = (64 * want).max(4096);
    let mut shorter: Option<Vec<u32>> = None;
    while len < text.len() {
        let ids = encode(prefix(len))?;
        if ids.len() > want {
            if let Some(s) = shorter.as_ref().filter(|s| s.len() > want) {
                if s[..want] == ids[..want] {
                    return Ok(ids);
                }
            }
        }
        shorter = Some(ids);
        len *= 2;
    }
    encode(text)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    /// Issue 26: `beam` tokenised every passage whole (657 MB peak for a 5 MB passage).
    /// A long text is encoded by prefixes only, and its leading ids are the whole
    /// text's.
    #[test]
    fn leading_ids_reads_a_prefix_of_a_long_text_and_agrees_with_the_whole() {
        let text: String = (0..200_000).map(|i| format!("w{} ", i % 997)).collect();
        let longest = Cell::new(0);
        let encode = |t: &str| -> anyhow::Result<Vec<u32>> {
            longest.set(longest.get().max(t.len()));
            Ok(t.split_whitespace()
                .map(|w| w[1..].parse::<u32>().unwrap())
                .collect())
        };
        let ids = super::leading_ids(encode, &text, 512).unwrap();
        let whole = encode(&text).unwrap();
        assert_eq!(ids[..513], whole[..513]);
        longest.set(0);
        super::leading_ids(encode, &text, 512).unwrap();
        // The first prefix is 64 × 513 bytes; two doublings reach agreement here.
        assert!(
            longest.get() <= 4 * 64 * 513,
            "encoded {} of {} bytes",
            longest.get(),
            text.len()
        );
        // A short text is encoded whole.
        assert_eq!(super::leading_ids(encode, "w1 w2", 512).unwrap(), [1, 2]);
    }
}
