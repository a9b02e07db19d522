//! EfficientRAG's word-level input rule (docs/spec.md §2). The official code splits every text
//! with spaCy's `en_core_web_sm` tokenizer, drops the `,` tokens and tokenises each
//! word on its own (so every word starts with `▁`). spaCy's model is not available to
//! hopscore, so [`words`] is a fixed approximation of its English tokenizer, written
//! identically in `tools/goldens/make_efficientrag_goldens.py`:
//!
//! 1. split on Unicode whitespace;
//! 2. in each piece, every leading and trailing punctuation character (ASCII
//!    punctuation and `“ ” ‘ ’ – — … « »`) is a word of its own (spaCy's prefixes and
//!    suffixes);
//! 3. a remaining core ending in `'s` or `n't` (straight or curly apostrophe) is split
//!    before that suffix (spaCy: `Obama's` → `Obama 's`, `isn't` → `is n't`);
//! 4. words equal to `,` are dropped.
//!
//! Known differences from spaCy: infixes (`well-known`, `3/4`) stay one word, and
//! abbreviations such as `U.S.` lose their final `.` to a separate word.
//!
//! Decoding follows the official code's transformers 4.x `decode`, whose default
//! `clean_up_tokenization_spaces=True` applies [`clean_up_tokenization`].

/// Characters split off the ends of a whitespace-separated piece.
fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation() || "“”‘’–—…«»".contains(c)
}

/// Suffixes split off a word's core (ASCII letters matched case-insensitively).
const SUFFIXES: [&str; 4] = ["'s", "’s", "n't", "n’t"];

/// The words of `text`, in order, without `,`.
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for piece in text.split_whitespace() {
        split_piece(piece, &mut out);
    }
    out.retain(|w| *w != ",");
    out
}

fn split_piece<'a>(piece: &'a str, out: &mut Vec<&'a str>) {
    let core_start = piece
        .char_indices()
        .find(|&(_, c)| !is_punct(c))
        .map_or(piece.len(), |(i, _)| i);
    let core_end = piece[core_start..]
        .char_indices()
        .rev()
        .find(|&(_, c)| !is_punct(c))
        .map_or(core_start, |(i, c)| core_start + i + c.len_utf8());
    push_chars(&piece[..core_start], out);
    let core = &piece[core_start..core_end];
    if !core.is_empty() {
        let cut = SUFFIXES.iter().find_map(|s| {
            let cut = core.len().checked_sub(s.len()).filter(|&c| c > 0)?;
            (core.is_char_boundary(cut) && core[cut..].eq_ignore_ascii_case(s)).then_some(cut)
        });
        match cut {
            Some(cut) => out.extend([&core[..cut], &core[cut..]]),
            None => out.push(core),
        }
    }
    push_chars(&piece[core_end..], out);
}

/// Each character of `s` as a word.
fn push_chars<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    out.extend(s.char_indices().map(|(i, c)| &s[i..i + c.len_utf8()]));
}

/// transformers' `clean_up_tokenization`: removes the space before `.`, `?`, `!`, `,`
/// and English contractions, in this order.
pub fn clean_up_tokenization(text: &str) -> String {
    [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ]
    .iter()
    .fold(text.to_string(), |s, (from, to)| s.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_documented_rule() {
        assert_eq!(
            words("Paris, France (\"capital\"). Obama's   U.S. isn't well-known… ISN'T"),
            [
                "Paris",
                "France",
                "(",
                "\"",
                "capital",
                "\"",
                ")",
                ".",
                "Obama",
                "'s",
                "U.S",
                ".",
                "is",
                "n't",
                "well-known",
                "…",
                "IS",
                "N'T"
            ]
        );
        assert_eq!(words(" , ,, 's ’S x’S"), ["'", "s", "’", "S", "x", "’S"]);
        assert!(words("  \n ").is_empty());
    }

    #[test]
    fn clean_up_matches_transformers() {
        // transformers: PreTrainedTokenizerBase.clean_up_tokenization
        assert_eq!(
            clean_up_tokenization("Paris , it is n't the U.S. 's . ' x ' ?"),
            "Paris, it isn't the U.S.'s.'x '?"
        );
    }
}
