//! Tolerant readers for the replies of the post-stage prompts. Tags are matched without
//! regard to case, with or without their brackets; answers may come with or without the
//! `The answer is` lead; numbers may sit anywhere in a sentence. Each reader returns
//! `None` when the reply holds nothing it can use, and the caller counts a parse failure.

/// Byte offset of the first occurrence of `word` in `text` (ASCII case-insensitive) that
/// is not part of a longer word, e.g. `RELEVANT` in `IRRELEVANT` does not count.
pub fn find_word(text: &str, word: &str) -> Option<usize> {
    let hay = text.to_ascii_uppercase();
    let needle = word.to_ascii_uppercase();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(pos) = hay[from..].find(&needle) {
        let start = from + pos;
        let end = start + needle.len();
        let before = hay[..start].chars().next_back();
        let after = hay[end..].chars().next();
        if !before.is_some_and(is_word) && !after.is_some_and(is_word) {
            return Some(start);
        }
        from = end;
    }
    None
}

/// Byte offset of the first `[tag]` in `text` (ASCII case-insensitive).
fn find_bracketed(text: &str, tag: &str) -> Option<usize> {
    text.to_ascii_uppercase()
        .find(&format!("[{}]", tag.to_ascii_uppercase()))
}

/// Which of two opposite tags (`yes`, `no`) the reply chose: the first bracketed one
/// (`[RELEVANT]`), else the first bare word; `None` when neither appears.
pub fn first_of(text: &str, yes: &str, no: &str) -> Option<bool> {
    let pick = |find: &dyn Fn(&str, &str) -> Option<usize>| match (find(text, yes), find(text, no))
    {
        (Some(a), Some(b)) => Some(a < b),
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (None, None) => None,
    };
    pick(&find_bracketed).or_else(|| pick(&find_word))
}

/// The text after `[tag]` (or, without brackets, after `tag:`), up to the end of its
/// line; the next non-empty line when the tag ends its line. `None` when the tag is
/// absent or nothing follows it.
pub fn after_tag(text: &str, tag: &str) -> Option<String> {
    let start = match find_bracketed(text, tag) {
        Some(i) => i + tag.len() + 2,
        None => {
            let upper = text.to_ascii_uppercase();
            let mut from = 0;
            loop {
                let i = from + find_word(&text[from..], tag)?;
                let end = i + tag.len();
                if upper[end..].trim_start_matches(['*', ' ']).starts_with(':') {
                    break end;
                }
                from = end;
            }
        }
    };
    let rest = text[start..].trim_start_matches([':', ' ', '\t', '*']);
    let mut lines = rest.lines();
    let first = lines.next().unwrap_or("").trim();
    let value = if first.is_empty() {
        lines.map(str::trim).find(|l| !l.is_empty())?
    } else {
        first
    };
    let value = clean_answer(value);
    (!value.is_empty()).then_some(value)
}

/// Strips decoration from a short answer: surrounding quotes, brackets, asterisks and a
/// final period.
pub fn clean_answer(s: &str) -> String {
    let strip = |t: &str| {
        t.trim()
            .trim_matches(['"', '\'', '*', '`', '[', ']', ' '])
            .to_string()
    };
    let t = strip(s);
    strip(t.strip_suffix('.').unwrap_or(&t))
}

/// The answer in a reply that ends with `The answer is X` (the last such sentence wins);
/// without that lead, the first non-empty line. `None` for an empty reply.
pub fn answer(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    const LEAD: &str = "the answer is";
    let found = if lower.len() == text.len() {
        lower.rfind(LEAD).map(|i| &text[i + LEAD.len()..])
    } else {
        None // lowercasing changed byte offsets: fall back to the line rule
    };
    let candidate = match found {
        Some(rest) => rest
            .trim_start_matches([':', ' '])
            .lines()
            .next()
            .unwrap_or(""),
        None => text.lines().map(str::trim).find(|l| !l.is_empty())?,
    };
    let a = clean_answer(candidate);
    (!a.is_empty()).then_some(a)
}

