//! How each strategy turns question and passage records into text (docs/spec.md §1, §3).

/// Dataset conventions that change the passage text of Beam Retrieval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassageStyle {
    /// HotpotQA and 2WikiMultihopQA: `title + "".join(sentences)`, no separator.
    TitleConcat,
    /// MuSiQue: `title + "." + paragraph_text`.
    TitleDot,
}

impl PassageStyle {
    /// The style of a dataset name as written by `hopscore import`.
    pub fn for_dataset(dataset: &str) -> Self {
        if dataset.eq_ignore_ascii_case("musique") {
            PassageStyle::TitleDot
        } else {
            PassageStyle::TitleConcat
        }
    }
}

/// Beam Retrieval passage text.
pub fn beam_passage(style: PassageStyle, title: &str, text: &str) -> String {
    match style {
        PassageStyle::TitleConcat => format!("{title}{text}"),
        PassageStyle::TitleDot => format!("{title}.{text}"),
    }
}

/// Beam Retrieval question text: one trailing `?` removed.
pub fn beam_question(question: &str) -> &str {
    question.strip_suffix('?').unwrap_or(question)
}

/// EfficientRAG chunk text, as the official corpus builds it
/// (`data_module/dataset.py::process_chunk`): `"{title}: {" ".join(sentences)}"`, or
/// `"{title}: {text}"` when the passage has no sentence list (MuSiQue, corpora).
pub fn efficientrag_chunk(title: &str, text: &str, sentences: Option<&[String]>) -> String {
    match sentences {
        Some(s) => format!("{title}: {}", s.join(" ")),
        None => format!("{title}: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn official_rendering() {
        assert_eq!(
            beam_passage(PassageStyle::TitleConcat, "Paris", "It is big."),
            "ParisIt is big."
        );
        assert_eq!(
            beam_passage(PassageStyle::for_dataset("musique"), "Paris", "It is big."),
            "Paris.It is big."
        );
        assert_eq!(beam_question("Who is he??"), "Who is he?");
        assert_eq!(beam_question("who"), "who");
        let sentences = ["It is big.".to_string(), " Very.".to_string()];
        assert_eq!(
            efficientrag_chunk("Paris", "It is big. Very.", Some(&sentences)),
            "Paris: It is big.  Very."
        );
        assert_eq!(efficientrag_chunk("P", "x", None), "P: x");
    }
}
