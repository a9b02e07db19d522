//! Tolerant readers for the replies of the post-stage prompts. Tags are matched without
//! regard to case, with or without their brackets; answers may come with or without the
//! `The answer is` lead; a number may sit in a sentence. A reply that does not state one
//! verdict or one number in the asked form holds nothing usable: each reader returns
//! `None` (or [`Choice::Both`]) and the caller counts a parse failure, never a verdict.

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

/// Which of two opposite tags a reply states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Only the first tag (`RELEVANT`).
    Yes,
    /// Only the second (`IRRELEVANT`).
    No,
    /// Both: a reply that echoes the format line (`[RELEVANT] or [IRRELEVANT]`) states
    /// no verdict.
    Both,
    Neither,
}

/// Which of two opposite tags (`yes`, `no`) the reply states: the bracketed ones
/// (`[RELEVANT]`) when it has any, else the bare words.
pub fn choice(text: &str, yes: &str, no: &str) -> Choice {
    let pick = |find: &dyn Fn(&str, &str) -> Option<usize>| match (
        find(text, yes).is_some(),
        find(text, no).is_some(),
    ) {
        (true, true) => Choice::Both,
        (true, false) => Choice::Yes,
        (false, true) => Choice::No,
        (false, false) => Choice::Neither,
    };
    match pick(&find_bracketed) {
        Choice::Neither => pick(&find_word),
        bracketed => bracketed,
    }
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

/// The probability a reply states: its one number, in [0, 1] (a percentage such as
/// `85%` reads as 0.85). A list marker (`1.` or `2)` starting a line and followed by
/// text) is not a number. `None` when the reply states no number, a number outside
/// [0, 1], or several different numbers (`7 reasons, so 1`): the prompt asks for the
/// number only, and a guess among several is no score.
pub fn probability(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut found: Option<f64> = None;
    let mut i = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            || (bytes[i] == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if !starts_number {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let token = &text[start..i];
        let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
        let marker = text[line_start..start].trim().is_empty()
            && (token.ends_with('.') || bytes.get(i) == Some(&b')'))
            && text[i..].trim_start_matches(')').starts_with([' ', '\t'])
            && text[i..]
                .trim_start_matches(')')
                .trim()
                .lines()
                .next()
                .is_some_and(|rest| rest.starts_with(|c: char| !c.is_ascii_digit() && c != '.'));
        if marker {
            continue;
        }
        let v: f64 = token.trim_end_matches('.').parse().ok()?;
        let v = if bytes.get(i) == Some(&b'%') {
            v / 100.0
        } else {
            v
        };
        if !(0.0..=1.0).contains(&v) || found.is_some_and(|f| f != v) {
            return None;
        }
        found = Some(v);
    }
    found
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
        let relevance = |t: &str| choice(t, "RELEVANT", "IRRELEVANT");
        assert_eq!(relevance("Judgment: [IRRELEVANT]"), Choice::No);
        assert_eq!(relevance("relevant, but unsupported"), Choice::Yes);
        assert_eq!(relevance("nothing here"), Choice::Neither);
        // The format line echoed back (a reply seen from SmolLM2 behind llama.cpp's
        // server) states no verdict.
        assert_eq!(
            relevance("Relevance: <a short reason> [RELEVANT] or [IRRELEVANT]"),
            Choice::Both
        );
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
            relevance("Relevance: not relevant at all [IRRELEVANT]"),
            Choice::No
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
        assert_eq!(probability("about 90%"), Some(0.9));
        assert_eq!(probability(".5"), Some(0.5));
        assert_eq!(probability("0.7\n"), Some(0.7));
        assert_eq!(probability("1"), Some(1.0));
        assert_eq!(probability("Score: 0.6 (0.6)"), Some(0.6));
        assert_eq!(probability("high"), None);
        // Several numbers, or a list marker as the only one: no score.
        assert_eq!(probability("7 reasons, so 1"), None);
        assert_eq!(
            probability("1. The candidate answer matches the passages."),
            None
        );
        assert_eq!(probability("1) The answer is right"), None);
        assert_eq!(
            probability("1. The candidate answer is likely: 0.8"),
            Some(0.8)
        );
        assert_eq!(probability("Between 0.3 and 0.5"), None);
        assert_eq!(probability("2.5"), None);
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