/// The first number in `text` that lies in [0, 1] (a probability); a percentage such as
/// `85%` reads as 0.85. `None` when there is none.
pub fn probability(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit()
            || (bytes[i] == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            let number = text[start..i].trim_end_matches('.');
            if let Ok(v) = number.parse::<f64>() {
                let percent = bytes.get(i) == Some(&b'%');
                let v = if percent { v / 100.0 } else { v };
                if (0.0..=1.0).contains(&v) {
                    return Some(v);
                }
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Questions listed one per line, numbered or bulleted (`1.`, `2)`, `-`, `*`, `Q1:`),
/// after an optional header line that ends with a colon; at most `k`. Lines that are
/// not questions (no `?` and fewer than three words) are skipped.
pub fn questions(text: &str, k: usize) -> Vec<String> {
    text.lines()
        .map(|l| {
            let l = l.trim();
            let l = l.trim_start_matches(['-', '*', '•', ' ']);
            let l = l.strip_prefix(['Q', 'q']).unwrap_or(l);
            let digits = l.len() - l.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let l = if digits > 0 {
                l[digits..].trim_start_matches(['.', ')', ':', ' '])
            } else {
                l
            };
            l.trim().trim_matches(['[', ']', '"']).trim().to_string()
        })
        .filter(|l| !l.is_empty() && !l.ends_with(':'))
        .filter(|l| l.contains('?') || l.split_whitespace().count() >= 3)
        .take(k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_whole_words_in_any_case() {
        assert_eq!(
            first_of("Judgment: [IRRELEVANT]", "RELEVANT", "IRRELEVANT"),
            Some(false)
        );
        assert_eq!(
            first_of("relevant, but unsupported", "RELEVANT", "IRRELEVANT"),
            Some(true)
        );
        assert_eq!(first_of("nothing here", "RELEVANT", "IRRELEVANT"), None);
        assert_eq!(
            after_tag("Action: [QUERY] Where was X born?\nmore", "QUERY").as_deref(),
            Some("Where was X born?")
        );
        assert_eq!(
            after_tag("[ANSWER]\n\n  Paris.", "ANSWER").as_deref(),
            Some("Paris")
        );
        assert_eq!(after_tag("[ANSWER]", "ANSWER"), None);
        assert_eq!(after_tag("ANSWERS: x", "ANSWER"), None);
        assert_eq!(
            after_tag("I cannot answer. Answer: Lyon", "ANSWER").as_deref(),
            Some("Lyon")
        );
        assert_eq!(
            first_of(
                "Relevance: not relevant at all [IRRELEVANT]",
                "RELEVANT",
                "IRRELEVANT"
            ),
            Some(false)
        );
    }

    #[test]
    fn answers_numbers_and_questions() {
        assert_eq!(
            answer("Both were born in Ohio. The answer is \"Ohio\".").as_deref(),
            Some("Ohio")
        );
        assert_eq!(answer("\n  Paris\nextra").as_deref(), Some("Paris"));
        assert_eq!(answer("  \n "), None);
        assert_eq!(probability("The score is: 0.85"), Some(0.85));
        assert_eq!(probability("7 reasons, so 1"), Some(1.0));
        assert_eq!(probability("about 90%"), Some(0.9));
        assert_eq!(probability(".5"), Some(0.5));
        assert_eq!(probability("high"), None);
        let q = questions(
            "Ranked Questions:\n1. Who wrote Dune?\n2) [When was it published?]\n- ok\nQ3: Where did the author live?",
            5,
        );
        assert_eq!(
            q,
            [
                "Who wrote Dune?",
                "When was it published?",
                "Where did the author live?"
            ]
        );
        assert_eq!(questions("1. a?\n2. b?\n3. c?", 2), ["a?", "b?"]);
    }
}
